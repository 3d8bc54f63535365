"""What every claim of the report is built from: the verdict rules over paired
differences, the view of a summary the claims read, and the registries of claims
(:data:`SEED_CLAIMS`, :data:`PROTOCOL_CLAIMS`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedspectral.experiments.reproduce.paper import CENTRAL, METHOD_LABELS, METRICS
from fedspectral.experiments.reproduce.plan import STABLE
from fedspectral.experiments.reproduce.stats import paired_diff

#: the rule by which a difference "holds": the 95 % paired t interval over seeds excludes 0
RULE = (
    "a difference is established when its 95 % paired t interval over seeds (mean ± "
    "t(0.975, n − 1) · SE of the per-seed differences, runs paired by seed; a two-sided "
    "test at the 5 % level) lies above 0, and refuted when it lies below 0; otherwise "
    "inconclusive; one seed is always inconclusive"
)
FEDERATED_EXCLUDE = (CENTRAL,)


def verdict_above(d: Mapping[str, Any] | None, level: float = 0.0) -> str:
    """``holds`` when the 95 % interval lies above ``level``, ``does not hold`` when it lies
    below it, else ``inconclusive`` (always with fewer than two seeds)."""
    if d is None:
        return "not measured"
    if d["n"] < 2 or not math.isfinite(d["se"]):
        return "inconclusive"
    if d["lo"] > level:
        return "holds"
    if d["hi"] < level:
        return "does not hold"
    return "inconclusive"


def verdict_positive(d: Mapping[str, Any] | None) -> str:
    return verdict_above(d, 0.0)


def fmt_diff(d: Mapping[str, Any] | None) -> str:
    """``+2.02 [95 % CI +0.50, +3.54] (sd 0.61, n=3)``: the mean difference, its paired t
    interval, the standard deviation of the per-seed differences and the seeds."""
    if d is None:
        return "n/a"
    if d["n"] < 2 or not math.isfinite(d["se"]):
        return f"{d['mean']:+.2f} (n={d['n']})"
    sd = f"sd {d['std']:.2f}, " if math.isfinite(d.get("std", math.nan)) else "unpaired, "
    return f"{d['mean']:+.2f} [95 % CI {d['lo']:+.2f}, {d['hi']:+.2f}] ({sd}n={d['n']})"


def combine(verdicts: Sequence[str]) -> str:
    vs = [v for v in verdicts if v != "not measured"]
    if not vs:
        return "not measured"
    if all(v == "holds" for v in vs):
        return "holds"
    bad = sum(v == "does not hold" for v in vs)
    if bad:
        return f"does not hold ({bad} of {len(vs)})"
    good = sum(v == "holds" for v in vs)
    return f"inconclusive ({good} of {len(vs)} hold)"


class View:
    """What the claims read from a summary (:func:`~.summary.summarize`): its settings,
    their labels, the methods run, and the table cells that hold values."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary
        self.settings = summary["settings"]
        self.label = {s["key"]: s["label"] for s in self.settings}
        self.curves = summary.get("curves", {})

    @property
    def methods(self) -> list[str]:
        return [m for m in self.summary["methods"]]

    @property
    def fedsc_rows(self) -> list[str]:
        """FedSC's Table 2 rows: ``fedsc`` and its stable variant when it was run."""
        return [r for r in self.summary.get("rows", self.methods) if r in ("fedsc", STABLE)]

    @property
    def fed(self) -> list[str]:
        """The federated methods run (centralized SC left out)."""
        return [m for m in self.methods if m not in FEDERATED_EXCLUDE]

    def cell(self, m: str, k: str, metric: str = "linear_probe") -> Mapping[str, Any] | None:
        """The Table 2 cell of method ``m`` in setting ``k``; ``None`` when it is empty."""
        c = self.summary["table2"][metric].get(m, {}).get(k)
        return c if c and c.get("n") else None


#: a claim: reads a summary, returns ``{"id", "claim", "rule", "evidence", "verdict"}``
Claim = Callable[[View], dict[str, Any]]
#: the paper's claims, in the order of the report (:func:`observations`)
SEED_CLAIMS: list[Claim] = []
#: the CPU protocol's checks and the paper's curve claim, in the order of the report
#: (:func:`protocol_observations`)
PROTOCOL_CLAIMS: list[Claim] = []


def register(registry: list[Claim]) -> Callable[[Claim], Claim]:
    """Register a claim function, in definition order."""

    def register(fn: Claim) -> Claim:
        registry.append(fn)
        return fn

    return register


def paired_rows(
    view: View, a: str, b: str, verdict: Callable[[Mapping[str, Any]], str]
) -> tuple[list[str], list[str]]:
    """Row ``a`` − row ``b`` of Table 2, paired by seed, in every setting and metric:
    ``(evidence lines, verdicts on the linear probe)``; ``verdict`` decides each."""
    ev, vs = [], []
    la, lb = short_label(a), short_label(b)
    for s in view.settings:
        k = s["key"]
        for metric in METRICS:
            d = paired_diff(view.cell(a, k, metric), view.cell(b, k, metric))
            if d is None:
                continue
            v = verdict(d)
            if metric == "linear_probe":
                vs.append(v)
            ev.append(f"{view.label[k]}, {metric}: {la} − {lb} = {fmt_diff(d)} -> {v}")
    return ev, vs


def short_label(row: str) -> str:
    """A row's label without its parenthesis (``FedSC, stable``)."""
    return METHOD_LABELS.get(row, row).split(" (")[0]
