"""FedSC's server bookkeeping (seed 001, Algorithm 1) and schedules, with fake clients."""

from __future__ import annotations

import numpy as np
import pytest

from fedspectral.config import ExperimentConfig
from fedspectral.fed.methods.fedsc import (
    FedSC,
    alpha_schedule,
    is_share_round,
    planned_releases,
    share_rounds,
)
from fedspectral.fed.protocol import Payload, run_round
from fedspectral.fed.releases import release_config
from fedspectral.privacy import PrivacyLedger

SIZES = {"c0": 10, "c1": 20, "c2": 30, "c3": 40}  # q = .1 .2 .3 .4
Q = {c: n / 100 for c, n in SIZES.items()}


def _cfg(rounds=4, **params):
    cfg = ExperimentConfig()
    cfg.method.name = "fedsc"
    cfg.method.rounds = rounds
    cfg.method.params = {"alpha": "fixed", "alpha_start": 0.5, **params}
    cfg.partition.num_clients = 4
    return cfg


def _r(cid, rnd):
    """The fake R_j a client uploads in round rnd: distinct, non-symmetric-free values."""
    j = int(cid[1])
    return np.array([[rnd * 10 + j, 1.0], [1.0, -(rnd + j)]])


class FakeClients:
    """Answers share with _r(cid, rnd) and train with weights + (its index); logs payloads."""

    def __init__(self):
        self.seen = []
        self.fail = set()

    def __call__(self, phase, rnd, payloads):
        out = {}
        for cid, p in payloads.items():
            self.seen.append((phase, rnd, cid, p))
            if (phase, rnd, cid) in self.fail:
                out[cid] = RuntimeError("down")
            elif phase == "share":
                out[cid] = Payload(
                    arrays={"R": _r(cid, rnd).astype(np.float32)},
                    metrics={"num-examples": SIZES[cid]},
                    config={
                        **release_config(0.0, 0.1, "fedsc/dp-calr"),
                        "cached": p.config["cache_weights"],
                    },
                )
            else:
                out[cid] = Payload.with_weights(
                    {"w": np.full(2, float(cid[1]), np.float32)},
                    metrics={"num-examples": SIZES[cid], "loss": 1.0},
                )
        return out


def _hand_r_minus(stored, cid):
    total = sum(Q[c] * stored[c] for c in stored)
    return (total - Q[cid] * stored[cid]) / (1 - Q[cid])


def test_staleness_bookkeeping_matches_hand_computed_sequence():
    m = FedSC(_cfg())
    st = m.init_server_state({"w": np.zeros(2, np.float32)}, SIZES)
    led = PrivacyLedger()
    fake = FakeClients()
    schedule = {1: ["c0", "c1"], 2: ["c2", "c0"], 3: ["c3"], 4: ["c1", "c2"]}
    stored = {}  # the hand-maintained R_j the server should hold
    for rnd, sampled in schedule.items():
        fake.seen.clear()
        rec = run_round(m, st, rnd, sampled, fake, led).to_dict()
        sharers = list(SIZES) if rnd == 1 else [c for c in SIZES if c in sampled]
        assert rec["phases"]["share"]["participants"] == sharers
        for c in sharers:
            stored[c] = _r(c, rnd)
        # the server's stale per-client matrices and global R
        for c in SIZES:
            np.testing.assert_array_equal(st.arrays[f"R/{c}"], stored[c])
        np.testing.assert_allclose(
            st.arrays["R_sum"], sum(Q[c] * stored[c] for c in SIZES), rtol=0, atol=1e-12
        )
        # each training client got its own R_-j, alpha, and no second copy of the weights
        trains = [(cid, p) for ph, _, cid, p in fake.seen if ph == "train"]
        assert [c for c, _ in trains] == sampled
        for cid, p in trains:
            np.testing.assert_allclose(p.arrays["R_minus"], _hand_r_minus(stored, cid), rtol=1e-6)
            assert p.config["alpha"] == 0.5
            assert p.weights() == {}
        # the share message of a non-sampled client says: do not keep the weights
        for ph, _, cid, p in fake.seen:
            if ph == "share":
                assert p.config["cache_weights"] == (cid in sampled)
        # plain mean of the returned weights
        np.testing.assert_allclose(st.weights["w"], np.mean([int(c[1]) for c in sampled]))
    # ledger: one release per upload, per client, with the round as step
    assert {c: led.count(c) for c in SIZES} == {"c0": 2, "c1": 2, "c2": 3, "c3": 2}
    assert [r.step for r in led.releases if r.party == "c3"] == [1, 3]


def test_failed_upload_keeps_stale_matrix_and_client_is_asked_again():
    m = FedSC(_cfg())
    st = m.init_server_state({"w": np.zeros(2, np.float32)}, SIZES)
    fake = FakeClients()
    fake.fail = {("share", 1, "c3"), ("share", 2, "c1")}
    led = PrivacyLedger()
    run_round(m, st, 1, ["c0", "c1"], fake, led)
    # c3 never uploaded: R is the q-weighted mean of the three others
    stored = {c: _r(c, 1) for c in ("c0", "c1", "c2")}
    qs = sum(Q[c] for c in stored)
    np.testing.assert_allclose(
        st.arrays["R_sum"] / st.method_state["q_sum"],
        sum(Q[c] * stored[c] for c in stored) / qs,
        atol=1e-12,
    )
    fake.seen.clear()
    rec = run_round(m, st, 2, ["c1"], fake, led).to_dict()
    # c3 (missing) is asked again; c1 fails -> keeps its round-1 matrix (stale)
    assert rec["phases"]["share"]["participants"] == ["c1", "c3"]
    assert set(rec["phases"]["share"]["failures"]) == {"c1"}
    np.testing.assert_array_equal(st.arrays["R/c1"], _r("c1", 1))
    np.testing.assert_array_equal(st.arrays["R/c3"], _r("c3", 2))
    assert st.method_state["q_sum"] == pytest.approx(1.0)
    # c1's share failed, so its train message carries the weights again
    (p,) = [p for ph, _, c, p in fake.seen if ph == "train"]
    assert set(p.weights()) == {"w"}
    # every request to release counts, answered or not (Fix 3): c1 and c3 were asked
    # in both rounds and failed once each
    assert led.count("c1") == 2 and led.count("c3") == 2


def test_share_start_and_every():
    m = FedSC(_cfg(rounds=6, share_start=3, share_every=2))
    st = m.init_server_state({"w": np.zeros(2, np.float32)}, SIZES)
    fake = FakeClients()
    led = PrivacyLedger()
    for rnd in range(1, 7):
        fake.seen.clear()
        rec = run_round(m, st, rnd, ["c2"], fake, led).to_dict()
        shared = "share" in rec["phases"]
        assert shared == (rnd in (3, 5))
        (p,) = [p for ph, _, c, p in fake.seen if ph == "train"]
        if rnd < 3:  # before the start: plain SC (alpha 1, no R, weights sent)
            assert p.config["alpha"] == 1.0 and "R_minus" not in p.arrays
            assert "w" in p.weights()
        else:  # stale R in round 4 and 6
            assert p.config["alpha"] == 0.5 and "R_minus" in p.arrays
            assert ("w" in p.weights()) == (rnd in (4, 6))
    assert share_rounds(6, 3, 2) == [3, 5]
    assert led.count() == 4 + 1  # round 3: all four; round 5: c2


def test_schedules():
    assert alpha_schedule("linear", 1, 11, 1.0, 0.2) == 1.0
    assert alpha_schedule("linear", 11, 11, 1.0, 0.2) == pytest.approx(0.2)
    assert alpha_schedule("linear", 6, 11, 1.0, 0.2) == pytest.approx(0.6)
    assert alpha_schedule("q", 3, 10, 1.0, 0.2, q=0.1) == 0.1
    assert planned_releases(200, 101, 1, 10, None) == 100
    assert planned_releases(200, 101, 2, 10, None) == 50
    assert planned_releases(10, 1, 1, 10, 2, "worst_case") == 10
    assert planned_releases(10, 1, 1, 10, 2, "expected") == 1 + 2  # 1 + ceil(9 * 0.2)


@pytest.mark.parametrize("start,every", [(1, 1), (3, 2), (5, 3), (8, 1)])
def test_the_method_shares_in_the_rounds_the_schedule_lists(start, every):
    m = FedSC(_cfg(rounds=8, share_start=start, share_every=every))
    cids = ["c0", "c1", "c2", "c3"]
    st = m.init_server_state({}, dict.fromkeys(cids, 10))
    shared = [t for t in range(1, 9) if m.participants("share", t, cids[:2], cids, st)]
    assert shared == share_rounds(8, start, every) == [t for t in range(start, 9, every)]
    assert shared == [t for t in range(1, 9) if is_share_round(t, start, every)]


def test_alpha_q_gives_each_client_its_weight():
    m = FedSC(_cfg(alpha="q"))
    st = m.init_server_state({"w": np.zeros(2, np.float32)}, SIZES)
    fake = FakeClients()
    run_round(m, st, 1, list(SIZES), fake, PrivacyLedger())
    alphas = {c: p.config["alpha"] for ph, _, c, p in fake.seen if ph == "train"}
    assert alphas == Q


def test_sigma_calibrated_per_client_size():
    from fedspectral.fed.correlation import calibrate_correlation_sigma

    cfg = _cfg(rounds=10, share_start=6)
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 3.0, 1e-2
    m = FedSC(cfg)
    for n in (100, 400):
        assert m.noise_sigma(n) == pytest.approx(
            calibrate_correlation_sigma(3.0, 1e-2, 5, 4.0, n, "rdp")
        )
    cfg.dp.epsilon, cfg.dp.sigma = None, 0.01
    assert FedSC(cfg).noise_sigma(100) == 0.01
    cfg.dp.enabled, cfg.dp.sigma = False, None
    assert FedSC(cfg).noise_sigma(100) == 0.0


@pytest.mark.parametrize(
    "params, match",
    [
        ({"mu": 0.0}, "mu=0.0"),
        ({"mu": -1}, "mu=-1"),
        ({"alpha_end": 1.5}, "alpha_end=1.5"),
        ({"alpha": "cubic"}, "cubic"),
        ({"share_start": 99}, "share_start=99"),
        ({"ema": 0.99}, "ema"),
        ({"mu": "big"}, "big"),
        ({"cross_term": "fresh"}, "cross_term='fresh'"),
        ({"server_lr": 0.0}, "server_lr=0.0"),
        ({"server_lr": 1.5}, "server_lr=1.5"),
        ({"server_lr": "half"}, "server_lr.*half"),
    ],
)
def test_bad_params_rejected(params, match):
    with pytest.raises(ValueError, match=match):
        FedSC(_cfg(**params))
