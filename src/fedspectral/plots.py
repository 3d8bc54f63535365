"""Figures drawn from results files only (never from live training state).

Bottom layer, below :mod:`fedspectral.results` (which draws ``convergence.png`` with
it); :func:`save_figure` writes any figure of the package atomically.

``plot_convergence`` draws, for one or more runs against the round, the KNN accuracy on
backbone and projector features (the FedSC paper Figure 2 analogue: FedSC vs FedAvg+SC;
from the untrained network at round 0 when the run evaluated it), the training loss and,
for DP runs, the ε spent.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedspectral.atomic import atomic_write_bytes
from fedspectral.kinds import PhaseKind

__all__ = ["METHOD_WORDS", "load_results", "plot_convergence", "save_figure", "summary_table"]

#: a run's ``method`` in words, for legends
METHOD_WORDS = {
    "fedsc": "FedSC",
    "fedavg_sc": "FedAvg+SC",
    "central_sc": "centralized SC",
    "fedavg_byol": "FedAvg+BYOL",
    "fedu": "FedU",
    "fedema": "FedEMA",
    "fedx": "FedX",
    "fedca": "FedCA",
}
#: a config's ``data.dataset`` in words, for titles
DATASET_WORDS = {
    "fashion_mnist": "Fashion-MNIST",
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "svhn": "SVHN",
    "digits": "scikit-learn digits (8x8)",
}


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 150) -> Path:
    """Save a matplotlib figure atomically (PNG unless the suffix says otherwise), at
    ``dpi`` dots per inch (150 by default: the figures' smallest text stays legible)."""
    buf = io.BytesIO()
    fmt = Path(path).suffix.lstrip(".") or "png"
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read a run's ``results.json`` (or the folder holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise FileNotFoundError(f"no results file at {str(p)!r}")
    with open(p) as fh:
        return json.load(fh)


def _series(res: Mapping[str, Any], key: str) -> tuple[list[int], list[float]]:
    """KNN ``key`` in % against the round, from round 0 (the untrained network, when the
    run evaluated it: ``eval.initial``) to the last evaluated round."""
    xs, ys = [], []
    init = res.get("initial") or {}
    if init.get(key) is not None:
        xs.append(0)
        ys.append(100.0 * float(init[key]))
    for r in res.get("records", []):
        if key in r and r[key] is not None:
            xs.append(int(r["round"]))
            ys.append(100.0 * float(r[key]))
    return xs, ys


def _loss_series(res: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """The clients' mean training loss of each round (``train_loss`` of its phase of kind
    train)."""
    xs, ys = [], []
    for r in res.get("records", []):
        trains = [ph for ph in r.get("phases", {}).values() if ph.get("kind") == PhaseKind.TRAIN]
        loss = next(
            (ph["metrics"]["train_loss"] for ph in trains if "train_loss" in ph["metrics"]), None
        )
        if loss is not None:
            xs.append(int(r["round"]))
            ys.append(float(loss))
    return xs, ys


def _eps_series(res: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """ε spent after each round (RDP, the most-charged client; from the run's ledger),
    from 0 before round 1; empty for a run without releases, or whose releases are not
    private (ε = ∞ in every round: FedSC sharing without DP)."""
    if not res.get("privacy", {}).get("releases"):
        return [], []
    xs, ys = [0], [0.0]
    for r in res.get("records", []):
        if r.get("epsilon_rdp") is not None and math.isfinite(float(r["epsilon_rdp"])):
            xs.append(int(r["round"]))
            ys.append(float(r["epsilon_rdp"]))
    return (xs, ys) if len(xs) > 1 else ([], [])


def _draw_panels(
    axes: Sequence[Any], loaded: Sequence[Mapping[str, Any]], labels: Sequence[str]
) -> None:
    for i, (res, lab) in enumerate(zip(loaded, labels, strict=True)):
        style = {"color": f"C{i % 10}", "marker": "o", "ms": 3.5, "lw": 1.4, "label": lab}
        for ax, key in zip(axes[:2], ("knn_backbone", "knn_projector"), strict=True):
            xs, ys = _series(res, key)
            # a marker at each evaluated round; joined only when there are enough of them
            # to draw a curve (never one straight line from round 0 to the last round)
            ax.plot(xs, ys, **{**style, "ms": 5, "ls": "-" if len(xs) > 2 else "none"})
        xs, ys = _loss_series(res)
        axes[2].plot(xs, ys, **{**style, "ms": 2.5 if len(xs) > 30 else 3.5})
        if len(axes) > 3:
            xs, ys = _eps_series(res)
            if xs:
                axes[3].plot(xs, ys, **{**style, "ms": 2.5 if len(xs) > 30 else 3.5})
            target = res.get("privacy", {}).get("target_epsilon")
            if target is not None:
                axes[3].axhline(float(target), color=style["color"], ls=":", lw=1)
    titles = (
        "KNN on backbone features $h$",
        "KNN on projector outputs $z$",
        "local training loss (clients' mean)",
        r"privacy spent $\varepsilon$ (RDP; dotted: target)",
    )
    ylabels = (
        "KNN accuracy (%), higher is better",
        "KNN accuracy (%), higher is better",
        "loss (lower is better)",
        r"$\varepsilon$ at the run's $\delta$",
    )
    xlabels = ("round (markers: rounds evaluated)",) * 2 + ("round",) * 2
    for ax, t, yl, xl in zip(axes, titles, ylabels, xlabels, strict=False):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel(xl, fontsize=8)
        ax.set_ylabel(yl, fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.set_xlim(left=-0.5)
        ax.xaxis.get_major_locator().set_params(integer=True)


def _run_words(res: Mapping[str, Any], i: int) -> str:
    """A run's legend entry: its method in words and its seed (one run: no band)."""
    m = res.get("method")
    seed = (res.get("config") or {}).get("run", {}).get("seed")
    words = METHOD_WORDS.get(m, m) if m else f"run {i}"
    return f"{words}, one run (seed {seed})" if seed is not None else f"{words}, one run"


def _dp_words(res: Mapping[str, Any]) -> str:
    """A run's privacy in words: ``DP, ε = 2.9 spent (target 3) at δ = 1e-05`` (the
    most-charged client, RDP), else ``no DP``."""
    priv = res.get("privacy") or {}
    xs, ys = _eps_series(res)
    if not xs:
        return "no DP"
    target = priv.get("target_epsilon")
    aim = f" (target {float(target):g})" if target is not None else ""
    delta = priv.get("delta")
    at = f" at δ = {float(delta):g}" if delta is not None else ""
    return f"DP, ε = {ys[-1]:.3g} spent{aim}{at}"


def _default_title(loaded: Sequence[Mapping[str, Any]]) -> str:
    """What the figure shows, in words: the methods, the data set
    (``config.data.dataset``) and each run's privacy (never the run's name)."""
    data = {(r.get("config") or {}).get("data", {}).get("dataset") for r in loaded} - {None}
    on = f" on {', '.join(sorted(DATASET_WORDS.get(d, str(d)) for d in data))}" if data else ""
    if len(loaded) == 1:
        res = loaded[0]
        m = res.get("method")
        words = METHOD_WORDS.get(m, str(m)) if m else "Training run"
        return f"{words}{on}: convergence of one run, {_dp_words(res)}"
    methods = list(dict.fromkeys(METHOD_WORDS.get(str(r.get("method")), "run") for r in loaded))
    dp = sorted({_dp_words(r) for r in loaded})
    privacy = dp[0] if len(dp) == 1 else "privacy per run in the ε panel"
    return f"{' vs '.join(methods)}{on}: convergence of {len(loaded)} runs, {privacy}"


def plot_convergence(
    runs: Sequence[str | os.PathLike | Mapping[str, Any]],
    out: str | os.PathLike,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Per run against the round: KNN accuracy (%) on backbone and projector features
    (from round 0, the untrained network, when the run evaluated it), the clients' mean
    training loss, and -- when any run released under DP -- the ε spent (RDP, the
    most-charged client; dotted: the run's target ε).

    Parameters
    ----------
    runs : sequence of results paths or loaded results dicts
    out : path of the figure (PNG unless the suffix says otherwise)
    labels : legend entries (default: each run's method in words and its seed)
    title : figure title (default: the methods, data set and privacy in words; ``""`` for
        none)
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded = [r if isinstance(r, Mapping) else load_results(r) for r in runs]
    if not loaded:
        raise ValueError("plot_convergence needs at least one run")
    if labels is not None and len(labels) != len(loaded):
        raise ValueError(f"{len(labels)} labels for {len(loaded)} runs")
    labels = [
        labels[i] if labels is not None else _run_words(res, i) for i, res in enumerate(loaded)
    ]
    n_panels = 4 if any(_eps_series(r)[0] for r in loaded) else 3
    fig, axes = plt.subplots(1, n_panels, figsize=(3.1 * n_panels, 2.9), layout="constrained")
    axes[1].sharey(axes[0])  # KNN on h and on z compared on one scale
    _draw_panels(list(axes), loaded, labels)
    handles, labs = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labs, loc="outside lower center", ncol=min(len(labs), 5), fontsize=8, frameon=False
    )
    title = title if title is not None else _default_title(loaded)
    if title:
        fig.suptitle(title, fontsize=10)
    path = save_figure(fig, out)
    plt.close(fig)
    return path


def summary_table(
    runs: Sequence[str | os.PathLike | Mapping[str, Any]], labels: Sequence[str] | None = None
) -> str:
    """A Markdown table of final KNN (backbone, projector), linear probe, ε and time per run."""
    loaded = [r if isinstance(r, Mapping) else load_results(r) for r in runs]
    head = "| run | KNN h (%) | KNN z (%) | linear probe (%) | eps RDP / PLD | rounds | time (s) |"
    lines = [head, "|" + "---|" * 7]
    for i, res in enumerate(loaded):
        fin, priv = res.get("final", {}), res.get("privacy", {})

        def pct(k: str, fin: Mapping[str, Any] = fin) -> str:
            return f"{100 * float(fin[k]):.1f}" if k in fin else "-"

        def num(x: Any) -> str:
            return "n/a" if x is None else f"{float(x):.3g}"

        eps = (
            f"{num(priv.get('epsilon_rdp'))} / {num(priv.get('epsilon_pld'))}"
            if priv.get("releases")
            else "-"
        )
        lab = labels[i] if labels is not None else res.get("method", f"run {i}")
        lines.append(
            f"| {lab} | {pct('knn_backbone')} | {pct('knn_projector')} | "
            f"{pct('linear_probe')} | {eps} | {res.get('rounds_done', '-')} | "
            f"{float(res.get('timings', {}).get('total_seconds', 0)):.0f} |"
        )
    return "\n".join(lines)
