"""Comparators of LDP-PCA: non-private, central Gaussian, OpenDP."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedspectral.linalg import subspace_distance, top_k_eigvecs
from fedspectral.pca.comparators import (
    central_gaussian_from_moment,
    central_gaussian_pca,
    nonprivate_pca,
    opendp_available,
    opendp_pca,
    second_moment,
)
from fedspectral.privacy import PrivacyLedger, gaussian_sigma, symmetric_gaussian

OPENDP_OK, OPENDP_WHY = opendp_available()


def _spiked(n, p, k, seed, lam=1.0):
    """The seed's model: x ~ N(0, (lam V V^T + I) / (5 p (lam + 1)))."""
    rng = np.random.default_rng(seed)
    V = np.linalg.qr(rng.standard_normal((p, k)))[0]
    L = np.linalg.cholesky((lam * V @ V.T + np.eye(p)) / (5 * p * (lam + 1)))
    X = rng.standard_normal((n, p)) @ L.T
    assert np.linalg.norm(X, axis=1).max() <= 1
    return X, V


def test_nonprivate_equals_numpy_eigh_of_uncentred_second_moment():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 12)) + 0.5  # non-zero mean: uncentred on purpose
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    k = 4
    w, U = np.linalg.eigh(X.T @ X / len(X))
    ref = U[:, ::-1][:, :k]
    res = nonprivate_pca(X, k)
    assert res.V.shape == (12, k)
    assert subspace_distance(res.V, ref) < 1e-10
    np.testing.assert_allclose(res.eigenvalues, w[::-1][:k], rtol=1e-12)
    np.testing.assert_allclose(second_moment(X), X.T @ X / len(X), atol=1e-15)


def test_replace_one_sensitivity_of_second_moment_is_sqrt2_over_n():
    """The calibration's claim: ||triu(x x^T - x' x'^T)||_2 <= sqrt(2), attained at e1, e2."""
    rng = np.random.default_rng(1)
    p = 7
    iu = np.triu_indices(p)
    worst = 0.0
    for _ in range(2000):
        x, y = rng.standard_normal((2, p))
        x /= max(1.0, np.linalg.norm(x)) * rng.uniform(1, 1.5)
        y /= np.linalg.norm(y)
        worst = max(worst, np.linalg.norm((np.outer(x, x) - np.outer(y, y))[iu]))
    assert worst <= math.sqrt(2) + 1e-12
    e = np.eye(p)
    assert np.linalg.norm((np.outer(e[0], e[0]) - np.outer(e[1], e[1]))[iu]) == pytest.approx(
        math.sqrt(2), abs=1e-15
    )


def test_central_gaussian_calibration_and_ledger():
    X, _ = _spiked(5000, 10, 2, seed=2)
    led = PrivacyLedger()
    res = central_gaussian_pca(X, 2, 1.0, 1e-5, rng=0, ledger=led)
    sens = math.sqrt(2) / 5000
    assert res.privacy["sensitivity"] == pytest.approx(sens, rel=1e-15)
    assert res.privacy["sigma"] == pytest.approx(gaussian_sigma(1.0, 1e-5, sens), rel=1e-12)
    (rel,) = led.releases
    assert rel.neighbouring == "replace_one" and rel.count == 1
    # one analytic-Gaussian release at the calibrated sigma is exactly (1, 1e-5)-DP
    assert led.epsilon(1e-5, accountant="analytic") == pytest.approx(1.0, rel=1e-6)
    assert res.ledger is led
    np.testing.assert_allclose(res.V.T @ res.V, np.eye(2), atol=1e-12)


def test_central_gaussian_release_is_second_moment_plus_symmetric_noise():
    """Exact reconstruction: the same seed gives S + symmetric_gaussian(p, sigma, rng), whose
    entries' variance is the privacy core's (tested there); from_moment == from rows."""
    X, _ = _spiked(400, 6, 2, seed=3)
    res = central_gaussian_pca(X, 6, 0.5, 1e-4, rng=11)
    sig = res.privacy["sigma"]
    S_hat = second_moment(X) + symmetric_gaussian(6, sig, np.random.default_rng(11))
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(S_hat)[::-1], atol=1e-14)
    res2 = central_gaussian_from_moment(second_moment(X), 400, 2, 0.5, 1e-4, rng=11)
    assert subspace_distance(res2.V, top_k_eigvecs(S_hat, 2)[1]) < 1e-10
    assert res2.privacy == central_gaussian_pca(X, 2, 0.5, 1e-4, rng=11).privacy


def test_central_gaussian_infinite_epsilon_is_nonprivate():
    X, _ = _spiked(1000, 8, 3, seed=4)
    a = central_gaussian_pca(X, 3, math.inf, 1e-4, rng=0)
    b = nonprivate_pca(X, 3)
    np.testing.assert_array_equal(a.V, b.V)
    assert a.privacy["sigma"] == 0.0
    assert a.ledger.epsilon(1e-4) == math.inf


def test_central_error_much_smaller_than_local_at_same_epsilon():
    """Central noise per entry is sqrt(n) times smaller than the local model's aggregate
    noise: at n = 20000, eps = 1 the central error must be below a third of the local one
    (mean of 5 seeds; measured 0.45 vs 2.3, non-private 0.10)."""
    from fedspectral.pca import LocalDPPCA

    p, k, n, eps, delta = 20, 3, 20000, 1.0, 1e-4
    X, V = _spiked(n, p, k, seed=5)
    central, local = [], []
    for s in range(5):
        central.append(subspace_distance(central_gaussian_pca(X, k, eps, delta, rng=s).V, V))
        est = LocalDPPCA(k, epsilon=eps, delta=delta, random_state=s).fit(X)
        local.append(subspace_distance(est.components_.T, V))
    assert np.mean(central) < np.mean(local) / 3, (central, local)
    # and the local error is far from the non-private one: privacy is what costs
    assert np.mean(local) > 5 * subspace_distance(nonprivate_pca(X, k).V, V)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"X": np.full((4, 3), np.nan)}, ValueError, "NaN"),
        ({"X": np.ones(3)}, ValueError, "2-dimensional"),
        ({"X": np.zeros((0, 3))}, ValueError, "non-empty"),
        ({"k": 0}, ValueError, "k must"),
        ({"k": 4}, ValueError, "k must"),
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": -1.0}, ValueError, "epsilon"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"X": np.full((4, 3), 1.0)}, ValueError, "norm"),
    ],
)
def test_central_gaussian_bad_input(kwargs, exc, match):
    args = {"X": np.full((4, 3), 0.5), "k": 2, "epsilon": 1.0, "delta": 1e-5} | kwargs
    with pytest.raises(exc, match=match):
        central_gaussian_pca(args["X"], args["k"], args["epsilon"], args["delta"], rng=0)


def test_nonprivate_bad_input():
    with pytest.raises(ValueError, match="k must"):
        nonprivate_pca(np.ones((3, 2)), 3)
    with pytest.raises(ValueError, match="infinite"):
        nonprivate_pca(np.array([[np.inf, 0.0]]), 1)


@pytest.mark.skipif(not OPENDP_OK, reason=OPENDP_WHY or "opendp unavailable")
@pytest.mark.parametrize("center", [True, False])
def test_opendp_returns_k_orthonormal_components_at_replace_one_epsilon(center):
    X, _ = _spiked(2000, 12, 3, seed=6)
    res = opendp_pca(X, 3, 1.0, center=center)
    assert res.V.shape == (12, 3)
    np.testing.assert_allclose(res.V.T @ res.V, np.eye(3), atol=1e-10)
    # OpenDP's own privacy map, for a replaced row (symmetric distance 2), is <= 1
    assert 0.99 <= res.privacy["epsilon"] <= 1.0 + 1e-9
    assert res.privacy["delta"] == 0.0 and res.privacy["centred"] is center


@pytest.mark.skipif(not OPENDP_OK, reason=OPENDP_WHY or "opendp unavailable")
def test_opendp_centred_vs_uncentred_targets():
    """With a large mean and a huge budget, the uncentred variant finds the mean direction
    (top eigenvector of X^T X / n), the centred one does not."""
    rng = np.random.default_rng(7)
    p, n = 6, 20000
    mean_dir = np.zeros(p)
    mean_dir[0] = 1.0
    X = 0.6 * mean_dir + 0.05 * rng.standard_normal((n, p)) * np.arange(1, p + 1)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    un = opendp_pca(X, 1, 1000.0, center=False)
    ce = opendp_pca(X, 1, 1000.0, center=True)
    assert abs(un.V[0, 0]) > 0.99
    assert abs(ce.V[0, 0]) < 0.5
    assert abs(ce.V[p - 1, 0]) > 0.9  # the largest-variance coordinate


def test_opendp_bad_input():
    with pytest.raises(ValueError, match="epsilon"):
        opendp_pca(np.full((4, 3), 0.5), 2, math.inf)
    with pytest.raises(ValueError, match="k must"):
        opendp_pca(np.full((4, 3), 0.5), 0, 1.0)
