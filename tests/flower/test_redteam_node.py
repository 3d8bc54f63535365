"""Red-team attacks of a hostile server on the real ClientApp, in process (as in
test_active_server.py and test_node_owns_data.py): each attack works on a weakened node
(one defence monkeypatched away) and fails on the real node with its default policy."""

from __future__ import annotations

import contextlib
import json
import time

import numpy as np
import pytest
from test_active_server import APP, _ctx, _hello, _ledger, _oracle_weights, _seeded_noise
from test_node_owns_data import _narrow, _train

from fedspectral.fed.flower.apps import client_app as ca
from fedspectral.fed.flower.apps.records import payload_from_recorddict, payload_to_recorddict
from fedspectral.fed.flower.node import failure

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


@pytest.mark.parametrize("weakened", [True, False])
def test_train_timing_oracle_of_the_padding(tiny, tmp_path, monkeypatch, weakened) -> None:
    """The train phase under client-level DP is total (a failure on the data is replied to
    with the reference), but the fallback was *padded* to the slowest computation seen so
    far while a success answered at once: a server that first sends one expensive request
    (many local epochs), then cheap ones with the oracle weights of test_active_server
    (some view of the node's data above a threshold), reads its predicate off each reply's
    delay.  The real node runs every step through a non-finite loss: no fallback, no
    padding, the same time.

    The padding's sleep is recorded, not slept (the delay the server sees is the elapsed
    time plus that wait)."""

    def cfg_of(epochs: int):
        cfg = tiny("fedsc", 1)
        cfg.method.local_epochs = epochs
        return _narrow(cfg)

    ctx = _ctx(tmp_path, max_epsilon=1e6, max_epsilon_total=1e12)
    _seeded_noise(monkeypatch, 5)
    monkeypatch.setattr(failure, "_DURATIONS", {})  # the node's slowest successes
    waits: list[float] = []

    def pad(phase: str, t0: float) -> None:
        waits.append(max(0.0, failure._DURATIONS.get(phase, 0.0) - (time.perf_counter() - t0)))

    monkeypatch.setattr(failure, "pad", pad)  # a uniform failure's wait
    monkeypatch.setattr(ca, "pad", pad)  # the total handler's fallback wait
    if weakened:  # the node before this defence
        monkeypatch.setattr(ca, "_run_through_nonfinite", contextlib.nullcontext)

    def delay(cfg, b: float) -> tuple[float, tuple]:
        n = len(waits)
        t = time.perf_counter()
        reply = payload_from_recorddict(APP(_train(_oracle_weights(cfg, b)), ctx).content)
        form = tuple((k, v.shape, v.dtype.str) for k, v in reply.arrays.items())
        return time.perf_counter() - t + sum(waits[n:]), form

    cheap = cfg_of(1)
    _hello(cheap, ctx)
    delay(cheap, -1e6)  # loads the data, warms up
    expensive = cfg_of(15)
    _hello(expensive, ctx)
    delay(expensive, -1e6)  # 15 epochs: the slowest computation so far
    _hello(cheap, ctx)
    delay(cheap, -1e6)
    ok = [delay(cheap, -1e6) for _ in range(2)]
    bad = [delay(cheap, 1e6) for _ in range(2)]
    assert len({f for _, f in ok + bad}) == 1  # the same form of reply either way
    slow_ok, fast_bad = max(d for d, _ in ok), min(d for d, _ in bad)
    expensive_s = failure._DURATIONS["train"]
    if weakened:  # a failure on the data outlasts every cheap success: one bit per query
        assert fast_bad >= expensive_s > 3 * slow_ok, (expensive_s, ok, bad)
    else:  # no failure, so no padding at all
        assert waits == [] and fast_bad < 3 * slow_ok + 0.5, (expensive_s, ok, bad)
    assert len(_ledger(tmp_path)) == 7  # each query a ledgered client-level release


def test_a_bad_pca_vectorisation_is_named_before_any_budget(tmp_path) -> None:
    """An LDP-PCA request whose vectorisation is no vectorisation: a ``ValueError`` naming
    it, before the node's ledger records anything (it was a uniform failure after the
    spend: the server could burn the node's budget with requests that release nothing)."""
    from test_node_policy import _ctx as pca_ctx
    from test_node_policy import _pca_query

    led = tmp_path / "led"
    ctx = pca_ctx({"policy-ledger-dir": str(led)})
    with pytest.raises(ValueError, match="vectorisation must be one of .*'bogus'"):
        APP(_pca_query(vectorisation="bogus"), ctx)
    assert not list(led.glob("ledger-*.json")) or all(
        json.loads(f.read_text())["releases"] == [] for f in led.glob("ledger-*.json")
    )
    APP(_pca_query(vectorisation="upper"), ctx)  # a good one is answered and ledgered
    (f,) = led.glob("ledger-*.json")
    assert len(json.loads(f.read_text())["releases"]) == 1


def _hostile_weights(cfg) -> dict[str, dict]:
    from test_active_server import _weights

    w = _weights(cfg)
    first = min(w)

    def each(f):
        return {k: f(v) if v.dtype.kind == "f" else v for k, v in w.items()}

    return {
        "nan": each(lambda v: np.full_like(v, np.nan)),
        "huge": each(lambda v: np.full_like(v, 3e38)),
        "float64": each(lambda v: v.astype(np.float64)),
        "float16": each(lambda v: v.astype(np.float16)),
        "int32": each(lambda v: v.astype(np.int32)),
        "one-wrong-shape": {**w, first: w[first][:1]},
        "unknown-key": {**w, "zzz": np.ones(3, np.float32)},
        "oracle": _oracle_weights(cfg, 1e6),
    }


def test_hostile_weights_give_data_independent_outcomes(tiny, tmp_path, monkeypatch) -> None:
    """Weights a server crafts (NaN, overflowing, other dtypes, a wrong shape, an unknown
    key, the oracle of test_active_server) on two nodes holding different records of the
    same size: in the train phase under client-level DP (and in the DP share phase) the
    outcome -- reply or failure, the exception's type, the reply's keys, shapes, dtypes,
    finiteness and metric keys -- is the same on both, i.e. a function of the request
    alone.  (The padding's sleep is skipped: timing is the first test's subject.)"""
    from test_node_owns_data import _dp_cfg, _share

    from fedspectral.fed.protocol import Payload

    monkeypatch.setattr(failure, "pad", lambda phase, t0: None)
    monkeypatch.setattr(ca, "pad", lambda phase, t0: None)

    def outcome(ctx, msg) -> tuple:
        try:
            r = payload_from_recorddict(APP(msg, ctx).content)
        except Exception as exc:  # noqa: BLE001 -- the outcome's class is the observation
            return (type(exc).__name__,)
        arrays = tuple(
            (k, v.shape, v.dtype.str, bool(np.isfinite(v).all()) if v.dtype.kind == "f" else 0)
            for k, v in sorted(r.arrays.items())
        )
        return ("reply", arrays, tuple(sorted(r.metrics)), tuple(sorted(r.config)))

    train_cfg, share_cfg = _narrow(tiny("fedsc", 1)), _dp_cfg(tiny)
    seen: dict[str, set] = {}
    for shard in ("0/3", "2/3"):
        ctx = _ctx(tmp_path / shard[0], max_epsilon=1e6, max_epsilon_total=1e12)
        _seeded_noise(monkeypatch, 1)
        ctx.node_config["data-shard"] = shard
        for cfg, phase in ((train_cfg, "train"), (share_cfg, "share")):
            _hello(cfg, ctx)
            for name, w in _hostile_weights(cfg).items():
                if phase == "train":
                    msg = _train(w)
                else:
                    msg = _share(cfg)
                    msg.content = payload_to_recorddict(
                        Payload.with_weights(w, config={"cache_weights": False}),
                        phase="share",
                        round=1,
                    )
                seen.setdefault(f"{phase}:{name}", set()).add(outcome(ctx, msg))
    assert {k: len(v) for k, v in seen.items()} == dict.fromkeys(seen, 1)
    # under client-level DP every one of them is answered (the train phase is total)
    assert all(next(iter(v))[0] == "reply" for k, v in seen.items() if k.startswith("train"))
