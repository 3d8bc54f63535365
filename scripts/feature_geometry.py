"""Why federated features fall below the untrained network: the geometry of the backbone
features h on the evaluation images, for the initial and the final weights of finished runs.

    python scripts/feature_geometry.py RUN_DIR [RUN_DIR ...] --out FILE.json

For each folder written by ``fedspectral train --out`` (``config.yaml`` and the final
``checkpoint.pt``), h is computed on the run's evaluation images (all classes mixed; the
network has no batch statistics, so batches do not matter) for the untrained network (the
initial weights, rebuilt from the run's seed) and the final weights.  On the unit-normalised
features (what the cosine KNN sees) it reports: the total variance tr S_T (0: every image
at one point), the between-class share tr S_B / tr S_T (how much of the spread separates the
classes), the within-class spread tr S_W, and the participation ratio of the covariance of
the raw h, (tr C)^2 / tr C^2 (the number of directions used).  No training is done.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def geometry(h: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Total variance, between-class share, within-class spread (unit-normalised h) and
    the participation ratio of the covariance of the raw h."""
    u = h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)
    mu = u.mean(0)
    total = float(((u - mu) ** 2).sum(1).mean())
    within = 0.0
    between = 0.0
    for c in np.unique(labels):
        uc = u[labels == c]
        w = len(uc) / len(u)
        within += w * float(((uc - uc.mean(0)) ** 2).sum(1).mean())
        between += w * float(((uc.mean(0) - mu) ** 2).sum())
    ev = np.linalg.eigvalsh(np.cov(h, rowvar=False))
    return {
        "total_var": total,
        "between_share": between / total if total > 0 else 0.0,
        "within_spread": within,
        "participation_ratio": float(ev.sum() ** 2 / max((ev**2).sum(), 1e-300)),
    }


def run_geometry(run_dir: Path) -> dict:
    from fedspectral.eval import encoder_features
    from fedspectral.fed import simulation as sim_mod
    from fedspectral.fed.validation import load_config
    from fedspectral.fed.weights import arrays_to_net, net_to_arrays

    cfg = load_config(run_dir / "config.yaml")
    sim = sim_mod.Simulation(cfg)
    sim._setup()
    initial = net_to_arrays(sim.net)
    state = sim_mod.load_run_state(run_dir / sim_mod.CHECKPOINT, cfg)
    if state.round != cfg.method.rounds:
        raise SystemExit(f"{run_dir}: no checkpoint of the final round")
    labels = np.asarray(sim.fed.eval.labels)
    out = {
        "run": f"{run_dir.parent.name}/{run_dir.name}",
        "method": cfg.method.name,
        "rounds": cfg.method.rounds,
    }
    for label, weights in (("untrained", initial), ("final", state.server.weights)):
        arrays_to_net(sim.net, weights)
        h, _ = encoder_features(sim.net, sim.fed.eval.images, cfg.eval.batch_size, cfg.run.device)
        out[label] = geometry(np.asarray(h, dtype=np.float64), labels)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for r in a.runs:
        row = run_geometry(r)
        rows.append(row)
        for label in ("untrained", "final"):
            cells = " | ".join(f"{k} {v:.3f}" for k, v in row[label].items())
            print(f"{row['run']:40s} {label:9s} {cells}", flush=True)
    a.out.write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
