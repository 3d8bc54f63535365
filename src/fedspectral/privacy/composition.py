r"""Composition of releases by dp-accounting's accountants: the ledger's numerical core.

Every release enters as the unit-sensitivity dp-accounting event of its noise law and
noise multiplier :math:`z` (:func:`law_event`; Gaussian or Laplace, :data:`LAWS`),
grouped into self-composed events (``{z: count}`` for Gaussian releases, ``{(law, z):
count}`` otherwise) and composed by the RDP or the PLD accountant, always under
``ADD_OR_REMOVE_ONE`` (:mod:`fedspectral.privacy.accounting` says why).  The numerical
domain (:data:`Z_CAP`, :data:`Z_MIN`, the PLD grid) is stated in
:mod:`fedspectral.privacy.accounting`'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import dp_accounting

from fedspectral.checks import check_choice, check_real, describe
from fedspectral.kinds import ACCOUNTANTS, PLD, RDP
from fedspectral.privacy.validate import check_count

__all__ = [
    "LAWS",
    "PLD_CALIBRATION_INTERVAL",
    "PLD_GRID",
    "PLD_MAX_EPSILON",
    "PLD_MIN_DELTA",
    "PLD_MIN_INTERVAL",
    "RDP_ORDERS",
    "Z_CAP",
    "Z_MIN",
    "Groups",
    "check_z_min",
    "epsilon_of_groups",
    "gaussian_event",
    "law_event",
    "make_accountant",
    "pld_interval",
]

#: the noise laws a release may have, each with its dp-accounting event of unit sensitivity
LAWS = ("gaussian", "laplace")

#: noise multipliers above this are accounted as this (an upper bound on ε)
Z_CAP = 1e8
#: RDP orders: dp-accounting's defaults extended to 2**26
RDP_ORDERS = tuple(dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS) + tuple(
    float(2**k) for k in range(11, 27)
)
#: target size of the PLD grid (bounds its memory and time)
PLD_GRID = 1e5
#: the PLD grid's finest interval: the ledger's, and calibration's (coarser: faster, and an
#: upper bound all the same; the single-release error at 1e-3 is below 1e-6)
PLD_MIN_INTERVAL = 1e-4
PLD_CALIBRATION_INTERVAL = 1e-3
#: PLD refuses compositions whose RDP ε exceeds this
PLD_MAX_EPSILON = 1e3
#: smallest δ the PLD accountant is asked for (its tail truncation is far below)
PLD_MIN_DELTA = 1e-15
#: smallest noise multiplier accounted: below it ε exceeds ~5e299 and the accountants'
#: float64 arithmetic overflows (dp-accounting's analytic ε even returns 0 at 5e-324)
Z_MIN = 1e-150


def law_event(law: str, z: float, count: int = 1) -> dp_accounting.DpEvent:
    """The dp-accounting event of ``count`` releases of ``law`` with noise multiplier ``z``
    (noise scale over sensitivity), self-composed when ``count > 1``: the one place the
    ledger's events are built."""
    check_choice("law", law, LAWS)
    z = check_real("z", z, low=0.0, low_open=law == "laplace", allow_inf=True)
    count = check_count("count", count, low=1)
    ev: dp_accounting.DpEvent = (
        dp_accounting.GaussianDpEvent(z) if law == "gaussian" else dp_accounting.LaplaceDpEvent(z)
    )
    return ev if count == 1 else dp_accounting.SelfComposedDpEvent(ev, count)


def make_accountant(
    kind: str, pld_interval: float = PLD_MIN_INTERVAL
) -> dp_accounting.PrivacyAccountant:
    rel = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind == RDP:
        return dp_accounting.rdp.RdpAccountant(orders=RDP_ORDERS, neighboring_relation=rel)
    if kind == PLD:
        return dp_accounting.pld.PLDAccountant(
            neighboring_relation=rel, value_discretization_interval=pld_interval
        )
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {kind!r}")


def gaussian_event(z: float, count: int = 1) -> dp_accounting.DpEvent:
    """The dp-accounting event of ``count`` Gaussian releases of unit sensitivity and noise
    multiplier ``z`` (self-composed when ``count > 1``): the one place events are built."""
    return law_event("gaussian", z, count)


#: releases grouped for the accountants: ``{z: count}`` (Gaussian) or ``{(law, z): count}``
Groups = dict[Any, int]


def _law_z(key: Any) -> tuple[str, float]:
    return key if isinstance(key, tuple) else ("gaussian", key)


def _compose(acc: dp_accounting.PrivacyAccountant, groups: Groups) -> None:
    for key, count in groups.items():
        law, z = _law_z(key)
        acc.compose(law_event(law, min(z, Z_CAP), count))


def _rdp_epsilon(groups: Groups, delta: float) -> float:
    acc = make_accountant(RDP)
    _compose(acc, groups)
    return float(acc.get_epsilon(delta))


def check_z_min(keys: Iterable[Any]) -> None:
    """Refuse noise multipliers in ``(0, Z_MIN)``: their ε is beyond float64 arithmetic."""
    tiny = sorted(z for z in (_law_z(k)[1] for k in keys) if 0 < z < Z_MIN)
    if tiny:
        raise ValueError(
            f"noise multiplier sigma/sensitivity = {tiny[0]!r} is below "
            f"{Z_MIN:g} (Z_MIN): its epsilon, about 1/(2 z^2), exceeds 5e299 (no "
            f"privacy at all) and is not accounted; noise multipliers >= "
            f"{Z_MIN:g} are"
        )


def pld_interval(groups: Groups, delta: float, floor: float = PLD_MIN_INTERVAL) -> float:
    """The PLD value-discretisation interval used for ``groups`` ({z: count} of Gaussian
    releases, or {(law, z): count}) at ``delta``:
    ``max(floor, eps_rdp / PLD_GRID)``; ``ValueError`` beyond :data:`PLD_MAX_EPSILON`."""
    if not isinstance(groups, dict):
        raise TypeError(
            f"groups must be a dict {{noise multiplier: count}}, got {describe(groups)}"
        )
    checked: Groups = {}
    for key, c in groups.items():
        law, z = _law_z(key)
        check_choice("law", law, LAWS)
        z = check_real("noise multiplier", z, low=0.0, allow_inf=True)
        checked[z if law == "gaussian" else (law, z)] = check_count("count", c, low=1)
    groups = checked
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    floor = check_real("floor", floor, low=0.0, low_open=True)
    check_z_min(groups)
    eps_rdp = _rdp_epsilon(groups, delta)
    if not math.isfinite(eps_rdp):
        raise ValueError(
            f"the RDP epsilon of noise multipliers {sorted(groups)[:3]} at "
            f"delta={delta!r} is {eps_rdp}: no accountant bounds it"
        )
    if eps_rdp > PLD_MAX_EPSILON:
        raise ValueError(
            f"the PLD accountant is limited to compositions with an RDP epsilon "
            f"<= {PLD_MAX_EPSILON:g} (bounded memory); this one has "
            f"{eps_rdp:.4g}: use accountant='rdp'"
        )
    return max(floor, eps_rdp / PLD_GRID)


def epsilon_of_groups(
    groups: Groups, delta: float, accountant: str, floor: float = PLD_MIN_INTERVAL
) -> float:
    check_z_min(groups)
    if accountant == PLD:
        if delta < PLD_MIN_DELTA:
            raise ValueError(
                f"the PLD accountant resolves delta >= {PLD_MIN_DELTA:g}, got "
                f"delta={delta!r}: use accountant='rdp'"
            )
        acc = make_accountant(PLD, pld_interval(groups, delta, floor))
    else:
        acc = make_accountant(accountant)
    _compose(acc, groups)
    eps = float(acc.get_epsilon(delta))
    if not math.isfinite(eps):
        other = f"; use accountant={RDP!r}" if accountant != RDP else ""
        raise ValueError(
            f"the {accountant} accountant gave epsilon={eps} for finite noise "
            f"(noise multipliers {sorted(groups)[:3]}, delta={delta!r}){other}"
        )
    return max(eps, 0.0)
