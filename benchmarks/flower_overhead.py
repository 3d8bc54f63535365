"""Overhead of Flower's simulation engine over the in-process runner, side by side.

Runs the same experiment (default ``configs/fmnist_fedsc.yaml``, the CPU config,
shortened to ``--rounds`` rounds with evaluation only at the end) with the
in-process runner, then with :func:`fedspectral.fed.flower.engine.run_flower_simulation`,
then in process again (a sandwich: on a shared machine the load drifts, and the
ratio is taken against the mean of the two in-process runs), in one process,
and prints

* the mean round time of each engine over the rounds after the first (round 1
  pays one-off costs in both engines: first-touch allocations, and in Flower the
  ClientApp processes' imports), the evaluation excluded;
* their ratio (target: Flower / in-process <= 1.3);
* Flower's one-off start-up (Ray, the virtual nodes loading their data) --
  printed, not part of the ratio;
* whether both engines ended with the same global weights.

Usage::

    nice .venv/bin/python benchmarks/flower_overhead.py [--config ...] [--rounds 4]
        [--set key=value ...]

Writes ``results/bench/flower_overhead.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _round_times(res: dict[str, Any]) -> list[float]:
    """Round times without evaluation (sum of the phases' wall times)."""
    return [sum(ph["seconds"] for ph in r["phases"].values()) for r in res["records"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "fmnist_fedsc.yaml"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "flower_overhead.json"))
    args = ap.parse_args(argv)
    if args.rounds < 2:
        raise SystemExit("--rounds must be >= 2 (round 1 is excluded from the ratio)")

    from fedspectral.experiments.config import load_config
    from fedspectral.experiments.results import versions, write_json
    from fedspectral.fed.flower.engine import run_flower_simulation
    from fedspectral.fed.simulation import Simulation, weights_equal

    overrides = [f"method.rounds={args.rounds}", f"eval.every={args.rounds}",
                 "eval.linear_probe=false", "run.progress=false", *args.overrides]

    def cfg():
        return load_config(args.config, overrides)

    t = time.perf_counter()
    sim = Simulation(cfg())
    ref = sim.run()
    wall_in = time.perf_counter() - t
    cap: dict[str, Any] = {}
    t = time.perf_counter()
    res = run_flower_simulation(cfg(), capture=cap)
    wall_fl = time.perf_counter() - t
    ref2 = Simulation(cfg()).run()

    r_in, r_in2, r_fl = _round_times(ref), _round_times(ref2), _round_times(res)
    m_in = statistics.mean(r_in[1:] + r_in2[1:])
    m_fl = statistics.mean(r_fl[1:])
    same = weights_equal(sim.server_state.weights, cap["server_state"].weights)
    out = {
        "config": args.config, "overrides": overrides, "rounds": args.rounds,
        "inprocess_round_seconds": r_in, "inprocess_round_seconds_after": r_in2,
        "flower_round_seconds": r_fl,
        "inprocess_mean_round_seconds": m_in, "flower_mean_round_seconds": m_fl,
        "ratio_flower_over_inprocess": m_fl / m_in,
        "flower_startup_seconds": res["timings"]["flower_startup_seconds"],
        "inprocess_wall_seconds": wall_in, "flower_wall_seconds": wall_fl,
        "same_global_weights": bool(same), "versions": versions(),
    }
    write_json(args.out, out)
    print(f"config {args.config} ({args.rounds} rounds; round 1 and evaluation excluded)")
    print(f"  in-process round  {m_in:8.2f} s   {' '.join(f'{x:.2f}' for x in r_in)} | "
          f"after Flower: {' '.join(f'{x:.2f}' for x in r_in2)}")
    print(f"  Flower round      {m_fl:8.2f} s   {' '.join(f'{x:.2f}' for x in r_fl)}")
    print(f"  ratio Flower / in-process = {m_fl / m_in:.3f}  (target <= 1.3)")
    print(f"  Flower one-off start-up (Ray, node data loading): "
          f"{res['timings']['flower_startup_seconds']:.1f} s (not in the ratio)")
    print(f"  same global weights: {same}")
    print(f"  written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
