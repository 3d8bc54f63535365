"""The reproduction's convergence figure (``convergence.png``), drawn from the report's
tables only (``tables.json``, or the same tables rebuilt from ``summary.json`` by
``scripts/redraw_convergence.py``).

One column per setting of the scale, one row per quantity:

1. KNN accuracy on backbone features h against the round, mean over seeds with a band of
   ± 1 sample standard deviation over the seeds (n in the legend), from round 0 (the
   untrained network of each seed; dashed: its mean);
2. the same on projector outputs z;
3. the final linear probe per method (the metric the verdicts rest on): each seed's value
   and the mean ± 1 std over the seeds, only the methods run in that setting (centralized
   SC trains on the pooled data: the full-participation columns only, said in the title);
4. one row per metric (linear probe, KNN on h, KNN on z): the paired differences the
   report decides with (FedSC − FedAvg+SC, the stable FedSC against both; on the probe
   also FedSC − the untrained network), each with its 95 % paired t interval over seeds
   (:func:`~.stats.paired_diff`); a row per metric, so that the wide KNN intervals do
   not squash the probe's.

Rows 1-3 share their y-axis across the settings, each difference row its x-axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from fedspectral.experiments.reproduce.paper import CENTRAL, METHOD_LABELS, UNTRAINED
from fedspectral.experiments.reproduce.plan import STABLE, Setting
from fedspectral.experiments.reproduce.stats import paired_diff
from fedspectral.plots import save_figure

#: the methods the figure draws, with their colours
FIG_METHODS: tuple[tuple[str, str], ...] = (
    ("fedsc", "C3"),
    (STABLE, "C1"),
    ("fedavg_sc", "C0"),
    (CENTRAL, "C2"),
)
#: the paired differences of row 4: (a, b) for a − b
FIG_DIFFS: tuple[tuple[str, str], ...] = (
    ("fedsc", "fedavg_sc"),
    (STABLE, "fedavg_sc"),
    (STABLE, "fedsc"),
    ("fedsc", UNTRAINED),
)
#: the metrics of row 4: key, words, marker, colour
FIG_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("linear_probe", "linear probe", "o", "k"),
    ("knn_backbone", "KNN on h", "s", "C4"),
    ("knn_projector", "KNN on z", "^", "C5"),
)
#: names of the data sets behind a setting's config prefix
DATASETS = {
    "fmnist": "Fashion-MNIST",
    "digits": "scikit-learn digits (8x8)",
    "svhn": "SVHN",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
}
_SHORT = {
    "fedsc": "FedSC",
    STABLE: "FedSC stable",
    "fedavg_sc": "FedAvg+SC",
    UNTRAINED: "untrained",
}
_TICK = {
    UNTRAINED: "un-\ntrained",
    "fedsc": "FedSC",
    STABLE: "FedSC\nstable",
    "fedavg_sc": "FedAvg\n+SC",
    CENTRAL: "central\nSC",
}


def setting_words(s: Setting) -> str:
    """A setting in words: ``10 clients × 1 class, 2 of 10 per round``."""
    cls = "class" if s.classes_per_client == 1 else "classes"
    k = s.num_clients if s.full else s.clients_per_round
    every = f"all {k}" if s.full else f"{k} of {s.num_clients}"
    return f"{s.num_clients} clients × {s.classes_per_client} {cls}, {every} per round"


def _cell(summary: Mapping[str, Any], metric: str, method: str, key: str) -> Any:
    c = summary.get("table2", {}).get(metric, {}).get(method, {}).get(key)
    return c if c and c.get("n") else None


def _untrained_by_seed(summary: Mapping[str, Any], key: str, setting: str) -> dict[int, float]:
    """The untrained network's KNN ``key`` (%) per seed in ``setting`` (table 2's row)."""
    cell = summary.get("table2", {}).get(key, {}).get(UNTRAINED, {}).get(setting) or {}
    return dict(zip(cell.get("seeds", []), cell.get("values", []), strict=True))


def _mean_curve_from_zero(
    runs: Sequence[Mapping[str, Any]], key: str, init: Mapping[int, float]
) -> tuple[list[int], Any]:
    """The rounds every run evaluated and the runs' KNN ``key`` there (runs x rounds),
    from round 0: the untrained network of the run's seed, the weights every SC method
    of that seed starts from (left out when a seed has no untrained row)."""
    import numpy as np

    points = []
    for r in runs:
        pts = dict(zip(r["rounds"], r[key], strict=True))
        if 0 not in pts and r.get("seed") in init:
            pts[0] = init[r["seed"]]
        points.append(pts)
    common = sorted(set.intersection(*[set(p) for p in points]))
    return common, np.asarray([[p[t] for t in common] for p in points])


def _draw_setting(ax: Any, summary: Mapping[str, Any], s: Setting, key: str) -> None:
    """One curve panel: mean ± std over seeds of each method's KNN ``key`` from round 0,
    and the untrained network's mean (dashed)."""
    curves = summary.get("curves", {})
    base = summary.get("table2", {}).get(key, {}).get(UNTRAINED, {}).get(s.key)
    if base and base.get("mean") is not None:
        ax.axhline(
            base["mean"], color="0.4", ls="--", lw=1, label="untrained network (mean over seeds)"
        )
    init = _untrained_by_seed(summary, key, s.key)
    for m, color in FIG_METHODS:
        runs = [r for r in curves.get(f"{m}|{s.key}|", []) if r.get("rounds")]
        if not runs:
            continue
        common, ys = _mean_curve_from_zero(runs, key, init)
        mu = ys.mean(axis=0)
        ax.plot(common, mu, marker="o", ms=3, color=color, label=_legend(m, len(runs)))
        if len(runs) > 1:
            sd = ys.std(axis=0, ddof=1)
            ax.fill_between(common, mu - sd, mu + sd, color=color, alpha=0.2, lw=0)


def _legend(m: str, n: int) -> str:
    return f"{METHOD_LABELS[m]} (n = {n} seed{'s' if n != 1 else ''})"


def _probe_slots(summary: Mapping[str, Any], s: Setting) -> list[str]:
    """The methods of the probe row in setting ``s``: those with a probe cell there (no
    empty slot for a method not run in that setting)."""
    return [m for m in (UNTRAINED, *dict(FIG_METHODS)) if _cell(summary, "linear_probe", m, s.key)]


def _draw_probe(ax: Any, summary: Mapping[str, Any], s: Setting, slots: Sequence[str]) -> None:
    """Final linear probe per method run in this setting: every seed (dots) and mean ± 1
    std (bar)."""
    import numpy as np

    colors = dict(FIG_METHODS, **{UNTRAINED: "0.4"})
    for x, m in enumerate(slots):
        c = _cell(summary, "linear_probe", m, s.key)
        if c is None:
            continue
        vals = np.asarray(c["values"], dtype=float)
        jitter = np.linspace(-0.18, 0.18, len(vals)) if len(vals) > 1 else np.zeros(1)
        ax.scatter(x + jitter, vals, s=9, color=colors[m], alpha=0.5, lw=0)
        ax.errorbar(
            x, c["mean"], yerr=c["std"] if c["n"] > 1 else None, fmt="D", ms=5,
            color=colors[m], mec="k", mew=0.6, ecolor="k", capsize=4, lw=1.2,
        )  # fmt: skip
    ax.set_xticks(range(len(slots)), [_TICK[m] for m in slots], fontsize=7)
    ax.set_xlim(-0.6, len(slots) - 0.4)
    if not slots:
        ax.text(0.5, 0.5, "no linear probe in the results", ha="center", transform=ax.transAxes)


def paired_rows(summary: Mapping[str, Any], key: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(comparison, metric, paired difference)`` of row 4 in setting ``key``: every
    pair of :data:`FIG_DIFFS` and metric of :data:`FIG_METRICS` both cells exist for,
    with :func:`~.stats.paired_diff` (mean, 95 % paired t interval ``lo``/``hi``, n)."""
    rows = []
    for a, b in FIG_DIFFS:
        for metric, _, _, _ in FIG_METRICS:
            ca, cb = _cell(summary, metric, a, key), _cell(summary, metric, b, key)
            if b == UNTRAINED and metric != "linear_probe":
                continue  # the untrained network: the verdicts' probe only
            d = paired_diff(ca, cb)
            if d is not None:
                rows.append((f"{_SHORT[a]} − {_SHORT[b]}", metric, d))
    return rows


def _draw_diffs(ax: Any, summary: Mapping[str, Any], s: Setting, metric: str) -> None:
    """A differences row: the paired differences of one ``metric`` with their 95 % paired
    t intervals (a forest plot, one line per comparison)."""
    import math

    rows = [(comp, d) for comp, m, d in paired_rows(summary, s.key) if m == metric]
    some_finite = any(math.isfinite(d["lo"]) and math.isfinite(d["hi"]) for _, d in rows)
    for y, (_, d) in enumerate(rows):
        finite = math.isfinite(d["lo"]) and math.isfinite(d["hi"])
        err = [[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]] if finite else None
        ax.errorbar(d["mean"], y, xerr=err, fmt="o", color="k", ms=4, capsize=3, lw=1.2)
        if not finite and some_finite:
            ax.annotate("one seed: no interval", (d["mean"], y), fontsize=6, xytext=(4, 0),
                        textcoords="offset points", va="center")  # fmt: skip
    if rows and not some_finite:
        ax.set_title("one seed: no intervals", fontsize=7, color="0.3")
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks(range(len(rows)), [c for c, _ in rows], fontsize=7)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
    if not rows:
        ax.text(0.5, 0.5, "no paired runs", ha="center", va="center", fontsize=7,
                transform=ax.transAxes)  # fmt: skip


#: resolution of the saved figure (dots per inch)
FIG_DPI = 150


def _seeds(summary: Mapping[str, Any], cols: Sequence[Setting]) -> list[int]:
    ns = {
        len(r)
        for s in cols
        for m, _ in FIG_METHODS
        if (r := summary.get("curves", {}).get(f"{m}|{s.key}|"))
    }
    return sorted(ns)


def _diff_metrics(summary: Mapping[str, Any], cols: Sequence[Setting]) -> list[tuple[str, str]]:
    """The metrics of the differences rows (key, words): those with a paired difference
    in any column."""
    have = {m for s in cols for _, m, _ in paired_rows(summary, s.key)}
    return [(k, w) for k, w, _, _ in FIG_METRICS if k in have]


def convergence_figure(summary: Mapping[str, Any], settings: Sequence[Setting]) -> Any:
    """The figure (a matplotlib ``Figure``, not saved) of the settings with curves; ``None``
    when no setting has any.  See the module's docstring for what it shows."""
    curves = summary.get("curves", {})
    cols = [s for s in settings if any(f"{m}|{s.key}|" in curves for m in ("fedsc", "fedavg_sc"))]
    if not cols:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    metrics = _diff_metrics(summary, cols) or [FIG_METRICS[0][:2]]
    n_rows = {
        k: max(1, *(sum(m == k for _, m, _ in paired_rows(summary, s.key)) for s in cols))
        for k, _ in metrics
    }
    diff_h = [0.28 * n_rows[k] + 0.45 for k, _ in metrics]
    fig = plt.figure(
        figsize=(3.3 * len(cols) + 1.1, 2.3 * 3 + sum(diff_h) + 2.0),
        layout="constrained",
        dpi=FIG_DPI,
    )
    nr = 3 + len(metrics)
    grid = fig.add_gridspec(nr, len(cols), height_ratios=[2.3, 2.3, 2.1, *diff_h])
    axes = [[fig.add_subplot(grid[i, j]) for j in range(len(cols))] for i in range(nr)]
    for i in range(3):  # settings compared on one scale: rows 1-3 share y, the rest x
        for j in range(1, len(cols)):
            axes[i][j].sharey(axes[i][0])
            axes[i][j].tick_params(labelleft=False)
    for i in range(3, nr):  # each metric on its own scale, with its own tick labels
        for j in range(1, len(cols)):
            axes[i][j].sharex(axes[i][0])
    for j, s in enumerate(cols):
        for i, key in enumerate(("knn_backbone", "knn_projector")):
            ax = axes[i][j]
            _draw_setting(ax, summary, s, key)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
            ax.set_xlabel("round", fontsize=8)
        _draw_probe(axes[2][j], summary, s, _probe_slots(summary, s))
        axes[2][j].set_xlabel("method (probe after the last round)", fontsize=8)
        for i, (metric, _) in enumerate(metrics, start=3):
            _draw_diffs(axes[i][j], summary, s, metric)
            axes[i][j].set_xlabel("difference (percentage points)", fontsize=7)
        axes[0][j].set_title(setting_words(s), fontsize=9)
        for i in range(nr):
            axis: Literal["both", "x", "y"] = "y" if i == 2 else "x" if i > 2 else "both"
            axes[i][j].grid(alpha=0.3, axis=axis)
            axes[i][j].tick_params(labelsize=7)
            if i > 2 and j > 0:
                axes[i][j].tick_params(labelleft=False)
    axes[0][0].set_ylabel(
        "KNN accuracy (%)\non backbone features h\n(higher is better)", fontsize=8
    )
    axes[1][0].set_ylabel(
        "KNN accuracy (%)\non projector outputs z\n(higher is better)", fontsize=8
    )
    axes[2][0].set_ylabel("final linear probe\naccuracy (%)\n(higher is better)", fontsize=8)
    for i, (_, words) in enumerate(metrics, start=3):
        axes[i][0].set_ylabel(f"difference:\n{words}", fontsize=8)
    _legends(fig, axes, ncol=2 if len(cols) < 3 else 3)
    fig.suptitle(_figure_title(summary, cols, fig.get_figwidth()), fontsize=8.5)
    return fig


def _figure_title(summary: Mapping[str, Any], cols: Sequence[Setting], width_in: float) -> str:
    """The figure's title: what it compares, over how many seeds, how to read each row,
    wrapped to the figure's width (never inside "95 %", "± 1" or "n = ")."""
    import textwrap

    data = sorted({DATASETS.get(s.prefix, s.prefix) for s in cols})
    ns = _seeds(summary, cols)
    what = "FedSC against FedAvg+SC and centralized SC"
    pooled = (
        " Centralized SC trains on the pooled data: it is drawn in the columns where all "
        "clients take part in every round."
    )
    if max(ns, default=1) > 1:
        title = (
            f"{', '.join(data)}: {what} over n = {' / '.join(map(str, ns))} seeds. Curves: "
            f"mean, band ± 1 std over the seeds; probe: each seed (dots), mean ± 1 std (bar); "
            f"differences (A − B > 0: A is better): mean over the seeds with its 95 % paired "
            f"t interval (runs paired by seed; the report's decision rule).{pooled}"
        )
    else:
        title = (
            f"{', '.join(data)}: {what}, one seed (n = 1): single runs, no band, no error "
            f"bar and no interval; a difference from one seed decides nothing.{pooled}"
        )
    nbsp = {"95 %": "95\u00a0%", "± 1": "±\u00a01", "n = ": "n\u00a0=\u00a0"}
    for a, b in nbsp.items():  # textwrap breaks at ASCII spaces only: never inside these
        title = title.replace(a, b)
    return textwrap.fill(title, int(width_in * 14))


def _legends(fig: Any, axes: Sequence[Sequence[Any]], ncol: int) -> None:
    """One legend of the methods below the panels (never over data), with the marks of
    the differences rows."""
    from matplotlib.lines import Line2D

    entries: dict[str, Any] = {}
    for row in axes[:2]:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(lab, h)
    banded = any(a.collections for row in axes[:2] for a in row)  # fill_between: the bands
    if banded:
        from matplotlib.patches import Patch

        entries["shaded: ± 1 std over the seeds"] = Patch(color="0.6", alpha=0.35, lw=0)
    entries["paired difference: mean, 95 % CI"] = Line2D([], [], marker="o", color="k", lw=1.2)
    fig.legend(
        list(entries.values()),
        list(entries),
        loc="outside lower center",
        ncol=ncol,
        fontsize=7.5,
        frameon=False,
    )


def plot_convergence_grid(
    summary: Mapping[str, Any], settings: Sequence[Setting], out: Path
) -> Path | None:
    """Draw :func:`convergence_figure` into ``out`` (PNG, :data:`FIG_DPI` dpi); ``None``
    when no setting has curves."""
    fig = convergence_figure(summary, settings)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    path = save_figure(fig, out, dpi=FIG_DPI)
    plt.close(fig)
    return path
