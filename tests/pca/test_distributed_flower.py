"""The distributed model on the Flower LDP-PCA app, in process (no Ray, no processes).

The real ServerApp body (``pca_server_main``) drives the real ClientApp of every node
through a small in-memory grid; each node reads its policy -- model, min contributors,
noise seed, secure-sum roster -- from its own node config.  Reference: the same users and
noise streams (the nodes' own test seed) summed here with ``holder_message``.
"""

from __future__ import annotations

import math
from uuid import uuid4

import dp_accounting
import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.app import Error as FlwrError

from fedspectral.fed.flower.apps.client_app import make_client_app
from fedspectral.fed.flower.node.secure_sum import write_identities
from fedspectral.fed.protocol import derive_seed
from fedspectral.pca import CovarianceAggregator, holder_message, holder_noise
from fedspectral.pca.flower.app import pca_server_main
from fedspectral.pca.flower.task import synthetic_users

P, K, USERS, SEED, NOISE_SEED = 5, 2, 120, 3, 11


@pytest.fixture(autouse=True)
def _task_identity():
    """Flower stamps messages with the running task's identity: set one."""
    from flwr.supercore.task_identity import TaskIdentity

    old = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = old


class Grid:
    """Routes each message to the real ClientApp of its node; ``drop`` = {partition:
    stage name} silences a node from that secure-sum stage on."""

    def __init__(self, configs: list[dict], drop: dict[int, str] | None = None) -> None:
        self.app = make_client_app()  # every node reads its own policy
        self.nodes = {
            100 + i: Context(
                run_id=1, node_id=100 + i, node_config=c, state=RecordDict(), run_config={}
            )
            for i, c in enumerate(configs)
        }
        self.drop = drop or {}
        self.replies: dict[str, Message] = {}
        self.errors: dict[int, list[str]] = {}

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            ctx = self.nodes[msg.metadata.dst_node_id]
            ids.append(mid)
            stage = self.drop.get(int(ctx.node_config["partition-id"]))
            if stage is not None and stage in str(msg.metadata.group_id):
                self.drop.pop(int(ctx.node_config["partition-id"]))
                self.drop[-1 - msg.metadata.dst_node_id] = "silent"
            if -1 - msg.metadata.dst_node_id in self.drop:
                continue
            try:
                reply = self.app(msg, ctx)
            except Exception as ex:  # noqa: BLE001 - as flwr-clientapp answers for it
                self.errors.setdefault(msg.metadata.dst_node_id, []).append(repr(ex))
                reply = Message(FlwrError(code=0, reason=repr(ex)), reply_to=msg)
            self.replies[mid] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]


def _configs(tmp_path, n, over=None):
    roster, keys = write_identities(tmp_path / "ids", [f"client-{i}" for i in range(n)])
    out = []
    for i in range(n):
        c = {
            "partition-id": i,
            "num-partitions": n,
            "pca-model": "distributed",
            "policy-noise-seed": NOISE_SEED,  # a test setting: simulation nodes only
            "policy-simulation": True,
            "policy-secagg-roster": str(roster),
            "policy-secagg-identity": str(keys[f"client-{i}"]),
        }
        c.update((over or {}).get(i, {}))
        out.append(c)
    return out


def _run(grid, **rc):
    run_config = {
        "task": "ldp-pca",
        "pca-model": "distributed",
        "pca-p": P,
        "pca-k": K,
        "pca-users": USERS,
        "pca-epsilon": 1.0,
        "pca-delta": 1e-4,
        "pca-seed": SEED,
        "node-wait": 5.0,
        "round-timeout": 5.0,
        **rc,
    }
    ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    return pca_server_main(grid, ctx)


def test_holders_release_through_the_secure_sum_and_a_dropped_holder_leaves_the_rest(tmp_path):
    """4 holders (threshold 3: a majority); client-3 goes silent before its masked input.
    The three others finish: Ŝ equals their messages, summed here from the same users and
    noise streams, to the quantisation; the ledger reads ε = 1 with secure aggregation and
    the fallback ε of one share."""
    led = {i: {"policy-ledger-dir": str(tmp_path / f"led{i}")} for i in range(4)}
    grid = Grid(_configs(tmp_path, 4, led), drop={3: "masked-input"})
    res = _run(grid)
    assert not res["aborted"] and res["threshold"] == 3
    assert res["contributors"] == ["client-0", "client-1", "client-2"]
    assert "masked-input" in res["failures"]["client-3"]
    noise = holder_noise(1.0, 1e-4, 3)
    total = np.zeros(P * (P + 1) // 2)
    for pid in range(3):
        rng = np.random.default_rng(derive_seed("node-noise", NOISE_SEED, "ldp-pca", pid))
        total += holder_message(synthetic_users(USERS, P, K, SEED, pid), noise, rng)
    ref = CovarianceAggregator(P).add_sum(total, 3 * USERS).covariance()
    assert res["n"] == 3 * USERS
    np.testing.assert_allclose(np.array(res["covariance"]), ref, rtol=0, atol=1e-9)
    pr = res["privacy"]
    assert pr["secagg"]["epsilon_analytic"] == pytest.approx(1.0, abs=1e-6)
    assert pr["fallback"]["sigma"] == pytest.approx(noise.share_sigma)
    assert pr["secagg"]["sigma"] == pytest.approx(noise.share_sigma * math.sqrt(3))
    # one share alone: weaker, and stated (1.87 at delta 1e-4), by dp-accounting directly
    want = dp_accounting.get_epsilon_gaussian(noise.share_sigma / math.sqrt(2), 1e-4)
    assert pr["fallback"]["epsilon_analytic"] == pytest.approx(want, rel=1e-6)
    assert want > 1.8
    # each node's own ledger: its share, with the values it drew (the packed p x p sum; the
    # noise is the test seed's numpy, so no sampler total variation is charged)
    import json

    for i in range(4):
        (f,) = (tmp_path / f"led{i}").glob("ledger-*.json")
        rels = json.loads(f.read_text())["releases"]
        assert [(r["values"], r["noise"]) for r in rels] == [(P * (P + 1) // 2, "numpy-float")]


def test_the_node_not_the_server_decides(tmp_path, monkeypatch):
    """A server cannot make a holder release an un-noised sum, join a sum below the node's
    own minimum, or release in a model its policy did not choose; each refusal leaves too
    few contributors, so the sum aborts and nothing is released."""
    from fedspectral.pca.flower import app as pca_app

    # epsilon = inf: the un-noised sum; refused by every node (allow-nonprivate is off)
    res = _run(Grid(_configs(tmp_path, 3)), **{"pca-epsilon": math.inf})
    assert res["aborted"] and "un-noised" in " ".join(res["failures"].values())
    # a server that lies about the nodes' minimum: t = 2 < 3, the nodes refuse
    real = pca_app._plans
    monkeypatch.setattr(
        pca_app, "_plans", lambda *a: ({c: (nd, m, 2) for c, (nd, m, _) in real(*a)[0].items()}, {})
    )
    grid = Grid(_configs(tmp_path, 3, {i: {"pca-min-contributors": 3} for i in range(3)}))
    res = _run(grid)
    assert res["aborted"] and "pca-min-contributors is 3" in " ".join(res["failures"].values())
    monkeypatch.setattr(pca_app, "_plans", real)
    # the same nodes with an honest server: t = 3, the sum completes
    assert not _run(
        Grid(_configs(tmp_path, 3, {i: {"pca-min-contributors": 3} for i in range(3)}))
    )["aborted"]
    # a node whose policy chose the local model is not counted as a holder
    grid = Grid(_configs(tmp_path, 3, {2: {"pca-model": "local"}}))
    with pytest.raises(RuntimeError, match="2 holder"):
        _run(grid, **{"pca-min-contributors": 3})


@pytest.mark.slow
def test_distributed_model_on_the_loopback_deployment_engine(tmp_path):
    """SuperLink + 3 SuperNodes on 127.0.0.1 (``flwr run``), every node's own node config
    choosing the distributed model; authenticated secure sum (LocalDeployment's identities
    and roster), threshold 3 from the run config.  Ŝ equals the holders' messages recomputed
    here from the same users and the nodes' test noise seed; ε per threat model from the
    ledger."""
    from pathlib import Path

    from fedspectral.fed.flower.deploy.local import LocalDeployment
    from fedspectral.fed.flower.deploy.processes import live_processes_in_groups

    app_dir = Path(__file__).resolve().parents[2] / "flower"
    dep = LocalDeployment(
        3,
        workdir=tmp_path / "dep",
        startup_timeout=60.0,
        node_config=[{"pca-model": "distributed"}] * 3,
        policy={"noise-seed": NOISE_SEED, "simulation": True},  # test nodes: seeded noise
    )
    out = tmp_path / "pca"
    rc = {
        "task": "ldp-pca",
        "pca-model": "distributed",
        "pca-min-contributors": 3,
        "min-nodes": 3,
        "pca-p": P,
        "pca-k": K,
        "pca-users": USERS,
        "pca-epsilon": 1.0,
        "pca-delta": 1e-4,
        "pca-seed": SEED,
        "out-dir": str(out),
    }
    try:
        dep.start()
        status = dep.run(app_dir, rc, timeout=180, done=lambda: (out / "ldp_pca.json").exists())
        assert status == "finished:completed", dep.log("superlink")[-3000:]
    finally:
        groups = dep.pgids()
        dep.stop(timeout=10.0)
        assert not live_processes_in_groups(groups)
    import json

    res = json.loads((out / "ldp_pca.json").read_text())
    assert not res["aborted"] and res["contributors"] == ["client-0", "client-1", "client-2"]
    noise = holder_noise(1.0, 1e-4, 3)
    total = np.zeros(P * (P + 1) // 2)
    for pid in range(3):
        rng = np.random.default_rng(derive_seed("node-noise", NOISE_SEED, "ldp-pca", pid))
        total += holder_message(synthetic_users(USERS, P, K, SEED, pid), noise, rng)
    ref = CovarianceAggregator(P).add_sum(total, 3 * USERS).covariance()
    np.testing.assert_allclose(np.array(res["covariance"]), ref, rtol=0, atol=1e-9)
    pr = res["privacy"]
    assert pr["secagg"]["epsilon_analytic"] == pytest.approx(1.0, abs=1e-6)
    assert pr["fallback"]["epsilon_analytic"] == pytest.approx(
        dp_accounting.get_epsilon_gaussian(noise.share_sigma / math.sqrt(2), 1e-4), rel=1e-6
    )
    print(
        f"loopback: secagg eps {pr['secagg']['epsilon_analytic']:.4f}, fallback eps "
        f"{pr['fallback']['epsilon_analytic']:.4f}"
    )


def test_holders_asked_different_things_cannot_complete_one_sum(tmp_path, monkeypatch):
    """A server that asks one holder for ε = 50 (almost no noise) and the others for ε = 1
    would leave every user with less noise than the ledger claims.  The request's digest
    is bound into the secure sum's session, which every holder signs: the odd holder
    refuses and the sum aborts.  Against a weakened node that skips the check (a constant
    digest) the same server completes the sum.  (With the default max-epsilon 4 the odd
    holder's policy refuses ε = 50 anyway: its message alone would spend more.)"""
    from flwr.app import ConfigRecord

    from fedspectral.fed.flower.apps.grid import exchange
    from fedspectral.fed.flower.apps.records import decode_replies
    from fedspectral.pca.flower import app as pca_app

    honest = pca_app._HolderTransport.send

    def hostile(self, msgs, rnd, label, kind):
        if not label.endswith("advertise-keys"):
            return honest(self, msgs, rnd, label, kind)
        out = []
        for i, m in enumerate(msgs):
            m.content["ldp-pca"] = ConfigRecord(
                dict(self.query, epsilon=50.0 if i == 0 else self.query["epsilon"])
            )
            out.append(
                Message(
                    m.content,
                    dst_node_id=m.metadata.dst_node_id,
                    message_type=pca_app.PCA_MESSAGE_TYPE,
                    group_id=m.metadata.group_id,
                )
            )
        return decode_replies(exchange(self.grid, out, timeout=self.timeout), self.cid_of)

    monkeypatch.setattr(pca_app._HolderTransport, "send", hostile)
    # nodes whose max-epsilon would let ε = 50 through: only the binding stops it
    lax = {i: {"policy-max-epsilon": 1e3, "policy-max-epsilon-total": 1e3} for i in range(3)}
    res = _run(Grid(_configs(tmp_path, 3, lax)), **{"pca-min-contributors": 3})
    assert res["aborted"] and "not bound to this request" in res["failures"]["client-0"]
    from fedspectral.pca.flower import node as pca_node

    # the server names the sum by the digest and the weakened node checks that constant
    monkeypatch.setattr(pca_app, "request_digest", lambda request: "0" * 32)
    monkeypatch.setattr(pca_node, "request_digest", lambda request: "0" * 32)
    assert not _run(Grid(_configs(tmp_path, 3, lax)), **{"pca-min-contributors": 3})["aborted"]


def test_a_holder_never_enters_a_sum_that_would_reveal_its_message_alone(tmp_path):
    """A stage-0 request for a secure sum of one holder (or threshold 1) is refused by the
    node before its data is read: the summand alone would be its un-summed message."""
    import json

    from flwr.app import ConfigRecord

    from fedspectral.fed.flower.apps.records import payload_to_recorddict
    from fedspectral.fed.protocol import Payload
    from fedspectral.pca.flower.task import PCA_MESSAGE_TYPE, request_digest

    grid = Grid(_configs(tmp_path, 2, {0: {"pca-data": str(tmp_path / "absent.npy")}}))
    request = {
        "p": P,
        "k": K,
        "epsilon": 1.0,
        "delta": 1e-4,
        "calibration": "analytic",
        "vectorisation": "auto",
        "norm-policy": "clip",
        "users": USERS,
        "seed": SEED,
        "spike": 1.0,
        "model": "distributed",
    }
    for clients, threshold in ((["client-0"], 1), (["client-0", "client-1"], 1)):
        session = f"0/ldp-pca-{request_digest(request)}/x".encode()
        rd = payload_to_recorddict(
            Payload(),
            phase="ldp-pca",
            round=0,
            **{
                "secagg-stage": 0,
                "secagg-session": session.hex(),
                "secagg-start": json.dumps(
                    {
                        "clients": clients,
                        "threshold": threshold,
                        "length": 16,
                        "bits": 64,
                        "bound": 1e6,
                        "key": "summand",
                    }
                ),
            },
        )
        rd["ldp-pca"] = ConfigRecord(request)
        msg = Message(rd, dst_node_id=100, message_type=PCA_MESSAGE_TYPE)
        with pytest.raises(ValueError, match="at least 2 distinct|threshold"):
            grid.app(msg, grid.nodes[100])


def test_a_local_model_nodes_ledger_records_each_users_message_size(tmp_path):
    """The local model: the node's ledger entry for its users' messages records the values
    one message draws, p(p+1)/2 (the per-user release the sampler's TV is charged to)."""
    import json

    over = {
        i: {"pca-model": "local", "policy-ledger-dir": str(tmp_path / f"led{i}")} for i in range(2)
    }
    res = _run(Grid(_configs(tmp_path, 2, over)), **{"pca-model": "local"})
    assert res["n"] == 2 * USERS
    for i in range(2):
        (f,) = (tmp_path / f"led{i}").glob("ledger-*.json")
        rels = json.loads(f.read_text())["releases"]
        assert [(r["party"], r["values"]) for r in rels] == [(f"users@node{i}", P * (P + 1) // 2)]
