r"""Noise calibration: the smallest noise multiplier that meets a target (ε, δ).

:func:`calibrate_noise_multiplier` inverts the accountants of
:mod:`fedspectral.privacy.accounting` (RDP, PLD) for ``count`` Gaussian releases of one
noise multiplier; :func:`closed_form_noise_multiplier` inverts the closed-form bound.
"""

from __future__ import annotations

import math

import dp_accounting

from fedspectral.checks import check_choice, check_real
from fedspectral.kinds import INVERTIBLE, PLD, RDP
from fedspectral.privacy.accounting import _check_delta
from fedspectral.privacy.composition import (
    PLD_CALIBRATION_INTERVAL,
    PLD_MIN_DELTA,
    epsilon_of_groups,
    gaussian_event,
    make_accountant,
    pld_interval,
)
from fedspectral.privacy.mechanisms import EPSILON_RANGE
from fedspectral.privacy.validate import check_count

__all__ = ["calibrate_noise_multiplier", "closed_form_noise_multiplier"]


def calibrate_noise_multiplier(
    epsilon: float, delta: float, count: int, accountant: str = RDP, tol: float = 1e-4
) -> float:
    """Smallest noise multiplier :math:`z` such that ``count`` Gaussian releases are (ε, δ)-DP.

    Uses ``dp_accounting.calibrate_dp_mechanism`` with the chosen accountant
    (``"rdp"`` or ``"pld"``, as :func:`epsilon_of_releases` runs them); returns 0 for
    ``epsilon = inf``.  The bracket is searched, not assumed: its lower end is
    shrunk from the single-release analytic z and its upper end grown from the
    closed-form z until they enclose the target, so calibration works over the
    whole domain ε in :data:`~fedspectral.privacy.mechanisms.EPSILON_RANGE`,
    δ in (0, 1) (PLD: δ >= :data:`PLD_MIN_DELTA`, and ``ValueError`` where its
    bounded grid cannot reach the target).  The result is within relative ``tol``
    (at most 1e-4 by default) of the smallest z, and never below it.
    """
    eps = check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=True)
    delta = _check_delta(delta)
    count = check_count("count", count, low=1)
    check_choice("accountant", accountant, INVERTIBLE)
    tol = check_real("tol", tol, low=0.0, low_open=True)
    if math.isinf(eps):
        return 0.0
    if not EPSILON_RANGE[0] <= eps <= EPSILON_RANGE[1]:
        raise ValueError(
            f"epsilon={eps!r} is outside the calibrated range "
            f"[{EPSILON_RANGE[0]:g}, {EPSILON_RANGE[1]:g}]"
        )
    if accountant == PLD and delta < PLD_MIN_DELTA:
        raise ValueError(
            f"the PLD accountant resolves delta >= {PLD_MIN_DELTA:g}, got "
            f"delta={delta!r}: use accountant={RDP!r}"
        )

    def eps_at(z: float) -> float:
        return epsilon_of_groups({z: count}, delta, accountant, PLD_CALIBRATION_INTERVAL)

    # ε(z) is decreasing.  T Gaussian releases of multiplier z compose exactly to one
    # of multiplier z/sqrt(T), so the exact answer is z* = sqrt(T) x the analytic z of
    # one release; every accountant is an upper bound on the exact ε, so just below z*
    # ε(z) > target.  The upper end starts at z* (PLD: nearly tight) or at the
    # closed-form z (RDP) and is grown until ε(upper) <= target.
    exact = math.sqrt(count) * float(dp_accounting.get_sigma_gaussian(eps, delta))
    lower = 0.995 * exact
    upper = (
        1.002 * exact
        if accountant == PLD
        else max(closed_form_noise_multiplier(eps, delta, count), 1.002 * exact)
    )
    for _ in range(60):
        if eps_at(lower) > eps:
            break
        lower *= 0.5  # pragma: no cover - accountants are upper bounds on the exact ε
    for _ in range(60):
        if eps_at(upper) <= eps:
            break
        upper = exact + 4.0 * (upper - exact)
    else:
        raise ValueError(
            f"the {accountant} accountant cannot reach epsilon={eps!r} at "
            f"delta={delta!r} with {count} releases (tried z up to {upper:.3g})"
        )
    z = float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: make_accountant(RDP) if accountant == RDP else _PldFresh(count, delta),
            lambda z: gaussian_event(z, count),
            eps,
            delta,
            dp_accounting.ExplicitBracketInterval(lower, upper),
            tol=tol * lower,
        )
    )
    return z


class _PldFresh:
    """A PLD accountant whose grid is chosen (bounded) for each event it composes."""

    def __init__(self, count: int, delta: float) -> None:
        self._count, self._delta = count, delta
        self._acc: dp_accounting.PrivacyAccountant | None = None
        self.ledger = dp_accounting.NoOpDpEvent()

    def compose(self, event: dp_accounting.DpEvent) -> _PldFresh:
        base = event.event if isinstance(event, dp_accounting.SelfComposedDpEvent) else event
        z = float(base.noise_multiplier)
        self._acc = make_accountant(
            PLD, pld_interval({z: self._count}, self._delta, PLD_CALIBRATION_INTERVAL)
        )
        self._acc.compose(event)
        return self

    def get_epsilon(self, delta: float) -> float:
        assert self._acc is not None
        return float(self._acc.get_epsilon(delta))


def closed_form_noise_multiplier(epsilon: float, delta: float, count: int) -> float:
    """Noise multiplier at which the closed-form bound equals ``epsilon`` (inverse of
    :math:`\\rho + 2\\sqrt{\\rho\\ln(1/\\delta)}`, :math:`\\rho = T/(2z^2)`).

    Computed as :math:`\\sqrt\\rho = \\varepsilon/(\\sqrt{L+\\varepsilon}+\\sqrt L)`,
    :math:`L=\\ln(1/\\delta)` (no cancellation at tiny ε)."""
    eps = check_real("epsilon", epsilon, low=0.0, low_open=True)
    delta = _check_delta(delta)
    count = check_count("count", count, low=1)
    log_inv = -math.log(delta)  # ln(1/δ) without overflowing 1/δ at δ = 5e-324
    sqrt_rho = eps / (math.sqrt(log_inv + eps) + math.sqrt(log_inv))
    # a subnormal epsilon underflows sqrt(rho) to 0: z beyond float64, said as such
    z = math.sqrt(count / 2.0) / sqrt_rho if sqrt_rho > 0 else math.inf
    if not math.isfinite(z):
        raise ValueError(f"the closed-form noise multiplier overflows at epsilon={eps!r}")
    return z
