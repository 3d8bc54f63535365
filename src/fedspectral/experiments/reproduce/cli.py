"""The command line of ``fedspectral reproduce``: its options (:func:`add_arguments`)
and the command (:func:`run`)."""

from __future__ import annotations

import argparse
import os
import sys

from fedspectral.config_checks import check_unique_overrides
from fedspectral.experiments.reproduce.execute import execute_plan, run_status
from fedspectral.experiments.reproduce.folder import check_report_folder, report_folder
from fedspectral.experiments.reproduce.needs import (
    GPU_TFLOPS,
    check_requirements,
    describe_requirements,
)
from fedspectral.experiments.reproduce.plan import EXPERIMENTS, TIERS, build_plan
from fedspectral.experiments.reproduce.report import describe_plan, write_report
from fedspectral.experiments.reproduce.summary import collect_results, summarize

#: the sustained TFLOP/s a --gpu-tflops may claim for one GPU (a laptop GPU's ~0.1 to
#: well above any accelerator's dense rate today)
MIN_TFLOPS, MAX_TFLOPS = 0.1, 5000.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", choices=EXPERIMENTS, help="what to reproduce")
    parser.add_argument(
        "--scale",
        choices=("cpu", "paper"),
        default="cpu",
        help="cpu: Fashion-MNIST on this machine (default); paper: the "
        "paper's datasets and models (GPU)",
    )
    parser.add_argument(
        "--tier",
        choices=TIERS,
        default="core",
        help="core (default): centralized SC, FedAvg+SC, FedSC on 10x1 at "
        "10/10 and 2/10, no DP; full: every method, the 5x2 settings "
        "and the DP tables; lowdrift, hetero, drift, lowdrift-dp: FedSC's "
        "mechanism tiers (CPU; reports in OUT/<tier>, runs shared in OUT/runs)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (< 5 min on 2 cores): digits, 1 seed, 2 rounds",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="number of seeds (default: 10 for the core, lowdrift, hetero and "
        "lowdrift-dp tiers, 5 for drift, 3 for the full tier, 1 with --quick; "
        "--seeds 3 for a quick core run; at most "
        "100, FEDSPECTRAL_ALLOW_LARGE=1 lifts the bound)",
    )
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated registered methods (default: all registered)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at a time (subprocesses when > 1; default 1)"
    )
    parser.add_argument(
        "--out", default=None, help="output folder (default results/reproduce/<scale>)"
    )
    parser.add_argument(
        "--configs", default=None, help="folder of the base configs (default ./configs)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value of every run (not the grid's keys)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and the estimated time; run nothing"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report from the finished runs; train nothing",
    )
    parser.add_argument(
        "--gpu-tflops",
        type=float,
        default=None,
        help="--scale paper only: the sustained TFLOP/s of the GPU for the cost estimate "
        f"(0.1-5000; default {GPU_TFLOPS:g}, an assumption for an A100/H100-class GPU)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower this command's and its runs' CPU priority by N (0-19, as nice(1); default 0)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    methods = None
    if args.methods is not None:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    # user errors are ValueErrors: ``fedspectral reproduce: error: ...``, exit status 2
    if args.dry_run and args.report_only:
        raise ValueError("--dry-run and --report-only exclude each other")
    if isinstance(args.jobs, int) and not 1 <= args.jobs <= max(2, os.cpu_count() or 1):
        raise ValueError(f"--jobs must lie in [1, {max(2, os.cpu_count() or 1)}], got {args.jobs}")
    nice = getattr(args, "nice", 0)
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"--nice must be an integer in [0, 19], got {nice!r}")
    check_unique_overrides(args.overrides, "--set")
    try:
        plan = build_plan(
            args.experiment,
            args.scale,
            quick=args.quick,
            tier=args.tier,
            seeds=args.seeds,
            methods=methods,
            configs=args.configs,
            overrides=args.overrides,
            out=args.out,
        )
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    paper = plan.scale.name == "paper"
    tflops = getattr(args, "gpu_tflops", None)
    if tflops is not None and not paper:
        raise ValueError(
            f"--gpu-tflops {tflops:g} sizes the --scale paper estimate; it does nothing at "
            f"--scale {args.scale}{' --quick' if args.quick else ''}"
        )
    tflops = GPU_TFLOPS if tflops is None else tflops
    if not (isinstance(tflops, float | int) and MIN_TFLOPS <= tflops <= MAX_TFLOPS):
        raise ValueError(
            f"--gpu-tflops must lie in [{MIN_TFLOPS:g}, {MAX_TFLOPS:g}] TFLOP/s (one GPU's "
            f"sustained rate), got {tflops!r}"
        )
    if args.dry_run:
        print(describe_plan(plan))
        if paper:
            print(describe_requirements(plan, tflops))
        status = {r.name: run_status(plan, r) for r in plan.runs}
        counts = {
            s: sum(1 for v in status.values() if v == s) for s in ("done", "resume", "new", "stale")
        }
        print(f"  status in {plan.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return 0
    finished = sum(1 for r in plan.runs if run_status(plan, r) == "done")
    check_report_folder(plan, finished, args.report_only)  # before any run trains
    outcomes: dict[str, str] = {}
    if not args.report_only:
        if paper:  # the data and the GPU, before any folder is made or run started
            check_requirements(plan)
        print(describe_plan(plan, runs=False))
        if paper:
            print(describe_requirements(plan, tflops))
        if nice:
            os.nice(nice)  # the runs (subprocesses included) inherit it
        outcomes = execute_plan(plan, jobs=args.jobs, progress=not args.quiet)
    results = collect_results(plan)
    summary = summarize(plan, results)
    folder, why = report_folder(plan, len(results))
    if why is not None:
        print(f"fedspectral reproduce: {why}: the new report goes beside it", file=sys.stderr)
    paths = write_report(plan, summary, results, folder)
    print(f"report: {paths['report']}")
    if plan.report_out != plan.out:  # a mechanism tier: the figure of every tier run so far
        from fedspectral.experiments.reproduce.tiers_figure import draw_tiers

        print(f"figure of the tiers: {draw_tiers(plan.out)}")
    for o in summary["observations"]:
        print(f"  {o['verdict']:<32} {o['claim'][:90]}")
    failed = [n for n, o in outcomes.items() if o.startswith("failed")]
    if failed:
        print(f"{len(failed)} run(s) failed: {failed[:5]}", file=sys.stderr)
        return 1
    return 0
