r"""The accelerated FPS ADMM's pieces (:func:`fedspectral.pca.fps.fps_admm`).

:class:`Anderson` extrapolates the ADMM's fixed-point iteration; :class:`RhoSchedule`
adapts its penalty; :func:`relative_gap` is the duality-gap certificate on which the
accelerated iteration stops.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

__all__ = [
    "GAP_HALVINGS",
    "MAX_RHO_CHANGES",
    "RHO_STEP_ACCELERATED",
    "Anderson",
    "RhoSchedule",
    "gap_bounds",
    "relative_gap",
    "set_state",
]

#: rho's first factor with the acceleration (the R package's is 2).
RHO_STEP_ACCELERATED = 10.0
#: With the acceleration rho changes at most this often (then it is fixed: ADMM with a
#: fixed rho converges).
MAX_RHO_CHANGES = 50
#: A failed gap test halves rho at most this often (halving at every failure drove rho
#: to about 1e-15 on some problems).
GAP_HALVINGS = 3


class Anderson:
    r"""Anderson acceleration (type II, memory ``m``) of a fixed-point map :math:`F`.

    Given the iterates :math:`\xi_j` and residuals :math:`g_j = F(\xi_j) - \xi_j`, the
    next iterate is :math:`F(\xi_t) - \sum_j \gamma_j (\Delta F_j)` with
    :math:`\gamma = \arg\min \|g_t - \sum_j \gamma_j \Delta g_j\|` over the last ``m``
    differences (Walker & Ni 2011; for ADMM / Douglas-Rachford, Zhang, O'Donoghue &
    Boyd 2020, as in SCS).  The differences live in two ring buffers of ``m`` rows of
    ``p * p`` entries and their Gram matrix is updated one row at a time, so a step
    costs about ``4 m p^2`` flops (a tridiagonal reduction costs ``4/3 p^3``)."""

    def __init__(self, mem: int, size: int) -> None:
        self.mem = mem
        self.dF = np.zeros((mem, size))  # differences of F(xi)
        self.dG = np.zeros((mem, size))  # differences of g
        self.gram = np.zeros((mem, mem))
        self.F_prev = np.empty(size)
        self.g_prev = np.empty(size)
        self.reset()

    def reset(self) -> None:
        self.count = 0  # differences stored
        self.has_prev = False

    def step(self, F: np.ndarray, g: np.ndarray) -> np.ndarray | None:
        """Record ``F = F(xi)`` and ``g = F - xi`` (flat) and return the extrapolated
        next iterate, or ``None`` (no history yet, or a singular system)."""
        if not self.has_prev:
            self.F_prev[:] = F
            self.g_prev[:] = g
            self.has_prev = True
            return None
        j = self.count % self.mem
        np.subtract(F, self.F_prev, out=self.dF[j])
        np.subtract(g, self.g_prev, out=self.dG[j])
        self.F_prev[:] = F
        self.g_prev[:] = g
        self.count += 1
        m = min(self.count, self.mem)
        dG = self.dG[:m]
        row = dG @ self.dG[j]  # two matrix-vector products (a stacked right side was
        self.gram[j, :m] = row  # measured 3x slower at p = 400)
        self.gram[:m, j] = row
        A = self.gram[:m, :m] + (1e-10 * np.trace(self.gram[:m, :m])) * np.eye(m)
        try:
            gamma = np.linalg.solve(A, dG @ g)
        except np.linalg.LinAlgError:
            return None
        if not np.all(np.isfinite(gamma)):
            return None
        return F - gamma @ self.dF[:m]


def set_state(xi: np.ndarray, tau: float, Z: np.ndarray, U: np.ndarray) -> None:
    """The ADMM state of ``xi = X + U``: ``Z = soft(xi, tau)``, ``U = xi - Z`` (in place)."""
    np.clip(xi, -tau, tau, out=U)
    np.subtract(xi, U, out=Z)
    np.subtract(xi, Z, out=U)


def relative_gap(
    S: np.ndarray, X: np.ndarray, U: np.ndarray, rho: float, lam: float, k: int
) -> float:
    r"""Relative duality gap of the ADMM state: a certificate of the objective's accuracy.

    ``X`` lies in the Fantope, so :math:`f(X) = \langle S, X\rangle - \lambda\|X\|_{1,1}`
    is a lower bound on the optimum.  For any :math:`Y` with :math:`|Y_{ij}| \le \lambda`,
    :math:`\lambda\|X\|_{1,1} \ge \langle Y, X\rangle`, so the optimum is at most
    :math:`\max_{X \in \mathcal F^k} \langle S - Y, X\rangle`, the sum of the ``k`` largest
    eigenvalues of :math:`S - Y`; the ADMM's multiplier :math:`Y = \rho U` satisfies the
    bound (``U`` is a clip to :math:`\pm\lambda/\rho`).  Returns the gap :math:`u - f`
    relative to the size of the objective's terms, :math:`\max(|u|, |\langle S, X\rangle|
    + \lambda\|X\|_{1,1})` (0 when that is 0): relative to :math:`|f|` alone it would
    never close where the two terms cancel (:math:`f \approx 0`).  Invariant under the
    rescaling of ``S``, ``lam`` and ``rho`` by one factor.  Costs one tridiagonal
    reduction and the top ``k`` eigenvalues."""
    lower, upper, scale = gap_bounds(S, X, U, rho, lam, k)
    return (upper - lower) / scale if scale > 0 else 0.0


def gap_bounds(
    S: np.ndarray, X: np.ndarray, U: np.ndarray, rho: float, lam: float, k: int
) -> tuple[float, float, float]:
    """``(lower, upper, scale)`` of :func:`relative_gap`: the objective at ``X`` (a
    Fantope point), the sum of the top ``k`` eigenvalues of ``S - rho U`` and the size of
    the objective's terms."""
    p = S.shape[0]
    fit, penalty = float(np.vdot(S, X)), lam * float(np.abs(X).sum())
    top = scipy.linalg.eigvalsh(
        S - rho * U, subset_by_index=[p - k, p - 1], check_finite=False, driver="evr"
    )
    upper = float(np.sum(top))
    return fit - penalty, upper, max(abs(upper), abs(fit) + penalty)


class RhoSchedule:
    """The adaptive penalty of :func:`fedspectral.pca.fps.fps_admm`: the R package's rule
    (x2 if ``r > 10 s``, /2 if ``s > 10 r``); accelerated, the factor starts at 10 and
    shrinks to its square root (>= 2) at each reversal, a failed gap test halves rho
    (``GAP_HALVINGS`` times at most), and rho changes at most ``MAX_RHO_CHANGES`` times."""

    def __init__(self, accelerated: bool) -> None:
        self.accelerated = accelerated
        self.step = RHO_STEP_ACCELERATED if accelerated else 2.0
        self.changes = 0
        self.last = 0
        self.gap_halvings = 0

    def change(self, r: float, s: float, gap_failed: bool) -> tuple[int, float]:
        """``(direction, factor)`` of rho's change after an iteration with residuals
        ``r, s`` (direction 0: unchanged); ``U`` moves the other way, so ``rho U`` stays."""
        if self.accelerated and self.changes >= MAX_RHO_CHANGES:
            return 0, 1.0
        change = 1 if r > 10.0 * s else -1 if s > 10.0 * r else 0
        if gap_failed and self.gap_halvings < GAP_HALVINGS:
            change, self.step = -1, 2.0
            self.gap_halvings += 1
        if change == 0:
            return 0, 1.0
        step = self.step
        if self.accelerated:
            if change == -self.last:  # a reversal: rho overshot, take smaller steps
                self.step = max(2.0, math.sqrt(self.step))
            self.last = change
            self.changes += 1
        return change, step
