"""``fedspectral demo``: a short tour of both pillars, printing result tables.

1. Locally private PCA: the quick version of ``fedspectral pca-bench`` (the LDP-PCA paper's
   Figure 1 and Tables 1-2 at reduced size, the Fashion-MNIST analogue), into
   ``<out>/pca``.
2. Federated SSL: centralized SC, FedAvg+SC and FedSC on the CPU protocol
   (``configs/fmnist_*.yaml``, 10 clients x 1 class) shortened to ``--rounds``
   rounds, plus FedSC with DP correlation sharing at ε = ``--epsilon``, into
   ``<out>/fed``.  The table puts the committed reproduction (100 rounds: the core
   tier, ``docs/results/fedsc_cpu/core/summary.json``, 10 seeds; without it the full
   tier, ``docs/results/fedsc_cpu/summary.json``, 3 seeds) beside the short run's own
   numbers, each labelled; the untrained row is the first run's evaluation of its
   initial weights.

Everything here is the library's normal entry points with smaller settings; the
full experiments are ``fedspectral pca-bench`` and ``fedspectral reproduce fedsc``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from fedspectral.experiments.preflight import preflight
from fedspectral.fed.validation import load_config, with_output
from fedspectral.inputs import check_nonempty_path

CONFIGS = {
    "centralized SC": "configs/fmnist_central_sc.yaml",
    "FedAvg+SC": "configs/fmnist_fedavg_sc.yaml",
    "FedSC": "configs/fmnist_fedsc.yaml",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/demo", help="output folder (results/demo)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="rounds of the short federated runs (10; the protocol runs 100)",
    )
    parser.add_argument(
        "--max-train",
        type=int,
        default=3000,
        help="training images used by the federated part (3000)",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        default=6.0,
        help="target epsilon of FedSC's DP correlation sharing (6)",
    )
    parser.add_argument(
        "--delta",
        type=float,
        default=1e-3,
        help="delta of FedSC's DP correlation sharing (1e-3, below 1/|D_j| = 1/300)",
    )
    parser.add_argument("--skip-pca", action="store_true", help="only the federated part")
    parser.add_argument("--skip-fed", action="store_true", help="only the PCA part")


def _validate(args: argparse.Namespace) -> None:
    if args.skip_pca and args.skip_fed:
        raise ValueError("--skip-pca and --skip-fed together leave nothing to do; drop one of them")
    check_nonempty_path(args.out, "--out")
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds!r}")
    if args.max_train < 100:
        raise ValueError(f"--max-train must be >= 100, got {args.max_train!r}")
    if not args.epsilon > 0:
        raise ValueError(f"--epsilon must be > 0, got {args.epsilon!r}")
    if not 0 < args.delta < 1:
        raise ValueError(f"--delta must lie in (0, 1), got {args.delta!r}")
    for path in CONFIGS.values():
        if not args.skip_fed and not Path(path).is_file():
            raise ValueError(f"config {path!r} not found: run the demo from the repository root")


def _pca_config(out: Path) -> Any:
    """The quick ``pca-bench`` config of the PCA part (validated)."""
    from fedspectral.experiments import pca_bench  # lazy: pulls in SciPy

    ns = argparse.Namespace(
        quick=True,
        repeats=None,
        sparse_repeats=None,
        out=str(out / "pca"),
        jobs=1,
        only=None,
        seed=0,
        no_progress=False,
        reanalyse=False,
    )
    cfg = pca_bench.config_from_args(ns)
    pca_bench.validate(cfg)
    return cfg


def _pca_part(cfg: Any, out: Path) -> None:
    from fedspectral.experiments import pca_bench  # lazy: pulls in SciPy

    payload = pca_bench.run_bench(cfg)
    print(pca_bench.summary_text(cfg, payload))
    print(f"(full tables: {out / 'pca'}; full run: fedspectral pca-bench)\n")


#: the committed runs the demo prints beside its own short run: the core tier (10 seeds)
#: when it is committed, else the full tier (3 seeds)
COMMITTED = ("docs/results/fedsc_cpu/core/summary.json", "docs/results/fedsc_cpu/summary.json")
_FINALS = ("knn_backbone", "knn_projector", "linear_probe")


def committed_summary() -> Path:
    """The first of :data:`COMMITTED` that exists (the last one when none does); its
    folder holds the report with the verdicts."""
    return Path(next((c for c in COMMITTED if Path(c).is_file()), COMMITTED[-1]))


def committed_table(
    path: str | Path | None = None, setting: str = "10x1-10/10"
) -> tuple[dict[str, dict[str, float]], int]:
    """Mean final accuracies per method of the committed ``reproduce`` run's Table 2 runs
    (``variant`` ``"main"``; no DP, late-start or stable-FedSC rows) on ``setting``, and
    the number of seeds; ``({}, 0)`` when the file is missing.  Default: the first of
    :data:`COMMITTED` that exists."""
    import json

    p = committed_summary() if path is None else Path(path)
    if not p.is_file():
        return {}, 0
    with open(p) as fh:
        runs = json.load(fh).get("runs", [])
    acc: dict[str, dict[str, list[float]]] = {}
    seeds: set[int] = set()
    for r in runs:
        if r.get("setting") != setting or r.get("dp") is not None:
            continue
        if r.get("variant", "main") != "main":  # the late-start and GroupNorm controls
            continue
        seeds.add(int(r["seed"]))
        for k in _FINALS:
            if k in r.get("final", {}):
                acc.setdefault(r["method"], {}).setdefault(k, []).append(float(r["final"][k]))
    return ({m: {k: sum(v) / len(v) for k, v in d.items()} for m, d in acc.items()}, len(seeds))


def _fed_configs(args: argparse.Namespace, out: Path) -> list[tuple[str, str, Any]]:
    """``(key, label, config)`` of the four federated runs, each loaded, validated and
    through ``fedspectral train``'s checks (model, privacy, output folder)."""
    common = [
        f"method.rounds={args.rounds}",
        f"data.max_train={args.max_train}",
        f"eval.every={args.rounds}",
        "run.progress=true",
    ]
    runs: list[tuple[str, str, str, list[str]]] = [
        ("central_sc", "centralized SC", CONFIGS["centralized SC"], []),
        ("fedavg_sc", "FedAvg+SC", CONFIGS["FedAvg+SC"], []),
        ("fedsc", "FedSC", CONFIGS["FedSC"], []),
        (
            "fedsc_dp",
            f"FedSC, DP eps={args.epsilon:g}",
            CONFIGS["FedSC"],
            ["dp.enabled=true", f"dp.epsilon={args.epsilon}", f"dp.delta={args.delta}"],
        ),
    ]
    cfgs = []
    for key, label, path, extra in runs:
        cfg = with_output(load_config(path, common + extra), out=str(out / "fed" / key))
        try:
            preflight(cfg, cfg.run.out)
        except ValueError as exc:
            raise ValueError(
                f"the {label} run (--epsilon {args.epsilon:g}, --delta "
                f"{args.delta:g}, --rounds {args.rounds}, --max-train "
                f"{args.max_train}): {exc}"
            ) from exc
        cfgs.append((key, label, cfg))
    return cfgs


def _fed_part(args: argparse.Namespace, out: Path, cfgs: list[tuple[str, str, Any]]) -> None:
    # per call: tests replace train.run_experiment
    from fedspectral.experiments.train import run_experiment

    rows: dict[str, dict[str, Any]] = {}
    spent = 0.0
    for i, (key, label, cfg) in enumerate(cfgs):
        # the estimate is this machine's measured speed: the mean of the runs done so far
        left = "" if i == 0 else f", about {spent / i * (len(cfgs) - i) / 60:.1f} min left"
        print(f"   run {i + 1}/{len(cfgs)}: {label}{left}", flush=True)
        t0 = time.perf_counter()
        res = run_experiment(cfg)
        spent += time.perf_counter() - t0
        priv = res.get("privacy", {})
        if "initial" in res and "untrained" not in rows:
            rows["untrained"] = {"label": "untrained network", **res["initial"]}
        rows[key] = {
            "label": label,
            **res.get("final", {}),
            "eps": priv.get("epsilon_rdp") if priv.get("releases") else None,
            "seconds": time.perf_counter() - t0,
        }
    full, n_seeds = committed_table()

    def cell(d: dict[str, Any] | None) -> str:
        if not d or "knn_backbone" not in d:
            return f"{'-':>20}"
        vals = [d.get(k) for k in _FINALS]
        return " / ".join("  - " if v is None else f"{100 * v:4.1f}" for v in vals).rjust(20)

    print(
        f"\nFashion-MNIST, 10 clients x 1 class, {args.max_train} images, the CPU protocol "
        f"of configs/fmnist_*.yaml; KNN backbone / KNN projector / linear probe in % (test split)"
    )
    print(f"{'method':<22} {'committed run':>20} {'this short run':>20} {'eps':>6} {'time s':>7}")
    print(
        f"{'':<22} {f'(100 rounds, {n_seeds} seeds)':>20} {f'({args.rounds} rounds, seed 0)':>20}"
    )
    for key in ("untrained", "central_sc", "fedavg_sc", "fedsc", "fedsc_dp"):
        r = rows.get(key)
        if r is None:
            continue
        ref = None if key == "fedsc_dp" else full.get(key)  # the full run's DP rows differ
        eps = "-" if r.get("eps") is None else f"{r['eps']:.2f}"
        secs = "-" if "seconds" not in r else f"{r['seconds']:.0f}"
        print(f"{r['label']:<22} {cell(ref)} {cell(r)} {eps:>6} {secs:>7}")
    if not full:
        print(f"(no committed run at {' or '.join(COMMITTED)})")
    d = 100 * (rows["fedsc"]["knn_backbone"] - rows["fedavg_sc"]["knn_backbone"])
    print(
        f"this short run: FedSC - FedAvg+SC = {d:+.1f} KNN points after {args.rounds} rounds, "
        "one seed: it shows the pipeline, not the paper's claims; the full run and its "
        f"verdicts: {committed_summary().parent / 'REPORT.md'} (fedspectral reproduce fedsc)"
    )
    print(f"(per-run results and curves: {out / 'fed'})")


def run(args: argparse.Namespace) -> int:
    _validate(args)
    out = Path(args.out)
    # every part's checks before any part runs
    pca_cfg = None if args.skip_pca else _pca_config(out)
    fed_cfgs = None if args.skip_fed else _fed_configs(args, out)
    t0 = time.perf_counter()
    parts = int(pca_cfg is not None) + int(fed_cfgs is not None)
    if pca_cfg is not None:
        print(f"== [1/{parts}] Locally private PCA (the LDP-PCA paper), quick reproduction ==")
        _pca_part(pca_cfg, out)
        print(f"   (stage 1 took {time.perf_counter() - t0:.0f} s)", flush=True)
    if fed_cfgs is not None:
        print(f"== [{parts}/{parts}] FedSC vs FedAvg+SC (the FedSC paper), short run ==")
        _fed_part(args, out, fed_cfgs)
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
    return 0
