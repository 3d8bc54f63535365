"""Redraw a finished reproduction's convergence figure from its ``summary.json`` alone.

``summary.json`` keeps every run's KNN curve and, per setting and seed, the untrained
network (the initial weights every SC method of that seed starts from); the run folders
are not needed.  The figure is the report's (:mod:`fedspectral.experiments.reproduce.figure`),
one column per setting of the scale: FedSC (and the stable FedSC when run), FedAvg+SC and
centralized SC against the round, mean ± std over seeds, from round 0 (the untrained
network); the final linear probe per method; the paired differences with their 95 %
paired t intervals.  ``REPORT.md`` and the
tables are left as they are.

    python scripts/redraw_convergence.py docs/results/fedsc_cpu
    python scripts/redraw_convergence.py docs/results/fedsc_cpu/core
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fedspectral.experiments.reproduce import SCALES
from fedspectral.experiments.reproduce.figure import plot_convergence_grid
from fedspectral.experiments.reproduce.paper import CENTRAL, UNTRAINED
from fedspectral.experiments.reproduce.plan import STABLE, STABLE_VARIANT
from fedspectral.experiments.reproduce.stats import seed_cell

KEYS = ("knn_backbone", "knn_projector")
#: the metrics of table 2 (the figure's probe row and paired differences)
METRICS = ("linear_probe", *KEYS)


def grid_input(summary: dict[str, Any], scale: str) -> tuple[dict[str, Any], list[Any]]:
    """The report's figure input from a ``summary.json``: ``curves`` and ``table2`` (every
    metric, per method and setting: :func:`~fedspectral.experiments.reproduce.stats.seed_cell`
    over seeds, in % as the report's tables) of the runs without DP, main variant (the
    stable FedSC as its own row ``fedsc_stable``)."""
    ran = summary.get("protocol", {}).get("settings")  # the tier's settings (core: 10 x 1)
    by_id = {
        f"{s.num_clients}x{s.classes_per_client}-{s.participation}": s
        for s in SCALES[scale].settings
    }
    settings = [s for i, s in by_id.items() if ran is None or i in ran]
    curves: dict[str, list[dict[str, Any]]] = {}
    values: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for run in summary["runs"]:
        s = by_id[run["setting"]]
        variant = run.get("variant", "main")
        if run.get("dp") or variant not in ("main", STABLE_VARIANT):
            continue
        method = STABLE if variant == STABLE_VARIANT else run["method"]
        cols = [s]  # centralized SC (pooled data) is shown in every full column
        if method == CENTRAL:
            cols = [c for c in settings if c.full and c.prefix == s.prefix]
        for c in cols:
            for k in METRICS:
                if run["final"].get(k) is not None:
                    values.setdefault((k, method, c.key), []).append(
                        (run["seed"], 100.0 * run["final"][k])
                    )
            if method == UNTRAINED:
                continue
            curve = {
                "seed": run["seed"],
                "rounds": [p["round"] for p in run["curve"]],
                **{k: [100.0 * p[k] for p in run["curve"]] for k in KEYS},
            }
            curves.setdefault(f"{method}|{c.key}|", []).append(curve)
    table2: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in METRICS}
    for (k, method, key), vals in values.items():
        table2[k].setdefault(method, {})[key] = seed_cell(sorted(vals))
    return {"curves": curves, "table2": table2}, settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a reproduction's output folder")
    ap.add_argument("--out", type=Path, help="the figure (default FOLDER/convergence.png)")
    args = ap.parse_args()
    summary = json.loads((args.folder / "summary.json").read_text())
    data, settings = grid_input(summary, summary["protocol"]["scale"])
    out = args.out or args.folder / "convergence.png"
    print(plot_convergence_grid(data, settings, out))


if __name__ == "__main__":
    main()
