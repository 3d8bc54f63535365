"""``fedspectral pca-plan``: how many users private PCA needs.

Prints the number of users for which Algorithm 1 (``--model local``) or the distributed
model over ``--holders`` data holders (``--model distributed``, secure aggregation;
``per-holder``, without) returns a ``k``-dimensional subspace
within ``--target-error`` of the true one in at least ``--confidence`` of simulated
repeats (:func:`fedspectral.pca.required_users`: simulation with the aggregate-noise
shortcut, bisection on ``n`` from the Theorem 2 rate), or says why the target cannot
be met.  Exit status 0 when a number is printed, 1 when the target is unreachable or
needs no data, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fedspectral pca-plan``."""
    parser.add_argument("--p", type=int, required=True, help="data dimension")
    parser.add_argument("--k", type=int, required=True, help="subspace dimension (k < p)")
    parser.add_argument("--epsilon", type=float, required=True, help="each user's ε")
    parser.add_argument("--delta", type=float, required=True, help="each user's δ")
    spec = parser.add_mutually_exclusive_group(required=True)
    spec.add_argument("--eigengap", type=float, default=None,
                      help="gap G > 0 of the covariance G(VVᵀ + I) (the seed's spiked model; "
                      "its own covariance at p = 40 is G = 1/(10p) = 0.0025)")
    spec.add_argument("--spectrum", default=None, metavar="FILE",
                      help="text file with the p eigenvalues of the covariance, or the p x p "
                      "covariance itself (symmetric, PSD, trace <= 1)")
    parser.add_argument("--target-error", type=float, required=True,
                        help="T > 0 in ‖V̂V̂ᵀ − VVᵀ‖_F")
    parser.add_argument("--confidence", type=float, default=0.9,
                        help="probability of meeting the target (default 0.9)")
    parser.add_argument("--calibration", default="analytic",
                        choices=("analytic", "classic", "paper"),
                        help="noise calibration (default analytic)")
    parser.add_argument("--vectorisation", default="auto",
                        choices=("auto", "isometric", "upper"),
                        help="message packing (default auto: isometric, upper for paper)")
    parser.add_argument("--model", default="local",
                        choices=("local", "distributed", "per-holder"),
                        help="local: every user adds her own noise (Algorithm 1); "
                        "distributed: data holders add shares of one central Gaussian "
                        "mechanism, summed by secure aggregation; per-holder: each holder "
                        "releases its sum with the full central noise (default local)")
    parser.add_argument("--holders", type=int, default=None, metavar="M",
                        help="number of data holders (distributed and per-holder models)")
    parser.add_argument("--min-contributors", type=int, default=None,
                        help="fewest holders the secure sum accepts; the shares are sized "
                        "for it (default: every holder)")
    parser.add_argument("--n-sim", type=int, default=400,
                        help="simulated repeats per tested n (default 400)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the full plan as JSON")


def _load_spectrum(path: str) -> np.ndarray:
    f = Path(path)
    if not f.is_file():
        raise ValueError(f"--spectrum {path!r}: no such file")
    try:
        a = np.loadtxt(f, dtype=np.float64, ndmin=1)
    except ValueError as exc:
        raise ValueError(f"--spectrum {path!r}: not a table of numbers ({exc})") from None
    if a.ndim == 2 and 1 in a.shape:
        a = a.ravel()
    return a


def _model_line(plan: object) -> str:
    if plan.model == "local":  # type: ignore[attr-defined]
        return "local model"
    return (f"{plan.model.replace('_', '-')} model over {plan.holders} holders "  # type: ignore[attr-defined]
            f"(min contributors {plan.min_contributors})")  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fedspectral pca-plan``."""
    from fedspectral.pca.planner import required_users

    try:
        spectrum = _load_spectrum(args.spectrum) if args.spectrum is not None else None
        plan = required_users(args.p, args.k, args.epsilon, args.delta,
                              target_error=args.target_error, eigengap=args.eigengap,
                              spectrum=spectrum, confidence=args.confidence,
                              calibration=args.calibration, vectorisation=args.vectorisation,
                              n_sim=args.n_sim, random_state=args.seed,
                              model=args.model.replace("-", "_"), holders=args.holders,
                              min_contributors=args.min_contributors)
    except (ValueError, TypeError) as exc:
        print(f"fedspectral pca-plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    elif plan.status == "ok":
        print(f"users needed: {plan.n:,} ({plan.n:.2e})")
        print(f"  {_model_line(plan)}, k = {plan.k} of p = {plan.p}, ε = {plan.epsilon:g}, "
              f"δ = {plan.delta:g}, {plan.calibration} σ = {plan.sigma:.4g}, "
              f"{plan.vectorisation} messages")
        print(f"  error <= {plan.target_error:g} in {plan.success_fraction:.1%} of "
              f"{plan.n_sim} simulated repeats (asked: {plan.confidence:.0%}; "
              f"non-private error {plan.nonprivate_error_quantile:.3g}; search "
              f"start {plan.n_rate:.2e})")
    else:
        print(f"{plan.status}: {plan.message}")
    return 0 if plan.status == "ok" else 1
