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

import numpy as np


def fraction(n: int, repeats: int, seed: int, target: float = 0.5) -> float:
    from fedspectral.experiments.pca_bench import tasks as pb
    from fedspectral.linalg import subspace_distance
    from fedspectral.pca import ldp_from_moment, spiked_covariance

    hits = 0
    for r in range(repeats):
        rng = np.random.default_rng([seed, r])
        Sigma, V = spiked_covariance(40, 5, 1.0, rng)
        S = pb.wishart_moment(Sigma, n, rng)
        Vh = ldp_from_moment(S, n, 5, 1.0, 1e-4, rng, vectorisation="isometric")[0]
        hits += subspace_distance(Vh, V) <= target
    return hits / repeats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2_620_000_000)
    ap.add_argument("--repeats", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=21)
    a = ap.parse_args()
    print(
        f"n = {a.n:.3g}: error <= 0.5 in {fraction(a.n, a.repeats, a.seed):.3f} of "
        f"{a.repeats} repeats; n/2: {fraction(a.n // 2, a.repeats // 2, a.seed + 1):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
