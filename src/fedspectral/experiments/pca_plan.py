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
import math
import sys
from typing import TYPE_CHECKING

import numpy as np

from fedspectral.checks import check_int, check_size
from fedspectral.inputs import check_input_file

if TYPE_CHECKING:
    from fedspectral.pca.planner import UsersPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fedspectral pca-plan``."""
    parser.add_argument(
        "--p",
        type=int,
        required=True,
        help="data dimension (at most 1000; FEDSPECTRAL_ALLOW_LARGE=1 lifts the bounds)",
    )
    parser.add_argument("--k", type=int, required=True, help="subspace dimension (k < p)")
    parser.add_argument("--epsilon", type=float, required=True, help="each user's ε")
    parser.add_argument("--delta", type=float, required=True, help="each user's δ")
    spec = parser.add_mutually_exclusive_group(required=True)
    spec.add_argument(
        "--eigengap",
        type=float,
        default=None,
        help="gap G > 0 of the covariance G(VVᵀ + I) (the paper's spiked model; "
        "its own covariance at p = 40 is G = 1/(10p) = 0.0025)",
    )
    spec.add_argument(
        "--spectrum",
        default=None,
        metavar="FILE",
        help="text file with the p eigenvalues of the covariance, or the p x p "
        "covariance itself (symmetric, PSD, trace <= 1)",
    )
    parser.add_argument("--target-error", type=float, required=True, help="T > 0 in ‖V̂V̂ᵀ − VVᵀ‖_F")
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.9,
        help="probability of meeting the target (default 0.9)",
    )
    parser.add_argument(
        "--calibration",
        default="analytic",
        choices=("analytic", "classic", "paper"),
        help="noise calibration (default analytic)",
    )
    parser.add_argument(
        "--vectorisation",
        default="auto",
        choices=("auto", "isometric", "upper"),
        help="message packing (default auto: isometric, upper for paper)",
    )
    parser.add_argument(
        "--model",
        default="local",
        choices=("local", "distributed", "per-holder"),
        help="local: every user adds her own noise (Algorithm 1); "
        "distributed: data holders add shares of one central Gaussian "
        "mechanism, summed by secure aggregation; per-holder: each holder "
        "releases its sum with the full central noise (default local)",
    )
    parser.add_argument(
        "--holders",
        type=int,
        default=None,
        metavar="M",
        help="number of data holders (distributed and per-holder models)",
    )
    parser.add_argument(
        "--min-contributors",
        type=int,
        default=None,
        help="fewest holders the secure sum accepts; the shares are sized "
        "for it (default: every holder)",
    )
    parser.add_argument(
        "--n-sim",
        type=int,
        default=400,
        help="simulated repeats per tested n (default 400, at most 100000 and n-sim x p^2 <= 2^28)",
    )
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the full plan as strict JSON (a non-finite number is "
        'null, and the field \'non_finite\' names it: {"n": "inf"})',
    )


#: Bounds of the simulation (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts them): each tested ``n``
#: holds two ``n_sim x p x p`` float64 arrays and eigen-decomposes ``n_sim`` ``p x p``
#: matrices, over about 20 bisection steps.  At ``n_sim x p^2 = MAX_SIM_ENTRIES`` the
#: arrays take 4 GiB; at ``p = MAX_P`` the default 400 repeats are about 8 000
#: decompositions of 1000 x 1000 matrices (time grows as ``p^3``): tens of minutes to
#: hours on two cores.
MAX_P = 1000
MAX_N_SIM = 100_000
MAX_SIM_ENTRIES = 1 << 28
#: largest ``--spectrum`` file read (a 1000 x 1000 covariance as text is about 25 MB)
MAX_SPECTRUM_BYTES = 64 << 20


def _check_sizes(args: argparse.Namespace) -> None:
    """The sizes and the seed, before any work (messages name the option)."""
    check_size(
        "--p",
        args.p,
        MAX_P,
        low=2,
        why="the simulation eigen-decomposes p x p matrices: time grows as p^3",
    )
    check_size("--n-sim", args.n_sim, MAX_N_SIM, low=50, why="simulated repeats per tested n")
    check_size(
        "--n-sim x --p^2",
        args.n_sim * args.p**2,
        MAX_SIM_ENTRIES,
        why=f"--n-sim {args.n_sim} x --p {args.p} squared: two arrays of that many "
        f"float64 entries, 4 GiB at the bound",
    )
    check_int("--seed", args.seed, low=0)


def _json_safe(obj: object, path: str, non_finite: dict[str, str]) -> object:
    """``obj`` with each non-finite float replaced by ``null`` and recorded in
    ``non_finite`` (``{"n": "inf"}``): strict JSON, which has no Infinity or NaN."""
    if isinstance(obj, dict):
        return {
            k: _json_safe(v, f"{path}.{k}" if path else str(k), non_finite) for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [_json_safe(v, f"{path}[{i}]", non_finite) for i, v in enumerate(obj)]
    if isinstance(obj, float) and not math.isfinite(obj):
        non_finite[path] = str(obj)
        return None
    return obj


def plan_json(plan: UsersPlan) -> str:
    """The plan as strict JSON: a non-finite number (``n`` of an unreachable target, a
    bracket end) is ``null``, and ``"non_finite"`` maps each such field to ``"inf"``,
    ``"-inf"`` or ``"nan"`` (``{}`` when there is none)."""
    non_finite: dict[str, str] = {}
    d = {str(k): _json_safe(v, str(k), non_finite) for k, v in plan.to_dict().items()}
    d["non_finite"] = non_finite
    return json.dumps(d, indent=2, allow_nan=False)


def _load_spectrum(path: str) -> np.ndarray:
    f = check_input_file(path, "--spectrum")
    if f.stat().st_size > MAX_SPECTRUM_BYTES:
        raise ValueError(
            f"--spectrum {path!r} is larger than {MAX_SPECTRUM_BYTES} bytes "
            f"(a {MAX_P} x {MAX_P} covariance as text is about 25 MB)"
        )
    try:
        a = np.loadtxt(f, dtype=np.float64, ndmin=1)
    except ValueError as exc:
        raise ValueError(f"--spectrum {path!r}: not a table of numbers ({exc})") from None
    if a.ndim == 2 and 1 in a.shape:
        a = a.ravel()
    return a


def _model_line(plan: UsersPlan) -> str:
    if plan.model == "local":
        return "local model"
    return (
        f"{plan.model.replace('_', '-')} model over {plan.holders} holders "
        f"(min contributors {plan.min_contributors})"
    )


def _asked(args: argparse.Namespace) -> str:
    """The request, as the options the user gave (a plan that cannot be met names them)."""
    keys = (
        "p",
        "k",
        "epsilon",
        "delta",
        "eigengap",
        "spectrum",
        "target_error",
        "model",
        "holders",
    )
    return "asked: " + " ".join(
        f"--{k.replace('_', '-')} {getattr(args, k)}"
        for k in keys
        if getattr(args, k, None) is not None
    )


def _name_flag(msg: str, args: argparse.Namespace) -> str:
    """``msg`` of the planner, naming the option the user gave when it opens with the
    library's parameter name (``target_error must be finite`` -> ``--target-error 1e400:``)."""
    for dest in (
        "target_error",
        "eigengap",
        "epsilon",
        "delta",
        "confidence",
        "n_sim",
        "holders",
        "min_contributors",
        "p",
        "k",
    ):
        if msg.startswith((dest + " ", dest + "=")) and hasattr(args, dest):
            flag = "--" + dest.replace("_", "-")
            return f"{flag} {getattr(args, dest)!r}: {msg}"
    return msg


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fedspectral pca-plan``."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.planner import required_users

    try:
        _check_sizes(args)
        spectrum = _load_spectrum(args.spectrum) if args.spectrum is not None else None
        plan = required_users(
            args.p,
            args.k,
            args.epsilon,
            args.delta,
            target_error=args.target_error,
            eigengap=args.eigengap,
            spectrum=spectrum,
            confidence=args.confidence,
            calibration=args.calibration,
            vectorisation=args.vectorisation,
            n_sim=args.n_sim,
            random_state=args.seed,
            model=args.model.replace("-", "_"),
            holders=args.holders,
            min_contributors=args.min_contributors,
        )
    except (ValueError, TypeError) as exc:
        print(f"fedspectral pca-plan: error: {_name_flag(str(exc), args)}", file=sys.stderr)
        return 2
    if args.json:
        print(plan_json(plan))
        if plan.status != "ok":
            print(
                f"fedspectral pca-plan: error: {plan.status}: {plan.message} ({_asked(args)})",
                file=sys.stderr,
            )
    elif plan.status == "ok":
        print(f"users needed: {plan.n:,} ({plan.n:.2e})")
        print(
            f"  {_model_line(plan)}, k = {plan.k} of p = {plan.p}, ε = {plan.epsilon:g}, "
            f"δ = {plan.delta:g}, {plan.calibration} σ = {plan.sigma:.4g}, "
            f"{plan.vectorisation} messages"
        )
        print(
            f"  error <= {plan.target_error:g} in {plan.success_fraction:.1%} of "
            f"{plan.n_sim} simulated repeats (asked: {plan.confidence:.0%}; "
            f"non-private error {plan.nonprivate_error_quantile:.3g}; search "
            f"start {plan.n_rate:.2e})"
        )
    else:
        print(
            f"fedspectral pca-plan: error: {plan.status}: {plan.message} ({_asked(args)})",
            file=sys.stderr,
        )
    # no plan for this target (above the random level, or unreachable): the user's request
    # cannot be met -- a user error (exit 2), as every command's; 1 is for bugs only
    return 0 if plan.status == "ok" else 2
