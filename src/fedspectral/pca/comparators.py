r"""Comparators for locally private PCA: non-private and central-model DP PCA.

All functions take the data matrix :math:`X \in \mathbb{R}^{n\times p}` with rows of
norm at most 1 (the assumption of Wang & Xu, IJCAI 2019) and return a
:class:`ComparatorResult` whose ``V`` (``p x k``, orthonormal columns) is compared to
a target subspace with :func:`fedspectral.linalg.subspace_distance`.

Neighbouring relation
---------------------
Everything here is stated for *replace-one* neighbours (two data sets of the same
size that differ in one row), the relation under which the local model's
guarantee of Algorithm 1 (any :math:`x` vs any :math:`x'`) is comparable with a
central guarantee.

:func:`nonprivate_pca`
    Top-:math:`k` eigenspace of the uncentred second moment
    :math:`S = X^\top X / n`: the limit every private method tends to.
:func:`central_gaussian_pca`
    A trusted curator releases :math:`\hat S = S + Z` with :math:`Z` symmetric
    Gaussian noise of :func:`fedspectral.privacy.symmetric_gaussian` (isometric
    packing: iid :math:`N(0,\sigma^2)` on :math:`\mathrm{svec}(S)`, i.e. variance
    :math:`\sigma^2` on the diagonal and :math:`\sigma^2/2` off it; the L2 norm of
    :math:`\mathrm{svec}` is the Frobenius norm).  Under replace-one the released
    vector moves by
    :math:`\|\mathrm{svec}(xx^\top - x'x'^\top)\|_2 / n = \|xx^\top - x'x'^\top\|_F/n
    = \sqrt{\|x\|^4 + \|x'\|^4 - 2(x^\top x')^2}/n \le \sqrt2/n` (equality for
    orthogonal unit vectors), so :math:`\sigma` is calibrated with sensitivity
    :math:`\sqrt 2/n` (the "Analyze Gauss" mechanism of Dwork, Talwar, Thakurta &
    Zhang, STOC 2014, with the replace-one sensitivity).  Compared with
    Algorithm 1, whose aggregate noise per entry of :math:`\hat S` has standard
    deviation :math:`\sigma_1/\sqrt n`, the central noise is :math:`\sqrt n` times
    smaller at the same :math:`(\varepsilon,\delta)`.
:func:`opendp_pca`
    OpenDP's central pure :math:`\varepsilon`-DP PCA (``dp.sklearn.decomposition.PCA``,
    after Amin, Dick, Kulesza, Muñoz Medina & Vassilvitskii, NeurIPS 2019).  See
    the function for how its ε maps to ours and what it estimates.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedspectral.checks import check_bool, check_int, check_real
from fedspectral.linalg import square_and_rank, top_k_eigvecs
from fedspectral.privacy import PrivacyLedger, gaussian_sigma, symmetric_gaussian

__all__ = [
    "ComparatorResult",
    "central_gaussian_from_moment",
    "central_gaussian_pca",
    "nonprivate_pca",
    "opendp_available",
    "opendp_pca",
    "second_moment",
]


@dataclass
class ComparatorResult:
    """Output of a comparator.

    Attributes
    ----------
    V : ndarray, shape (p, k)
        Orthonormal basis of the estimated principal subspace.
    method : str
        Name of the method.
    privacy : dict
        What was guaranteed: ``epsilon``, ``delta``, ``neighbouring``, ``model``
        ("none", "central"), and method-specific fields (``sigma``, ``sensitivity``).
    ledger : PrivacyLedger or None
        The Gaussian releases made (None when the method does not release Gaussian
        noise: non-private, or OpenDP's Laplace/exponential mechanisms which OpenDP
        accounts for itself).
    eigenvalues : ndarray, shape (k,) or None
        Eigenvalues of the matrix whose eigenspace is ``V``, when available.
    """

    V: np.ndarray
    method: str
    privacy: dict[str, Any] = field(default_factory=dict)
    ledger: PrivacyLedger | None = None
    eigenvalues: np.ndarray | None = None


def _check_X(X: object, k: object) -> tuple[np.ndarray, int]:
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n, p), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must be non-empty, got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number):
        raise TypeError(f"X must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float64, copy=False)
    if not np.isfinite(X).all():
        raise ValueError("X contains NaN or infinite values")
    p = X.shape[1]
    k = check_int("k", k)
    if not 1 <= k <= p:
        raise ValueError(f"k must be an integer with 1 <= k <= p={p}, got {k!r}")
    return X, int(k)


def _check_norms(X: np.ndarray, tol: float = 1e-9) -> None:
    mx = float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X))))
    if mx > 1.0 + tol:
        raise ValueError(
            f"rows of X must have L2 norm <= 1 (the sensitivity assumes it), got a row of "
            f"norm {mx:.6g}; clip or scale the rows first"
        )


def _check_eps(epsilon: object, *, allow_inf: bool) -> float:
    return check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=allow_inf)


def second_moment(X: np.ndarray) -> np.ndarray:
    r"""Uncentred second moment :math:`S = X^\top X / n` (symmetric, ``p x p``)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-d array, got shape {X.shape}")
    S = X.T @ X
    S /= X.shape[0]
    return 0.5 * (S + S.T)


def nonprivate_pca(X: np.ndarray, k: int) -> ComparatorResult:
    r"""Top-``k`` eigenspace of the uncentred second moment :math:`X^\top X/n`.

    The target of Algorithm 1 with no noise (ε = ∞); for zero-mean data it
    estimates the principal subspace of the covariance :math:`\Sigma`.

    Parameters
    ----------
    X : ndarray, shape (n, p)
    k : int
        ``1 <= k <= p``.
    """
    X, k = _check_X(X, k)
    vals, V = top_k_eigvecs(second_moment(X), k)
    return ComparatorResult(
        V, "nonprivate", {"model": "none", "epsilon": math.inf, "delta": 0.0}, None, vals
    )


def central_gaussian_pca(
    X: np.ndarray,
    k: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    *,
    calibration: str = "analytic",
    ledger: PrivacyLedger | None = None,
    party: str = "curator",
) -> ComparatorResult:
    r"""Central-model Gaussian PCA: noise added once, by a trusted curator, to the mean.

    Releases :math:`\hat S = X^\top X/n + Z`, :math:`Z` symmetric Gaussian with the
    isometric packing (module docstring), :math:`\sigma` = ``gaussian_sigma(ε, δ, √2/n,
    calibration)`` (replace-one sensitivity, see the module docstring), and returns
    the top-``k`` eigenspace of :math:`\hat S`.  The release is recorded in
    ``ledger`` (a new one if None) as one Gaussian release of party ``party``.

    Parameters
    ----------
    X : ndarray, shape (n, p)
        Rows of L2 norm at most 1 (checked; raises otherwise).
    k : int
    epsilon : float
        ``> 0``; ``math.inf`` gives :func:`nonprivate_pca`'s answer (no noise).
    delta : float
        In ``(0, 1)``.
    rng : numpy.random.Generator or int, optional
    calibration : {"analytic", "classic"}
        ``"classic"`` is only valid for ε < 1 (raises otherwise).
    ledger : PrivacyLedger, optional
    party : str
        Ledger party name.
    """
    X, k = _check_X(X, k)
    _check_central_args(X.shape[0], epsilon, delta, calibration, ledger)
    _check_norms(X)
    return central_gaussian_from_moment(
        second_moment(X),
        X.shape[0],
        k,
        epsilon,
        delta,
        rng,
        calibration=calibration,
        ledger=ledger,
        party=party,
    )


@functools.lru_cache(maxsize=4096)
def _cached_sigma(eps: float, delta: float, sensitivity: float, calibration: str) -> float:
    # gaussian_sigma is deterministic; the analytic calibration costs milliseconds
    # (a root search in dp-accounting), which adds up over thousands of releases
    return gaussian_sigma(eps, delta, sensitivity, calibration)


def _check_central_args(
    n: int, epsilon: object, delta: object, calibration: object, ledger: object
) -> tuple[float, float]:
    """Validate; return ε and σ (calibrated with the replace-one sensitivity √2/n)."""
    eps = _check_eps(epsilon, allow_inf=True)
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if not isinstance(calibration, str):
        raise TypeError(f"calibration must be 'analytic' or 'classic', got {calibration!r}")
    # validates delta and the method
    sigma = _cached_sigma(eps, float(delta), math.sqrt(2.0) / n, calibration)
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
    return eps, sigma


def central_gaussian_from_moment(
    S: np.ndarray,
    n: int,
    k: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    *,
    calibration: str = "analytic",
    ledger: PrivacyLedger | None = None,
    party: str = "curator",
) -> ComparatorResult:
    r""":func:`central_gaussian_pca` given the exact second moment :math:`S = X^\top X/n`
    of ``n`` rows of norm at most 1 (the curator's statistic; the caller vouches for
    the norm bound).  Used when :math:`S` is sampled directly (e.g. from its Wishart
    distribution) instead of from rows."""
    n = check_int("n", n, low=1)
    S, k = square_and_rank(S, k)
    p = S.shape[0]
    eps, sigma = _check_central_args(int(n), epsilon, delta, calibration, ledger)
    sensitivity = math.sqrt(2.0) / int(n)
    gen = np.random.default_rng(rng)
    if sigma > 0:
        S = S + symmetric_gaussian(p, sigma, gen)
    led = PrivacyLedger() if ledger is None else ledger
    led.record(
        party,
        "central-gaussian/second-moment",
        sigma=float(sigma),
        sensitivity=sensitivity,
        count=1,
        neighbouring="replace_one",
    )
    vals, V = top_k_eigvecs(S, int(k))
    privacy = {
        "model": "central",
        "epsilon": eps,
        "delta": float(delta),
        "neighbouring": "replace_one",
        "sigma": float(sigma),
        "sensitivity": sensitivity,
        "calibration": calibration,
    }
    return ComparatorResult(V, "central_gaussian", privacy, led, vals)


def opendp_available() -> tuple[bool, str]:
    """Whether OpenDP's PCA can be used here, and why not if it cannot."""
    try:
        import opendp.prelude as dp  # noqa: F401
        from opendp.extras.sklearn.decomposition import PCA  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or an incompatible scikit-learn
        return False, f"opendp PCA unavailable: {type(exc).__name__}: {exc}"
    return True, ""


def opendp_pca(X: np.ndarray, k: int, epsilon: float, *, center: bool = True) -> ComparatorResult:
    r"""OpenDP's central ε-DP PCA at replace-one privacy ``epsilon``.

    ``center=True`` (default) is ``dp.sklearn.decomposition.PCA(epsilon=ε/2,
    row_norm=1, n_samples=n, n_features=p, n_components=k)``: it privately
    estimates the mean, centres the data, clamps rows to norm 1 and releases
    eigenvalues (Laplace) and eigenvectors one at a time (Amin et al. 2019).
    OpenDP's ``epsilon`` there is the loss for one *added or removed* row; a
    replaced row is two such changes, so ``epsilon/2`` is passed and the
    replace-one ε is read back from OpenDP's own privacy map (``map(2)``) and
    checked to be at most ``epsilon``.  By default OpenDP spends ε/3 on the
    mean, ε/3 on the eigenvalues and ε/3 on the eigenvectors.

    ``center=False`` uses OpenDP's lower-level ``make_private_pca`` with the
    origin fixed at 0 (no mean estimate): its subspace is that of the uncentred
    second moment, the same target as Algorithm 1 even for data of non-zero mean;
    the budget is then split ε/2 eigenvalues, ε/2 eigenvectors.

    Differences from our Gaussian methods, to read comparisons honestly:

    * pure ε-DP (δ = 0) instead of (ε, δ);
    * with ``center=True`` it estimates the principal subspace of the *centred*
      covariance; for zero-mean data (the paper's synthetic model) this is the
      same target, for data of non-zero mean compare it with the centred
      non-private subspace;
    * part of the budget is spent on quantities the subspace error ignores
      (mean, eigenvalues);
    * noise comes from OpenDP's cryptographically secure generator: it cannot be
      seeded, so runs are not reproducible bit for bit.

    Parameters
    ----------
    X : ndarray, shape (n, p)
        Rows of norm at most 1 (OpenDP clamps larger rows to norm 1).
    k : int
        ``1 <= k <= p``.
    epsilon : float
        Replace-one ε, finite and ``> 0``.
    center : bool
        See above.

    Raises
    ------
    ImportError
        OpenDP (or its scikit-learn extra) cannot be imported.
    """
    X, k = _check_X(X, k)
    eps = _check_eps(epsilon, allow_inf=False)
    center = check_bool("center", center)
    ok, why = opendp_available()
    if not ok:
        raise ImportError(why)
    import opendp.prelude as dp

    dp.enable_features("contrib", "idealized-numerics", "honest-but-curious")
    n, p = X.shape
    X = np.ascontiguousarray(X)
    if center:
        model = dp.sklearn.decomposition.PCA(
            epsilon=eps / 2.0, row_norm=1.0, n_samples=n, n_features=p, n_components=k
        )
        meas = model.measurement()
        spent = float(meas.map(2))
        _check_spent(spent, eps)
        model.fit(X)
        V = np.asarray(model.components_, dtype=np.float64)[:k].T
        vals = np.asarray(model.explained_variance_, dtype=np.float64)[:k]
    else:
        from opendp.extras.sklearn.decomposition import make_private_pca

        domain = dp.numpy.array2_domain(
            norm=1.0, p=2, origin=np.zeros(p), size=n, num_columns=p, T=float
        )
        meas = make_private_pca(domain, dp.symmetric_distance(), eps, num_components=k)
        spent = float(meas.map(2))
        _check_spent(spent, eps)
        # rows of norm slightly above 1 by rounding would leave the domain: clamp
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        X = X / np.maximum(norms, 1.0)
        out = meas(X)
        V = np.asarray(out.Vt, dtype=np.float64)[:k].T
        vals = np.asarray(out.S, dtype=np.float64)[:k] ** 2 / n
    # re-orthonormalise (OpenDP returns orthonormal vectors up to rounding)
    Q, _ = np.linalg.qr(V)
    privacy = {
        "model": "central",
        "epsilon": spent,
        "delta": 0.0,
        "neighbouring": "replace_one",
        "mechanism": "opendp.make_private_pca",
        "centred": center,
        "accounted_by": "opendp privacy map, d_in = 2",
    }
    return ComparatorResult(Q, "opendp" if center else "opendp_uncentred", privacy, None, vals)


def _check_spent(spent: float, eps: float) -> None:
    if not spent <= eps * (1 + 1e-9):
        raise RuntimeError(f"OpenDP reports replace-one epsilon {spent} > requested {eps}")
