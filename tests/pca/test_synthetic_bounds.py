"""The seed's synthetic models (Section 6) and Theorems 1-4 as functions."""

import math

import numpy as np
import pytest

from fedspectral.pca import (
    davis_kahan_bound,
    random_stiefel,
    row_sparse_covariance,
    sample,
    spiked_covariance,
    spiked_eigenvalues,
    theorem1_lower_bound,
    theorem2_upper_bound,
    theorem3_lower_bound,
    theorem4_upper_bound,
)


@pytest.mark.parametrize("p, k, lam", [(40, 5, 1.0), (10, 3, 4.0)])
def test_spiked_covariance_structure(p, k, lam):
    S, V = spiked_covariance(p, k, lam, rng=0)
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-12)
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_allclose(S @ V, V / (5 * p), rtol=1e-12)  # top eigenvalue 1/(5p)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(S)[::-1], spiked_eigenvalues(p, k, lam), rtol=1e-10
    )
    assert np.trace(S) == pytest.approx((lam * k + p) / (5 * p * (lam + 1)))
    _S2, V2 = spiked_covariance(p, k, lam, rng=0)
    np.testing.assert_array_equal(V, V2)


def test_random_stiefel_is_isotropic():
    # E[V V^T] = (k/p) I for Haar V; 400 draws, entrywise tolerance 0.03
    # (sd of a diagonal entry of the mean ~ 0.01)
    rng = np.random.default_rng(1)
    Vs = [random_stiefel(6, 2, rng) for _ in range(400)]
    P = np.mean([V @ V.T for V in Vs], axis=0)
    np.testing.assert_allclose(P, np.eye(6) * 2 / 6, atol=0.03)


def test_row_sparse_covariance_structure():
    p, k, s = 50, 3, 7
    S, V = row_sparse_covariance(p, k, s, 1.0, rng=2)
    rows = np.flatnonzero(np.abs(V).sum(1) > 0)
    assert len(rows) == s
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-12)
    np.testing.assert_allclose(S @ V, V / (5 * p), rtol=1e-12)
    off = np.setdiff1d(np.arange(p), rows)
    np.testing.assert_allclose(S[np.ix_(off, off)], np.eye(len(off)) / (5 * p * 2), atol=1e-15)
    # rows are permuted: supports differ across seeds
    supports = {
        tuple(np.flatnonzero(np.abs(row_sparse_covariance(p, k, s, 1.0, r)[1]).sum(1)))
        for r in range(5)
    }
    assert len(supports) > 1


def test_sample_covariance_and_norms():
    S, _ = spiked_covariance(40, 5, 1.0, rng=3)
    X = sample(S, 100_000, rng=4)
    assert X.shape == (100_000, 40)
    err = np.linalg.norm(X.T @ X / X.shape[0] - S) / np.linalg.norm(S)
    assert err < 0.03  # expected ~ sqrt(p/n) = 0.02 relative in Frobenius, loose
    # the seed's claim: ||x|| <= 1 with high probability (trace(S) = 0.15 here)
    assert (np.linalg.norm(X, axis=1) > 1).mean() == 0.0
    # singular Sigma is fine
    Z = sample(np.diag([1.0, 0.0]), 10, rng=0)
    np.testing.assert_array_equal(Z[:, 1], 0.0)


@pytest.mark.parametrize(
    "fn, args, bad",
    [
        (spiked_covariance, (0, 1), "0"),
        (spiked_covariance, (5, 6), "6"),
        (spiked_covariance, (5, 2, -1.0), "-1.0"),
        (row_sparse_covariance, (10, 3, 2), "2"),
        (row_sparse_covariance, (10, 3, 11), "11"),
        (sample, (np.eye(2), 0), "0"),
        (sample, (np.array([[1.0, 2.0], [2.0, 1.0]]), 3), "semi-definite"),
        (sample, (np.array([[1.0, 0.5], [0.0, 1.0]]), 3), "symmetric"),
        (sample, (np.eye(3)[:2], 3), r"\(2, 3\)"),
    ],
)
def test_synthetic_bad_input(fn, args, bad):
    with pytest.raises(ValueError, match=bad):
        fn(*args)


# --------------------------------------------------------------------------- bounds
EV = np.array([0.5, 0.4, 0.1, 0.1, 0.05])  # lambda_1=.5, lambda_2=.4, lambda_3=.1


def test_bound_formulas_by_hand():
    n, p, k, s, eps = 1000, 5, 2, 3, 0.5
    gap = 0.4 - 0.1
    assert theorem1_lower_bound(n, p, k, eps, EV) == pytest.approx(
        0.5 * 0.1 / gap**2 * k * p / (n * eps**2)
    )
    assert theorem2_upper_bound(n, p, k, eps, EV) == pytest.approx(k * p / (n * eps**2 * gap**2))
    assert theorem2_upper_bound(n, p, k, eps, EV, delta=1e-4) == pytest.approx(
        math.log(1.25e4) * k * p / (n * eps**2 * gap**2)
    )
    assert theorem3_lower_bound(n, p, k, s, eps, EV) == pytest.approx(
        0.5 * 0.1 / gap**2 * k * s * math.log(p) / (n * eps**2)
    )
    assert theorem4_upper_bound(n, p, k, s, eps, EV) == pytest.approx(
        0.25 / gap**2 * s**2 * math.log(p) / (n * eps**2)
    )
    assert davis_kahan_bound(10**9, p, k, 2.0, EV) == pytest.approx(
        32 * k * p * 4.0 / (1e9 * gap**2)
    )
    assert davis_kahan_bound(10, p, k, 2.0, EV) == 2 * k  # capped at the maximum
    # eigenvalues in any order
    assert theorem1_lower_bound(n, p, k, eps, EV[::-1]) == theorem1_lower_bound(n, p, k, eps, EV)


def test_bound_scaling_and_ordering():
    rng = np.random.default_rng(5)
    for _ in range(20):
        p, k = 30, 3
        ev = np.sort(rng.uniform(0.01, 1.0, p))[::-1]
        s = int(rng.integers(k, p + 1))
        b1 = theorem1_lower_bound(1000, p, k, 0.5, ev)
        assert theorem1_lower_bound(2000, p, k, 0.5, ev) == pytest.approx(b1 / 2)
        assert theorem1_lower_bound(1000, p, k, 1.0, ev) == pytest.approx(b1 / 4)
        # sparse upper bound dominates the sparse lower bound: ratio (l1/l_{k+1}) (s/k) >= 1
        assert theorem4_upper_bound(1000, p, k, s, 0.5, ev) >= theorem3_lower_bound(
            1000, p, k, s, 0.5, ev
        )


def test_seed_spiked_factor():
    # for the seed's model lambda_1 lambda_{k+1} / gap^2 = (lam+1)/lam^2 (= 2 at lam=1)
    ev = spiked_eigenvalues(40, 5, 1.0)
    assert theorem1_lower_bound(1, 40, 5, 1.0, ev) == pytest.approx(2 * 5 * 40)


@pytest.mark.parametrize(
    "args, bad",
    [
        ((0, 5, 2, 0.5, EV), "0"),
        ((10, 5, 2, 0.0, EV), "0.0"),
        ((10, 5, 5, 0.5, EV), "5"),
        ((10, 5, 2, 0.5, EV[:4]), "p=5"),
        ((10, 5, 3, 0.5, EV), "gap"),
        ((10, 5, 6, 0.5, EV), "6"),
    ],
)
def test_bounds_bad_input(args, bad):
    with pytest.raises(ValueError, match=bad):
        theorem1_lower_bound(*args)
