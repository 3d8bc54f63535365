"""The CPU protocol's own checks and the paper's curve claim (Figure 2), computed from a
summary (:func:`protocol_observations`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from fedspectral.experiments.reproduce.paper import CENTRAL, UNTRAINED
from fedspectral.experiments.reproduce.plan import STABLE
from fedspectral.experiments.reproduce.stats import paired_diff, t_interval
from fedspectral.experiments.reproduce.verdicts import (
    PROTOCOL_CLAIMS,
    RULE,
    View,
    combine,
    fmt_diff,
    paired_rows,
    register,
    short_label,
    verdict_above,
    verdict_positive,
)

#: criterion (a) of the CPU protocol: centralized SC this many points above the untrained
#: network, on KNN backbone and on the linear probe
LEARN_MARGIN = 5.0
#: the gain FedSC - FedAvg+SC aimed for on the linear probe, in points (the issue's
#: target; the paper's Table 2 gain at CIFAR-10 10/10 is +2.2)
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
    """The CPU protocol's own checks and the paper's curve claim (Figure 2): whether
    training learns (centralized SC vs the untrained network), whether the federated
    methods beat the untrained network, the +2-point target, and the second-half shape
    of the KNN curves (one function each, :data:`PROTOCOL_CLAIMS`)."""
    view = View(summary)
    return [claim(view) for claim in PROTOCOL_CLAIMS]


@register(PROTOCOL_CLAIMS)
def _claim_learns(view: View) -> dict[str, Any]:
    """Centralized SC at least :data:`LEARN_MARGIN` points above the untrained network."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        for metric in ("knn_backbone", "linear_probe"):
            d = paired_diff(view.cell(CENTRAL, k, metric), view.cell(UNTRAINED, k, metric))
            if d is None:
                continue
            v = "holds" if d["mean"] >= LEARN_MARGIN else "does not hold"
            vs.append(v)
            ev.append(
                f"{view.label[k]}, {metric}: centralized SC − untrained = {fmt_diff(d)} -> {v}"
            )
    return {
        "id": "learns",
        "claim": f"the protocol learns: centralized SC is at least "
        f"{LEARN_MARGIN:g} points above the untrained network of the same "
        f"architecture (KNN backbone and linear probe, mean over seeds)",
        "rule": f"mean paired difference >= {LEARN_MARGIN:g} points",
        "evidence": ev,
        "verdict": combine(vs),
    }


@register(PROTOCOL_CLAIMS)
def _claim_above_untrained(view: View) -> dict[str, Any]:
    """FedSC and FedAvg+SC above the untrained network."""
    ev, vs = [], []
    for s in view.settings:
        k = s["key"]
        for m in (*view.fedsc_rows, "fedavg_sc"):
            for metric in ("knn_backbone", "linear_probe"):
                d = paired_diff(view.cell(m, k, metric), view.cell(UNTRAINED, k, metric))
                if d is None:
                    continue
                v = verdict_positive(d)
                vs.append(v)
                ev.append(
                    f"{view.label[k]}, {metric}: {short_label(m)} − untrained = "
                    f"{fmt_diff(d)} -> {v}"
                )
    return {
        "id": "above_untrained",
        "claim": "federated training beats the untrained "
        "network (FedSC and FedAvg+SC, KNN backbone and linear probe)",
        "rule": RULE,
        "evidence": ev,
        "verdict": combine(vs),
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


@register(PROTOCOL_CLAIMS)
def _claim_target_gain(view: View) -> dict[str, Any]:
    """FedSC (and its stable variant, when run) at least :data:`TARGET_GAIN` points above
    FedAvg+SC."""
    ev, vs = [], []
    for row in view.fedsc_rows:
        e, v = paired_rows(view, row, "fedavg_sc", _verdict_target)
        ev += e
        vs += v
    return {
        "id": "target_gain",
        "claim": f"FedSC >= FedAvg+SC + {TARGET_GAIN:g} points "
        "(the target of this reproduction; the paper's Table 2 gain at CIFAR-10 10/10 "
        "is +2.2)",
        "rule": f"holds when the mean paired difference is >= {TARGET_GAIN:g} and its 95 % "
        f"paired t interval lies above 0; does not hold when the interval lies "
        f"below {TARGET_GAIN:g}; verdict on the linear probe",
        "evidence": ev,
        "verdict": combine(vs),
    }


@register(PROTOCOL_CLAIMS)
def _claim_stable(view: View) -> dict[str, Any]:
    """FedSC with its stability options against FedAvg+SC and against the paper's FedSC."""
    if STABLE not in view.fedsc_rows:
        return {
            "id": "stable",
            "claim": "FedSC with its stability options beats FedAvg+SC and the paper's FedSC",
            "rule": RULE,
            "evidence": [],
            "verdict": "not measured",
        }
    ev, vs = paired_rows(view, STABLE, "fedavg_sc", verdict_positive)
    ev2, vs2 = paired_rows(view, STABLE, "fedsc", verdict_positive)
    return {
        "id": "stable",
        "claim": "FedSC with its stability options (tracked cross term, server lr 0.5) "
        "beats FedAvg+SC; evidence also against the paper's FedSC (frozen cross term)",
        "rule": RULE + "; verdict on the linear probe against FedAvg+SC (against the "
        f"paper's FedSC: {combine(vs2)})",
        "evidence": ev + ev2,
        "verdict": combine(vs),
    }


#: the share of the gap from FedAvg+SC to centralized SC FedSC aims to close on the linear
#: probe (the paper closes 18 % of it on CIFAR-10 10/10)
TARGET_GAP_SHARE = 0.25
#: the margin over the untrained network FedSC aims for on the linear probe, in points
TARGET_OVER_UNTRAINED = 2.0


@register(PROTOCOL_CLAIMS)
def _claim_gap_share(view: View) -> dict[str, Any]:
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
                ev.append(f"{view.label[k]}: {short_label(row)} closes {100 * share:.0f} % -> {v}")
            if unt is not None:
                d = paired_diff(c, unt)
                v = verdict_above(d, TARGET_OVER_UNTRAINED)
                vs.append(v)
                ev.append(
                    f"{view.label[k]}: {short_label(row)} − untrained = {fmt_diff(d)} "
                    f"(target +{TARGET_OVER_UNTRAINED:g}) -> {v}"
                )
    return {
        "id": "gap_share",
        "claim": f"FedSC closes >= {100 * TARGET_GAP_SHARE:.0f} % of the gap from FedAvg+SC "
        f"to centralized SC (the paper: 18 % on CIFAR-10) and ends >= "
        f"{TARGET_OVER_UNTRAINED:g} points above the untrained network (linear probe)",
        "rule": "share of the gap from the means over seeds; the margin over the untrained "
        f"network holds when its 95 % paired t interval lies above +{TARGET_OVER_UNTRAINED:g}",
        "evidence": ev,
        "verdict": combine(vs),
    }


@register(PROTOCOL_CLAIMS)
def _claim_curve_shape(view: View) -> dict[str, Any]:
    """The second half of the KNN curves: FedSC does not decline, FedAvg+SC does not
    improve (paper Figure 2)."""
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
                f"{fmt_diff(dsc)}, FedAvg+SC {fmt_diff(dav)} -> {v}"
            )
    return {
        "id": "curve_shape",
        "claim": "FedSC's KNN curve does not decline over the "
        "second half of training, while FedAvg+SC shows a floor or a decline "
        "(paper Figure 2)",
        "rule": f"FedSC's final − mid-training KNN >= −{CURVE_TOL:g} point and "
        f"FedAvg+SC's <= +{CURVE_TOL:g} point (means over seeds)",
        "evidence": ev,
        "verdict": combine(vs),
    }
