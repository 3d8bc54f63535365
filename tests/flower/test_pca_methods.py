"""LDP-PCA and distributed PCA as methods on the in-process runner (issue 47, deliverable
4): the same users, the same messages bit for bit as today's Flower node draws with the
same noise stream, the same estimate, and the same ledger entries, through the round loop
every FedSSL method runs on.

The references are written from the building blocks the Flower app uses
(``fedspectral.pca.flower``: its synthetic users, its node handler; ``pca.local``,
``pca.holders``), not from the methods' code.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from test_node_policy import _pca_query

from fedspectral.config import ExperimentConfig
from fedspectral.fed.flower.node.policy import NodePolicy, node_noise_generator
from fedspectral.fed.methods import build_method, ssl_methods
from fedspectral.fed.protocol import ClientRuntime, Payload, client_generators
from fedspectral.fed.simulation import Simulation
from fedspectral.fed.validation import validate
from fedspectral.linalg import subspace_distance, top_k_eigvecs
from fedspectral.pca.flower import node as pca_node
from fedspectral.pca.flower.task import synthetic_model, synthetic_users
from fedspectral.pca.holders import holder_message, holder_noise
from fedspectral.pca.local import (
    SENSITIVITY,
    CovarianceAggregator,
    ldp_noise_scale,
    perturb_batch,
)
from fedspectral.privacy import PrivacyLedger

P, K, USERS, CLIENTS, EPS, DELTA = 6, 2, 150, 4, 2.0, 1e-5


def _cfg(method: str, **params) -> ExperimentConfig:
    cfg = ExperimentConfig()
    cfg.name = method
    cfg.method.name = method
    cfg.method.rounds = 1
    cfg.method.params = {"p": P, "k": K, "users": USERS, **params}
    cfg.partition.num_clients = CLIENTS
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, EPS, DELTA
    cfg.run.progress = False
    return validate(cfg)


def _runtime(method, j: int, rng, releases) -> ClientRuntime:
    """Client ``client-<j>``'s runtime: its synthetic users, the noise source ``rng`` and
    the ledgered ``releases`` the handler must draw from."""
    return ClientRuntime(
        cid=f"client-{j}",
        data=synthetic_users(USERS, P, K, 0, j, 1.0),
        net=None,
        augment=None,
        generator=None,
        noise_rng=rng,
        state={},
        config=method.config,
        releases=releases,
    )


def test_the_pca_methods_are_not_in_the_ssl_pillar() -> None:
    ssl = ssl_methods()
    assert "fedsc" in ssl and "fedavg_sc" in ssl
    assert "ldp_pca" not in ssl and "distributed_pca" not in ssl


def test_ldp_pca_runs_on_the_round_loop_as_todays_server_computes_it() -> None:
    """The whole run in process against the estimate written from today's blocks: each
    client's users (the Flower app's synthetic users of its partition), its messages
    (``perturb_batch`` on the runner's noise stream of that client), their sum in
    partition order, the top-k eigenspace and its error: equal, not close."""
    cfg = _cfg("ldp_pca")
    res = Simulation(cfg).run()
    agg = CovarianceAggregator(P, "isometric")
    for j in range(CLIENTS):
        X = synthetic_users(USERS, P, K, 0, j, 1.0)
        _, rng = client_generators(cfg.run.seed, 1, f"client-{j}", "collect", cfg.dp.noise_seed)
        agg.add_batch(perturb_batch(X, EPS, DELTA, rng=rng))
    eigvals, V_hat = top_k_eigvecs(agg.covariance(), K)
    _, V = synthetic_model(P, K, 0, 1.0)
    fin = res["final"]
    assert fin["eigenvalues"] == eigvals.tolist()
    assert fin["subspace"] == V_hat.tolist()
    assert fin["subspace_error"] == subspace_distance(V_hat, V)
    assert fin["users"] == CLIENTS * USERS
    # the ledger: one entry per client standing for its users, as today's server records
    sigma = ldp_noise_scale(EPS, DELTA).sigma
    entries = res["privacy"]["ledger"]["releases"]
    assert len(entries) == CLIENTS
    for e in entries:
        assert (e["sigma"], e["sensitivity"], e["neighbouring"], e["count"]) == (
            sigma,
            SENSITIVITY,
            "replace_one",
            1,
        )
    ref = PrivacyLedger()
    from fedspectral.pca.local import record_ldp_release

    record_ldp_release(ref, sigma, USERS, party="users@node0")
    assert res["privacy"]["epsilon_pld"] == pytest.approx(ref.epsilon(DELTA, accountant="pld"))
    assert res["privacy"]["epsilon_pld"] == pytest.approx(EPS, rel=1e-6)


@pytest.mark.usefixtures("task_identity")
def test_ldp_pca_messages_are_the_flower_nodes_bit_for_bit() -> None:
    """A Flower node of partition 1 with a seeded (test) noise source answers today's
    query; the method's client handler, handed the same noise stream, sends the same
    messages, bit for bit."""
    q = {"p": P, "k": K, "epsilon": EPS, "delta": DELTA, "users": USERS}
    nc = {"partition-id": 1, "num-partitions": CLIENTS}
    nc.update({"policy-simulation": True, "policy-noise-seed": 11})
    nc["policy-ledger-dir"] = "memory"
    ctx = Context(run_id=5, node_id=1, node_config=nc, state=RecordDict(), run_config={})
    reply = pca_node.pca_client_query(_pca_query(**q), ctx)
    sent = reply.content.array_records["messages"]["messages"].numpy()
    method = build_method(_cfg("ldp_pca"))
    rng = node_noise_generator(NodePolicy.from_node(nc), None, ("ldp-pca", 1))
    rt = _runtime(method, 1, rng, tuple(method.releases("collect", USERS)))
    ours = method.client_phase("collect", 1, Payload(), rt).arrays["messages"]
    assert ours.dtype == sent.dtype and np.array_equal(ours, sent)


def test_a_ledgered_release_that_is_not_the_requests_is_refused() -> None:
    """The handler draws from the object the answering party ledgered: one of another σ
    (a node that priced another request) is refused before any noise is drawn."""
    from dataclasses import replace

    method = build_method(_cfg("ldp_pca"))
    (rel,) = method.releases("collect", USERS)
    rt = _runtime(method, 0, np.random.default_rng(0), (replace(rel, sigma=rel.sigma / 2),))
    with pytest.raises(ValueError, match="sigma differs"):
        method.client_phase("collect", 1, Payload(), rt)


def test_distributed_pca_is_a_secure_sum_of_todays_holder_messages() -> None:
    """The distributed model through the round loop's secure-sum phase: the sum of each
    holder's ``holder_message`` (today's node function) on the runner's noise stream and
    its count; the estimate from that sum; the ledger under both threat models at the σ
    of ``holder_noise`` (the share alone; the sum of the contributors)."""
    cfg = _cfg("distributed_pca")
    res = Simulation(cfg).run()
    t = CLIENTS // 2 + 1
    noise = holder_noise(EPS, DELTA, t)
    total = np.zeros(P * (P + 1) // 2 + 1)
    for j in range(CLIENTS):
        X = synthetic_users(USERS, P, K, 0, j, 1.0)
        _, rng = client_generators(cfg.run.seed, 1, f"client-{j}", "sum", cfg.dp.noise_seed)
        total += np.append(holder_message(X, noise, rng), len(X))
    S = CovarianceAggregator(P, "isometric").add_sum(total[:-1], round(total[-1])).covariance()
    eigvals, V_hat = top_k_eigvecs(S, K)
    fin = res["final"]
    assert fin["users"] == CLIENTS * USERS
    assert np.allclose(fin["eigenvalues"], eigvals, rtol=0, atol=1e-12)
    assert fin["subspace_error"] == pytest.approx(
        subspace_distance(V_hat, synthetic_model(P, K, 0, 1.0)[1]), abs=1e-9
    )
    entries = res["privacy"]["ledger"]["releases"]
    by_threat = {th: [e for e in entries if e["threat"] == th] for th in ("fallback", "secagg")}
    assert len(by_threat["fallback"]) == len(by_threat["secagg"]) == CLIENTS
    assert {e["sigma"] for e in by_threat["fallback"]} == {noise.share_sigma}
    assert {e["sigma"] for e in by_threat["secagg"]} == {noise.secagg_sigma(CLIENTS)}


@pytest.mark.parametrize(
    ("method", "key", "value", "match"),
    [
        ("ldp_pca", "k", 9, "method.params.k"),
        ("ldp_pca", "calibration", "laplace", "method.params.calibration"),
        ("distributed_pca", "min_contributors", 1, "method.params.min_contributors"),
        ("distributed_pca", "vectorisation", "upper", "method.params.vectorisation"),
    ],
)
def test_bad_pca_parameters_are_refused_naming_the_key(method, key, value, match) -> None:
    with pytest.raises(ValueError, match=match):
        _cfg(method, **{key: value})


def test_a_pca_method_needs_one_round_and_an_epsilon() -> None:
    cfg = ExperimentConfig()
    cfg.method.name, cfg.method.rounds = "ldp_pca", 2
    cfg.dp.enabled, cfg.dp.epsilon = True, 1.0
    with pytest.raises(ValueError, match="method.rounds"):
        validate(cfg)
    cfg.method.rounds, cfg.dp.enabled, cfg.dp.epsilon = 1, False, None
    with pytest.raises(ValueError, match="dp.epsilon"):
        validate(cfg)


# -- on Flower: the training ServerApp's runner and ClientApp (an in-process grid) ---------
@pytest.mark.usefixtures("task_identity")
def test_ldp_pca_on_the_flower_runner_equals_the_in_process_run_bit_for_bit() -> None:
    """The same method through the Flower runner and the real ClientApp (Flower's
    serialisation, simulation nodes drawing the runner's noise streams): the estimate and
    the ledger are the in-process run's, bit for bit."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner

    ref = Simulation(_cfg("ldp_pca")).run()
    res = FlowerRunner(_cfg("ldp_pca"), FakeGrid(CLIENTS), round_timeout=30, node_wait=5).run()
    assert res["engine"] == "flower"
    for key in ("eigenvalues", "subspace", "subspace_error", "users"):
        assert res["final"][key] == ref["final"][key], key
    strip = [
        {k: v for k, v in e.items() if k != "noise"} for e in res["privacy"]["ledger"]["releases"]
    ]
    assert strip == ref["privacy"]["ledger"]["releases"]


def _deployed(tmp_path, **extra) -> dict:
    """Node config of a deployed node (its own policy, a ledger on disk, test noise)."""
    return {
        "policy-ledger-dir": str(tmp_path / "led"),
        "policy-max-epsilon": 2.5,
        "policy-max-epsilon-total": 3.0,
        **extra,
    }


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("weakened", [True, False])
def test_a_request_beyond_the_nodes_bounds_is_refused_before_any_budget(
    tmp_path, monkeypatch, weakened
) -> None:
    """A server asks a deployed node for p = 600 (its pca-max-dim is 512): without the
    check (weakened) the node spends its budget and builds the users; the real node refuses
    first and its ledger stays empty."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner
    from fedspectral.fed.flower.node import workload

    if weakened:
        monkeypatch.setattr(workload, "check_users_request", lambda *a: None)
    grid = FakeGrid(CLIENTS, policy=None, node_config=_deployed(tmp_path))
    for ctx in grid.nodes.values():  # a deployed node: not the server's plan
        ctx.node_config.pop("policy-simulation")
    cfg = _cfg("ldp_pca", p=600, k=2, users=5)
    runner = FlowerRunner(cfg, grid, round_timeout=60, node_wait=5)
    spent = tmp_path / "led"
    if weakened:  # served: its budget spent, users of the server's size built
        assert runner.run()["final"]["users"] == CLIENTS * 5
        assert list(spent.glob("ledger-*.json"))
        return
    with pytest.raises(RuntimeError, match="pca-max-dim 512"):
        runner.run()
    assert not list(spent.glob("ledger-*.json"))  # refused before any budget


@pytest.mark.usefixtures("task_identity")
def test_one_budget_covers_the_ldp_pca_app_and_the_method(tmp_path) -> None:
    """A deployed node answers the LDP-PCA app's query (ε = 2, its total 2.2) and then the
    method's phase at the same ε: the second is refused, from the same ledger (the data
    set's declared identity keys both, and both name the node's users as the party)."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner

    nc = {"partition-id": 0, "num-partitions": 1, **_deployed(tmp_path)}
    nc["policy-max-epsilon-total"] = 2.2
    ctx = Context(run_id=5, node_id=1, node_config=nc, state=RecordDict(), run_config={})
    q = {"p": P, "k": K, "epsilon": EPS, "delta": DELTA, "users": USERS}
    pca_node.pca_client_query(_pca_query(**q), ctx)  # the app's path: spends epsilon 2
    grid = FakeGrid(1, policy=None, node_config={**_deployed(tmp_path), **nc})
    grid.nodes[1000].node_config.pop("policy-simulation")
    cfg = ExperimentConfig()
    cfg.method.name, cfg.method.rounds = "ldp_pca", 1
    cfg.method.params = {"p": P, "k": K, "users": USERS}
    cfg.partition.num_clients = 1
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, EPS, DELTA
    cfg.run.progress = False
    with pytest.raises(RuntimeError, match="max-epsilon-total"):
        FlowerRunner(validate(cfg), grid, round_timeout=60, node_wait=5).run()


@pytest.mark.usefixtures("task_identity")
def test_distributed_pca_on_the_flower_runner_equals_the_in_process_run() -> None:
    """The distributed model through the Flower runner: the five stages of the secure sum
    over the real ClientApp (simulation nodes, the runner's noise streams); the estimate
    is the in-process run's up to the sum's quantisation, the ledger the same."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner

    ref = Simulation(_cfg("distributed_pca")).run()
    res = FlowerRunner(
        _cfg("distributed_pca"), FakeGrid(CLIENTS), round_timeout=60, node_wait=5
    ).run()
    assert res["final"]["users"] == ref["final"]["users"] == CLIENTS * USERS
    assert np.allclose(res["final"]["eigenvalues"], ref["final"]["eigenvalues"], atol=1e-9)
    assert res["final"]["subspace_error"] == pytest.approx(ref["final"]["subspace_error"], abs=1e-7)
    key = [(e["party"], e["threat"], e["sigma"]) for e in ref["privacy"]["ledger"]["releases"]]
    got = [(e["party"], e["threat"], e["sigma"]) for e in res["privacy"]["ledger"]["releases"]]
    assert sorted(got) == sorted(key)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("weakened", [True, False])
def test_a_session_not_bound_to_the_request_is_refused(monkeypatch, weakened) -> None:
    """A server that runs the holders' secure sum in a session that does not carry the
    request's fingerprint (so that it could ask holders different things): a weakened node
    (the check removed) takes part and the sum completes; the real one refuses before its
    data is read, and the sum cannot complete."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps import client_app as ca
    from fedspectral.fed.flower.apps import runner as rn
    from fedspectral.fed.flower.node.secure_sum import grid_secure_sum

    def unbound(self, phase, rnd, payloads, spec):
        return grid_secure_sum(self, phase, rnd, payloads, spec, "")

    monkeypatch.setattr(rn.GridTransport, "secure_sum", unbound)
    if weakened:
        monkeypatch.setattr(ca, "check_session", lambda *a: None)
    runner = rn.FlowerRunner(
        _cfg("distributed_pca"), FakeGrid(CLIENTS), round_timeout=60, node_wait=5
    )
    if weakened:
        assert runner.run()["final"]["users"] == CLIENTS * USERS
        return
    with pytest.raises(RuntimeError, match="no client took part.*not bound to this node's req"):
        runner.run()


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("weakened", [True, False])
def test_a_threshold_below_the_shares_sizing_is_refused(monkeypatch, weakened) -> None:
    """A server that runs the sum with threshold 3 when each holder sized its share for the
    request's min_contributors 4: three contributors would release a sum with less noise
    than the guarantee needs.  A weakened node takes part; the real one refuses before its
    data is read."""
    from dataclasses import replace

    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps import client_app as ca
    from fedspectral.fed.flower.apps import runner as rn
    from fedspectral.fed.methods.pca import DistributedPca

    real = DistributedPca.secure_sum_spec

    def low(self, *a):
        return replace(real(self, *a), min_contributors=3)

    monkeypatch.setattr(DistributedPca, "secure_sum_spec", low)  # the server's side
    if weakened:
        monkeypatch.setattr(ca, "check_session", lambda *a: None)
    runner = rn.FlowerRunner(
        _cfg("distributed_pca", min_contributors=4),
        FakeGrid(CLIENTS),
        round_timeout=60,
        node_wait=5,
    )
    if weakened:
        assert runner.run()["final"]["users"] == CLIENTS * USERS
        return
    with pytest.raises(RuntimeError, match="threshold 3: this node's share is sized for 4"):
        runner.run()


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("weakened", [True, False])
def test_a_node_never_reads_a_file_the_server_names(tmp_path, monkeypatch, weakened) -> None:
    """The server names a users' file (``method.params.data``) that sits on the node's
    machine: a node that took the server's plan (the check removed) reads it and releases
    from it; the real node refuses before any budget and reads nothing."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps import client_app as ca
    from fedspectral.fed.flower.apps.runner import FlowerRunner
    from fedspectral.fed.flower.node import workload

    path = tmp_path / "someone_elses.npy"
    np.save(path, synthetic_users(4 * USERS, P, K, 7, 0, 1.0))
    cfg = _cfg("ldp_pca", data=str(path))
    reads = []
    real_load = workload.pca_node.node_users

    def server_plan(context, pol, cfg_, method, cid):  # the weakened node's data source
        reads.append(cid)
        return method.load_federation().clients[cid], ("x", None)

    if weakened:
        monkeypatch.setattr(workload, "check_users_request", lambda *a: None)
        monkeypatch.setattr(ca, "node_users", server_plan)
        res = FlowerRunner(cfg, FakeGrid(CLIENTS), round_timeout=60, node_wait=5).run()
        assert res["final"]["users"] == 4 * USERS and len(reads) == CLIENTS
        return
    monkeypatch.setattr(
        workload.pca_node, "node_users", lambda *a: reads.append(a) or real_load(*a)
    )
    with pytest.raises(RuntimeError, match="names a users' file"):
        FlowerRunner(cfg, FakeGrid(CLIENTS), round_timeout=60, node_wait=5).run()
    assert reads == []
