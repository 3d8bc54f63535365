"""Accuracy of centralized SC, FedAvg+SC and FedSC at the CPU Fashion-MNIST config.

Issue 3 ("Accuracy"): Fashion-MNIST, 10 clients x 1 class, full participation;
KNN (k = 200, t = 0.1, cosine) on backbone and projector features and a linear
probe on frozen backbone features, over several seeds; mean +- sample std.
Target: FedSC >= FedAvg+SC + 2 points and closing at least half of the gap to
centralized SC.

Each (method, seed) run is ``fedspectral train --config configs/<cfg>.yaml
--set run.seed=S`` (the checked-in configs; extra ``--set`` overrides apply to
every run), written to ``<out>/<method>_s<seed>/``.  Runs whose ``results.json``
exists are skipped (resumable; an interrupted run resumes from its checkpoint).
At most ``--jobs`` runs at a time, each in its own process with
``run.threads = --threads``, under ``nice``.

Usage::

    nice .venv/bin/python benchmarks/fedsc_accuracy.py                 # test split, 3 seeds
    .venv/bin/python benchmarks/fedsc_accuracy.py --table-only         # table from results
    .venv/bin/python benchmarks/fedsc_accuracy.py --split val --out results/accuracy_val

Writes ``<out>/TABLE.md`` and ``<out>/summary.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)

METHODS = {  # label -> config
    "central_sc": "fmnist_central_sc",
    "fedavg_sc": "fmnist_fedavg_sc",
    "fedsc": "fmnist_fedsc",
}
LABELS = {"central_sc": "centralized SC", "fedavg_sc": "FedAvg+SC", "fedsc": "FedSC"}
METRICS = ("knn_backbone", "knn_projector", "linear_probe")


def _cmd(method: str, seed: int, out: Path, args: argparse.Namespace) -> list[str]:
    cmd = [
        "nice",
        sys.executable,
        "-m",
        "fedspectral.cli",
        "train",
        "--config",
        str(ROOT / "configs" / f"{METHODS[method]}.yaml"),
        "--out",
        str(out),
        "--quiet",
        "--set",
        f"run.seed={seed}",
        "--set",
        f"run.threads={args.threads}",
    ]
    if args.split == "val":
        cmd += ["--set", f"data.val_fraction={args.val_fraction}", "--set", "data.eval_split=val"]
    for s in args.set:
        cmd += ["--set", s]
    if (out / "checkpoint.pt").exists():
        cmd.append("--resume")
    return cmd


def run_grid(args: argparse.Namespace) -> None:
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    todo = [
        (m, s)
        for s in args.seeds
        for m in args.methods
        if not (root / f"{m}_s{s}" / "results.json").exists()
    ]
    running: list[tuple[str, subprocess.Popen, float]] = []
    env = dict(os.environ)
    while todo or running:
        while todo and len(running) < args.jobs:
            m, s = todo.pop(0)
            out = root / f"{m}_s{s}"
            out.mkdir(parents=True, exist_ok=True)
            cmd = _cmd(m, s, out, args)
            (out / "command.txt").write_text(" ".join(cmd) + "\n")
            print(f"[{time.strftime('%H:%M:%S')}] start {m} seed {s}", flush=True)
            with open(out / "train.log", "w") as log:  # the child keeps its own handle
                proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=ROOT, env=env)
            running.append((f"{m}_s{s}", proc, time.time()))
        time.sleep(5)
        for item in list(running):
            name, p, t0 = item
            if p.poll() is not None:
                running.remove(item)
                print(
                    f"[{time.strftime('%H:%M:%S')}] done {name} rc={p.returncode} "
                    f"({time.time() - t0:.0f} s)",
                    flush=True,
                )


def _fmt(xs: list[float]) -> str:
    if not xs:
        return "-"
    m = 100 * statistics.fmean(xs)
    sd = 100 * statistics.stdev(xs) if len(xs) > 1 else float("nan")
    return f"{m:.2f} ± {sd:.2f} (n={len(xs)})" if len(xs) > 1 else f"{m:.2f} (n=1)"


def table(args: argparse.Namespace) -> str:
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, list[float]]] = {}
    secs: dict[str, list[float]] = {}
    per_seed: dict[str, dict[int, dict[str, float]]] = {}
    for m in args.methods:
        rows[m] = {k: [] for k in METRICS}
        secs[m] = []
        per_seed[m] = {}
        for s in args.seeds:
            f = root / f"{m}_s{s}" / "results.json"
            if not f.exists():
                continue
            res = json.loads(f.read_text())
            fin = res.get("final", {})
            per_seed[m][s] = {k: fin[k] for k in METRICS if k in fin}
            for k in METRICS:
                if k in fin:
                    rows[m][k].append(float(fin[k]))
            secs[m].append(float(res["timings"]["total_seconds"]))
    split = "validation part of the train split" if args.split == "val" else "test split"
    head = (
        f"Fashion-MNIST, 10 clients x 1 class, full participation; evaluated on the "
        f"{split}; accuracy in % (mean ± sample std over seeds {list(args.seeds)})."
    )
    lines = [
        head,
        "",
        "| method | KNN backbone | KNN projector | linear probe | minutes per run |",
        "|---|---|---|---|---|",
    ]
    for m in args.methods:
        mins = f"{statistics.fmean(secs[m]) / 60:.1f}" if secs[m] else "-"
        lines.append(
            f"| {LABELS[m]} | {_fmt(rows[m]['knn_backbone'])} | "
            f"{_fmt(rows[m]['knn_projector'])} | {_fmt(rows[m]['linear_probe'])} | "
            f"{mins} |"
        )
    lines.append("")
    # target check per metric, on the means
    if all(m in rows for m in ("central_sc", "fedavg_sc", "fedsc")):
        lines.append(
            "| metric | FedSC − FedAvg+SC | gap closed (FedSC−FedAvg)/(central−FedAvg) "
            "| target met (≥ 2 points and ≥ 50 %) |"
        )
        lines.append("|---|---|---|---|")
        for k in METRICS:
            c, a, f = (rows[m][k] for m in ("central_sc", "fedavg_sc", "fedsc"))
            if not (c and a and f):
                continue
            mc, ma, mf = (100 * statistics.fmean(x) for x in (c, a, f))
            diff = mf - ma
            gap = mc - ma
            closed = diff / gap if abs(gap) > 1e-9 else math.nan
            ok = diff >= 2.0 and closed >= 0.5
            lines.append(f"| {k} | {diff:+.2f} | {100 * closed:.0f} % | {'yes' if ok else 'no'} |")
        lines.append("")
    lines.append("Per seed (%):")
    lines.append("")
    lines.append("| method | seed | KNN backbone | KNN projector | linear probe |")
    lines.append("|---|---|---|---|---|")
    for m in args.methods:
        for s, v in sorted(per_seed[m].items()):
            lines.append(
                f"| {LABELS[m]} | {s} | "
                + " | ".join(f"{100 * v[k]:.2f}" if k in v else "-" for k in METRICS)
                + " |"
            )
    text = "\n".join(lines) + "\n"
    (root / "TABLE.md").write_text(text)
    summ = {m: {k: rows[m][k] for k in METRICS} | {"seconds": secs[m]} for m in args.methods}
    (root / "summary.json").write_text(
        json.dumps(
            {"split": args.split, "seeds": list(args.seeds), "overrides": args.set, "runs": summ},
            indent=2,
        )
    )
    return text


def _check(ap: argparse.ArgumentParser, args: argparse.Namespace, given: set[str]) -> None:
    """Every option means something in the mode asked, and the runs' configs load with
    the overrides, before any run starts or any file is written."""
    _args.unique(ap, "--seeds", args.seeds)
    _args.unique(ap, "--methods", args.methods)
    if args.table_only:
        _args.refuse(ap, given, ("jobs", "threads", "val_fraction"), "with --table-only")
        return
    if args.split != "val":
        _args.refuse(ap, given, ("val_fraction",), "without --split val")
    from fedspectral.fed.validation import load_config, validate

    for m in args.methods:
        cmd = _cmd(m, args.seeds[0], Path(args.out) / "-", args)
        overrides = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
        config = ROOT / "configs" / f"{METHODS[m]}.yaml"
        what = f"--set {' '.join(args.set)}" if args.set else f"the config {config.name}"
        _args.config_error(ap, what, lambda c=config, o=overrides: validate(load_config(c, o)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=_args.out_folder, default=str(ROOT / "results" / "accuracy"))
    ap.add_argument("--seeds", type=_args.seed, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument(
        "--split",
        choices=("test", "val"),
        default="test",
        help="evaluate on the test split (final numbers) or on a held-out "
        "validation part of the train split (for choosing settings)",
    )
    ap.add_argument(
        "--val-fraction",
        type=_args.real(0.0, 1.0, low_open=True, high_open=True),
        default=0.2,
        help="with --split val: the part of the train split held out (default 0.2)",
    )
    ap.add_argument(
        "--set",
        action="append",
        type=_args.override,
        default=[],
        metavar="KEY=VALUE",
        help="extra config override for every run (repeatable)",
    )
    ap.add_argument("--jobs", type=_args.threads, default=2, help="runs at a time")
    ap.add_argument("--threads", type=_args.threads, default=1, help="torch threads per run")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args(argv)
    _check(ap, args, _args.given(ap, argv))
    if not args.table_only:
        run_grid(args)
    print(table(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
