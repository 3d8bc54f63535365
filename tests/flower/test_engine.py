"""Flower simulation runtime (``flwr run`` on a local simulation SuperLink, Ray) against
the in-process runner.

Three Flower runs (the SuperLink, the ``flwr-simulation`` process and Ray's start-up
dominate):

1. plain FedSC, 2 rounds, 3 clients: the global weights, the server's correlation
   state, the per-round metrics and the privacy ledger equal the in-process run's,
   bit for bit (same seeds; one torch thread in every process, so every float
   reduction runs in the same order);
2. interrupted, faulty and privatised at once: the in-process runner stops after
   round 1 (checkpoint), Flower resumes from that checkpoint, client-1 raises in
   both phases of round 2, and client-level DP (Flower's fixed clipping, the runners'
   post-processor) is on --
   the result equals an uninterrupted in-process run with the same fault and DP;
3. FedCA with its public alignment set: equal to the in-process run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from faults import StopAfter, failing  # tests/faults.py
from fedspectral.fed.flower.apps.engine import run_flower_simulation, write_app
from fedspectral.fed.flower.node.client_dp import MECHANISM, ClientDP
from fedspectral.fed.simulation import CHECKPOINT, Simulation, load_run_state

pytestmark = pytest.mark.slow


def _assert_same_state(a, b) -> None:
    assert list(a.weights) == list(b.weights)
    for k in a.weights:
        assert a.weights[k].dtype == b.weights[k].dtype
        assert np.array_equal(a.weights[k], b.weights[k]), k
    assert a.arrays.keys() == b.arrays.keys()
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k


def _metrics(res):
    return [{p: ph["metrics"] for p, ph in r["phases"].items()} for r in res["records"]]


def test_flower_simulation_equals_in_process(tiny, capfd, tmp_path) -> None:
    sim = Simulation(tiny("fedsc", 2))
    ref = sim.run()
    capfd.readouterr()
    res = run_flower_simulation(tiny("fedsc", 2), out_dir=tmp_path)
    # the supported runtime (flwr run): Flower prints no deprecation warning
    # (flwr.simulation.run_simulation logged one on every run)
    printed = capfd.readouterr()
    assert "deprecated" not in (printed.out + printed.err).lower()
    assert res["flower"]["runtime"].startswith("flwr run")
    assert res["engine"] == "flower" and ref["engine"] == "inprocess"
    # the Flower run's final state: its checkpoint, read back as the runners read it
    fl = load_run_state(tmp_path / CHECKPOINT, tiny("fedsc", 2))
    assert fl.round == 2 and [r.to_dict() for r in fl.records] == res["records"]
    _assert_same_state(sim.state.server, fl.server)
    assert _metrics(res) == _metrics(ref)
    assert [r["knn_projector"] for r in res["records"]] == [
        r["knn_projector"] for r in ref["records"]
    ]
    assert fl.ledger.to_dict() == sim.state.ledger.to_dict()  # same DP-CalR releases
    assert res["privacy"]["ledger"] == fl.ledger.to_dict()
    # what travelled: one query and one train message per client and round
    log = res["flower"]["messages"]
    assert [(m["phase"], m["kind"], m["sent"], m["answered"]) for m in log] == [
        ("share", "query", 3, 3),
        ("train", "train", 3, 3),
    ] * 2
    assert [r["bytes_up"] for r in res["records"]] == [r["bytes_up"] for r in ref["records"]]
    assert res["timings"]["flower_startup_seconds"] > 0


def test_resume_fault_and_client_dp_match_in_process(tiny, tmp_path) -> None:
    fault = {("share", 2, "client-1"), ("train", 2, "client-1")}

    def fail(phase: str, rnd: int, cid: str) -> bool:
        return (phase, rnd, cid) in fault

    def dp() -> ClientDP:
        return ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=7, delta=1e-5)

    # reference: uninterrupted, in process
    ref_dp = dp()
    ref_sim = Simulation(tiny("fedsc", 2), transport=failing(fail), client_dp=ref_dp)
    ref = ref_sim.run()
    # interrupted after round 1 (in process), resumed on Flower
    part = Simulation(
        tiny("fedsc", 2),
        out_dir=tmp_path,
        transport=failing(fail),
        callbacks=[StopAfter(1)],
        client_dp=dp(),
    )
    assert part.run()["rounds_done"] == 1
    # the virtual nodes run the tests' ClientApp: client-1 raises on both round-2 messages
    app = write_app(
        tmp_path / "app", clientapp="faulty_client:app", extra_config={"fail": "client-1|2|*"}
    )
    shutil.copy(Path(__file__).with_name("faulty_client.py"), app)
    fl_dp = dp()
    res = run_flower_simulation(
        tiny("fedsc", 2), out_dir=tmp_path, resume=True, client_dp=fl_dp, app_dir=app
    )
    assert res["resumed_from"] == 1 and res["rounds_done"] == 2
    fl = load_run_state(tmp_path / CHECKPOINT, tiny("fedsc", 2))
    _assert_same_state(ref_sim.state.server, fl.server)
    assert _metrics(res) == _metrics(ref)
    # the failed client is non-participation, recorded; the round completed with the others
    r2 = res["records"][1]["phases"]
    assert set(r2["share"]["failures"]) == {"client-1"}
    assert "injected failure" in r2["train"]["failures"]["client-1"]
    assert r2["train"]["participants"] == ["client-0", "client-1", "client-2"]
    assert r2["train"]["metrics"]["clients"] == 2.0
    # FedSC kept client-1's stale correlation from round 1
    st = fl.server
    stale = [k for k in st.arrays if "client-1" in k]
    assert stale, f"no per-client correlation state in {sorted(st.arrays)}"
    for k in stale:  # unchanged since round 1 (the checkpointed state)
        assert np.array_equal(st.arrays[k], part.state.server.arrays[k]), k
    # client-level DP: the run's ledger, the same on both runners, and nothing else
    assert fl.ledger.to_dict() == ref_sim.state.ledger.to_dict()  # sample level: DP-CalR
    assert all(r.mechanism != MECHANISM for r in fl.ledger.releases)
    led = fl.client_ledger  # client level, its own ledger: nothing composed across units
    assert led.unit == "client" and led.to_dict() == ref_sim.state.client_ledger.to_dict()
    dp_rel = [r for r in led.releases if r.mechanism == MECHANISM]
    assert len(dp_rel) == len(led.releases)
    assert [(r.party, r.step) for r in dp_rel] == [
        ("client-0", 1),
        ("client-1", 1),
        ("client-2", 1),
        ("client-0", 2),
        ("client-2", 2),
    ]
    eps_agg = fl_dp.epsilon()  # the released aggregates': the ledger's, every round
    assert eps_agg > 0 and eps_agg == ref_dp.epsilon()
    # the caller's ClientDP holds the run's client-level ledger, as if it had run here
    assert fl_dp.ledger.to_dict() == led.to_dict()
    # client-0 took part in both releases: its own ε is the aggregate's (one z per round)
    eps_ours = led.epsilon(1e-5, party="client-0", accountant="rdp")
    assert eps_ours == pytest.approx(eps_agg, rel=1e-12)
    assert res["privacy"]["client_level"]["epsilon_rdp"] == pytest.approx(eps_ours)
    assert res["flower"]["client_dp"]["epsilon_rdp"] == eps_agg
    assert res["flower"]["client_dp"]["releases"] == 1  # round 2 only: round 1 was resumed


def test_fedca_with_alignment_equals_in_process(tiny, tmp_path) -> None:
    """FedCA on Flower: the public split and base representations travel in the first
    train message, the dictionaries afterwards, the clients keep them in their node
    state -- and the run equals the in-process one bit for bit."""
    from fedspectral.fed.validation import validate

    def cfg():
        c = tiny("fedca", 2)
        c.method.views = 1
        c.method.params = {"public_size": 40, "base_epochs": 2}
        return validate(c)

    sim = Simulation(cfg())
    ref = sim.run()
    res = run_flower_simulation(cfg(), out_dir=tmp_path)
    st = load_run_state(tmp_path / CHECKPOINT, cfg()).server
    _assert_same_state(sim.state.server, st)
    assert st.method_state["fedca.has_public"] == sorted(sim.fed.clients)
    assert _metrics(res) == _metrics(ref)
    assert [r["bytes_down"] for r in res["records"]] == [r["bytes_down"] for r in ref["records"]]
    assert res["records"][0]["phases"]["train"]["metrics"]["aligned"] == 1.0
