"""Redraw a finished reproduction's convergence figure from its ``summary.json`` alone.

``summary.json`` keeps every run's KNN curve and, per setting and seed, the untrained
network (the initial weights every SC method of that seed starts from); the run folders
are not needed.  The figure is the report's (:mod:`fedspectral.experiments.reproduce`):
FedSC, FedAvg+SC and centralized SC against the round, mean ± std over seeds, from round 0
(the untrained network), one column per setting of the scale.  ``REPORT.md`` and the
tables are left as they are.

    python scripts/redraw_convergence.py docs/results/fedsc_cpu
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fedspectral.experiments.reproduce import SCALES
from fedspectral.experiments.reproduce.paper import CENTRAL, UNTRAINED
from fedspectral.experiments.reproduce.report import _plot_convergence_grid

KEYS = ("knn_backbone", "knn_projector")


def grid_input(summary: dict[str, Any], scale: str) -> tuple[dict[str, Any], list[Any]]:
    """The report's figure input (``curves``, table 2's untrained row) from a
    ``summary.json``: main-variant runs without DP, in % as the report's tables."""
    settings = list(SCALES[scale].settings)
    by_id = {f"{s.num_clients}x{s.classes_per_client}-{s.participation}": s for s in settings}
    curves: dict[str, list[dict[str, Any]]] = {}
    untrained: dict[str, dict[str, dict[str, list]]] = {k: {} for k in KEYS}
    for run in summary["runs"]:
        s = by_id[run["setting"]]
        if run["method"] == UNTRAINED:
            for k in KEYS:
                cell = untrained[k].setdefault(s.key, {"seeds": [], "values": []})
                cell["seeds"].append(run["seed"])
                cell["values"].append(100.0 * run["final"][k])
            continue
        if run.get("dp") or run.get("variant", "main") != "main":
            continue
        curve = {
            "seed": run["seed"],
            "rounds": [p["round"] for p in run["curve"]],
            **{k: [100.0 * p[k] for p in run["curve"]] for k in KEYS},
        }
        cols = [s]  # centralized SC (pooled data) is shown in every full column
        if run["method"] == CENTRAL:
            cols = [c for c in settings if c.full and c.prefix == s.prefix]
        for c in cols:
            curves.setdefault(f"{run['method']}|{c.key}|", []).append(curve)
    table2 = {
        k: {
            UNTRAINED: {
                key: {**cell, "mean": sum(cell["values"]) / len(cell["values"])}
                for key, cell in untrained[k].items()
            }
        }
        for k in KEYS
    }
    return {"curves": curves, "table2": table2}, settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a reproduction's output folder")
    ap.add_argument("--out", type=Path, help="the figure (default FOLDER/convergence.png)")
    args = ap.parse_args()
    summary = json.loads((args.folder / "summary.json").read_text())
    data, settings = grid_input(summary, summary["protocol"]["scale"])
    out = args.out or args.folder / "convergence.png"
    print(_plot_convergence_grid(data, settings, out))


if __name__ == "__main__":
    main()
