r"""Fantope projection and selection (FPS) by ADMM.

The high-dimensional estimator of Wang & Xu (IJCAI 2019, Algorithm 2) solves the
convex relaxation of sparse PCA of Vu, Cho, Lei & Rohe (NeurIPS 2013),

.. math::

    \max_X \; \langle S, X\rangle - \lambda \|X\|_{1,1}
    \quad \text{s.t.} \quad X \in \mathcal{F}^k
    = \{X = X^\top : 0 \preceq X \preceq I,\ \operatorname{tr} X = k\},

where :math:`\|X\|_{1,1} = \sum_{ij} |X_{ij}|` and :math:`\mathcal{F}^k` is the
Fantope (the convex hull of rank-:math:`k` projection matrices). The problem is
split as :math:`X \in \mathcal{F}^k`, :math:`Z` carrying the penalty, :math:`X = Z`,
and solved by ADMM (scaled dual :math:`U`) with the adaptive penalty :math:`\rho`
and stopping rule of the reference R package ``fps`` (Vu):

.. math::

    X &\leftarrow P_{\mathcal{F}^k}(Z - U + S/\rho), \\
    Z &\leftarrow \operatorname{soft}(X + U, \lambda/\rho) \quad\text{(entrywise)}, \\
    U &\leftarrow U + X - Z,

with primal residual :math:`r = \|X - Z\|_F`, dual residual
:math:`s = \rho\|Z - Z_{\text{old}}\|_F`, stop when both are below
:math:`\sqrt{k}\,\text{tol}`; :math:`\rho` doubles (and :math:`U` halves) when
:math:`r > 10 s`, halves (and :math:`U` doubles) when :math:`s > 10 r`.  By default
:func:`fps_admm` accelerates this iteration (Anderson acceleration of its fixed point,
:math:`\rho` moved by 10 until it first reverses, and a certified stop: the residuals
*and*, for a bounded number of iterations, the relative duality gap below
:math:`\sqrt{k}\,\text{tol}`); ``anderson=0`` runs it exactly as above (Notes).

The Euclidean projection onto the Fantope (Vu et al. 2013, Lemma 4.1) keeps the
eigenvectors of :math:`A = \sum_i \gamma_i v_i v_i^\top` and maps the eigenvalues to
:math:`\gamma_i^+(\theta) = \min(\max(\gamma_i - \theta, 0), 1)` with :math:`\theta`
the root of :math:`\sum_i \gamma_i^+(\theta) = k`. The left side is continuous,
non-increasing and piecewise linear in :math:`\theta` with knots at
:math:`\gamma_i` and :math:`\gamma_i - 1`, so the root is found exactly: locate the
segment between consecutive distinct knots that contains it, then solve the
linear equation on that segment. This is robust to repeated eigenvalues (where
bisection brackets such as :math:`[\gamma_{\min}, \gamma_{\max}]` fail: for
:math:`A = I` the root is :math:`1 - k/p`, below :math:`\gamma_{\min} = 1`).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from sklearn.exceptions import ConvergenceWarning

from fedspectral.checks import check_int, check_real
from fedspectral.pca.fps_accel import Anderson, RhoSchedule, relative_gap, set_state

__all__ = [
    "ACCELERATED_ANDERSON",
    "DEFAULT_ANDERSON",
    "DEFAULT_MAX_ITER",
    "FPSResult",
    "fantope_projection",
    "fps_admm",
    "fps_objective",
]

#: Default iteration cap of :func:`fps_admm`. The R package uses 100, which is
#: often too few: measured here on the paper's sparse model (p = 400, k = 10,
#: s in {20, 80}, n in {2000, 10^5}, eps in {1, 4}, delta = 1e-4, analytic
#: calibration, lam = c sigma_1 sqrt(log p / n), c in {0.1, 0.5, 1, 2}) the plain ADMM
#: needed 24-282 iterations at tol = 1e-3 (over 100 in 9 of 16 cases) and
#: 27-789 at tol = 1e-4; 2000 leaves a wide margin.
DEFAULT_MAX_ITER = 2000
#: the most ADMM iterations a caller may ask for: each costs one eigendecomposition of a
#: p x p matrix, so 10^6 is already days at p = 1000; a larger count is a mistake, not a plan
MAX_ITER_BOUND = 1_000_000

# From this size on, the projection reduces W to tridiagonal form once and back-
# transforms only the eigenvectors of nonzero weight (_project_tridiagonal); below it,
# one scipy.linalg.eigh (divide and conquer). Measured on benchmarks/pca_perf.py's
# problems (one thread, CPU time): fps_admm 1.24-1.34x faster than with scipy's eigh
# ("evd", or "evr" for the top pairs) at p = 400, 1.3x at p = 100-200, equal at 30-60.
_PARTIAL_EIGH_MIN_P = 64

# Matrices with entries beyond this magnitude are divided by a power of two before the
# eigendecomposition, so that no eigenvalue (up to p * max|A|) overflows float64.
_RESCALE_ABOVE = 2.0**500


# --------------------------------------------------------------------------- checks
def _check_k(k: object, p: int) -> int:
    k = check_int("k", k)
    if not 1 <= k <= p:
        raise ValueError(f"k must lie in [1, p] = [1, {p}], got k={k}")
    return k


def _check_symmetric(A: object, name: str) -> np.ndarray:
    """Return ``A`` as a float64 symmetric array, or raise naming the problem."""
    if isinstance(A, (str, bytes)) or A is None:
        raise TypeError(f"{name} must be a square array, got {type(A).__name__}")
    arr = np.asarray(A)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be a square 2-D array, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {arr.shape}")
    arr = np.asarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"{name} must be finite, got {arr[tuple(bad)]!r} at index {tuple(int(i) for i in bad)}"
        )
    scale = max(1.0, float(np.max(np.abs(arr))))
    asym = float(np.max(np.abs(arr / scale - arr.T / scale)))  # no overflow near 1.8e308
    if asym > 1e-8:
        raise ValueError(
            f"{name} must be symmetric, got max |{name} - {name}.T| = {asym * scale:.3g}"
        )
    return arr


# --------------------------------------------------------------------- projection
def _fantope_theta(gamma: np.ndarray, k: int) -> float:
    r"""Exact root :math:`\theta` of :math:`\sum_i \min(\max(\gamma_i-\theta,0),1) = k`.

    ``gamma`` may hold only the eigenvalues above some bound ``L`` as long as the
    root is ``>= L`` (the missing ones contribute 0 there); it needs at least
    ``k`` entries.
    """
    g = np.sort(gamma)  # ascending
    knots = np.unique(np.concatenate((g - 1.0, g)))
    # f at every knot in O(m log m): f(t) = #{g >= t+1} + sum_{t < g < t+1} (g - t)
    csum = np.concatenate(([0.0], np.cumsum(g)))
    lo = np.searchsorted(g, knots, side="right")  # first index with g > t
    hi = np.searchsorted(g, knots + 1.0, side="left")  # first index with g >= t+1
    hi = np.maximum(hi, lo)
    f = (g.size - hi) + (csum[hi] - csum[lo]) - (hi - lo) * knots
    # f is non-increasing from f(g_min - 1) = m >= k to f(g_max) = 0 < k:
    # take the last knot with f >= k; the root lies in [knots[j], knots[j+1]].
    j = int(np.nonzero(f >= k)[0][-1]) if np.any(f >= k) else 0
    j = min(j, knots.size - 2)
    a, b = knots[j], knots[j + 1]
    mid = 0.5 * (a + b)
    # On the open segment the sets "saturated" (g - t >= 1) and "fractional"
    # (0 < g - t < 1) are fixed, so f(t) = n_sat + sum_frac(g) - n_frac * t.
    n_sat = int(np.count_nonzero(g >= mid + 1.0))
    frac = (g > mid) & (g < mid + 1.0)
    n_frac = int(np.count_nonzero(frac))
    if n_frac == 0:  # f is flat (= n_sat = k) on the segment: any point is a root
        return float(mid)
    theta = (float(np.sum(g[frac])) + n_sat - k) / n_frac
    return float(min(max(theta, a), b))


def _fantope_project(
    W: np.ndarray, k: int, *, overwrite: bool = False, n_top: int | None = None
) -> tuple[np.ndarray, int]:
    """Project symmetric ``W`` onto the Fantope; return (projection, its rank).

    For ``p >= 64`` the eigendecomposition is taken apart (:func:`_project_tridiagonal`):
    one tridiagonal reduction, then only the eigenvectors the projection needs, back-
    transformed. With ``n_top`` given (``k <= n_top < p``), only the ``n_top`` largest
    eigenpairs of the tridiagonal matrix are computed first (MRRR). That is exact
    whenever the root theta computed from them is at least the smallest of them: every
    eigenvalue left out is then <= theta and maps to 0, and the knot equation agrees
    with the full one above that point. This is checked; on failure all eigenpairs of
    the tridiagonal matrix are computed (divide and conquer), without a second
    reduction. In FPS the rank of the projection changes little between iterations, so
    the previous rank plus a margin is a good ``n_top``. Should LAPACK report a failure,
    ``scipy.linalg.eigh`` (divide and conquer) is used on ``W`` itself.

    Any finite ``W`` is handled (see :func:`_relative_spectrum`): entries beyond
    ``2**500`` in magnitude are divided by a power of two before the
    eigendecomposition (exact), and the root is solved in coordinates relative to
    the ``k``-th largest eigenvalue, so unit-scale differences between eigenvalues
    of order ``1e16`` or ``1e300`` are not rounded away.
    """
    p = W.shape[0]
    big = float(np.max(np.abs(W)))
    shift = math.frexp(big)[1] if big > _RESCALE_ABOVE else 0  # W / 2**shift: |entries| < 1
    if shift:
        W = np.ldexp(W, -shift)  # a power of two: exact
        overwrite = True
    if p >= _PARTIAL_EIGH_MIN_P:
        out = _project_tridiagonal(
            W, k, shift, n_top if n_top is not None and k <= n_top < p else None
        )
        if out is not None:
            return out
    gamma, V = scipy.linalg.eigh(W, overwrite_a=overwrite, check_finite=False, driver="evd")
    g = _relative_spectrum(gamma, shift, k)
    return _assemble(g, V, _fantope_theta(g, k))


@functools.cache
def _sytrd_lwork(p: int) -> int:
    work, info = scipy.linalg.lapack.dsytrd_lwork(p, lower=1)
    return max(p, int(work)) if info == 0 else p


def _project_tridiagonal(
    W: np.ndarray, k: int, shift: int, n_top: int | None
) -> tuple[np.ndarray, int] | None:
    """The projection from ``W = Q T Q^T`` (``T`` tridiagonal, LAPACK ``dsytrd``):
    eigenpairs of ``T`` (the top ``n_top`` by MRRR ``dstemr`` if that suffices, else
    all by ``dstevd``), then only the ``r`` eigenvectors of nonzero weight multiplied
    by ``Q`` (``dormqr`` on the Householder vectors). ``None`` if LAPACK reports a
    failure (``W`` is left intact)."""
    lapack = scipy.linalg.lapack
    p = W.shape[0]
    c, d, e, tau, info = lapack.dsytrd(W, lower=1, lwork=_sytrd_lwork(p))
    if info:
        return None
    g = None
    if n_top is not None:
        e_ = np.empty(p)
        e_[:-1] = e  # dstemr wants n entries (the last is workspace)
        m, w, z, info = lapack.dstemr(
            d, e_, 2, 0.0, 0.0, p - n_top + 1, p, lwork=18 * p, liwork=10 * p
        )
        if info == 0 and m == n_top and np.all(np.diff(w[:m]) >= 0):
            # m = n_top < p, so gamma[-k] is w[m - k]: _relative_spectrum sees the top m.
            g = _relative_spectrum(w[:m], shift, k)
            theta = _fantope_theta(g, k)
            if theta >= g[0]:
                Z = z[:, :m]
            else:
                g = None
    if g is None:
        w, Z, info = lapack.dstevd(d, e)
        if info or np.any(np.diff(w) < 0):
            return None
        g = _relative_spectrum(w, shift, k)
        theta = _fantope_theta(g, k)
    keep = np.clip(g - theta, 0.0, 1.0) > 0.0
    Zk = np.array(Z[:, keep], order="F")
    r = Zk.shape[1]
    # Q = H(1) ... H(p-1) acts on rows 1..p-1 as the QR factor of c[1:, :-1] (dormtr, "L").
    cq, _, info = lapack.dormqr("L", "N", c[1:, :-1], tau, Zk[1:], max(1, 64 * r), overwrite_c=1)
    if info:
        return None
    Zk[1:] = cq
    return _assemble(g[keep], Zk, theta)


def _relative_spectrum(gamma: np.ndarray, shift: int, k: int) -> np.ndarray:
    r"""Eigenvalues (ascending, divided by ``2**shift``) as
    :math:`\mathrm{clip}(\gamma_i - \gamma_{(k)}, -2, 2)` in true units.

    The projection is shift-invariant (:math:`P(A + cI) = P(A)`) and its root
    :math:`\theta` lies in :math:`[\gamma_{(k)} - 1, \gamma_{(k+1)}]`, i.e. in
    :math:`[-1, 0]` after the shift by the ``k``-th largest eigenvalue
    :math:`\gamma_{(k)}`; eigenvalues more than 1 above it saturate at 1 and those
    more than 1 below map to 0, so clipping to :math:`[-2, 2]` changes nothing
    while keeping every knot of the piecewise-linear equation representable.
    """
    ref = gamma[-k]
    with np.errstate(over="ignore"):
        return np.clip(np.ldexp(gamma - ref, shift), -2.0, 2.0)


def _assemble(gamma: np.ndarray, V: np.ndarray, theta: float) -> tuple[np.ndarray, int]:
    d = np.clip(gamma - theta, 0.0, 1.0)
    keep = d > 0.0
    Vk = V[:, keep]
    return (Vk * d[keep]) @ Vk.T, int(np.count_nonzero(keep))


def fantope_projection(A: np.ndarray, k: int) -> np.ndarray:
    r"""Euclidean (Frobenius) projection of a symmetric matrix onto the Fantope.

    .. math::

        P_{\mathcal{F}^k}(A) = \arg\min_{X \in \mathcal{F}^k} \|X - A\|_F, \qquad
        \mathcal{F}^k = \{X = X^\top: 0 \preceq X \preceq I,\ \operatorname{tr} X = k\}.

    With :math:`A = \sum_i \gamma_i v_i v_i^\top`, the projection is
    :math:`\sum_i \min(\max(\gamma_i - \theta, 0), 1)\, v_i v_i^\top` where
    :math:`\theta` solves :math:`\sum_i \min(\max(\gamma_i - \theta, 0), 1) = k`
    (Vu et al. 2013, Lemma 4.1). :math:`\theta` is computed exactly from the knots
    :math:`\gamma_i, \gamma_i - 1` of this piecewise-linear equation, so repeated
    eigenvalues are handled (see the module docstring).

    Parameters
    ----------
    A : array of shape (p, p)
        Symmetric, finite (asymmetry up to ``1e-8 * max(1, max|A|)`` is tolerated
        and removed by symmetrising).  Any finite magnitude up to float64's limit is
        handled: the root is solved relative to the ``k``-th largest eigenvalue, so
        the result is in the Fantope also when the eigenvalues are ``1e16`` or
        ``1e300`` (it is the exact projection of the eigendecomposition LAPACK
        computes, whose eigenvalues carry an absolute error of about
        ``1e-16 * max|A|``).
    k : int
        Trace of the result, ``1 <= k <= p``.

    Returns
    -------
    X : ndarray of shape (p, p), float64
        The projection; its eigenvalues lie in [0, 1] and sum to ``k``.

    Raises
    ------
    ValueError
        If ``A`` is not square, not finite, not symmetric, or ``k`` is out of range.
    TypeError
        If ``k`` is not an integer or ``A`` is not numeric.
    """
    arr = _check_symmetric(A, "A")
    k = _check_k(k, arr.shape[0])
    W = 0.5 * arr + 0.5 * arr.T  # (arr + arr.T) / 2 would overflow near 1.8e308
    X, _ = _fantope_project(W, k, overwrite=True)
    return X


# --------------------------------------------------------------------------- ADMM
def fps_objective(S: np.ndarray, X: np.ndarray, lam: float) -> float:
    r"""FPS objective :math:`\langle S, X\rangle - \lambda \sum_{ij} |X_{ij}|`.

    Parameters
    ----------
    S, X : arrays of shape (p, p)
    lam : float
        Penalty :math:`\lambda \ge 0`.

    Returns
    -------
    float
    """
    S = np.asarray(S, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if S.ndim != 2 or S.shape != X.shape:
        raise ValueError(f"S and X must be 2-D of equal shape, got {S.shape} and {X.shape}")
    lam = check_real("lam", lam, low=0.0)
    return float(np.vdot(S, X) - lam * np.abs(X).sum())


def _ldexp_capped(x: float, e: int) -> float:
    """``x * 2**e`` for ``x >= 0``, capped at the largest float (no OverflowError)."""
    with np.errstate(over="ignore"):
        return float(min(np.ldexp(x, e), np.finfo(np.float64).max))


# With the acceleration rho follows fps_accel.RhoSchedule, and an extrapolated state is
# kept only if its fixed-point residual is below _AA_DECREASE times the one before.  A
# fixed factor 10 for rho cycled between two values on some problems (188 iterations
# against the plain ADMM's 42; 22 now).  See docs/performance.md.
_AA_DECREASE = 0.99

#: Memory of the Anderson acceleration (``anderson=5``), the default.
ACCELERATED_ANDERSON = 5
#: Default of :func:`fps_admm`: the accelerated ADMM with the certified stop.  (An earlier
#: accelerated version without the gap test stopped farther from the optimum than the plain
#: ADMM at ``tol = 1e-3``: on the cross-validated choice of lambda in
#: tests/privacy/test_budget.py the held-out score at lambda = 0.01 was 0.0558, against
#: 0.0632 plain, 0.0650 now and 0.0654 converged, and it chose another lambda.)
DEFAULT_ANDERSON = ACCELERATED_ANDERSON


@dataclass
class FPSResult:
    """Solution and diagnostics of :func:`fps_admm`.

    Attributes
    ----------
    X : ndarray of shape (p, p)
        The ADMM ``Z`` iterate (soft-thresholded, hence sparse); the estimate.
    iterations : int
        Number of ADMM iterations run.
    primal_residuals : list of float
        :math:`r_t = \\|X_t - Z_t\\|_F` per iteration.
    dual_residuals : list of float
        :math:`s_t = \\rho_t \\|Z_t - Z_{t-1}\\|_F` per iteration.
    converged : bool
        Whether both residuals fell below :math:`\\sqrt{k}\\,\\text{tol}`.
    rho : float
        Final penalty parameter.
    duality_gap : float
        Relative duality gap of the last ADMM state (computed when first read: one
        partial eigendecomposition), a certificate that holds whatever the stopping
        rule: the optimum lies in ``[lower, upper]``, and this is ``upper - lower``
        relative to the size of the objective's terms
        (:func:`fedspectral.pca.fps_accel.relative_gap`); NaN for a result built by hand.
    """

    X: np.ndarray
    iterations: int
    primal_residuals: list[float] = field(default_factory=list)
    dual_residuals: list[float] = field(default_factory=list)
    converged: bool = False
    rho: float = 1.0
    #: (S, X, U, rho, lam, k) of the last state, in the solver's (rescaled) units.
    _state: tuple[np.ndarray, np.ndarray, np.ndarray, float, float, int] | None = field(
        default=None, repr=False, compare=False
    )

    @functools.cached_property
    def duality_gap(self) -> float:
        if self._state is None:
            return math.nan
        return relative_gap(*self._state)


def _admm(
    S: np.ndarray,
    k: int,
    lam: float,
    rho: float,
    thresh: float,
    max_iter: int,
    Z0: np.ndarray,
    anderson: int,
) -> tuple[np.ndarray, int, list[float], list[float], bool, float, tuple[np.ndarray, np.ndarray]]:
    """The iterations of :func:`fps_admm` (checked, rescaled input): ``(Z, iterations,
    primal and dual residuals, converged, rho, (X, U))``, ``X`` the last Fantope iterate
    and ``U`` the scaled dual (for :attr:`FPSResult.duality_gap`)."""
    p = S.shape[0]
    Z = Z0
    Z_old = np.empty_like(Z)
    U = np.zeros((p, p))
    W = np.empty_like(Z)
    D = np.empty_like(Z)
    aa = Anderson(anderson, p * p) if anderson else None
    g_norm_prev = math.inf  # fixed-point residual of the state before, for the safeguard
    extrapolated = False  # whether the current state is an Anderson step
    xi: np.ndarray | None = None
    S_rho, rho_of_S = S, math.nan
    sched = RhoSchedule(accelerated=aa is not None)
    gap_bar = math.inf  # the gap is next checked when both residuals are below this
    certify_until = max_iter  # set at the first pass of the residual test
    primal: list[float] = []
    dual: list[float] = []
    converged = False
    X = Z0
    n_top: int | None = None
    it = 0  # the iterations run (returned)
    while it < max_iter:
        it += 1
        Z, Z_old = Z_old, Z
        # X = P_F(Z_old - U + S / rho)
        np.subtract(Z_old, U, out=W)
        if rho != rho_of_S:  # S / rho, recomputed when rho changes
            # not S * (1 / rho): 1 / rho overflows for a subnormal rho
            S_rho, rho_of_S = S / rho, rho
        W += S_rho
        X, rank = _fantope_project(W, k, overwrite=True, n_top=n_top)
        # Next time only the top eigenpairs if the rank is small: MRRR for m of p = 400 pairs
        # was slower than dstevd's all from m = 40-60 on; a short guess costs both.
        n_top = max(k, rank) + max(8, rank // 4)
        n_top = n_top if n_top <= p // 8 else None
        if aa is not None:  # xi = Z_old + U, F(xi) = X + U, residual g = X - Z_old
            np.subtract(X, Z_old, out=D)
            g_norm = float(np.linalg.norm(D))
            if extrapolated and g_norm > _AA_DECREASE * g_norm_prev:
                aa.reset()  # the extrapolation did worse than the plain step: restart
            g_norm_prev = g_norm
        # Z = soft(X + U, lam / rho): t - clip(t, -tau, tau)
        tau = lam / rho
        np.add(X, U, out=W)
        np.clip(W, -tau, tau, out=Z)
        np.subtract(W, Z, out=Z)
        if aa is not None:
            xi = aa.step(W.reshape(-1), D.reshape(-1))  # W = F(xi), D = g
        # U += X - Z
        np.subtract(X, Z, out=D)
        U += D
        r = float(np.linalg.norm(D))
        np.subtract(Z, Z_old, out=D)
        s = rho * float(np.linalg.norm(D))
        primal.append(r)
        dual.append(s)
        gap_failed = False
        if r < thresh and s < thresh and (max(r, s) < gap_bar or it >= certify_until):
            # The R package stops here.  Accelerated, this can pass far from the optimum
            # (at a large rho it moves little): the certified gap is asked for too, until
            # 4x the iterations of the first pass (then as the R package); on a failure
            # rho halves (RhoSchedule), and the gap is rechecked at half the residuals.
            certify_until = min(certify_until, max(4 * it, it + 50))
            if aa is None or it >= certify_until or relative_gap(S, X, U, rho, lam, k) <= thresh:
                converged = True
                break
            gap_failed = True
            gap_bar = max(r, s) / 2
        extrapolated = False
        change, step = sched.change(r, s, gap_failed)  # rho up (1), down (-1), by step
        if change:
            rho, U = (rho * step, U / step) if change > 0 else (rho / step, U * step)
            gap_bar = math.inf  # residuals at another rho: the next pass is checked
            if aa is not None:
                aa.reset()  # a new rho is a new fixed-point map
                g_norm_prev = math.inf
        elif xi is not None:
            set_state(xi.reshape(p, p), tau, Z, U)
            extrapolated = True
    return Z, it, primal, dual, converged, rho, (X, U)


def fps_admm(
    S: np.ndarray,
    k: int,
    lam: float,
    *,
    rho: float | None = None,
    tol: float = 1e-3,
    max_iter: int = DEFAULT_MAX_ITER,
    X0: np.ndarray | None = None,
    anderson: int = DEFAULT_ANDERSON,
) -> FPSResult:
    r"""Fantope projection and selection (Vu et al. 2013) by ADMM.

    Solves

    .. math::

        \max_X \; \langle S, X\rangle - \lambda \|X\|_{1,1}
        \quad \text{s.t.} \quad 0 \preceq X \preceq I,\ \operatorname{tr} X = k,

    the convex program of Wang & Xu (IJCAI 2019, Algorithm 2) applied to the
    privatised second moment :math:`\hat S`, with the ADMM of the reference R
    package ``fps`` (see the module docstring for the iteration, the adaptive
    :math:`\rho` and the stopping rule).

    Parameters
    ----------
    S : array of shape (p, p)
        Symmetric, finite input matrix (e.g. the noisy covariance).
    k : int
        Target dimension, ``1 <= k <= p``.
    lam : float
        :math:`\ell_1` penalty :math:`\lambda \ge 0`.
    rho : float, optional
        Initial ADMM penalty; default :math:`\max_{ij} |S_{ij}|` (1 if S = 0).
    tol : float
        Stop when both residuals are below :math:`\sqrt{k}\,\text{tol}` and, with the
        acceleration, the relative duality gap as well (:attr:`FPSResult.duality_gap`;
        tried for a bounded number of iterations, see Notes).
    max_iter : int
        Iteration cap (default :data:`DEFAULT_MAX_ITER`; the R package's 100 is
        often too few). A :class:`sklearn.exceptions.ConvergenceWarning` is issued
        when it is reached.
    X0 : array of shape (p, p), optional
        Warm start: initial ``X = Z`` (e.g. the solution for a nearby ``lam``);
        the scaled dual starts at 0.
    anderson : int
        Memory of the Anderson acceleration of the ADMM (default
        :data:`DEFAULT_ANDERSON` = :data:`ACCELERATED_ANDERSON` = 5, with the certified
        stop); 0 runs the plain ADMM of the R package, its stopping rule included, bit
        for bit as before the acceleration.  See Notes.

    Returns
    -------
    FPSResult

    Raises
    ------
    ValueError, TypeError
        On invalid input, before any work.

    Notes
    -----
    When ``max|S|`` lies outside :math:`[2^{-64}, 2^{64}]` the problem is solved with
    ``S``, ``lam`` and ``rho`` divided by the same power of two (the solution is
    unchanged; the dual residual and its stopping rule are scale-dependent), and ``rho``
    and the dual residuals are reported in the original units.

    **Anderson acceleration.**  The ADMM is a fixed-point iteration of
    :math:`\xi = X + U` (Douglas-Rachford: :math:`Z = \operatorname{soft}(\xi)`,
    :math:`U = \xi - Z`, :math:`F(\xi) = P_{\mathcal{F}^k}(2Z - \xi + S/\rho) + U`).
    With ``anderson = m > 0`` the next state is the type-II Anderson extrapolation of
    the last ``m + 1`` values of :math:`F` (Walker & Ni 2011; Zhang, O'Donoghue &
    Boyd 2020), unless the adaptive :math:`\rho` changes (a new map: the memory is
    cleared).  Safeguard: when the state reached by an extrapolation has a
    fixed-point residual :math:`\|F(\xi) - \xi\|_F` not at least 1 % below the
    state's before it, the memory is cleared and the plain ADMM step is taken.  The
    residuals, the stopping rule and the returned ``X`` are those of the plain ADMM
    step from the current state, so a converged result satisfies the plain ADMM's test
    (and the gap test below).
    With the acceleration :math:`\rho` moves by a factor 10 instead of 2 until its
    first reversal, then by the square root of the factor before (at least 2), at most
    50 times: each change clears the memory, so fewer, larger changes leave it more
    iterations to work with, and shrinking the factor stops the cycling between two
    values of :math:`\rho` that a fixed factor 10 fell into on some problems.

    **Certified stop.**  The residual test alone can pass far from the optimum when
    :math:`\rho` is large (the iterate moves little); with extrapolation that happened
    often enough to change a cross-validated choice of :math:`\lambda`.  So the
    accelerated ADMM stops only when, besides the residuals, the relative duality gap
    of its state (:attr:`FPSResult.duality_gap`: the Fantope iterate's objective
    against the bound from the multiplier :math:`\rho U`) is below
    :math:`\sqrt{k}\,\text{tol}`; when the residuals pass and the gap does not,
    :math:`\rho` halves (at most 3 times) and the gap is checked again once both
    residuals have halved.  It tries until 4 times the iteration at which the residuals
    first passed (at least 50 more); after that the residual test alone decides, as in
    the plain ADMM, and ``duality_gap`` says how far from certified the result is (on
    some noise-dominated problems of ``pca-bench``'s Tables 1-2 the gap stalled above
    the threshold with both residuals 100x below theirs).  Measured on 15 problems
    (``benchmarks/fps_stopping.py``, ``docs/performance.md``): 16-18 instead of 24-26
    iterations at p = 400 on the benchmark's problems; closer to the optimum than the
    plain ADMM on 11, within 2x of its distance on the other 4; on
    ``LocalDPSparsePCA``'s :math:`\hat S` (p = 100-400) 1-13x closer, at 0.64-1.7x its
    CPU time (2x on p = 20 problems, milliseconds).

    Each iteration costs one symmetric eigendecomposition, for ``p >= 64`` taken apart:
    one tridiagonal reduction, the eigenvalues, and only the eigenvectors of nonzero
    weight back-transformed (only the top eigenpairs by MRRR once the rank of the
    projection is small, checked exactly), plus O(p^2) work. Multi-threaded
    BLAS on an oversubscribed machine can make small eigendecompositions much
    slower (measured 4x at p = 100 with 2 OpenBLAS threads on a loaded 2-core
    machine); callers may wrap the call in ``threadpoolctl.threadpool_limits(1)``.
    """
    S = _check_symmetric(S, "S")
    p = S.shape[0]
    k = _check_k(k, p)
    lam = check_real("lam", lam, low=0.0)
    tol = check_real("tol", tol, low=0.0, low_open=True)
    max_iter = check_int("max_iter", max_iter, low=1, high=MAX_ITER_BOUND)
    if rho is not None:
        rho = check_real("rho", rho, low=0.0, low_open=True)
    anderson = check_int("anderson", anderson, low=0)
    if X0 is not None:
        X0 = _check_symmetric(X0, "X0")
        if X0.shape != S.shape:
            raise ValueError(f"X0 must have shape {S.shape}, got {X0.shape}")

    S = 0.5 * S + 0.5 * S.T
    # The problem is invariant under (S, lam, rho) -> c (S, lam, rho) but the dual residual
    # and its stopping rule are not: far outside unit scale, solve the problem rescaled by a
    # power of two c (exact), and report rho and the dual residuals in the original units.
    big = float(np.max(np.abs(S)))
    e = math.frexp(big)[1] if big > 0 and not 2.0**-64 <= big <= 2.0**64 else 0
    if e:
        S = np.ldexp(S, -e)
        lam = _ldexp_capped(lam, -e)
        rho = None if rho is None else _ldexp_capped(rho, -e)
    if rho is None:
        rho = float(np.max(np.abs(S)))
        if rho == 0.0:
            rho = 1.0
    thresh = math.sqrt(k) * tol

    Z0 = np.zeros((p, p)) if X0 is None else 0.5 * (X0 + X0.T)
    Z, it, primal, dual, converged, rho, (X_f, U) = _admm(
        S, k, lam, rho, thresh, max_iter, Z0, anderson
    )
    rho_solved = rho
    if not converged:
        warnings.warn(
            f"fps_admm did not converge in max_iter={max_iter} iterations "
            f"(primal residual {primal[-1]:.3g}, dual residual {dual[-1]:.3g}, "
            f"target {thresh:.3g}); increase max_iter or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    if e:
        dual = [_ldexp_capped(d, e) for d in dual]
        rho = _ldexp_capped(rho, e)
    return FPSResult(
        X=Z,
        iterations=len(primal),
        primal_residuals=primal,
        dual_residuals=dual,
        converged=converged,
        rho=rho,
        _state=(S, X_f, U, rho_solved, lam, k),
    )
