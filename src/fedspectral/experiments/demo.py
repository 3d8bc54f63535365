"""``fedspectral demo``: a short tour of both pillars, printing result tables.

1. Locally private PCA: the quick version of ``fedspectral pca-bench`` (seed 000's
   Figure 1 and Tables 1-2 at reduced size, the Fashion-MNIST analogue), into
   ``<out>/pca``.
2. Federated SSL: FedSC against FedAvg+SC on the CPU Fashion-MNIST configs
   (10 clients x 1 class), shortened to ``--rounds`` rounds on ``--max-train``
   images, plus FedSC with DP correlation sharing at ε = ``--epsilon``, into
   ``<out>/fed``.

Everything here is the library's normal entry points with smaller settings; the
full experiments are ``fedspectral pca-bench`` and ``fedspectral reproduce fedsc``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

CONFIGS = {"FedAvg+SC": "configs/fmnist_fedavg_sc.yaml", "FedSC": "configs/fmnist_fedsc.yaml"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/demo", help="output folder (results/demo)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="federated rounds of the FedSC vs FedAvg+SC comparison (5)")
    parser.add_argument("--max-train", type=int, default=3000,
                        help="training images used by the federated part (3000)")
    parser.add_argument("--epsilon", type=float, default=6.0,
                        help="target epsilon of FedSC's DP correlation sharing (6; delta 1e-2)")
    parser.add_argument("--skip-pca", action="store_true", help="only the federated part")
    parser.add_argument("--skip-fed", action="store_true", help="only the PCA part")


def _validate(args: argparse.Namespace) -> None:
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {args.rounds!r}")
    if args.max_train < 100:
        raise ValueError(f"--max-train must be >= 100, got {args.max_train!r}")
    if not args.epsilon > 0:
        raise ValueError(f"--epsilon must be > 0, got {args.epsilon!r}")
    for path in CONFIGS.values():
        if not args.skip_fed and not Path(path).is_file():
            raise ValueError(f"config {path!r} not found: run the demo from the repository root")


def _pca_part(out: Path) -> None:
    from fedspectral.experiments import pca_bench

    ns = argparse.Namespace(quick=True, repeats=None, sparse_repeats=None, out=str(out / "pca"),
                            jobs=1, only=None, seed=0, no_progress=False, reanalyse=False)
    cfg = pca_bench.config_from_args(ns)
    payload = pca_bench.run_bench(cfg)
    print(pca_bench.summary_text(cfg, payload))
    print(f"(full tables: {out / 'pca'}; full run: fedspectral pca-bench)\n")


def _fed_part(args: argparse.Namespace, out: Path) -> None:
    from fedspectral.experiments.config import load_config
    from fedspectral.experiments.train import run_experiment

    common = [f"method.rounds={args.rounds}", f"data.max_train={args.max_train}",
              f"eval.every={args.rounds}", "eval.linear_probe=false", "run.progress=true"]
    runs: list[tuple[str, str, list[str]]] = [
        ("FedAvg+SC", CONFIGS["FedAvg+SC"], []),
        ("FedSC", CONFIGS["FedSC"], []),
        # DP needs per-sample normalisation: batch statistics would let one sample move
        # the others' representations (config validation refuses norm=batch with DP)
        (f"FedSC, DP eps={args.epsilon:g}, GN", CONFIGS["FedSC"],
         ["dp.enabled=true", f"dp.epsilon={args.epsilon}", "dp.delta=0.01", "model.norm=group"]),
    ]
    cfgs = []
    for label, path, extra in runs:  # load and validate everything before training
        cfg = load_config(path, common + extra)
        slug = label.split(",")[0].replace("+", "_").lower() + ("_dp" if extra else "")
        cfg.run.out = str(out / "fed" / slug)
        cfgs.append((label, cfg))
    rows: list[dict[str, Any]] = []
    for label, cfg in cfgs:
        t0 = time.perf_counter()
        res = run_experiment(cfg)
        fin = res.get("final", {})
        priv = res.get("privacy", {})
        rows.append({"method": label, "knn_backbone": fin.get("knn_backbone"),
                     "knn_projector": fin.get("knn_projector"),
                     "eps_rdp": priv.get("epsilon_rdp") if priv.get("releases") else None,
                     "eps_pld": priv.get("epsilon_pld") if priv.get("releases") else None,
                     "mb_round": res["timings"].get("mean_bytes_up_per_round", 0) / 1e6,
                     "seconds": time.perf_counter() - t0})
    print(f"\nFedSC vs FedAvg+SC: Fashion-MNIST, 10 clients x 1 class, {args.max_train} images, "
          f"{args.rounds} rounds (KNN k=200 on the test split)")
    print(f"{'method':<22} {'kNN backbone':>12} {'kNN proj.':>10} {'eps RDP':>8} {'eps PLD':>8} "
          f"{'MB up/round':>11} {'time s':>7}")

    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    def num(x: Any) -> str:
        return "-" if x is None else f"{x:.2f}"

    for r in rows:
        print(f"{r['method']:<22} {pct(r['knn_backbone']):>12} {pct(r['knn_projector']):>10} "
              f"{num(r['eps_rdp']):>8} {num(r['eps_pld']):>8} {r['mb_round']:>11.2f} "
              f"{r['seconds']:>7.0f}")
    print(f"(per-run results, CSV and convergence plots: {out / 'fed'}; "
          "a short run: accuracies are not the full-length numbers in the README)")


def run(args: argparse.Namespace) -> int:
    _validate(args)
    out = Path(args.out)
    t0 = time.perf_counter()
    if not args.skip_pca:
        print("== Locally private PCA (seed 000), quick reproduction ==")
        _pca_part(out)
    if not args.skip_fed:
        print("== FedSC vs FedAvg+SC (seed 001), short run ==")
        _fed_part(args, out)
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
    return 0
