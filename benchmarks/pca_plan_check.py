"""Independent check of a ``fedspectral pca-plan`` answer by simulation.

The README's example: p = 40, k = 5, ε = 1, δ = 1e-4, the seed's covariance
(VVᵀ + I)/(10p) (eigen-gap 0.0025), target error 0.5 with confidence 0.9.  At the planned
n and at half of it, fresh repeats draw S = XᵀX/n from its Wishart law (a random V each
time) and run Algorithm 1 in the aggregate-noise mode (analytic σ, isometric message),
i.e. a different code path from the planner's Gaussian model.

Usage::

    nice .venv/bin/python benchmarks/pca_plan_check.py [--n 2620000000] [--repeats 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)

#: the dimension of the check's covariance (the README's example)
P = 40


def fraction(n: int, repeats: int, seed: int, target: float = 0.5) -> float:
    from fedspectral.experiments.pca_bench import tasks as pb
    from fedspectral.linalg import subspace_distance
    from fedspectral.pca import ldp_from_moment, spiked_covariance

    hits = 0
    for r in range(repeats):
        rng = np.random.default_rng([seed, r])
        Sigma, V = spiked_covariance(P, 5, 1.0, rng)
        S = pb.wishart_moment(Sigma, n, rng)
        Vh = ldp_from_moment(S, n, 5, 1.0, 1e-4, rng, vectorisation="isometric")[0]
        hits += subspace_distance(Vh, V) <= target
    return hits / repeats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--n",
        type=_args.count(2 * P, 10**15),
        default=2_620_000_000,
        help=f"users planned (n/2 >= p = {P}: the Wishart law needs n >= p; <= 1e15)",
    )
    ap.add_argument(
        "--repeats",
        type=_args.count(2, 1_000_000),
        default=1000,
        help="repeats at n (half as many at n/2)",
    )
    ap.add_argument("--seed", type=_args.seed, default=21)
    a = ap.parse_args(argv)
    print(
        f"n = {a.n:.3g}: error <= 0.5 in {fraction(a.n, a.repeats, a.seed):.3f} of "
        f"{a.repeats} repeats; n/2: {fraction(a.n // 2, a.repeats // 2, a.seed + 1):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
