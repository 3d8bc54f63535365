"""Is the linear probe converged?  The probe of finished runs, re-evaluated at other budgets.

    python scripts/probe_convergence.py RUN_DIR [RUN_DIR ...] --out FILE.json

For each folder written by ``fedspectral train --out`` (``config.yaml``, ``results.json``
and the final ``checkpoint.pt``), the probe is evaluated on the untrained network
(the initial weights, rebuilt from the run's seed) and on the final weights, with the
run's own settings (no feature normalisation, ``eval.probe_epochs``), with more epochs,
with standardised features, and with the converged L-BFGS probe (``lbfgs``). The first
column must equal the run's recorded ``linear_probe`` (a consistency check; the script
fails otherwise). No training is done.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

BUDGETS = (
    ("none", None),
    ("none", 1000),
    ("standardize", 100),
    ("standardize", 300),
    ("standardize", 1000),
)


def probe_budgets(run_dir: Path) -> dict:
    from fedspectral.fed import simulation as sim_mod
    from fedspectral.fed.evaluation import linear_probe_accuracy
    from fedspectral.fed.validation import load_config
    from fedspectral.fed.weights import arrays_to_net, net_to_arrays

    cfg = load_config(run_dir / "config.yaml")
    recorded = json.loads((run_dir / "results.json").read_text())
    sim = sim_mod.Simulation(cfg)
    sim._setup()
    initial = net_to_arrays(sim.net)
    state = sim_mod.load_run_state(run_dir / sim_mod.CHECKPOINT, cfg)
    if state.round != cfg.method.rounds:
        raise SystemExit(f"{run_dir}: no checkpoint of the final round")
    out = {
        "run": f"{run_dir.parent.name}/{run_dir.name}",
        "method": recorded["method"],
        "probe_epochs": cfg.eval.probe_epochs,
    }
    for label, weights, rec in (
        ("untrained", initial, recorded["initial"]["linear_probe"]),
        ("final", state.server.weights, recorded["final"]["linear_probe"]),
    ):
        arrays_to_net(sim.net, weights)
        accs = {}
        for norm, epochs in BUDGETS:
            epochs = cfg.eval.probe_epochs if epochs is None else epochs
            accs[f"{norm}@{epochs}"] = linear_probe_accuracy(
                sim.net, sim.fed, cfg, solver="adam", epochs=epochs, normalize=norm
            )["linear_probe"]
        accs["lbfgs"] = linear_probe_accuracy(sim.net, sim.fed, cfg, solver="lbfgs")["linear_probe"]
        own = accs[f"none@{cfg.eval.probe_epochs}"]
        if own != rec:
            raise SystemExit(f"{run_dir} {label}: re-evaluated probe {own} != recorded {rec}")
        out[label] = accs
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    missing = [str(r) for r in a.runs if not (r / "results.json").is_file()]
    if missing:
        p.error(f"not finished run folders: {', '.join(missing)}")
    torch.set_num_threads(1)
    rows = []
    for r in a.runs:
        row = probe_budgets(r)
        rows.append(row)
        for label in ("untrained", "final"):
            cells = " | ".join(f"{k} {v * 100:.1f}" for k, v in row[label].items())
            print(f"{row['run']:36s} {label:9s} {cells}", flush=True)
    a.out.write_text(
        json.dumps(
            {"budgets": [f"{n}@{e or 'run'}" for n, e in BUDGETS] + ["lbfgs"], "runs": rows},
            indent=1,
        )
        + "\n"
    )
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
