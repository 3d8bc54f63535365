"""Refit the reproduce cost model (``COSTS``) from finished runs' own timings.

    python scripts/fit_costs.py OUT_DIR [--json FILE]

``OUT_DIR`` is a ``fedspectral reproduce`` output folder (``runs/<name>/results.json``
and ``config.yaml``). The fit is :func:`fedspectral.experiments.reproduce.costs.fit_costs`:
per method, the median over rounds, then over runs, of the training seconds per
training sample, local epoch and pair of views, FedSC's DP-CalR seconds per sample and
sharing view, and the evaluation seconds per image. The script prints them beside the
values in ``COSTS``, then each run's measured seconds (the sum of its rounds,
evaluations included) beside the estimate of both models. Nothing is changed; copy the
fitted values into ``COSTS`` by hand if they should plan later runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def finished_runs(out: Path) -> list[tuple[str, str, dict, object]]:
    """``(name, method, results, config)`` of every run under ``out/runs`` that has
    all its rounds."""
    from fedspectral.fed.validation import load_config

    runs = []
    for d in sorted((out / "runs").glob("*")):
        if not (d / "results.json").is_file():
            continue
        res = json.loads((d / "results.json").read_text())
        cfg = load_config(d / "config.yaml")
        if res.get("rounds_done", 0) >= cfg.method.rounds:
            runs.append((d.name, res["method"], res, cfg))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="a fedspectral reproduce output folder")
    p.add_argument("--json", type=Path, default=None, help="also write the fit here")
    args = p.parse_args(argv)
    from fedspectral.experiments.reproduce.costs import COSTS, estimate_run_seconds, fit_costs
    from fedspectral.experiments.reproduce.plan import RunSpec

    runs = finished_runs(args.out)
    if not runs:
        print(f"no finished runs under {args.out / 'runs'}", file=sys.stderr)
        return 2
    fitted = fit_costs([(m, res, cfg) for _, m, res, cfg in runs])
    print(f"{len(runs)} finished runs; seconds per unit (median over rounds, then runs)\n")
    print(f"{'cost':<30} {'COSTS':>10} {'fitted':>10} {'ratio':>7}")
    for m, new in sorted(fitted["train_sample"].items()):
        old = COSTS["train_sample"].get(m, COSTS["train_sample_default"])
        print(f"{'train_sample[' + m + ']':<30} {old:10.2e} {new:10.2e} {old / new:7.2f}")
    for key in ("share_view_sample", "eval_image"):
        print(f"{key:<30} {COSTS[key]:10.2e} {fitted[key]:10.2e} {COSTS[key] / fitted[key]:7.2f}")
    print(f"\n{'run':<46} {'measured s':>10} {'COSTS s':>9} {'fitted s':>9}")
    rows = []
    for name, m, res, cfg in runs:
        spec = RunSpec(name=name, setting=None, method=m, seed=0, base=None, config=cfg)
        row = {
            "run": name,
            "measured_s": sum(r["seconds_round"] for r in res["records"]),
            "costs_s": estimate_run_seconds(spec),
            "fitted_s": estimate_run_seconds(spec, fitted),
        }
        rows.append(row)
        print(f"{name:<46} {row['measured_s']:10.1f} {row['costs_s']:9.1f} {row['fitted_s']:9.1f}")
    tot = {k: sum(x[k] for x in rows) for k in ("measured_s", "costs_s", "fitted_s")}
    print(f"{'total':<46} {tot['measured_s']:10.1f} {tot['costs_s']:9.1f} {tot['fitted_s']:9.1f}")
    if args.json:
        from fedspectral.results import write_json

        write_json(args.json, {"fitted": fitted, "runs": rows, "total": tot})
    return 0


if __name__ == "__main__":
    sys.exit(main())
