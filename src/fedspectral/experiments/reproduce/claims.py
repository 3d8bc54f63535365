"""The seed's observations and the CPU protocol's checks, computed from a summary
(:func:`observations`, :func:`protocol_observations`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedspectral.experiments.reproduce.paper import CENTRAL, METHOD_LABELS, METRICS, UNTRAINED
from fedspectral.experiments.reproduce.plan import STABLE
from fedspectral.experiments.reproduce.stats import _num, _paired, t_interval

#: the rule by which a difference "holds": the 95 % paired t interval over seeds excludes 0
RULE = (
    "a difference is established when its 95 % paired t interval over seeds (mean ± "
    "t(0.975, n − 1) · SE of the per-seed differences, runs paired by seed; a two-sided "
    "test at the 5 % level) lies above 0, and refuted when it lies below 0; otherwise "
    "inconclusive; one seed is always inconclusive"
)
BYOL_FAMILY = ("fedavg_byol", "fedu", "fedema")
FEDERATED_EXCLUDE = (CENTRAL,)


def _verdict_above(d: Mapping[str, Any] | None, level: float = 0.0) -> str:
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


def _verdict_positive(d: Mapping[str, Any] | None) -> str:
    return _verdict_above(d, 0.0)


def _fmt_diff(d: Mapping[str, Any] | None) -> str:
    """``+2.02 [95 % CI +0.50, +3.54] (sd 0.61, n=3)``: the mean difference, its paired t
    interval, the standard deviation of the per-seed differences and the seeds."""
    if d is None:
        return "n/a"
    if d["n"] < 2 or not math.isfinite(d["se"]):
        return f"{d['mean']:+.2f} (n={d['n']})"
    sd = f"sd {d['std']:.2f}, " if math.isfinite(d.get("std", math.nan)) else "unpaired, "
    return f"{d['mean']:+.2f} [95 % CI {d['lo']:+.2f}, {d['hi']:+.2f}] ({sd}n={d['n']})"


def _combine(verdicts: Sequence[str]) -> str:
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


class _View:
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
Claim = Callable[[_View], dict[str, Any]]
#: the seed's claims, in the order of the report (:func:`observations`)
SEED_CLAIMS: list[Claim] = []
#: the CPU protocol's checks and the seed's curve claim, in the order of the report
#: (:func:`protocol_observations`)
PROTOCOL_CLAIMS: list[Claim] = []


def _claim(registry: list[Claim]) -> Callable[[Claim], Claim]:
    """Register a claim function, in definition order."""

    def register(fn: Claim) -> Claim:
        registry.append(fn)
        return fn

    return register


def observations(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The seed's claims checked on ``summary`` (:func:`summarize`); each entry has
    ``id``, ``claim`` (the seed's words, shortened), ``rule``, ``evidence`` (per
    setting) and ``verdict`` (holds / does not hold / inconclusive / not measured).
    One function per claim (:data:`SEED_CLAIMS`), then :func:`protocol_observations`."""
    view = _View(summary)
    obs = [claim(view) for claim in SEED_CLAIMS]
    obs.extend(protocol_observations(summary))
    return obs


@_claim(SEED_CLAIMS)
def _claim_sota(view: _View) -> dict[str, Any]:
    """1. FedSC better than or comparable to every other federated method."""
    cell, label = view.cell, view.label
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        others = [(cell(m, k)["mean"], m) for m in view.fed if m != "fedsc" and cell(m, k)]
        if "fedsc" not in view.methods or not cell("fedsc", k) or not others:
            continue
        best = max(others)[1]
        d = _paired(cell("fedsc", k), cell(best, k))
        if d is None:
            v = "not measured"
        elif d["n"] < 2 or not math.isfinite(d["se"]):
            v = "inconclusive"
        else:
            v = "does not hold" if d["hi"] < 0 else "holds"
        vs.append(v)
        ev.append(
            f"{label[k]}: FedSC − best other ({METHOD_LABELS.get(best, best)}) = "
            f"{_fmt_diff(d)} -> {v}"
        )
    return {
        "id": "sota",
        "claim": "FedSC performs better than or comparably to the other "
        "federated methods (seed Sec. 6, observation 1)",
        "rule": "holds in a setting unless FedSC is below the best other method with "
        "the 95 % paired t interval below 0",
        "evidence": ev,
        "verdict": _combine(vs),
    }


def _paired_rows(
    view: _View, a: str, b: str, verdict: Callable[[Mapping[str, Any]], str]
) -> tuple[list[str], list[str]]:
    """Row ``a`` − row ``b`` of Table 2, paired by seed, in every setting and metric:
    ``(evidence lines, verdicts on the linear probe)``; ``verdict`` decides each."""
    ev, vs = [], []
    la, lb = _short(a), _short(b)
    for s in view.settings:
        k = s["key"]
        for metric in METRICS:
            d = _paired(view.cell(a, k, metric), view.cell(b, k, metric))
            if d is None:
                continue
            v = verdict(d)
            if metric == "linear_probe":
                vs.append(v)
            ev.append(f"{view.label[k]}, {metric}: {la} − {lb} = {_fmt_diff(d)} -> {v}")
    return ev, vs


def _short(row: str) -> str:
    """A row's label without its parenthesis (``FedSC, stable``)."""
    return METHOD_LABELS.get(row, row).split(" (")[0]


@_claim(SEED_CLAIMS)
def _claim_fedsc_vs_fedavg_sc(view: _View) -> dict[str, Any]:
    """2. FedSC vs FedAvg+SC, every metric."""
    ev, vs = _paired_rows(view, "fedsc", "fedavg_sc", _verdict_positive)
    return {
        "id": "fedsc_vs_fedavg_sc",
        "claim": "sharing correlation matrices (FedSC) beats plain FedAvg+SC (seed Table 2)",
        "rule": RULE + "; verdict on the linear probe, KNN shown as evidence",
        "evidence": ev,
        "verdict": _combine(vs),
    }


@_claim(SEED_CLAIMS)
def _claim_byol_family(view: _View) -> dict[str, Any]:
    """3. The BYOL family trails on the split with smaller local datasets (the CIFAR
    analogue)."""
    cell, label = view.cell, view.label
    ev, vs = [], []
    gaps: dict[str, float] = {}
    for s in view.settings:
        k = s["key"]
        fam = [cell(m, k)["mean"] for m in BYOL_FAMILY if m in view.methods and cell(m, k)]
        if s["full"] and fam and cell("fedsc", k):
            gaps[k] = cell("fedsc", k)["mean"] - sum(fam) / len(fam)
            ev.append(f"{label[k]}: FedSC − mean(FedAvg+BYOL, FedU, FedEMA) = {gaps[k]:+.2f}")
    sizes = {s["key"]: s["num_clients"] for s in view.settings}
    if len(gaps) >= 2 and len({sizes[k] for k in gaps}) >= 2:
        many = max(gaps, key=lambda k: sizes[k])
        few = min(gaps, key=lambda k: sizes[k])
        v = "holds" if gaps[many] > gaps[few] and gaps[many] > 0 else "does not hold"
        vs.append(v)
        ev.append(
            f"gap with more, smaller clients ({label[many]}) {gaps[many]:+.2f} vs "
            f"fewer, larger clients ({label[few]}) {gaps[few]:+.2f} -> {v}"
        )
    return {
        "id": "byol_family",
        "claim": "FedAvg+BYOL, FedU and FedEMA do well with large "
        "local datasets (SVHN) but trail on CIFAR with smaller ones (seed observation "
        "2); here: their gap to FedSC is larger on the split with more, smaller "
        "clients",
        "rule": "compare the mean gaps at full participation",
        "evidence": ev,
        "verdict": _combine(vs),
    }


def _median(values: Sequence[float]) -> float:
    """The median of sorted ``values`` (the mean of the middle two when even)."""
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


@_claim(SEED_CLAIMS)
def _claim_partial(view: _View) -> dict[str, Any]:
    """4. Partial participation hurts FedSC and FedCA less."""
    cell = view.cell
    ev, vs = [], []
    for s in view.settings:
        if not s["full"]:
            continue
        for p in view.settings:
            if (
                p["full"]
                or p["prefix"] != s["prefix"]
                or p["num_clients"] != s["num_clients"]
                or p["classes_per_client"] != s["classes_per_client"]
            ):
                continue
            deg = {
                m: cell(m, s["key"])["mean"] - cell(m, p["key"])["mean"]
                for m in view.fed
                if cell(m, s["key"]) and cell(m, p["key"])
            }
            if "fedsc" not in deg or len(deg) < 3:
                continue
            others = sorted(v for m, v in deg.items() if m not in ("fedsc", "fedca"))
            if not others:
                continue
            med = _median(others)
            mine = [deg[m] for m in ("fedsc", "fedca") if m in deg]
            v = "holds" if all(x <= med for x in mine) else "does not hold"
            vs.append(v)
            ev.append(
                f"{s['label']} -> {p['participation']}: drop "
                + ", ".join(f"{METHOD_LABELS.get(m, m)} {x:+.2f}" for m, x in deg.items())
                + f"; median of the others {med:+.2f} -> {v}"
            )
    return {
        "id": "partial",
        "claim": "FedSC and FedCA lose less than the others when "
        "switching to partial participation (seed observation 3)",
        "rule": "each of FedSC's and FedCA's drop (full − partial, means) is at most "
        "the median drop of the other federated methods",
        "evidence": ev,
        "verdict": _combine(vs),
    }


def _pick_noise_free(
    rows: Sequence[Mapping[str, Any]], method: str, gn: bool
) -> Mapping[str, Any] | None:
    """The DP table's noise-free row of ``method`` (GroupNorm comparator or not) that
    holds a value."""
    return next(
        (
            r
            for r in rows
            if r["method"] == method
            and not r.get("late")
            and bool(r.get("gn")) == gn
            and (r["epsilon"] is None or not math.isfinite(_num(r["epsilon"])))
            and any(c and c["linear_probe"].get("n") for c in r["cells"].values())
        ),
        None,
    )


def _verdict_modest(cost: Mapping[str, Any] | None) -> str:
    """A decline is modest when its 95 % interval lies at or below 2.5 points."""
    if cost is None:
        return "not measured"
    ok = cost["n"] > 1 and math.isfinite(cost["se"])
    return (
        "holds"
        if ok and cost["hi"] <= 2.5
        else "does not hold"
        if ok and cost["lo"] > 2.5
        else "inconclusive"
    )


def _dp_cost_table(
    table: Mapping[str, Any],
    label: Mapping[str, str],
    ev: list[str],
    vs_cost: list[str],
    vs_margin: list[str],
) -> None:
    """The evidence and verdicts of one DP table (one δ), appended to the lists."""
    rows = table["rows"]
    # like for like: the noise-free runs with the DP runs' normalisation when they exist
    inf_row = _pick_noise_free(rows, "fedsc", True) or _pick_noise_free(rows, "fedsc", False)
    avg_row = _pick_noise_free(rows, "fedavg_sc", True) or _pick_noise_free(
        rows, "fedavg_sc", False
    )
    inf_name = "FedSC(inf, GroupNorm)" if inf_row and inf_row.get("gn") else "FedSC(inf)"
    avg_name = "FedAvg+SC(GroupNorm)" if avg_row and avg_row.get("gn") else "FedAvg+SC"
    late_row = next((r for r in rows if r.get("late")), None)
    for r in rows:
        if (
            r["method"] != "fedsc"
            or r.get("late")
            or r.get("gn")
            or not math.isfinite(_num(r["epsilon"]))
        ):
            continue
        for k, c in r["cells"].items():
            if c is None or not c["linear_probe"].get("n"):
                continue
            here = c["linear_probe"]
            cost = _paired(inf_row["cells"][k]["linear_probe"], here) if inf_row else None
            marg = _paired(here, avg_row["cells"][k]["linear_probe"]) if avg_row else None
            vc = _verdict_modest(cost)
            if cost is not None:
                vs_cost.append(vc)
            vm = _verdict_positive(marg)
            vs_margin.append(vm)
            noise = (
                _paired(late_row["cells"][k]["linear_probe"], here)
                if late_row and late_row["cells"].get(k)
                else None
            )
            ev.append(
                f"delta={table['delta']:g}, eps={_num(r['epsilon']):g}, {label[k]}: "
                f"cost {inf_name} − FedSC(eps) = {_fmt_diff(cost)} -> {vc}; "
                f"of which the noise alone, FedSC(no noise, same late sharing) − "
                f"FedSC(eps) = {_fmt_diff(noise)}; "
                f"FedSC(eps) − {avg_name} = {_fmt_diff(marg)} -> {vm}"
            )


@_claim(SEED_CLAIMS)
def _claim_dp_cost(view: _View) -> dict[str, Any]:
    """5. DP: a modest decline, still above FedAvg+SC."""
    ev: list[str] = []
    vs_cost: list[str] = []
    vs_margin: list[str] = []
    for table in view.summary["dp"]:
        _dp_cost_table(table, view.label, ev, vs_cost, vs_margin)
    return {
        "id": "dp_cost",
        "claim": "with DP (eps = 3 ... 8) FedSC declines only "
        "modestly (the seed's largest decline is 2.4 points) and stays above "
        "FedAvg+SC (seed Tables 3-5)",
        "rule": "modest: the decline's 95 % paired t interval lies at or below 2.5 "
        "points; above FedAvg+SC: " + RULE + "; both against the noise-free runs with the DP runs' "
        "normalisation (GroupNorm) where the Table 2 runs use batch "
        "statistics",
        "evidence": ev,
        "verdict": f"modest decline: {_combine(vs_cost)}; above FedAvg+SC: {_combine(vs_margin)}",
    }


@_claim(SEED_CLAIMS)
def _claim_convergence(view: _View) -> dict[str, Any]:
    """6. Convergence (seed Figure 2)."""
    ev, vs = [], []
    curves = view.curves
    for s in view.settings:
        k = s["key"]
        mc = {
            m: _mean_curve(curves.get(f"{m}|{k}|", []), "knn_projector")
            for m in ("fedsc", "fedavg_sc")
        }
        if any(c is None for c in mc.values()):
            continue
        parts, drops, finals = [], {}, {}
        for m, (_, ys) in mc.items():
            drops[m] = max(ys) - ys[-1]
            finals[m] = ys[-1]
            parts.append(f"{METHOD_LABELS[m]} final {ys[-1]:.1f}, peak {max(ys):.1f}")
        n_runs = min(len(curves.get(f"{m}|{k}|", [])) for m in ("fedsc", "fedavg_sc"))
        if n_runs < 2 or len(mc["fedsc"][0]) < 3:
            v = "inconclusive"
        else:
            v = (
                "holds"
                if drops["fedsc"] <= 1.0 and finals["fedsc"] > finals["fedavg_sc"]
                else "does not hold"
            )
        vs.append(v)
        ev.append(f"{view.label[k]} (KNN on z, mean over seeds): " + "; ".join(parts) + f" -> {v}")
    return {
        "id": "convergence",
        "claim": "FedSC keeps improving KNN accuracy over the rounds "
        "while FedAvg+SC hits an error floor or overfits (seed Figure 2)",
        "rule": "FedSC's mean KNN (projector) curve ends within 1 point of its peak and "
        "above FedAvg+SC's final value (at least 2 seeds and 3 evaluations)",
        "evidence": ev,
        "verdict": _combine(vs),
    }


@_claim(SEED_CLAIMS)
def _claim_central_upper_bound(view: _View) -> dict[str, Any]:
    """7. Centralized SC is an upper bound of the federated methods."""
    cell = view.cell
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        c = cell(CENTRAL, k)
        others = [(cell(m, k)["mean"], m) for m in view.fed if cell(m, k)]
        if c is None or not others:
            continue
        best = max(others)[1]
        d = _paired(c, cell(best, k))
        v = _verdict_positive(d)
        vs.append(v)
        ev.append(
            f"{view.label[k]}: centralized SC − best federated "
            f"({METHOD_LABELS.get(best, best)}) = {_fmt_diff(d)} -> {v}"
        )
    return {
        "id": "central_upper_bound",
        "claim": "centralized SC is an upper bound of the federated methods (seed Table 2)",
        "rule": RULE,
        "evidence": ev,
        "verdict": _combine(vs),
    }


#: criterion (a) of the CPU protocol: centralized SC this many points above the untrained
#: network, on KNN backbone and on the linear probe
LEARN_MARGIN = 5.0
#: the gain FedSC - FedAvg+SC aimed for on the linear probe, in points (the issue's
#: target; the seed's Table 2 gain at CIFAR-10 10/10 is +2.2)
TARGET_GAIN = 3.0
#: a curve "declines" over the second half when its final value is this many points below
#: its value at mid-training (mean over seeds); it "improves" when this many points above
CURVE_TOL = 1.0


def _second_half_change(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    """Final minus mid-training KNN (points), per seed, from the runs' curves."""
    import numpy as np

    deltas = []
    for r in runs:
        rounds, ys = r.get("rounds") or [], r.get(key) or []
        if len(rounds) < 3:
            continue
        mid = rounds[-1] / 2.0
        j = int(np.argmin([abs(x - mid) for x in rounds]))
        deltas.append(ys[-1] - ys[j])
    if not deltas:
        return None
    d = np.asarray(deltas)
    n = len(d)
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    se = sd / math.sqrt(n) if n > 1 else math.inf
    lo, hi = t_interval(float(d.mean()), se, n - 1)
    return {"mean": float(d.mean()), "std": sd, "n": n, "se": se, "lo": lo, "hi": hi}


def protocol_observations(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CPU protocol's own checks and the seed's curve claim (Figure 2): whether
    training learns (centralized SC vs the untrained network), whether the federated
    methods beat the untrained network, the +2-point target, and the second-half shape
    of the KNN curves (one function each, :data:`PROTOCOL_CLAIMS`)."""
    view = _View(summary)
    return [claim(view) for claim in PROTOCOL_CLAIMS]


@_claim(PROTOCOL_CLAIMS)
def _claim_learns(view: _View) -> dict[str, Any]:
    """Centralized SC at least :data:`LEARN_MARGIN` points above the untrained network."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        for metric in ("knn_backbone", "linear_probe"):
            d = _paired(view.cell(CENTRAL, k, metric), view.cell(UNTRAINED, k, metric))
            if d is None:
                continue
            v = "holds" if d["mean"] >= LEARN_MARGIN else "does not hold"
            vs.append(v)
            ev.append(
                f"{view.label[k]}, {metric}: centralized SC − untrained = {_fmt_diff(d)} -> {v}"
            )
    return {
        "id": "learns",
        "claim": f"the protocol learns: centralized SC is at least "
        f"{LEARN_MARGIN:g} points above the untrained network of the same "
        f"architecture (KNN backbone and linear probe, mean over seeds)",
        "rule": f"mean paired difference >= {LEARN_MARGIN:g} points",
        "evidence": ev,
        "verdict": _combine(vs),
    }


@_claim(PROTOCOL_CLAIMS)
def _claim_above_untrained(view: _View) -> dict[str, Any]:
    """FedSC and FedAvg+SC above the untrained network."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        for m in (*view.fedsc_rows, "fedavg_sc"):
            for metric in ("knn_backbone", "linear_probe"):
                d = _paired(view.cell(m, k, metric), view.cell(UNTRAINED, k, metric))
                if d is None:
                    continue
                v = _verdict_positive(d)
                vs.append(v)
                ev.append(
                    f"{view.label[k]}, {metric}: {METHOD_LABELS[m]} − untrained = "
                    f"{_fmt_diff(d)} -> {v}"
                )
    return {
        "id": "above_untrained",
        "claim": "federated training beats the untrained "
        "network (FedSC and FedAvg+SC, KNN backbone and linear probe)",
        "rule": RULE,
        "evidence": ev,
        "verdict": _combine(vs),
    }


def _verdict_target(d: Mapping[str, Any]) -> str:
    """At least :data:`TARGET_GAIN` points on average with the 95 % interval above 0, or
    the interval entirely below :data:`TARGET_GAIN`."""
    if d["n"] < 2 or not math.isfinite(d["se"]):
        return "inconclusive"
    if d["mean"] >= TARGET_GAIN and d["lo"] > 0:
        return "holds"
    if d["hi"] < TARGET_GAIN:
        return "does not hold"
    return "inconclusive"


@_claim(PROTOCOL_CLAIMS)
def _claim_target_gain(view: _View) -> dict[str, Any]:
    """FedSC (and its stable variant, when run) at least :data:`TARGET_GAIN` points above
    FedAvg+SC."""
    ev, vs = [], []
    for row in view.fedsc_rows:
        e, v = _paired_rows(view, row, "fedavg_sc", _verdict_target)
        ev += e
        vs += v
    return {
        "id": "target_gain",
        "claim": f"FedSC >= FedAvg+SC + {TARGET_GAIN:g} points "
        "(the target of this reproduction; the seed's Table 2 gain at CIFAR-10 10/10 "
        "is +2.2)",
        "rule": f"holds when the mean paired difference is >= {TARGET_GAIN:g} and its 95 % "
        f"paired t interval lies above 0; does not hold when the interval lies "
        f"below {TARGET_GAIN:g}; verdict on the linear probe",
        "evidence": ev,
        "verdict": _combine(vs),
    }


@_claim(PROTOCOL_CLAIMS)
def _claim_stable(view: _View) -> dict[str, Any]:
    """FedSC with its stability options against FedAvg+SC and against the seed's FedSC."""
    if STABLE not in view.fedsc_rows:
        return {
            "id": "stable",
            "claim": "FedSC with its stability options beats FedAvg+SC and the seed's FedSC",
            "rule": RULE,
            "evidence": [],
            "verdict": "not measured",
        }
    ev, vs = _paired_rows(view, STABLE, "fedavg_sc", _verdict_positive)
    ev2, vs2 = _paired_rows(view, STABLE, "fedsc", _verdict_positive)
    return {
        "id": "stable",
        "claim": "FedSC with its stability options (tracked cross term, server lr 0.5) "
        "beats FedAvg+SC; evidence also against the seed's FedSC (frozen cross term)",
        "rule": RULE + "; verdict on the linear probe against FedAvg+SC (against the "
        f"seed's FedSC: {_combine(vs2)})",
        "evidence": ev + ev2,
        "verdict": _combine(vs),
    }


#: the share of the gap from FedAvg+SC to centralized SC FedSC aims to close on the linear
#: probe (the seed closes 18 % of it on CIFAR-10 10/10)
TARGET_GAP_SHARE = 0.25
#: the margin over the untrained network FedSC aims for on the linear probe, in points
TARGET_OVER_UNTRAINED = 2.0


@_claim(PROTOCOL_CLAIMS)
def _claim_gap_share(view: _View) -> dict[str, Any]:
    """FedSC closes at least :data:`TARGET_GAP_SHARE` of the gap FedAvg+SC -> centralized
    SC and ends :data:`TARGET_OVER_UNTRAINED` points above the untrained network."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        avg, cen, unt = (view.cell(m, k) for m in ("fedavg_sc", CENTRAL, UNTRAINED))
        for row in view.fedsc_rows:
            c = view.cell(row, k)
            if c is None:
                continue
            if avg is not None and cen is not None and cen["mean"] > avg["mean"]:
                share = (c["mean"] - avg["mean"]) / (cen["mean"] - avg["mean"])
                v = "holds" if share >= TARGET_GAP_SHARE else "does not hold"
                vs.append(v)
                ev.append(f"{view.label[k]}: {_short(row)} closes {100 * share:.0f} % -> {v}")
            if unt is not None:
                d = _paired(c, unt)
                v = _verdict_above(d, TARGET_OVER_UNTRAINED)
                vs.append(v)
                ev.append(
                    f"{view.label[k]}: {_short(row)} − untrained = {_fmt_diff(d)} "
                    f"(target +{TARGET_OVER_UNTRAINED:g}) -> {v}"
                )
    return {
        "id": "gap_share",
        "claim": f"FedSC closes >= {100 * TARGET_GAP_SHARE:.0f} % of the gap from FedAvg+SC "
        f"to centralized SC (the seed: 18 % on CIFAR-10) and ends >= "
        f"{TARGET_OVER_UNTRAINED:g} points above the untrained network (linear probe)",
        "rule": "share of the gap from the means over seeds; the margin over the untrained "
        f"network holds when its 95 % paired t interval lies above +{TARGET_OVER_UNTRAINED:g}",
        "evidence": ev,
        "verdict": _combine(vs),
    }


@_claim(PROTOCOL_CLAIMS)
def _claim_curve_shape(view: _View) -> dict[str, Any]:
    """The second half of the KNN curves: FedSC does not decline, FedAvg+SC does not
    improve (seed Figure 2)."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        for key in ("knn_backbone", "knn_projector"):
            dsc = _second_half_change(view.curves.get(f"fedsc|{k}|", []), key)
            dav = _second_half_change(view.curves.get(f"fedavg_sc|{k}|", []), key)
            if dsc is None or dav is None:
                continue
            sc_ok = dsc["mean"] >= -CURVE_TOL
            av_floor = dav["mean"] <= CURVE_TOL
            v = "holds" if (sc_ok and av_floor) else "does not hold"
            vs.append(v)
            ev.append(
                f"{view.label[k]}, {key}: final − mid-training KNN, FedSC "
                f"{_fmt_diff(dsc)}, FedAvg+SC {_fmt_diff(dav)} -> {v}"
            )
    return {
        "id": "curve_shape",
        "claim": "FedSC's KNN curve does not decline over the "
        "second half of training, while FedAvg+SC shows a floor or a decline "
        "(seed Figure 2)",
        "rule": f"FedSC's final − mid-training KNN >= −{CURVE_TOL:g} point and "
        f"FedAvg+SC's <= +{CURVE_TOL:g} point (means over seeds)",
        "evidence": ev,
        "verdict": _combine(vs),
    }


def _mean_curve(
    runs: Sequence[Mapping[str, Any]], key: str
) -> tuple[list[int], list[float]] | None:
    """Mean over seeds at the rounds every seed evaluated."""
    import numpy as np

    runs = [r for r in runs if r.get("rounds")]
    if not runs:
        return None
    common = sorted(set.intersection(*[set(r["rounds"]) for r in runs]))
    if not common:
        return None
    ys = np.asarray(
        [[dict(zip(r["rounds"], r[key], strict=True))[t] for t in common] for r in runs]
    )
    return common, [float(v) for v in ys.mean(axis=0)]
