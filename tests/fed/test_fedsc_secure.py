"""FedSC through secure aggregation: the server keeps only sums (A, Q, who contributed when).

Pinned here: equality with the plain run when noise is off, fresh noise in every sum,
the distributed noise and the two threat models of the ledger (computed by the
accountants), the abort rule, the commit protocol and the refused overflow.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from faults import FailingTransport, StopAfter  # tests/faults.py
from fedspectral.config import ExperimentConfig
from fedspectral.fed.correlation import calibrate_correlation_sigma, correlation_sensitivity
from fedspectral.fed.methods import build_method
from fedspectral.fed.methods.fedsc import FedSC
from fedspectral.fed.protocol import derive_seed, run_round, sample_clients
from fedspectral.fed.simulation import InProcessTransport, Simulation
from fedspectral.fed.weights import net_to_arrays
from fedspectral.linalg import pack_symmetric
from fedspectral.privacy import PrivacyLedger

D_IN, D_OUT = 6, 3
PACKED = D_OUT * (D_OUT + 1) // 2
SIZES = {"c0": 20, "c1": 30, "c2": 40, "c3": 50, "c4": 60}


def _cfg(secure=True, rounds=3, per_round=2, **params):
    cfg = ExperimentConfig(name="secure-test")
    cfg.method.name = "fedsc"
    cfg.method.rounds = rounds
    cfg.method.clients_per_round = per_round
    cfg.method.params = {
        "alpha": "fixed",
        "alpha_start": 0.5,
        "mu": 1.0,
        "share_views": 1,
        "secure_aggregation": secure,
        **params,
    }
    cfg.partition.num_clients = len(SIZES)
    cfg.model.projector_out = D_OUT
    cfg.optim.batch_size = 16
    cfg.run.seed = 7
    return cfg


class Harness:
    """Real FedSC client handlers on a linear encoder (x -> Wx, 6 -> 3) and random data,
    run by the in-process transport of the simulation."""

    def __init__(self, cfg, mode="exact", fail=None):
        torch.manual_seed(0)
        self.net = torch.nn.Linear(D_IN, D_OUT, bias=False)
        rng = np.random.default_rng(1)
        self.data = {
            c: _Data(torch.from_numpy((rng.normal(size=(n, D_IN)) / 3).astype(np.float32)))
            for c, n in SIZES.items()
        }
        fed = SimpleNamespace(clients=self.data, augment=_augment)
        self.sim = SimpleNamespace(
            cfg=cfg,
            fed=fed,
            net=self.net,
            method=build_method(cfg),
            tolerate_failures=fail is not None,
            secure_sum_mode=mode,
        )
        self.method = self.sim.method
        self.state = self.method.init_server_state(net_to_arrays(self.net), SIZES)
        self.clients = {c: {} for c in SIZES}
        self.transport = (
            InProcessTransport(self.sim, self.clients)
            if fail is None
            else FailingTransport(self.sim, self.clients, fail)
        )
        self.ledger = PrivacyLedger()

    def round(self, rnd, sampled=None):
        sampled = sampled or sample_clients(
            list(SIZES), self.sim.cfg.method.clients_per_round, rnd, self.sim.cfg.run.seed
        )
        rec = run_round(self.method, self.state, rnd, sampled, self.transport, self.ledger)
        return rec.to_dict()


class _Data:
    def __init__(self, images):
        self.images = images

    def __len__(self):
        return int(self.images.shape[0])


def _augment(x, g):
    return x + 0.05 * torch.randn(x.shape, generator=g, dtype=x.dtype)


def _sigma_cfg(cfg, sigma):
    cfg.dp.enabled, cfg.dp.sigma, cfg.dp.epsilon = True, sigma, None
    return cfg


# --------------------------------------------------------------------------------------
# equality with the plain path
# --------------------------------------------------------------------------------------
def _sim_cfg(secure):
    cfg = ExperimentConfig(name="sim-secure")
    cfg.data.dataset = "digits"
    cfg.data.max_train = 300
    cfg.partition.num_clients = 5
    cfg.partition.classes_per_client = 2
    cfg.model.width = 4
    cfg.model.projector_hidden = 16
    cfg.model.projector_out = 8
    cfg.method.name = "fedsc"
    cfg.method.rounds = 3
    cfg.method.clients_per_round = 2
    cfg.method.params = {"share_views": 1, "secure_aggregation": secure}
    cfg.optim.batch_size = 32
    cfg.eval.every = 100
    cfg.eval.sc_objective = False
    cfg.eval.test_size = 50
    cfg.eval.knn_k = 5
    cfg.run.progress = False
    cfg.run.threads = 1
    cfg.run.checkpoint = False
    return cfg


@pytest.mark.parametrize("mode", ["exact", "secagg"])
def test_secure_run_equals_plain_run_without_noise(mode):
    """Partial participation (2 of 5), noise off: the in-process secure run (exact float
    sum, or the five-stage exchange on 64-bit integers) trains the same model as the plain
    run, to float tolerance; the server never holds a per-client matrix."""
    plain = Simulation(_sim_cfg(False))
    rp = plain.run()
    sec = Simulation(_sim_cfg(True), secure_sum=mode)
    rs = sec.run()
    for k, w in plain.state.server.weights.items():
        np.testing.assert_allclose(sec.state.server.weights[k], w, rtol=1e-4, atol=1e-6, err_msg=k)
    assert set(sec.state.server.arrays) == {"A"}
    assert any(k.startswith("R/") for k in plain.state.server.arrays)
    # the aggregate is the plain server's running sum, packed
    np.testing.assert_allclose(
        sec.state.server.arrays["A"], pack_symmetric(plain.state.server.arrays["R_sum"]), atol=1e-6
    )
    # the train losses agree round by round
    for a, b in zip(rp["records"], rs["records"], strict=True):
        assert b["phases"]["train"]["metrics"]["train_loss"] == pytest.approx(
            a["phases"]["train"]["metrics"]["train_loss"], rel=1e-4
        )
        assert b["phases"]["share"]["kind"] == "secure_sum"
        assert b["phases"]["share"]["contributors"] == list(plain.state.server.clients)


def test_r_minus_and_staleness_match_algorithm_1_with_a_failed_upload():
    """R_-j computed by each client from A, Q and its committed R_j equals the plain
    server's, round by round, with a client whose upload failed (it keeps its stale R_j
    in A and commits nothing)."""
    fail = {("share", 2, "c3")}
    runs = {}
    for secure in (False, True):
        h = Harness(
            _cfg(secure, rounds=3, min_contributors=3), fail=lambda ph, r, c: (ph, r, c) in fail
        )
        seen = []
        orig = h.method.make_loss

        def spy(payload, rt, orig=orig, seen=seen):
            seen.append((rt.cid, np.array(payload.arrays.get("R_minus"))))
            return orig(payload, rt)

        h.method.make_loss = spy
        for rnd in (1, 2, 3):
            h.round(rnd, ["c1", "c3"] if rnd == 2 else None)
        runs[secure] = (h, seen)
    (_, sp), (hs, ss) = runs[False], runs[True]
    assert [c for c, _ in sp] == [c for c, _ in ss]
    for (c, a), (_, b) in zip(sp, ss, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7, err_msg=c)
    # c3 failed in round 2: not counted, its pending contribution was dropped
    assert hs.state.method_state["secure_history"][1]["contributors"] == ["c0", "c1", "c2", "c4"]
    assert hs.state.method_state["secure_last"]["c3"] == 3


# --------------------------------------------------------------------------------------
# fresh noise
# --------------------------------------------------------------------------------------
def test_every_sum_carries_fresh_noise_only():
    """Correlation handled by fresh contributions: in every sharing round every client
    (sampled or not) replaces its old noisy term, so the noise left in A after round t is
    exactly sum_k q_k sigma_k g_k(t), the draws of round t, and nothing of round t-1."""
    cfg = _sigma_cfg(_cfg(True, rounds=3), 0.3)
    h = Harness(cfg)
    q = h.state.q
    noise = {}
    for rnd in (1, 2, 3):
        rec = h.round(rnd)
        assert rec["phases"]["share"]["contributors"] == list(SIZES)
        # noiseless signal of each client's latest contribution (committed by the train
        # message when sampled, still pending otherwise)
        signal = sum(
            q[c]
            * h.clients[c].get("fedsc.secure.pending_plain", h.clients[c].get("fedsc.secure.plain"))
            for c in SIZES
        )
        noise[rnd] = h.state.arrays["A"] - signal
        draws = {
            c: np.random.default_rng(derive_seed("noise", 7, rnd, c, "share")).standard_normal(
                PACKED
            )
            for c in SIZES
        }
        expect = sum(q[c] * h.method.distributed_sigma(SIZES[c]) * draws[c] for c in SIZES)
        np.testing.assert_allclose(noise[rnd], expect, rtol=0, atol=1e-12)
        if rnd > 1:  # the non-sampled clients' round-(t-1) noise is gone from A
            prev = {
                c: np.random.default_rng(
                    derive_seed("noise", 7, rnd - 1, c, "share")
                ).standard_normal(PACKED)
                for c in SIZES
            }
            resid = noise[rnd] - expect
            for c in SIZES:
                assert abs(resid @ prev[c]) < 1e-10
    # the stale clients did not recompute (no weights sent), yet re-noised
    stale = [c for c in SIZES if c not in rec["sampled"]]
    assert stale and all(rec["phases"]["share"]["bytes_down"][c] == 0 for c in stale)
    assert all(rec["phases"]["share"]["bytes_down"][c] > 0 for c in rec["sampled"])


# --------------------------------------------------------------------------------------
# distributed noise and the two threat models
# --------------------------------------------------------------------------------------
def test_distributed_sigma_and_threat_model_epsilons():
    """Calibrated sigma_plain for (3, 1e-3) over 3 sharing rounds; each contributor adds
    sigma_plain / sqrt(m_min - 1).  With every client contributing every round the
    secure-aggregation epsilon is at most the target (the noise of m_min - 1 others
    and its own, less the largest single other), the fallback epsilon is that of releases
    at sigma_k alone, both from the accountants."""
    cfg = _cfg(True, rounds=3, min_contributors=4)
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 3.0, 1e-3
    h = Harness(cfg)
    m = h.method
    for n in SIZES.values():
        plain = calibrate_correlation_sigma(3.0, 1e-3, 3, 1.0, n, "rdp")
        assert m.noise_sigma(n) == pytest.approx(plain)
        assert m.distributed_sigma(n) == pytest.approx(plain / math.sqrt(3))
    for rnd in (1, 2, 3):
        h.round(rnd)
    sec, fb = h.ledger.view("secagg"), h.ledger.view("fallback")
    for c, n in SIZES.items():
        assert sec.count(c) == 3 and fb.count(c) == 3
        e_sec = h.ledger.epsilon(1e-3, c, "rdp", threat="secagg")
        e_fb = h.ledger.epsilon(1e-3, c, "rdp", threat="fallback")
        assert e_sec <= 3.0 * (1 + 1e-3)
        # 5 contributors > m_min = 4: better than the target
        assert e_sec < 3.0
        # the fallback: three releases at sigma_plain/sqrt(3), by the accountant
        ref = PrivacyLedger()
        ref.record(
            c,
            "ref",
            m.distributed_sigma(n),
            correlation_sensitivity(1.0, n),
            count=3,
            neighbouring="zero_out",
        )
        assert e_fb == pytest.approx(ref.epsilon(1e-3, c, "rdp"))
        assert e_fb > 2 * e_sec
    # secure-model noise multiplier by hand-derived formula (not an epsilon): all five
    # fresh, less the largest other term; q_k sigma_k is equal for all k here
    z = calibrate_correlation_sigma(3.0, 1e-3, 3, 1.0, 1, "rdp")  # sigma at n=1 = z mu
    for r in sec.releases:
        assert r.noise_multiplier == pytest.approx(z * math.sqrt(4 / 3), rel=1e-9)
    with pytest.raises(ValueError, match="threat models"):
        from fedspectral.privacy.accounting import epsilon_of_releases

        epsilon_of_releases(h.ledger.releases, 1e-3)


def test_noise_not_replaced_next_round_is_not_counted():
    """A client that drops out of sum i+1 leaves its round-i noise in A: that noise is
    no longer counted as protection of round i (K_i = C_i and C_{i+1})."""
    cfg = _sigma_cfg(_cfg(True, rounds=2, min_contributors=3), 0.2)
    h = Harness(cfg, fail=lambda ph, r, c: (ph, r, c) == ("share", 2, "c4"))
    h.round(1)
    first = {r.party: r.sigma for r in h.ledger.view("secagg").releases}
    h.round(2)
    by_step = {(r.party, r.step): r.sigma for r in h.ledger.view("secagg").releases}
    q, m = h.state.q, h.method
    w2 = {k: (q[k] * m.distributed_sigma(SIZES[k])) ** 2 for k in SIZES}
    for j in SIZES:
        assert by_step[(j, 1)] < first[j]
        kept = [k for k in SIZES if k != "c4"]
        others = [w2[k] for k in kept if k != j]
        assert by_step[(j, 1)] == pytest.approx(math.sqrt(sum(w2[k] for k in kept) - max(others)))
    # c4 did not contribute in round 2 but its signal is in A: it is released again
    assert ("c4", 2) in by_step


# --------------------------------------------------------------------------------------
# abort, overflow, configuration
# --------------------------------------------------------------------------------------
def test_sum_below_min_contributors_is_aborted_and_ledgered():
    cfg = _sigma_cfg(_cfg(True, rounds=2, min_contributors=4), 0.2)
    h = Harness(cfg, fail=lambda ph, r, c: ph == "share" and r == 2 and c in ("c0", "c1"))
    h.round(1)
    a1 = h.state.arrays["A"].copy()
    secure_before = len(h.ledger.view("secagg").releases)
    rec = h.round(2)
    ph = rec["phases"]["share"]
    assert ph["aborted"] and ph["contributors"] == []
    np.testing.assert_array_equal(h.state.arrays["A"], a1)  # nothing folded in
    assert len(h.ledger.view("secagg").releases) == secure_before  # nothing released
    assert (
        h.ledger.aborted[0]["step"] == 2
        and "fewer than min_contributors=4" in h.ledger.aborted[0]["reason"]
    )
    # the requests were sent: the fallback entries count them
    assert h.ledger.view("fallback").count("c2") == 2
    # the ones that computed a summand dropped it: their committed round stays 1
    for c in ("c2", "c3", "c4"):
        assert h.state.method_state["secure_last"][c] == 1
    h.method.config.method.rounds = 3
    h.round(3)  # reconciles: pending of round 2 dropped, round 3 counted
    assert all(h.state.method_state["secure_last"][c] == 3 for c in SIZES)
    # the ledger round-trips with its note of the aborted sum
    back = PrivacyLedger.from_dict(h.ledger.to_dict())
    assert back.aborted == h.ledger.aborted
    assert back.epsilon(1e-3, threat="secagg") == h.ledger.epsilon(1e-3, threat="secagg")


def test_overflow_refused():
    """A summand beyond the bound the field was sized for is refused by its client (a
    failure, no wrap); a field too narrow for the configured noise is refused upfront."""
    cfg = _sigma_cfg(_cfg(True, rounds=1, min_contributors=3), 0.2)
    h = Harness(cfg, mode="quantised")
    spec = h.method.secure_sum_spec("share", 1, h.state, list(SIZES))
    orig = h.method._secure_share

    def huge(rnd, payload, rt):
        out = orig(rnd, payload, rt)
        if rt.cid == "c2":
            out.arrays["x"] = out.arrays["x"] + 2 * spec.bound
        return out

    h.method._secure_share = huge
    rec = h.round(1)
    ph = rec["phases"]["share"]
    assert "QuantisationOverflow" in ph["failures"]["c2"]
    assert ph["contributors"] == ["c0", "c1", "c3", "c4"]
    # the bound covers the signal range and 2 x 12 noise standard deviations
    q = h.state.q
    sig = h.method.distributed_sigma
    assert spec.bound == pytest.approx(
        max(q[c] * (math.sqrt(2) + 24 * sig(n)) for c, n in SIZES.items())
    )
    # 8 bits hold 5 summands of magnitude <= 25 at unit resolution: enough at sigma 0.2,
    # refused at sigma 10 (summand bound q_max (sqrt 2 + 24 sigma/2) = 0.3 x 121.4 = 36)
    build_method(_sigma_cfg(_cfg(True, rounds=1, secure_bits=8), 0.2)).init_server_state(
        net_to_arrays(h.net), SIZES
    )
    with pytest.raises(ValueError, match="secure_bits=8.*could overflow"):
        bad = _sigma_cfg(_cfg(True, rounds=1, secure_bits=8), 10.0)
        build_method(bad).init_server_state(net_to_arrays(h.net), SIZES)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"min_contributors": 1}, "min_contributors=1"),
        ({"min_contributors": 9}, "min_contributors=9"),
        ({"secure_bits": 72}, "secure_bits=72"),
    ],
)
def test_bad_secure_params_refused(params, match):
    with pytest.raises(ValueError, match=match):
        build_method(_cfg(True, **params))


def test_expected_plan_refused_and_budget_off_under_secure_aggregation():
    cfg = _cfg(True)
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta, cfg.dp.plan = True, 3.0, 1e-3, "expected"
    with pytest.raises(ValueError, match="worst_case"):
        build_method(cfg)
    cfg.dp.plan = "worst_case"
    assert build_method(cfg).release_budget() is None
    assert build_method(_cfg(False)).phase_kind("share") == "query"
    assert build_method(cfg).phase_kind("share") == "secure_sum"


def test_transport_without_secure_sum_refused():
    h = Harness(_cfg(True, rounds=1))

    def bare(phase, rnd, payloads):
        return h.transport(phase, rnd, payloads)

    with pytest.raises(TypeError, match="has no secure_sum"):
        run_round(h.method, h.state, 1, ["c0"], bare, PrivacyLedger())


def test_replies_carry_only_the_summand():
    h = Harness(_sigma_cfg(_cfg(True, rounds=1), 0.1))
    st = h.state
    h.state.sampled = ["c0"]
    payloads = h.method.configure("share", 1, st, list(SIZES))
    reps = h.transport("share", 1, payloads)
    for rep in reps.values():
        assert set(rep.arrays) == {"x"} and rep.config == {} and rep.metrics == {}
    # seeds derive from the run seed, so the numbers are reproducible
    assert derive_seed("noise", 7, 1, "c0", "share") == derive_seed("noise", 7, 1, "c0", "share")


# --------------------------------------------------------------------------------------
# ledger views, results, resume
# --------------------------------------------------------------------------------------
def test_ledger_threat_views():
    led = PrivacyLedger()
    led.record("a", "plain", 2.0, 1.0, count=2, neighbouring="zero_out")
    led.record("a", "sec", 4.0, 1.0, neighbouring="zero_out", threat="secagg")
    led.record("a", "sec", 1.0, 1.0, neighbouring="zero_out", threat="fallback")
    ref_sec, ref_fb = PrivacyLedger(), PrivacyLedger()
    for ref, z in ((ref_sec, 4.0), (ref_fb, 1.0)):
        ref.record("a", "plain", 2.0, 1.0, count=2, neighbouring="zero_out")
        ref.record("a", "x", z, 1.0, neighbouring="zero_out")
    for acc in ("rdp", "closed_form"):
        assert led.epsilon(1e-5, "a", acc, threat="secagg") == ref_sec.epsilon(1e-5, "a", acc)
        assert led.epsilon(1e-5, "a", acc) == ref_fb.epsilon(1e-5, "a", acc)  # default
    assert led.view("secagg").count() == 3 and led.view("fallback").count() == 3
    with pytest.raises(ValueError, match="threat"):
        led.record("a", "sec", 1.0, 1.0, threat="broken")
    with pytest.raises(ValueError, match="threat"):
        led.epsilon(1e-5, threat="any")
    back = PrivacyLedger.from_dict(led.to_dict())
    assert [r.threat for r in back.releases] == ["any", "secagg", "fallback"]
    # a ledger written before threat models existed reads as releases in the clear
    old = {
        "unit": "sample",
        "releases": [{"party": "a", "mechanism": "m", "sigma": 1.0, "sensitivity": 1.0}],
    }
    assert PrivacyLedger.from_dict(old).releases[0].threat == "any"


def _dp_sim_cfg(rounds=2):
    cfg = _sim_cfg(True)
    cfg.method.rounds = rounds
    cfg.partition.num_clients = 3
    cfg.partition.classes_per_client = 3
    cfg.method.params = {**cfg.method.params, "min_contributors": 2}
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 3.0, 1e-3
    return cfg


@pytest.mark.filterwarnings("ignore:partition_by_class uses 9 of 10 classes")
def test_results_report_both_threat_models_and_resume(tmp_path):
    cfg = _dp_sim_cfg(rounds=2)
    cfg.run.checkpoint = True
    full = Simulation(cfg, out_dir=tmp_path / "full").run()
    tm = full["privacy"]["threat_models"]
    assert set(tm) == {"secagg", "fallback"}
    # m_min = 2: each contributor adds sigma_plain itself, so even the fallback is the
    # plain guarantee, and the sum of 3 contributors (less one) is at least as good
    assert tm["fallback"]["epsilon_rdp"] == pytest.approx(3.0, rel=1e-3)
    assert tm["secagg"]["epsilon_rdp"] <= tm["fallback"]["epsilon_rdp"]
    assert full["privacy"]["epsilon_rdp"] == tm["fallback"]["epsilon_rdp"]  # conservative
    sig, dist = full["privacy"]["sigma"], full["privacy"]["sigma_distributed"]
    assert all(dist[c] == pytest.approx(sig[c]) for c in sig)  # sqrt(m_min - 1) = 1
    Simulation(cfg, out_dir=tmp_path / "part", callbacks=[StopAfter(1)]).run()
    sim = Simulation(cfg, out_dir=tmp_path / "part")
    res = sim.run(resume=True)
    assert res["resumed_from"] == 1
    assert res["privacy"]["threat_models"] == tm
    assert (
        res["records"][-1]["phases"]["train"]["metrics"]
        == full["records"][-1]["phases"]["train"]["metrics"]
    )


def test_hostile_server_cannot_recover_one_clients_correlation(monkeypatch):
    """Through the five-stage exchange, the server receives masked integer vectors and
    the unmasking shares, and learns the sum.  Its reading of one client's masked vector
    misses that client's summand by a uniformly random vector (errors of order
    2^63 / s); the best it can do from the sum is off by the sum of the others."""
    from fedspectral.fed import secagg_server
    from fedspectral.fed.secagg_primitives import dequantise, quantisation_scale

    seen = {}
    orig = secagg_server.SecAggServer.collect_masked

    def spy(self, masked):
        seen.update({c: np.array(v) for c, v in masked.items()})
        return orig(self, masked)

    monkeypatch.setattr(secagg_server.SecAggServer, "collect_masked", spy)
    cfg = _sigma_cfg(_cfg(True, rounds=1, min_contributors=3), 0.05)
    h = Harness(cfg, mode="secagg")
    summands = {}
    orig_share = h.method._secure_share

    def keep(rnd, payload, rt):
        out = orig_share(rnd, payload, rt)
        summands[rt.cid] = out.arrays["x"].copy()
        return out

    h.method._secure_share = keep
    h.round(1)
    spec = h.method.secure_sum_spec("share", 1, h.state, list(SIZES))
    s = quantisation_scale(spec.bound, len(SIZES), spec.bits)
    total = sum(summands.values())
    np.testing.assert_allclose(h.state.arrays["A"], total, atol=len(SIZES) / s)
    half = 2.0**63 / s  # the field read as signed numbers covers [-half, half)
    errs = []
    for j in SIZES:
        others = np.linalg.norm(total - summands[j])
        reading = dequantise(seen[j], s, spec.bits)  # the masked vector, read as a summand
        errs.append(np.abs(reading - summands[j]))
        assert np.linalg.norm(reading - summands[j]) > 10 * others
        # from the sum alone: any estimate that ignores the others is off by about them
        assert np.linalg.norm(h.state.arrays["A"] - summands[j]) == pytest.approx(others, rel=1e-9)
    # the masked readings are uniform over the whole field: mean |error| = half/2 (the
    # masks come from OS entropy; 30 entries, the bounds are 4.7 standard deviations)
    assert 0.25 * half < np.mean(errs) < 0.75 * half


def test_switches_off_leave_the_config_fingerprint_as_before_they_existed():
    """A finished run or checkpoint written before the secure-aggregation keys existed
    stays valid (same fingerprint) while they are off; turning one on changes it."""
    from fedspectral.config import to_dict
    from fedspectral.fed.validation import config_fingerprint, validate

    full = to_dict(validate(_cfg(secure=False)))
    old = to_dict(validate(_cfg(secure=False)))
    for k in FedSC.neutral_params:  # the config as recorded before the keys existed
        del old["method"]["params"][k]
    assert set(FedSC.neutral_params) <= set(full["method"]["params"])
    assert config_fingerprint(full) == config_fingerprint(old)
    assert config_fingerprint(to_dict(validate(_cfg(secure=True)))) != config_fingerprint(full)
    bits = to_dict(validate(_cfg(secure=False, secure_bits=32)))
    assert config_fingerprint(bits) != config_fingerprint(full)
