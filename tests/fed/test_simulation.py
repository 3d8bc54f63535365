"""The in-process runner: resume equals an uninterrupted run; failed clients; checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from faults import StopAfter, failing, weights_equal  # tests/faults.py
from fedspectral.config import ExperimentConfig
from fedspectral.data.partition import stratified_subset
from fedspectral.fed.callbacks import Callback
from fedspectral.fed.simulation import Simulation


def _cfg(method="fedsc", rounds=3):
    cfg = ExperimentConfig(name="sim-test")
    cfg.data.dataset = "digits"
    cfg.data.max_train = 600
    cfg.partition.num_clients = 5
    cfg.partition.classes_per_client = 2
    cfg.model.width = 4
    cfg.model.projector_hidden = 32
    cfg.model.projector_out = 16
    cfg.method.name = method
    cfg.method.rounds = rounds
    cfg.method.clients_per_round = 3
    cfg.optim.batch_size = 32
    cfg.eval.every = 1
    cfg.eval.knn_k = 10
    cfg.eval.test_size = 200
    cfg.run.progress = False
    cfg.run.threads = 1
    if method == "fedsc":
        cfg.method.params = {"share_views": 2, "alpha": "linear"}
        cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 4.0, 1e-3
    return cfg


def _strip_times(x):
    if isinstance(x, dict):
        return {k: _strip_times(v) for k, v in x.items() if "seconds" not in k}
    if isinstance(x, list):
        return [_strip_times(v) for v in x]
    return x


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    sim = Simulation(_cfg(), out_dir=out)
    res = sim.run()
    return sim, res


def test_resume_equals_uninterrupted(uninterrupted, tmp_path):
    full_sim, full = uninterrupted
    part = Simulation(_cfg(), out_dir=tmp_path, callbacks=[StopAfter(1)])
    first = part.run()
    assert first["rounds_done"] == 1 and first["final"] == {}
    resumed_sim = Simulation(_cfg(), out_dir=tmp_path)  # a fresh process would do the same
    res = resumed_sim.run(resume=True)
    assert res["resumed_from"] == 1 and res["rounds_done"] == 3
    a, b = full_sim.state.server, resumed_sim.state.server
    assert weights_equal(a.weights, b.weights)  # bit-equal
    assert a.arrays.keys() == b.arrays.keys()
    assert all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)
    assert _strip_times(res["records"]) == _strip_times(full["records"])
    assert res["final"] == full["final"]
    assert res["privacy"]["ledger"] == full["privacy"]["ledger"]
    # partial participation really happened, and was recorded
    assert all(len(r["sampled"]) == 3 for r in full["records"])
    assert len({tuple(r["sampled"]) for r in full["records"]}) > 1


def test_run_is_deterministic_and_seed_matters(uninterrupted):
    _, full = uninterrupted
    again = Simulation(_cfg()).run()
    assert _strip_times(again["records"]) == _strip_times(full["records"])
    cfg = _cfg()
    cfg.run.seed = 1
    other = Simulation(cfg, callbacks=[StopAfter(1)]).run()
    assert (
        other["records"][0]["phases"]["train"]["metrics"]
        != full["records"][0]["phases"]["train"]["metrics"]
    )


def test_privacy_report_matches_ledger(uninterrupted):
    _, full = uninterrupted
    priv = full["privacy"]
    # round 1: every client shares; rounds 2-3: the 3 sampled ones
    counts = {c: 0 for c in priv["per_party"]}
    for r in full["records"]:
        for c in r["phases"]["share"]["participants"]:
            counts[c] += 1
    assert counts["client-0"] >= 1 and sum(counts.values()) == 5 + 3 + 3
    assert priv["releases"] == 11
    # worst-case plan: 3 releases at eps=4 -> no client above 4 by RDP; PLD is tighter
    for p in priv["per_party"].values():
        assert p["epsilon_rdp"] <= 4.0 + 1e-6
        assert p["epsilon_pld"] <= p["epsilon_rdp"]
    assert full["records"][-1]["epsilon_rdp"] == pytest.approx(priv["epsilon_rdp"])


def test_failed_client_is_non_participation(tmp_path):
    cfg = _cfg(rounds=2)
    bad = ("share", 2)
    sim = Simulation(
        cfg, transport=failing(lambda ph, r, c: (ph, r) == bad and c in cfg_sampled(cfg, r)[:1])
    )
    res = sim.run()
    rec = res["records"][1]
    (failed,) = rec["phases"]["share"]["failures"]
    assert "injected failure" in rec["phases"]["share"]["failures"][failed]
    # its stale R_j from round 1 was kept; its round-2 release is counted all the same
    # (a release counts when it is requested and sent, whether or not the reply arrives)
    steps = [r["step"] for r in res["privacy"]["ledger"]["releases"] if r["party"] == failed]
    assert steps == [1, 2]
    assert failed in rec["phases"]["train"]["participants"]  # still trains (gets weights)
    assert rec["bytes_down"][failed] > 0


def test_a_round_in_which_no_client_takes_part_stops_the_run(tmp_path):
    """Every client refuses or fails in round 2 (a node policy that refuses the server's
    requests, a round timeout too short): the run stops with an error naming the round
    and the reasons, after round 2's checkpoint -- it does not train nothing for the
    remaining rounds and end as a success.  A round in which one client takes part goes
    on (the test above), and so does one whose failures leave another phase's replies."""
    from fedspectral.fed.simulation import CHECKPOINT, load_run_state

    cfg = _cfg(rounds=2)
    cfg.eval.every = 2
    sim = Simulation(cfg, out_dir=tmp_path, transport=failing(lambda ph, r, c: r == 2))
    with pytest.raises(RuntimeError, match=r"round 2: no client took part") as err:
        sim.run()
    assert "in share: RuntimeError: injected failure of client-" in str(err.value)
    assert load_run_state(tmp_path / CHECKPOINT, sim.cfg).round == 2  # resumable, ledgered
    # only the share phase fails everywhere: the train replies are aggregated, the run ends
    res = Simulation(_cfg(rounds=1), transport=failing(lambda ph, r, c: ph == "share")).run()
    (rec,) = res["records"]
    share, train = rec["phases"]["share"], rec["phases"]["train"]
    assert set(share["failures"]) == set(share["participants"]) and train["failures"] == {}


def cfg_sampled(cfg, rnd):
    from fedspectral.fed.protocol import sample_clients

    return sample_clients([f"client-{j}" for j in range(5)], 3, rnd, cfg.run.seed)


def test_resume_refuses_other_config(tmp_path):
    Simulation(_cfg(rounds=2), out_dir=tmp_path, callbacks=[StopAfter(1)]).run()
    cfg = _cfg(rounds=2)
    cfg.optim.lr = 0.01
    with pytest.raises(ValueError, match="different config"):
        Simulation(cfg, out_dir=tmp_path).run(resume=True)


def test_threads_restored():
    before = torch.get_num_threads()
    cfg = _cfg("fedavg_sc", rounds=1)
    cfg.run.threads = 1
    Simulation(cfg).run()
    assert torch.get_num_threads() == before


def test_stratified_subset():
    y = np.repeat(np.arange(4), [10, 20, 30, 40])
    idx = stratified_subset(y, 50, np.random.default_rng(0))
    assert len(idx) == 50 and len(set(idx)) == 50
    np.testing.assert_array_equal(np.bincount(y[idx]), [5, 10, 15, 20])


def test_global_sc_objective_is_the_full_data_sc_loss():
    from fedspectral.fed.losses import spectral_contrastive_loss
    from fedspectral.fed.methods.sc import global_sc_objective

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5))
    x = torch.rand(37, 1, 3, 4)
    shift = torch.linspace(-1, 1, 12).view(1, 1, 3, 4)
    calls = []

    def aug(xb, g):  # view 1 = x, view 2 = x + shift (deterministic, batch-independent)
        calls.append(len(xb))
        return xb + shift * (len(calls) % 2 == 0)

    want = spectral_contrastive_loss([net(x), net(x + shift)], mu=2.0).item()
    for bs in (37, 10):
        calls.clear()
        got = global_sc_objective(net, x, aug, 2.0, seed=0, batch_size=bs)
        assert got == pytest.approx(want, rel=1e-6)
    assert net.training  # mode restored
    # in parts (the clients' data sets): the same value for a per-sample network ...
    calls.clear()
    got = global_sc_objective(net, [x[:20], x[20:]], aug, 2.0, seed=0, batch_size=16)
    assert got == pytest.approx(want, rel=1e-6)
    assert calls == [16, 16, 4, 4, 16, 16, 1, 1]  # batches never cross a part
    # ... and, with batch statistics, each part normalised on its own, as clients train
    bn = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.BatchNorm1d(12, affine=False, track_running_stats=False)
    )
    parts = [x[:20], x[20:] * 3.0]
    calls.clear()
    got = global_sc_objective(bn, parts, aug, 100.0, seed=0, batch_size=64)
    za = [bn.train()(torch.cat([p, p + shift])) for p in parts]
    z1 = torch.cat([z[: len(p)] for z, p in zip(za, parts, strict=True)])
    z2 = torch.cat([z[len(p) :] for z, p in zip(za, parts, strict=True)])
    assert got == pytest.approx(spectral_contrastive_loss([z1, z2], mu=100.0).item(), rel=1e-5)


def test_initial_evaluation_is_the_untrained_network(tmp_path):
    """``eval.initial`` evaluates the weights before round 1: a run whose steps cannot
    move the weights (lr 1e-30, below float32 resolution; no decay) ends exactly where
    its initial record says, the record survives a resume, and a real run moves away."""
    cfg = _cfg("fedavg_sc", rounds=2)
    cfg.eval.initial = True
    cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.schedule = 1e-30, 0.0, "constant"
    frozen = Simulation(cfg).run()
    assert set(frozen["initial"]) >= {"knn_backbone", "knn_projector", "sc_objective"}
    for k in ("knn_backbone", "knn_projector"):
        assert frozen["initial"][k] == frozen["final"][k]
    assert frozen["initial"]["sc_objective"] == pytest.approx(
        frozen["records"][-1]["sc_objective"], abs=1e-12
    )
    cfg = _cfg("fedavg_sc", rounds=2)
    cfg.eval.initial = True
    cfg.optim.lr = 0.2
    Simulation(cfg, out_dir=tmp_path, callbacks=[StopAfter(1)]).run()
    resumed = Simulation(cfg, out_dir=tmp_path).run(resume=True)
    assert resumed["initial"] == frozen["initial"]  # same seed, same initial weights
    assert resumed["records"][-1]["sc_objective"] != frozen["initial"]["sc_objective"]
    cfg.eval.initial = False
    assert "initial" not in Simulation(cfg).run()


def test_initial_evaluation_is_on_by_default_changes_no_weight_and_no_fingerprint(
    uninterrupted,
):
    """``eval.initial`` unset is on (round 0 of every convergence figure), and the
    evaluation leaves the run as it was: turned off, the same config trains to bit-equal
    weights and records.  That is why unset is hashed as ``false`` (its default before it
    was on): a config that does not set it keeps its fingerprint, finished runs and
    checkpoints stay valid; ``true`` set explicitly keeps its own."""
    from fedspectral.config import to_dict
    from fedspectral.fed.validation import config_fingerprint, validate

    on_sim, on = uninterrupted
    assert _cfg().eval.initial is None  # the fixture's config leaves it unset
    assert set(on["initial"]) >= {"knn_backbone", "knn_projector", "sc_objective"}
    cfg = _cfg()
    cfg.eval.initial = False
    off_sim = Simulation(cfg)
    off = off_sim.run()
    assert "initial" not in off
    assert weights_equal(on_sim.state.server.weights, off_sim.state.server.weights)
    assert _strip_times(off["records"]) == _strip_times(on["records"])
    assert off["final"] == on["final"]

    def fingerprint(value):
        c = _cfg()
        c.eval.initial = value
        return config_fingerprint(to_dict(validate(c)))

    assert fingerprint(None) == fingerprint(False) != fingerprint(True)


class _Recorder(Callback):
    """Records what the runner hands its callbacks; adds a key to the results."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_state(self, sim, state):
        self.calls.append(("state", state.round, len(state.records)))

    def on_round_end(self, sim, rnd, record):
        self.calls.append(("round", rnd, record.round))

    def on_results(self, sim, results):
        self.calls.append(("results", results["rounds_done"]))
        results["seen_by"] = "recorder"


def test_callbacks_see_state_rounds_and_results_and_may_stop(tmp_path):
    cfg = _cfg(rounds=2)
    cfg.data.max_train, cfg.eval.test_size = 300, 100  # small: only the hooks matter
    first, stop = _Recorder(), StopAfter(1)
    res = Simulation(cfg, out_dir=tmp_path, callbacks=[first, stop]).run()
    assert first.calls == [("state", 0, 0), ("round", 1, 1), ("results", 1)]
    assert res["rounds_done"] == 1 and res["final"] == {} and res["seen_by"] == "recorder"
    again = _Recorder()
    res = Simulation(cfg, out_dir=tmp_path, callbacks=[again]).run(resume=True)
    assert again.calls == [("state", 1, 1), ("round", 2, 2), ("results", 2)]  # loaded state
    assert res["resumed_from"] == 1 and res["rounds_done"] == 2


def test_a_transport_wrapper_that_fails_nobody_changes_nothing():
    """The fault-injecting test transport answers exactly as the default one when no
    client is listed (same weights, bit for bit, same records)."""
    cfg = _cfg(rounds=1)
    a, b = Simulation(cfg), Simulation(cfg, transport=failing(lambda ph, r, c: False))
    ra, rb = a.run(), b.run()
    assert weights_equal(a.state.server.weights, b.state.server.weights)
    assert _strip_times(ra["records"]) == _strip_times(rb["records"])


def test_bad_hooks_are_refused_before_any_work():
    with pytest.raises(TypeError, match="callbacks"):
        Simulation(_cfg(), callbacks=[object()])
    with pytest.raises(TypeError, match="transport"):
        Simulation(_cfg(), transport="inprocess")
    with pytest.raises(TypeError, match="tolerate_failures"):
        Simulation(_cfg(), tolerate_failures="yes")
