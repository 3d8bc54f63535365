"""Gaussian-mechanism calibration and symmetric noise (fedspectral.privacy.mechanisms).

References: dp-accounting's analytic Gaussian (``get_epsilon_gaussian``), the
closed form of Balle & Wang (2018, Thm. 8) evaluated with scipy, and the classic
formula of Dwork & Roth (Thm. A.1).
"""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from fedspectral.privacy import gaussian_sigma, symmetric_gaussian

EPS = [0.1, 0.5, 1.0, 2.0, 8.0]
DELTAS = [1e-6, 1e-3]
SENS = [1.0, math.sqrt(2.0), 3.0]


def balle_wang_delta(eps: float, z: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism with noise multiplier z (Balle & Wang 2018)."""
    return stats.norm.cdf(1 / (2 * z) - eps * z) - math.exp(eps) * stats.norm.cdf(
        -1 / (2 * z) - eps * z
    )


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("sens", SENS)
def test_analytic_sigma_matches_dp_accounting(eps, delta, sens):
    sigma = gaussian_sigma(eps, delta, sens, "analytic")
    z = sigma / sens
    assert dp_accounting.get_epsilon_gaussian(z, delta) == pytest.approx(eps, rel=1e-6)
    # independent closed form: the mechanism is exactly (eps, delta)-DP at this z
    assert balle_wang_delta(eps, z) == pytest.approx(delta, rel=1e-5)


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("sens", SENS)
def test_classic_sigma_formula_and_validity(eps, delta, sens):
    sigma = gaussian_sigma(eps, delta, sens, "classic")
    assert sigma == pytest.approx(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps, rel=1e-14)
    # the classic bound is sufficient for eps < 1: it is never below the analytic sigma
    assert sigma >= gaussian_sigma(eps, delta, sens, "analytic")
    assert dp_accounting.get_epsilon_gaussian(sigma / sens, delta) <= eps


@pytest.mark.parametrize("eps", [1.0, 1.5, 4.0])
def test_classic_refuses_eps_ge_1_unless_forced(eps):
    with pytest.raises(ValueError, match=repr(eps)):
        gaussian_sigma(eps, 1e-5, 1.0, "classic")
    forced = gaussian_sigma(eps, 1e-5, 1.0, "classic", force=True)
    assert forced == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) / eps, rel=1e-14)


def test_infinite_epsilon_means_no_noise():
    assert gaussian_sigma(math.inf, 1e-5, 2.0, "analytic") == 0.0
    assert gaussian_sigma(math.inf, 1e-5, 2.0, "classic") == 0.0


def test_sigma_scales_linearly_with_sensitivity():
    s1 = gaussian_sigma(1.3, 1e-5, 1.0)
    assert gaussian_sigma(1.3, 1e-5, 2.5) == pytest.approx(2.5 * s1, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, bad",
    [
        ({"epsilon": 0.0, "delta": 1e-5}, "0.0"),
        ({"epsilon": -1.0, "delta": 1e-5}, "-1.0"),
        ({"epsilon": float("nan"), "delta": 1e-5}, "nan"),
        ({"epsilon": "1", "delta": 1e-5}, "'1'"),
        ({"epsilon": 1.0, "delta": 0.0}, "0.0"),
        ({"epsilon": 1.0, "delta": 1.0}, "1.0"),
        ({"epsilon": 1.0, "delta": -0.1}, "-0.1"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0.0}, "0.0"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": -2.0}, "-2.0"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": math.inf}, "inf"),
        ({"epsilon": 1.0, "delta": 1e-5, "method": "laplace"}, "laplace"),
    ],
)
def test_gaussian_sigma_bad_input(kwargs, bad):
    with pytest.raises((ValueError, TypeError), match=bad):
        gaussian_sigma(**kwargs)


def test_symmetric_gaussian_symmetric_with_calibrated_variance():
    # the plain upper triangle; the isometric default: tests/privacy/test_vectorisation.py
    # 400 matrices of p=30: 186 000 upper-triangular draws; the sample variance has
    # relative sd sqrt(2/N) = 0.33 %, tolerance 2 % (6 sd); diagonal: 12 000 draws,
    # relative sd 1.3 %, tolerance 6 %.
    p, sigma, m = 30, 2.5, 400
    Z = symmetric_gaussian(p, sigma, np.random.default_rng(12345), size=m, vectorisation="upper")
    assert Z.shape == (m, p, p)
    np.testing.assert_array_equal(Z, np.swapaxes(Z, 1, 2))
    iu = np.triu_indices(p)
    upper = Z[:, iu[0], iu[1]].ravel()
    assert abs(upper.mean()) < 4 * sigma / math.sqrt(upper.size)
    assert upper.var() == pytest.approx(sigma**2, rel=0.02)
    diag = np.diagonal(Z, axis1=1, axis2=2).ravel()
    assert diag.var() == pytest.approx(sigma**2, rel=0.06)  # not doubled by mirroring
    assert stats.kstest(upper / sigma, "norm").pvalue > 1e-3
    # distinct upper entries uncorrelated: |corr| < 4/sqrt(m)
    a, b = Z[:, 0, 1], Z[:, 2, 5]
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / math.sqrt(m)


def test_symmetric_gaussian_single_and_zero():
    Z = symmetric_gaussian(5, 0.0, np.random.default_rng(0))
    np.testing.assert_array_equal(Z, np.zeros((5, 5)))
    Z = symmetric_gaussian(5, 1.0, np.random.default_rng(0))
    assert Z.shape == (5, 5) and np.array_equal(Z, Z.T)


def test_symmetric_gaussian_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="0"):
        symmetric_gaussian(0, 1.0, rng)
    with pytest.raises(ValueError, match="-1.0"):
        symmetric_gaussian(3, -1.0, rng)
    with pytest.raises(ValueError, match="nan"):
        symmetric_gaussian(3, float("nan"), rng)
    with pytest.raises(TypeError, match="RandomState"):
        symmetric_gaussian(3, 1.0, np.random.RandomState(0))


def test_booleans_are_not_privacy_parameters():
    import pytest

    from fedspectral.privacy import gaussian_sigma

    with pytest.raises(TypeError, match="True"):
        gaussian_sigma(True, 1e-5)
    with pytest.raises(TypeError, match="False"):
        gaussian_sigma(1.0, False)
