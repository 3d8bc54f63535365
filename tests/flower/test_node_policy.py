"""The node's own privacy policy: refusals, its ledger, its noise, its error reasons.

No Ray, no processes: the real ClientApp is called directly (LDP-PCA) or through
the in-process ``FakeGrid`` of ``test_adapter`` (FedSC rounds run by the real
server-side runner), each node with the policy of its own node config.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedspectral.fed.flower.apps import client_app as ca
from fedspectral.fed.flower.apps.runner import FlowerRunner
from fedspectral.fed.flower.node.failure import FAILURE, DataError
from fedspectral.fed.flower.node.policy import (
    NodePolicy,
    PolicyRefusal,
    node_noise_generator,
)

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def _ctx(node_config: dict, run_id: int = 5) -> Context:
    return Context(
        run_id=run_id,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1, **node_config},
        state=RecordDict(),
        run_config={"debug": True},  # refusals raised, not error replies (outcome.py)
    )


def _pca_query(**over) -> Message:
    q = {
        "p": 4,
        "k": 1,
        "epsilon": 1.0,
        "delta": 1e-5,
        "calibration": "analytic",
        "norm-policy": "clip",
        "users": 20,
        "seed": 0,
        "spike": 1.0,
        **over,
    }
    return Message(
        RecordDict({"ldp-pca": ConfigRecord(q)}), dst_node_id=1, message_type="query.ldp_pca"
    )


APP = ca.make_client_app()  # each node reads its policy from its own node config


# -- the policy itself ---------------------------------------------------------------------
def test_policy_from_file_and_node_config(tmp_path, monkeypatch) -> None:
    f = tmp_path / "policy.toml"
    f.write_text(
        "[privacy]\nmax-epsilon = 2\nmax-epsilon-total = 5.0\n"
        'calibrations = ["analytic"]\nledger-dir = "/tmp/x"\n'
    )
    pol = NodePolicy.from_node({"privacy-policy": str(f), "policy-max-delta": 1e-6})
    assert (pol.max_epsilon, pol.max_epsilon_total, pol.max_delta) == (2.0, 5.0, 1e-6)
    assert pol.calibrations == ("analytic",) and pol.ledger_dir == "/tmp/x"
    assert str(f) in pol.source and "node-config" in pol.source
    # the defaults: nothing non-private, noise from OS entropy, "paper" and "raise" off
    d = NodePolicy.from_node({"partition-id": 0})
    assert not d.allow_nonprivate and d.noise_seed is None
    assert "paper" not in d.calibrations and d.norm_policies == ("clip",)
    monkeypatch.setenv("FEDSPECTRAL_NODE_POLICY", str(f))
    assert NodePolicy.from_node({}).max_epsilon == 2.0
    with pytest.raises(ValueError, match="unknown privacy-policy key 'max-eps'"):
        NodePolicy.from_node({"policy-max-eps": 1.0})
    with pytest.raises(ValueError, match="max_delta"):
        NodePolicy(max_delta=1.5)
    with pytest.raises(TypeError, match="allow_nonprivate"):
        NodePolicy(allow_nonprivate=1)


def test_node_noise_is_not_reproducible_and_seeded_only_by_the_node() -> None:
    from fedspectral.privacy import SecureNoise
    from fedspectral.privacy.noise import add_gaussian

    src = node_noise_generator(NodePolicy())
    assert isinstance(src, SecureNoise)  # the secure source by default
    a = add_gaussian(np.zeros(4), 1.0, src)
    b = add_gaussian(np.zeros(4), 1.0, node_noise_generator(NodePolicy()))
    assert not np.array_equal(a, b)  # OS entropy: nothing shared to regenerate it from
    pol = NodePolicy(noise_seed=3, simulation=True)  # a test setting: simulation only
    assert np.array_equal(
        node_noise_generator(pol, parts=(1,)).standard_normal(4),
        node_noise_generator(pol, parts=(1,)).standard_normal(4),
    )
    derived = np.random.default_rng(0)
    derive = NodePolicy(noise_seed="derive", simulation=True)
    assert node_noise_generator(derive, derived) is derived
    # the query carries no noise seed; one slipped in is ignored, not obeyed
    r1 = APP(_pca_query(**{"noise-seed": 11}), _ctx({"policy-ledger-dir": ""}))
    r2 = APP(_pca_query(**{"noise-seed": 11}), _ctx({}))
    m1 = r1.content.array_records["messages"]["messages"].numpy()
    m2 = r2.content.array_records["messages"]["messages"].numpy()
    assert m1.shape == m2.shape == (20, 10) and not np.array_equal(m1, m2)


# -- LDP-PCA: refused before any data is read ------------------------------------------------
@pytest.mark.parametrize(
    ("over", "policy", "match"),
    [
        ({"epsilon": math.inf}, {}, "without noise .policy allow-nonprivate: false"),
        ({"calibration": "paper"}, {}, "calibrations 'paper' is not allowed"),
        ({"norm-policy": "raise"}, {}, "norm-policies 'raise' is not allowed"),
        ({"delta": 1e-3}, {}, "requested delta 0.001 exceeds max-delta"),
        ({"epsilon": 3.0}, {"policy-max-epsilon": 2.0}, "above max-epsilon 2"),
    ],
)
def test_ldp_pca_request_outside_the_policy_is_refused(over, policy, match, tmp_path) -> None:
    # the node's data file does not even exist: the refusal comes before it is opened
    ctx = _ctx({"pca-data": str(tmp_path / "absent.npy"), **policy})
    with pytest.raises(PolicyRefusal, match=match) as err:
        APP(_pca_query(**over), ctx)
    assert "refused by the node's" in str(err.value) and "policy" in str(err.value)


def _rdp_total(k: int, delta: float = 1e-4) -> float:
    """ε of k LDP-PCA releases (ε = 1, δ = 1e-5, analytic) by dp-accounting's RDP accountant."""
    import dp_accounting

    from fedspectral.pca.local import SENSITIVITY, ldp_noise_scale

    z = ldp_noise_scale(1.0, 1e-5).sigma / SENSITIVITY
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(z), k)
    return float(acc.get_epsilon(delta))


def _ledger_files(d) -> list:
    return sorted(d.glob("ledger-*.json"))


def test_ledger_survives_rounds_runs_and_restarts_per_data_set(tmp_path) -> None:
    """The total-ε limit is per node and per data set: a new run or a restarted node
    (fresh context) continues from the persisted ledger; another data set has its own."""
    limit = round((_rdp_total(2) + _rdp_total(3)) / 2, 3)  # room for 2 releases, not 3
    X = np.full((20, 4), 0.25)
    np.save(tmp_path / "users.npy", X)
    cfg = {
        "policy-ledger-dir": str(tmp_path / "ledger"),
        "policy-max-epsilon-total": limit,
        "pca-data": str(tmp_path / "users.npy"),
    }
    out = APP(_pca_query(), _ctx(cfg))
    assert out.content.config_records["release"]["epsilon"] <= 1.0 + 1e-9
    APP(_pca_query(), _ctx(cfg, run_id=6))  # another run: the same budget
    (f,) = _ledger_files(tmp_path / "ledger")
    assert len(json.loads(f.read_text())["releases"]) == 2
    # a third query -- new run, restarted node -- would exceed the limit: refused, unrecorded
    with pytest.raises(PolicyRefusal, match=f"total .* above max-epsilon-total {limit:g}"):
        APP(_pca_query(), _ctx(cfg, run_id=7))
    assert len(json.loads(f.read_text())["releases"]) == 2
    # another path to the same file is the same data set: the same ledger, the same limit
    (tmp_path / "again.npy").symlink_to(tmp_path / "users.npy")
    with pytest.raises(PolicyRefusal, match="above max-epsilon-total"):
        APP(_pca_query(), _ctx({**cfg, "pca-data": str(tmp_path / "again.npy")}, run_id=8))
    # another file under the same declared identity is the same data set (issue 48: the
    # budget follows the data set its operator declares, never the content)
    np.save(tmp_path / "other.npy", X / 2)
    with pytest.raises(PolicyRefusal, match="above max-epsilon-total"):
        APP(_pca_query(), _ctx({**cfg, "pca-data": str(tmp_path / "other.npy")}, run_id=8))
    # another data set, declared by the operator (data-id), starts its own ledger
    other = {**cfg, "pca-data": str(tmp_path / "other.npy"), "data-id": "other-users"}
    APP(_pca_query(), _ctx(other, run_id=8))
    assert len(_ledger_files(tmp_path / "ledger")) == 2
    # the default: the node's state directory (FEDSPECTRAL_NODE_STATE, set by conftest)
    import os

    APP(_pca_query(), _ctx({"pca-data": str(tmp_path / "users.npy")}))
    assert len(_ledger_files(Path(os.environ["FEDSPECTRAL_NODE_STATE"]))) == 1
    # "memory": the node's Flower context only (the simulation engine's virtual nodes)
    mem = {"policy-ledger-dir": "memory", "policy-simulation": True}
    ctx = _ctx({"policy-max-epsilon-total": limit, **mem})
    APP(_pca_query(), ctx)
    APP(_pca_query(), ctx)
    with pytest.raises(PolicyRefusal):
        APP(_pca_query(), ctx)


def test_the_node_fails_closed_when_its_ledger_cannot_be_written(tmp_path) -> None:
    X = np.full((5, 4), 0.25)
    np.save(tmp_path / "users.npy", X)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cfg = {"policy-ledger-dir": str(blocker / "sub"), "pca-data": str(tmp_path / "absent.npy")}
    # refused before the data is opened (the data file does not even exist)
    with pytest.raises(PolicyRefusal, match="ledger .* cannot be read.*fails closed"):
        APP(_pca_query(), _ctx(cfg))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):  # root ignores the mode bits
            pytest.skip("running as root: a read-only directory is writable")
        with pytest.raises(PolicyRefusal, match="fails closed"):
            APP(_pca_query(), _ctx({**cfg, "policy-ledger-dir": str(ro)}))
    finally:
        ro.chmod(0o700)


def test_error_reasons_carry_no_data_values(tmp_path) -> None:
    X = np.zeros((3, 4))
    X[2] = [1.0, 0.5, 0.25, 0.125]  # norm 1.1524..., row 2
    np.save(tmp_path / "users.npy", X)
    ctx = _ctx({"pca-data": str(tmp_path / "users.npy"), "policy-norm-policies": "clip,raise"})
    with pytest.raises(DataError) as err:
        APP(_pca_query(**{"norm-policy": "raise"}), ctx)
    assert str(err.value) == FAILURE  # no type, no reason: the same for every failure
    # the attempt was spent before the data was read
    (f,) = sorted(Path(os.environ["FEDSPECTRAL_NODE_STATE"]).glob("ledger-*.json"))
    assert len(json.loads(f.read_text())["releases"]) == 1


# -- FedSC share phase through the server-side runner ---------------------------------------
def _dp_tiny(tiny, rounds: int = 2):
    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", rounds)
    cfg.dp.enabled, cfg.dp.epsilon = True, 4.0
    cfg.method.params["neighbouring"] = "replace_one"  # the nodes' default relation
    return validate(cfg)


def test_fedsc_refusal_is_a_failure_and_the_node_ledger_counts_rounds(tiny, tmp_path) -> None:
    from test_adapter import FakeGrid

    grid = FakeGrid(3, policy=None)
    for node in grid.nodes.values():  # FedSC's weights leave un-noised: opted in
        node.node_config["policy-allow-unprotected-weights"] = True
    ledger_dir = tmp_path / "node0"
    grid.nodes[1000].node_config["policy-ledger-dir"] = str(ledger_dir)
    grid.nodes[1001].node_config["policy-max-epsilon"] = 0.1  # client-1 refuses
    res = FlowerRunner(_dp_tiny(tiny), grid, round_timeout=5.0, node_wait=5.0).run()
    for rec in res["records"]:
        share = rec["phases"]["share"]
        assert set(share["failures"]) == {"client-1"}
        why = share["failures"]["client-1"]
        assert "refused by the node's node-config privacy policy" in why
        assert "max-epsilon 0.1" in why
        assert rec["phases"]["train"]["failures"] == {}
        assert "clip_fraction" not in share["metrics"]
    # client-0's own ledger: one DP-CalR release per round, the sigma the server recorded
    (f,) = sorted(ledger_dir.glob("ledger-*.json"))
    led = json.loads(f.read_text())["releases"]
    assert [r["step"] for r in led] == [1, 2]
    server = [r for r in res["privacy"]["ledger"]["releases"] if r["party"] == "client-0"]
    assert [r["sigma"] for r in server] == [r["sigma"] for r in led]


def test_nonprivate_fedsc_is_refused_before_the_data_is_loaded(tiny) -> None:
    from fedspectral.config import to_dict

    cfg = tiny("fedsc", 1)  # dp.enabled: false
    ctx = _ctx({})
    hello = Message(
        RecordDict({"config": ConfigRecord({"json": json.dumps(to_dict(cfg))})}),
        dst_node_id=1,
        message_type="query.hello",
    )
    APP(hello, ctx)
    ca._PROCESS_CACHE.clear()
    share = Message(
        RecordDict({"fedspectral": ConfigRecord({"phase": "share", "round": 1})}),
        dst_node_id=1,
        message_type="query",
    )
    with pytest.raises(PolicyRefusal, match="fedsc's 'R' .* without noise .*allow-nonprivate"):
        APP(share, ctx)
    assert ca._PROCESS_CACHE.get("clients", {}) == {}  # no data loaded
