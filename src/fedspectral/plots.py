"""Figures drawn from results files only (never from live training state).

Bottom layer, next to :mod:`fedspectral.results` (which draws ``convergence.png`` with
it); :mod:`fedspectral.experiments.plots` re-exports it.

``plot_convergence`` draws the KNN accuracy against the round for one or more
runs (the seed 001 Figure 2 analogue: FedSC vs FedAvg+SC), backbone and
projector features side by side.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["load_results", "plot_convergence", "summary_table"]


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
    xs, ys = [], []
    for r in res.get("records", []):
        if key in r and r[key] is not None:
            xs.append(int(r["round"]))
            ys.append(100.0 * float(r[key]))
    return xs, ys


def plot_convergence(
    runs: Sequence[str | os.PathLike | Mapping[str, Any]],
    out: str | os.PathLike,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """KNN accuracy (%) vs round for each run, backbone (left) and projector (right).

    Parameters
    ----------
    runs : sequence of results paths or loaded results dicts
    out : path of the figure (PNG unless the suffix says otherwise)
    labels : legend entries (default: each run's method name)
    title : figure title (default: the first run's name)
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.results import save_figure

    loaded = [r if isinstance(r, Mapping) else load_results(r) for r in runs]
    if not loaded:
        raise ValueError("plot_convergence needs at least one run")
    if labels is not None and len(labels) != len(loaded):
        raise ValueError(f"{len(labels)} labels for {len(loaded)} runs")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for i, res in enumerate(loaded):
        lab = labels[i] if labels is not None else res.get("method", f"run {i}")
        for ax, key in zip(axes, ("knn_backbone", "knn_projector"), strict=True):
            xs, ys = _series(res, key)
            ax.plot(xs, ys, marker="o", ms=3, label=lab)
    for ax, name in zip(axes, ("backbone features h", "projector outputs z"), strict=True):
        ax.set_xlabel("round")
        ax.set_title(f"KNN on {name}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("KNN accuracy (%)")
    axes[1].legend(loc="best", fontsize=8)
    fig.suptitle(title if title is not None else loaded[0].get("name", ""))
    path = save_figure(fig, out)
    plt.close(fig)
    return path


def summary_table(runs: Sequence[str | os.PathLike | Mapping[str, Any]],
                  labels: Sequence[str] | None = None) -> str:
    """A Markdown table of final KNN (backbone, projector), linear probe, ε and time per run."""
    loaded = [r if isinstance(r, Mapping) else load_results(r) for r in runs]
    head = ("| run | KNN h (%) | KNN z (%) | linear probe (%) | eps RDP / PLD | rounds | "
            "time (s) |")
    lines = [head, "|" + "---|" * 7]
    for i, res in enumerate(loaded):
        fin, priv = res.get("final", {}), res.get("privacy", {})

        def pct(k: str, fin: Mapping[str, Any] = fin) -> str:
            return f"{100 * float(fin[k]):.1f}" if k in fin else "-"

        def num(x: Any) -> str:
            return "n/a" if x is None else f"{float(x):.3g}"

        eps = (f"{num(priv.get('epsilon_rdp'))} / {num(priv.get('epsilon_pld'))}"
               if priv.get("releases") else "-")
        lab = labels[i] if labels is not None else res.get("method", f"run {i}")
        lines.append(f"| {lab} | {pct('knn_backbone')} | {pct('knn_projector')} | "
                     f"{pct('linear_probe')} | {eps} | {res.get('rounds_done', '-')} | "
                     f"{float(res.get('timings', {}).get('total_seconds', 0)):.0f} |")
    return "\n".join(lines)
