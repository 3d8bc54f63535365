"""The one figure of the mechanism tiers (:mod:`~.tiers`), drawn from their committed
``summary.json`` files only (:func:`draw_tiers`).

Three panels: (a) the low-drift tier's KNN accuracy on backbone features against the
round, mean over seeds with its 95 % t interval, the untrained network as the round-0
point and a dashed line; (b) the drift curve, FedSC − FedAvg+SC (paired by seed, 95 %
paired t interval) against the local steps a round at equal total gradient steps;
(c) the heterogeneity tier, each federated method − its untrained network and FedSC −
FedAvg+SC per split.  A tier not run yet leaves its panel with a note saying so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedspectral.experiments.reproduce.stats import paired_diff, seed_cell
from fedspectral.plots import save_figure

__all__ = ["draw_tiers", "paired", "per_seed"]

#: (method, variant) -> legend label and colour of panel (a)
_ROWS = (
    (("central_sc", "main"), "centralized SC, same steps, union batch", "0.35"),
    (("fedsc", "main"), "FedSC, α_j = q_j (exact gradient alignment)", "C0"),
    (("fedsc", "tracked+server_lr0.5"), "FedSC, server lr 0.5", "C9"),
    (("fedavg_sc", "main"), "FedAvg+SC", "C3"),
)
_METRIC_WORDS = {"knn_backbone": "KNN on h", "linear_probe": "linear probe"}


def per_seed(
    runs: Sequence[Mapping[str, Any]], setting: str, method: str, variant: str, metric: str
) -> dict[int, float]:
    """``{seed: final metric in %}`` of the noise-free runs of one row."""
    return {
        int(r["seed"]): 100.0 * float(r["final"][metric])
        for r in runs
        if r["setting"] == setting
        and r["method"] == method
        and r["variant"] == variant
        and r["dp"] is None
        and metric in r["final"]
    }


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float, int] | None:
    """Mean of ``a - b`` over the seeds both have and the half-width of its 95 % paired t
    interval (:func:`~.stats.paired_diff`; ``None`` with fewer than two common seeds)."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return None
    d = paired_diff(seed_cell([(s, a[s]) for s in common]), seed_cell([(s, b[s]) for s in common]))
    if d is None:
        return None
    return d["mean"], d["hi"] - d["mean"], d["n"]


def _seeds(ns: Sequence[int]) -> str:
    lo, hi = min(ns), max(ns)
    return f"{lo} seeds" if lo == hi else f"{lo}-{hi} seeds"


def _load(path: Path | None) -> list[dict[str, Any]] | None:
    if path is None or not path.is_file():
        return None
    return list(json.loads(path.read_text(encoding="utf-8"))["runs"])


def _not_run(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _panel_lowdrift(ax: Any, runs: list[dict[str, Any]] | None) -> None:
    import numpy as np
    from scipy import stats

    ax.set_title("(a) low drift: one local step a round, 10 clients x 1 class", fontsize=9)
    if not runs:
        _not_run(ax, "not run yet:\nfedspectral reproduce fedsc --tier lowdrift")
        return
    setting = "10x1-lowdrift"
    untrained = per_seed(runs, setting, "untrained", "main", "knn_backbone")
    for (method, variant), label, colour in _ROWS:
        curves = [
            r["curve"]
            for r in runs
            if (r["setting"], r["method"], r["variant"], r["dp"])
            == (setting, method, variant, None)
        ]
        if not curves:
            continue
        rounds = sorted({c["round"] for cur in curves for c in cur})
        xs, mean, half = [0], [], []
        base = list(untrained.values())
        mean.append(float(np.mean(base)) if base else math.nan)
        half.append(0.0)
        for t in rounds:
            vals = [100 * c["knn_backbone"] for cur in curves for c in cur if c["round"] == t]
            if len(vals) < 2:
                continue
            xs.append(t)
            mean.append(float(np.mean(vals)))
            half.append(
                float(stats.t.ppf(0.975, len(vals) - 1) * np.std(vals, ddof=1) / np.sqrt(len(vals)))
            )
        m, h = np.asarray(mean), np.asarray(half)
        ax.plot(xs, m, color=colour, marker="o", markersize=2.5, label=f"{label} (n={len(curves)})")
        ax.fill_between(xs, m - h, m + h, color=colour, alpha=0.18, linewidth=0)
    if untrained:
        ax.axhline(
            float(np.mean(list(untrained.values()))),
            color="k",
            ls="--",
            lw=1,
            label="untrained network (its initial weights)",
        )
    ax.set_xlabel("round (= local gradient steps); line: mean, band: its 95 % t interval")
    ax.set_ylabel("KNN accuracy on h, test split (%)")
    ax.legend(fontsize=7, loc="lower right")


def _panel_drift(ax: Any, runs: list[dict[str, Any]] | None) -> None:
    ax.set_title("(b) the drift curve: FedSC − FedAvg+SC at equal total steps", fontsize=9)
    if not runs:
        _not_run(ax, "not run yet:\nfedspectral reproduce fedsc --tier drift")
        return
    steps = {"10x1-lowdrift": 1, "10x1-steps2": 2, "10x1-protocol": 4, "10x1-steps5": 5}
    for k, (metric, marker) in enumerate((("knn_backbone", "o"), ("linear_probe", "s"))):
        xs, ys, hs, ns = [], [], [], []
        for setting, s in sorted(steps.items(), key=lambda kv: kv[1]):
            d = paired(
                per_seed(runs, setting, "fedsc", "main", metric),
                per_seed(runs, setting, "fedavg_sc", "main", metric),
            )
            if d is not None:
                xs.append(s + (k - 0.5) * 0.12)
                ys.append(d[0])
                hs.append(d[1])
                ns.append(d[2])
        if xs:
            ax.errorbar(
                xs,
                ys,
                yerr=hs,
                marker=marker,
                capsize=3,
                lw=1.2,
                label=f"{_METRIC_WORDS[metric]} ({_seeds(ns)})",
            )
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks([1, 2, 4, 5], ["1", "2", "4\n(protocol batch)", "5"])
    ax.set_xlabel("local gradient steps a round (400 steps in all)")
    ax.set_ylabel("FedSC − FedAvg+SC (points, 95 % CI)")
    ax.legend(fontsize=7)


def _panel_hetero(ax: Any, runs: list[dict[str, Any]] | None) -> None:
    ax.set_title("(c) label heterogeneity at the protocol's local epoch (KNN on h)", fontsize=9)
    if not runs:
        _not_run(ax, "not run yet:\nfedspectral reproduce fedsc --tier hetero")
        return
    groups = (
        ("dir0.1", "Dirichlet 0.1"),
        ("dir0.5", "Dirichlet 0.5"),
        ("5x2", "5 clients x 2 cls"),
    )
    comps = (
        (("fedsc", "main"), ("untrained", "main"), "FedSC − untrained", "C0", "o"),
        (("fedavg_sc", "main"), ("untrained", "main"), "FedAvg+SC − untrained", "C3", "s"),
        (("fedsc", "main"), ("fedavg_sc", "main"), "FedSC − FedAvg+SC", "C2", "D"),
    )
    for j, (a, b, label, colour, marker) in enumerate(comps):
        xs, ys, hs = [], [], []
        for i, (key, _) in enumerate(groups):
            d = paired(
                per_seed(runs, key, *a, "knn_backbone"), per_seed(runs, key, *b, "knn_backbone")
            )
            if d is not None:
                xs.append(i + (j - 1) * 0.2)
                ys.append(d[0])
                hs.append(d[1])
        if xs:
            ax.errorbar(xs, ys, yerr=hs, fmt=marker, color=colour, capsize=3, label=label)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(range(len(groups)), [g[1] for g in groups])
    ax.set_ylabel("difference (points, 95 % paired CI)")
    ax.legend(fontsize=7)


def draw_tiers(folder: Path, out: Path | None = None) -> Path:
    """Draw the figure from ``folder/<tier>/summary.json`` (``lowdrift``, ``drift``,
    ``hetero``) into ``out`` (default ``folder/tiers.png``); returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    out = folder / "tiers.png" if out is None else Path(out)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), constrained_layout=True)
    _panel_lowdrift(axes[0], _load(folder / "lowdrift" / "summary.json"))
    _panel_drift(axes[1], _load(folder / "drift" / "summary.json"))
    _panel_hetero(axes[2], _load(folder / "hetero" / "summary.json"))
    fig.suptitle(
        "FedSC's shared correlations where its theory says they help (Fashion-MNIST, CPU "
        "protocol, paired seeds)",
        fontsize=10,
    )
    try:
        return save_figure(fig, out, dpi=130)
    finally:
        plt.close(fig)
