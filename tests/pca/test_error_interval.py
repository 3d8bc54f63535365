"""Error bars of the fitted private subspace (``error_interval``, parametric bootstrap).

Coverage: in regimes from clear signal to saturation (the seed's spiked model, p = 10,
k = 2, n = 20 000, ε from 256 down to 1), the nominal 95 % interval contains the error
the privacy noise caused -- the distance of the fitted subspace to the non-private one
of the same users -- in at least 90 % of 60 repeats (fixed seeds).  The full table,
including the sparse estimator, is in docs/pca.md ("Error bars").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from fedspectral.linalg import subspace_distance, top_k_eigvecs
from fedspectral.pca import (
    LocalDPPCA,
    LocalDPSparsePCA,
    row_sparse_covariance,
    sample,
    spiked_covariance,
)

P, K, N = 10, 2, 20_000


def _data(seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 77])
    Sigma, _ = spiked_covariance(P, K, 3.0, rng)
    return sample(Sigma, N, rng)


@pytest.mark.parametrize("eps", [256.0, 32.0, 8.0, 1.0])
def test_coverage_from_clear_signal_to_saturation(eps):
    reps, hits, resolved, errs = 60, 0, 0, []
    for r in range(reps):
        X = _data(r)
        V0 = top_k_eigvecs(X.T @ X / N, K)[1]
        est = LocalDPPCA(K, eps, 1e-5, random_state=r).fit(X)
        lo, hi = est.error_interval(0.95, 100, random_state=1000 + r)
        d = subspace_distance(est.components_.T, V0)
        hits += lo <= d <= hi
        resolved += est.bootstrap_["resolved"]
        errs.append(d)
    assert hits / reps >= 0.9, f"coverage {hits / reps:.2f} at eps={eps}"
    rl = math.sqrt(2 * K - 2 * K * K / P)
    # the regimes really span clear signal to saturation
    if eps == 256.0:
        assert np.mean(errs) < 0.15 * rl and resolved == reps
    if eps == 1.0:
        assert np.mean(errs) > 0.9 * rl and resolved <= 0.1 * reps


def test_bootstrap_record_reproducibility_and_unresolved_cap():
    X = _data(0)
    est = LocalDPPCA(K, 64.0, 1e-5, random_state=0).fit(X)
    a = est.error_interval(0.9, 40, random_state=5)
    b = est.bootstrap_
    assert b["n_boot"] == b["refits"] == 40 and b["seconds"] > 0 and b["confidence"] == 0.9
    assert b["distances"].shape == (40,) and b["interval"] == a and b["resolved"]
    assert a == est.error_interval(0.9, 40, random_state=5)
    np.testing.assert_allclose(a, np.quantile(b["distances"], [0.05, 0.95]))
    assert b["noise_sd_diagonal"] == pytest.approx(est.noise_scale_ / math.sqrt(N))
    sat = LocalDPPCA(K, 0.5, 1e-5, random_state=0).fit(X)
    lo, hi = sat.error_interval(random_state=0)
    assert not sat.bootstrap_["resolved"] and hi == math.sqrt(2 * min(K, P - K)) and lo < hi
    free = LocalDPPCA(K, np.inf, 1e-5).fit(X)
    assert free.error_interval(random_state=0) == (0.0, 0.0)
    assert free.bootstrap_["refits"] == 0


def test_sparse_estimator_refits_with_its_own_lambda():
    rng = np.random.default_rng(3)
    Sigma, _ = row_sparse_covariance(16, 2, 4, 3.0, rng)
    X = sample(Sigma, N, rng)
    est = LocalDPSparsePCA(2, 64.0, 1e-5, random_state=1).fit(X)
    lo, hi = est.error_interval(0.95, 20, random_state=2)
    assert 0 <= lo <= hi <= math.sqrt(2 * 2) and est.bootstrap_["refits"] == 20
    d = subspace_distance(est.components_.T, top_k_eigvecs(X.T @ X / N, 2)[1])
    assert d < math.sqrt(4)  # sanity: a real fit


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"n_boot": 5}, ValueError, "n_boot must be >= 10, got 5"),
        ({"n_boot": 9}, ValueError, "n_boot must be >= 10, got 9"),
        ({"n_boot": True}, TypeError, "n_boot must be an integer, got bool True"),
        ({"confidence": 0.0}, ValueError, "confidence must be > 0.0, got 0.0"),
        ({"confidence": 1.5}, ValueError, "confidence must be < 1.0, got 1.5"),
        ({"confidence": "high"}, TypeError, "confidence must be a real number"),
    ],
)
def test_bad_input(kw, exc, match):
    est = LocalDPPCA(K, 8.0, 1e-5, random_state=0).fit(_data(0)[:500])
    with pytest.raises(exc, match=match):
        est.error_interval(**kw)
    assert not hasattr(est, "bootstrap_")  # refused before any work
    with pytest.raises(NotFittedError):
        LocalDPPCA(K, 8.0, 1e-5).error_interval()
