"""FedSC's overshoot on the linear encoder of tests/fed/test_convergence_linear.py, by
step size, local steps, client spread and stability option (docs/fedsc_tuning.md,
"Stability").  A NumPy re-implementation of the same rounds (full-batch local gradient
steps, exact shared correlations, alpha = q_j or linear 1 -> 0.2), cheap enough to scan;
the test file checks two of its cells through the real FedSC code.

    python scripts/fedsc_linear_stability.py > docs/results/fedsc_stability/linear.md

Each cell: the final gap (L - L*) / |L*| after ``ROUNDS`` rounds and, in brackets, the
largest rise of the gap between two rounds (relative to |L*|); ``div`` when it diverged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fed"))
import test_convergence_linear as lin

ROUNDS = 100
OPTIONS = {
    "plain": {},
    "server_lr 0.5": {"eta_s": 0.5},
    "tracked": {"beta": 1.0},
    "FedAvg+SC": {"alpha": 1.0},
}


def _moments(clients):
    return [
        ((xa.T @ xb + xb.T @ xa) / (2 * len(xa)), (xa.T @ xa + xb.T @ xb) / (2 * len(xa)))
        for xa, xb in clients.values()
    ]


def run(clients, lr, epochs, alpha="q", beta=0.0, eta_s=1.0, rounds=ROUNDS) -> str:
    """FedSC rounds on the linear encoder; ``beta`` 1: the tracked cross term."""
    import torch

    a, b = lin._moments(clients)
    lstar = lin.optimum(a, b)
    mom = _moments(clients)
    q = 1.0 / len(mom)
    torch.manual_seed(0)  # the test's initial weights
    w = torch.nn.Linear(lin.P, lin.D, bias=False).double().weight.detach().numpy().copy()
    gaps = []
    for t in range(rounds):
        al = (
            q
            if alpha == "q"
            else 1.0 - 0.8 * t / (rounds - 1)
            if alpha == "linear"
            else float(alpha)
        )
        r = [w @ bj @ w.T for _, bj in mom]
        r_sum = sum(r) * q
        step = np.zeros_like(w)
        for j, (aj, bj) in enumerate(mom):
            r_minus = (r_sum - q * r[j]) / (1 - q)
            wj = w.copy()
            for _ in range(epochs):
                rj = wj @ bj @ wj.T
                g = al * rj + (1 - al) * (r_minus + beta * (rj - r[j]))
                wj = wj - lr * (-2 * wj @ aj + 2 * g @ wj @ bj)
            step += q * (wj - w)
        w = w + eta_s * step
        gaps.append((lin.global_loss(w, a, b) - lstar) / abs(lstar))
        if not np.isfinite(gaps[-1]) or gaps[-1] > 1e6:
            return "div"
    return f"{gaps[-1]:.0e} ({np.diff(gaps).max():+.0e})"


def main() -> None:
    print(f"| spread | alpha | lr | E | {' | '.join(OPTIONS)} |")
    print("|---|---|---|---|" + "---|" * len(OPTIONS))
    for spread in (0.3, 1.5):
        clients = lin._problem(spread=spread)
        for alpha in ("q", "linear"):
            for lr, epochs in ((0.1, 1), (0.1, 5), (0.1, 10), (0.2, 5), (0.3, 1), (0.3, 5)):
                cells = [
                    run(clients, lr, epochs, **({"alpha": alpha} | o)) for o in OPTIONS.values()
                ]
                print(f"| {spread} | {alpha} | {lr} | {epochs} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
