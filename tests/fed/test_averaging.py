"""The server side shared by FedAvg+SC/FedSC and the baselines: the learning-rate
schedule and the average of the returned weights (fed/methods/_averaging.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedspectral.config import ExperimentConfig
from fedspectral.fed.methods import build_method
from fedspectral.fed.methods._averaging import scheduled_lr
from fedspectral.fed.protocol import Payload, ServerState
from fedspectral.fed.validation import validate


def test_scheduled_lr_cosine_and_constant_closed_forms():
    # cosine: eta_min + (eta - eta_min) (1 + cos(pi (t - 1) / T)) / 2
    assert scheduled_lr(0.1, 1, 10) == pytest.approx(0.1, abs=0)
    assert scheduled_lr(0.1, 6, 10, "cosine", 0.02) == pytest.approx(0.06, rel=1e-15)
    assert scheduled_lr(0.1, 4, 10, "cosine", 0.0) == pytest.approx(
        0.05 * (1 + math.cos(math.pi * 0.3)), rel=1e-15
    )
    assert scheduled_lr(0.1, 11, 10, "cosine", 0.01) == pytest.approx(0.01, rel=1e-12)
    # constant: the base rate in every round
    assert {scheduled_lr(0.3, t, 5, "constant", 0.1) for t in range(1, 6)} == {0.3}
    with pytest.raises(ValueError, match="schedule must be 'cosine' or 'constant'"):
        scheduled_lr(0.1, 1, 10, "step")


def _cfg(name: str, weighted: bool) -> ExperimentConfig:
    cfg = ExperimentConfig()
    cfg.data.dataset = "digits"
    cfg.method.name = name
    cfg.method.rounds = 4
    cfg.method.weighted = weighted
    cfg.optim.lr, cfg.optim.schedule, cfg.optim.min_lr = 0.2, "cosine", 0.0
    return validate(cfg)


def _replies() -> dict[str, Payload]:
    w = {"c0": np.array([1.0, 2.0], dtype=np.float32), "c1": np.array([4.0, 8.0], np.float32)}
    return {
        c: Payload.with_weights({"a": w[c]}, metrics={"num-examples": n, "loss": loss})
        for c, n, loss in (("c0", 1, 3.0), ("c1", 3, 1.0))
    }


@pytest.mark.parametrize(
    "name,weighted,expect",
    [
        ("fedavg_sc", False, [2.5, 5.0]),  # the seed's plain mean
        ("fedavg_sc", True, [3.25, 6.5]),  # |D_j|-weighted: (1 * w0 + 3 * w1) / 4
        ("fedavg_byol", False, [3.25, 6.5]),  # the baselines always weigh by |D_j|
    ],
)
def test_average_of_replies_and_round_metrics(name, weighted, expect):
    method = build_method(_cfg(name, weighted))
    state = ServerState(weights={"a": np.zeros(2, np.float32), "kept": np.ones(3)})
    out = method.aggregate("train", 3, state, _replies())
    np.testing.assert_array_equal(state.weights["a"], np.array(expect, np.float32))
    assert state.weights["a"].dtype == np.float32
    np.testing.assert_array_equal(state.weights["kept"], np.ones(3))  # not sent back: kept
    assert out["clients"] == 2.0
    assert out["train_loss"] == pytest.approx((1 * 3.0 + 3 * 1.0) / 4, rel=1e-15)
    assert out["lr"] == pytest.approx(0.1 * (1 + math.cos(math.pi * 2 / 4)), rel=1e-15)
    assert method.aggregate("train", 3, state, {}) == {"clients": 0.0}


def test_replies_with_different_weight_sets_are_refused():
    method = build_method(_cfg("fedavg_sc", False))
    replies = _replies()
    replies["c1"] = Payload.with_weights(
        {"b": np.zeros(2, np.float32)}, metrics={"num-examples": 3, "loss": 1.0}
    )
    with pytest.raises(ValueError, match="different weight sets"):
        method.aggregate("train", 1, ServerState(weights={"a": np.zeros(2)}), replies)
