r"""Theorems 1-4 of Wang & Xu (IJCAI 2019) as functions.

All four are **rates up to universal constants** (the theorems hide constants in
:math:`\Omega(\cdot)`/:math:`O(\cdot)`): use them for slopes and ratios, not for
absolute values.  Each returns the bound on the **squared** subspace distance
:math:`\|\hat V\hat V^\top - VV^\top\|_F^2`.  ``eigenvalues`` are those of the
population covariance :math:`\Sigma` (any order; sorted descending here) and enter
through :math:`\lambda_1`, :math:`\lambda_k`, :math:`\lambda_{k+1}` and the gap
:math:`\lambda_k-\lambda_{k+1} > 0`.

Theorem 1 (lower, low-dim)
    :math:`\frac{\lambda_1\lambda_{k+1}}{(\lambda_k-\lambda_{k+1})^2}
    \frac{kp}{n\varepsilon^2}`
Theorem 2 (upper, Alg. 1)
    :math:`\frac{kp}{n\varepsilon^2(\lambda_k-\lambda_{k+1})^2}` (see below)
Theorem 3 (lower, sparse)
    :math:`\frac{\lambda_1\lambda_{k+1}}{(\lambda_k-\lambda_{k+1})^2}
    \frac{ks\log p}{n\varepsilon^2}`
Theorem 4 (upper, Alg. 2)
    :math:`\frac{\lambda_1^2}{(\lambda_k-\lambda_{k+1})^2}\frac{s^2\log p}{n\varepsilon^2}`

Theorem 2's displayed formula is missing from the seed text; the paper states that
the :math:`kp/(n\varepsilon^2)` term is optimal.  We use the rate that the proof
technique (Davis-Kahan with :math:`\|\hat S-\Sigma\|_{op}\lesssim\sigma_1\sqrt{p/n}`,
:math:`\sigma_1^2 \propto \ln(1/\delta)/\varepsilon^2`) gives, in which the eigen-gap
enters as :math:`1/(\lambda_k-\lambda_{k+1})^2`; :func:`davis_kahan_bound` states it
with explicit constants for a given σ.  Theorem 3's rate is as written in the
paper's introduction (its statement is garbled in the seed text).

Every bound is computed as products of ratios (never a square of a tiny gap or a
huge ε on its own), so it is finite wherever its value is, down to gaps and δ of the
smallest floats; a value beyond float64's range is ``inf``.
"""

from __future__ import annotations

import math

import numpy as np

from fedspectral.checks import check_int, check_real

__all__ = [
    "davis_kahan_bound",
    "theorem1_lower_bound",
    "theorem2_upper_bound",
    "theorem3_lower_bound",
    "theorem4_upper_bound",
]


def _pos_int(v: object, name: str) -> int:
    return check_int(name, v, low=1)


def _pos_real(v: object, name: str) -> float:
    return check_real(name, v, low=0.0, low_open=True)


def _eig(eigenvalues: object, k: int, p: int) -> tuple[float, float, float]:
    ev = np.sort(np.asarray(eigenvalues, dtype=np.float64).ravel())[::-1]
    if ev.size != p:
        raise ValueError(f"eigenvalues must have p={p} entries, got {ev.size}")
    if not np.isfinite(ev).all():
        raise ValueError("eigenvalues contain NaN or infinite values")
    if k >= p:
        raise ValueError(f"k must be < p={p} for an eigen-gap to exist, got {k!r}")
    l1, lk, lk1 = float(ev[0]), float(ev[k - 1]), float(ev[k])
    if not lk - lk1 > 0:
        raise ValueError(f"eigen-gap lambda_k - lambda_(k+1) must be > 0, got {lk - lk1!r}")
    return l1, lk, lk1


def _common(n: object, p: object, k: object, eps: object) -> tuple[int, int, int, float]:
    n, p, k = _pos_int(n, "n"), _pos_int(p, "p"), _pos_int(k, "k")
    if k > p:
        raise ValueError(f"k must be <= p={p}, got {k!r}")
    return n, p, k, _pos_real(eps, "eps")


def theorem1_lower_bound(n: int, p: int, k: int, eps: float, eigenvalues: object) -> float:
    r"""Theorem 1 (ε-LDP minimax lower bound, low dimension), up to a constant:
    :math:`\frac{\lambda_1\lambda_{k+1}}{(\lambda_k-\lambda_{k+1})^2}\cdot\frac{kp}{n\varepsilon^2}`
    (stated for :math:`p/4 \le k \le 3p/4`, ε ∈ (0, 1/2] and n large enough)."""
    n, p, k, eps = _common(n, p, k, eps)
    l1, lk, lk1 = _eig(eigenvalues, k, p)
    gap = lk - lk1
    return (l1 / gap) * (lk1 / gap) * k * p / n / eps / eps


def theorem2_upper_bound(
    n: int, p: int, k: int, eps: float, eigenvalues: object, delta: float | None = None
) -> float:
    r"""Upper bound rate of Algorithm 1 (Theorem 2), up to a constant:
    :math:`\frac{kp}{n\varepsilon^2(\lambda_k-\lambda_{k+1})^2}`, times
    :math:`\ln(1.25/\delta)` when ``delta`` is given.  The paper's formula is missing;
    this is the Davis-Kahan rate of the proof technique (module docstring)."""
    n, p, k, eps = _common(n, p, k, eps)
    _, lk, lk1 = _eig(eigenvalues, k, p)
    f = 1.0
    if delta is not None:
        if not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
        f = math.log(1.25) - math.log(delta)  # 1.25/δ overflows below δ ≈ 7e-309
    gap = lk - lk1
    return f * k * p / n / eps / eps / gap / gap


def theorem3_lower_bound(n: int, p: int, k: int, s: int, eps: float, eigenvalues: object) -> float:
    r"""Theorem 3 (ε-LDP minimax lower bound, row-sparse), up to a constant:
    :math:`\frac{\lambda_1\lambda_{k+1}}{(\lambda_k-\lambda_{k+1})^2}
    \cdot\frac{ks\log p}{n\varepsilon^2}`."""
    n, p, k, eps = _common(n, p, k, eps)
    s = _pos_int(s, "s")
    if not k <= s <= p:
        raise ValueError(f"s must satisfy k <= s <= p, got {s!r}")
    l1, lk, lk1 = _eig(eigenvalues, k, p)
    gap = lk - lk1
    return (l1 / gap) * (lk1 / gap) * k * s * math.log(p) / n / eps / eps


def theorem4_upper_bound(n: int, p: int, k: int, s: int, eps: float, eigenvalues: object) -> float:
    r"""Theorem 4 (upper bound of Algorithm 2), up to a constant:
    :math:`\frac{\lambda_1^2}{(\lambda_k-\lambda_{k+1})^2}\cdot\frac{s^2\log p}{n\varepsilon^2}`."""
    n, p, k, eps = _common(n, p, k, eps)
    s = _pos_int(s, "s")
    if not k <= s <= p:
        raise ValueError(f"s must satisfy k <= s <= p, got {s!r}")
    l1, lk, lk1 = _eig(eigenvalues, k, p)
    r = l1 / (lk - lk1)
    return r * r * s * s * math.log(p) / n / eps / eps


def davis_kahan_bound(n: int, p: int, k: int, sigma: float, eigenvalues: object) -> float:
    r"""Noise term of Algorithm 1's squared error with explicit constants, for a given
    per-user noise σ (asymptotic, high probability, sampling error ignored):

    .. math:: \|\hat V\hat V^\top - VV^\top\|_F^2 = 2\|\sin\Theta\|_F^2
              \le \frac{8k\|E\|_{op}^2}{(\lambda_k-\lambda_{k+1})^2}
              \approx \frac{32\,kp\,\sigma^2}{n(\lambda_k-\lambda_{k+1})^2},

    by the Davis-Kahan theorem in the form of Yu, Wang & Samworth (2015) and
    :math:`\|E\|_{op} \approx 2\sigma\sqrt{p/n}` for the averaged symmetric Gaussian
    noise :math:`E` (entries :math:`N(0,\sigma^2/n)`).  Capped at the largest possible
    value :math:`2k`.
    """
    n, p, k = _pos_int(n, "n"), _pos_int(p, "p"), _pos_int(k, "k")
    sigma = check_real("sigma", sigma, low=0.0)
    _, lk, lk1 = _eig(eigenvalues, k, p)
    r = sigma / (lk - lk1)
    return min(2.0 * k, 32.0 * k * p * r * r / n)
