"""FedSC's schedules: which rounds share correlations, :math:`\\alpha_t`, and how many
releases a client's noise is calibrated for (re-exported by
:mod:`fedspectral.fed.methods.fedsc`)."""

from __future__ import annotations

import math

__all__ = [
    "ALPHA_SCHEDULES",
    "alpha_schedule",
    "is_share_round",
    "planned_releases",
    "share_rounds",
]

ALPHA_SCHEDULES = ("linear", "fixed", "q")


def is_share_round(rnd: int, start: int, every: int) -> bool:
    """Whether round ``rnd`` shares correlations (every ``every`` rounds from ``start``)."""
    return rnd >= start and (rnd - start) % every == 0


def share_rounds(rounds: int, start: int, every: int) -> list[int]:
    """The rounds (1-based, up to ``rounds``) in which correlations are shared."""
    return [t for t in range(1, rounds + 1) if is_share_round(t, start, every)]


def alpha_schedule(
    kind: str, rnd: int, rounds: int, start: float, end: float, q: float | None = None
) -> float:
    r""":math:`\alpha_t` of round ``rnd``: ``linear`` from ``start`` (round 1) to ``end``
    (round ``rounds``), ``fixed`` = ``start``, ``q`` = :math:`q_j`."""
    if kind == "linear":
        if rounds <= 1:
            return float(start)
        return float(start + (end - start) * (rnd - 1) / (rounds - 1))
    if kind == "fixed":
        return float(start)
    if kind == "q":
        if q is None:
            raise ValueError("alpha schedule 'q' needs q_j")
        return float(q)
    raise ValueError(f"alpha schedule must be one of {ALPHA_SCHEDULES}, got {kind!r}")


def planned_releases(
    rounds: int,
    start: int,
    every: int,
    clients: int,
    per_round: int | None,
    plan: str = "worst_case",
) -> int:
    """Releases per client the noise is calibrated for.

    ``worst_case``: one per sharing round (holds whatever the sampling).
    ``expected``: the first sharing round (all clients) plus the expected share of
    the others, :math:`1 + \\lceil (S-1)K/J \\rceil` (the paper's "σ changed by the
    participation ratio"; not a guarantee -- the ledger reports what was spent).
    """
    s = len(share_rounds(rounds, start, every))
    if s == 0:
        return 0
    if plan == "worst_case" or per_round is None or per_round >= clients:
        return s
    if plan == "expected":
        return 1 + math.ceil((s - 1) * per_round / clients)
    raise ValueError(f"plan must be 'worst_case' or 'expected', got {plan!r}")
