"""Refit the reproduce cost model (``COSTS``) from finished runs' own timings.

    python scripts/fit_costs.py OUT_DIR [--json FILE]

``OUT_DIR`` is a ``fedspectral reproduce`` output folder (``runs/<name>/results.json``).
Every run records, per round, the seconds of each phase and of each evaluation. From
them the script takes, per method, the median over rounds of

* training seconds per training sample, local epoch and pair of views
  (``COSTS["train_sample"]``);
* FedSC's DP-CalR seconds per sample and sharing view (``share_view_sample``);
* evaluation seconds per image of the KNN bank and test split (``eval_image``);

and prints them beside the values in ``experiments/reproduce/costs.py``, then each
run's measured seconds (the sum of its rounds and evaluations) beside the estimate of
both models. Medians over rounds, not means: a run that shares its core with others
(``--jobs 2`` on 2 cores, other work) has slow rounds whenever the machine is busy.
Nothing is changed; copy the fitted values into ``COSTS`` by hand if they should plan
later runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def _client_size(cfg) -> float:
    from fedspectral.experiments.reproduce.costs import _client_size as size

    return size(cfg)


def run_rates(run_dir: Path) -> dict | None:
    """Per-round rates of one finished run (``None`` when it has no results)."""
    from fedspectral.experiments.config import load_config

    res_file = run_dir / "results.json"
    if not res_file.is_file():
        return None
    res = json.loads(res_file.read_text())
    cfg = load_config(run_dir / "config.yaml")
    if res.get("rounds_done", 0) < cfg.method.rounds:
        return None
    nj = _client_size(cfg)
    views = max(1, cfg.method.views)
    J = cfg.partition.num_clients
    pooled = res["method"] == "central_sc"
    train, share, evals = [], [], []
    for r in res["records"]:
        ph = r["phases"]
        tr = ph.get("train")
        if tr and tr["participants"]:
            clients = J if pooled else len(tr["participants"])
            train.append(tr["seconds"] / (clients * nj * cfg.method.local_epochs * views))
        sh = ph.get("share")
        if sh and sh["participants"]:
            v = cfg.method.params["share_views"]
            share.append(sh["seconds"] / (len(sh["participants"]) * nj * v))
        if "seconds_eval" in r:
            bank = J * nj if cfg.eval.bank_size is None else min(cfg.eval.bank_size, J * nj)
            test = cfg.eval.test_size or 0
            evals.append(r["seconds_eval"] / (bank + test))
    measured = sum(r["seconds_round"] for r in res["records"])
    return {"run": run_dir.name, "method": res["method"], "config": cfg,
            "train": statistics.median(train) if train else None,
            "share": statistics.median(share) if share else None,
            "eval": statistics.median(evals) if evals else None,
            "measured_s": measured}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="a fedspectral reproduce output folder")
    p.add_argument("--json", type=Path, default=None, help="also write the fit here")
    args = p.parse_args(argv)
    from fedspectral.experiments.reproduce.costs import COSTS, estimate_run_seconds
    from fedspectral.experiments.reproduce.plan import RunSpec

    runs = [r for d in sorted((args.out / "runs").glob("*")) if (r := run_rates(d))]
    if not runs:
        print(f"no finished runs under {args.out / 'runs'}", file=sys.stderr)
        return 2
    fitted = {k: (dict(v) if isinstance(v, dict) else v) for k, v in COSTS.items()}
    print(f"{len(runs)} finished runs; seconds per unit (median over rounds, then runs)\n")
    print(f"{'cost':<30} {'COSTS':>10} {'fitted':>10} {'ratio':>7}")
    for m in sorted({r["method"] for r in runs}):
        vals = [r["train"] for r in runs if r["method"] == m and r["train"] is not None]
        if vals:
            fitted["train_sample"][m] = statistics.median(vals)
            old = COSTS["train_sample"].get(m, COSTS["train_sample_default"])
            print(f"{'train_sample[' + m + ']':<30} {old:10.2e} {fitted['train_sample'][m]:10.2e} "
                  f"{old / fitted['train_sample'][m]:7.2f}")
    for key, field in (("share_view_sample", "share"), ("eval_image", "eval")):
        vals = [r[field] for r in runs if r[field] is not None]
        if vals:
            fitted[key] = statistics.median(vals)
            print(f"{key:<30} {COSTS[key]:10.2e} {fitted[key]:10.2e} "
                  f"{COSTS[key] / fitted[key]:7.2f}")
    print(f"\n{'run':<46} {'measured s':>10} {'COSTS s':>9} {'fitted s':>9}")
    rows = []
    for r in runs:
        spec = RunSpec(name=r["run"], setting=None, method=r["method"], seed=0, base=None,
                       config=r["config"])
        old, new = estimate_run_seconds(spec), estimate_run_seconds(spec, fitted)
        rows.append({"run": r["run"], "measured_s": r["measured_s"], "costs_s": old,
                     "fitted_s": new})
        print(f"{r['run']:<46} {r['measured_s']:10.1f} {old:9.1f} {new:9.1f}")
    tot = {k: sum(x[k] for x in rows) for k in ("measured_s", "costs_s", "fitted_s")}
    print(f"{'total':<46} {tot['measured_s']:10.1f} {tot['costs_s']:9.1f} "
          f"{tot['fitted_s']:9.1f}")
    if args.json:
        from fedspectral.experiments.results import write_json

        write_json(args.json, {"fitted": fitted, "runs": rows, "total": tot})
    return 0


if __name__ == "__main__":
    sys.exit(main())
