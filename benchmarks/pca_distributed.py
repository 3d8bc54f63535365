"""Local vs distributed private PCA on the same data, n = 10³ … 10⁸ users over 10 holders.

The seed's covariance (p = 40, k = 5, Σ = (VVᵀ + I)/(10p), eigen-gap 0.0025), ε = 1,
δ = 1e-4 per user at the replace-one relation, analytic σ, isometric messages.  For every
n and repeat one second moment S = XᵀX/n is drawn from its exact Wishart law (the seed's
rows stay in the unit ball: the largest norm of 10⁵ sampled rows is printed), and every
model runs on that **same** S, its noise drawn by its exact law:

* ``local``: Algorithm 1, the sum of the n users' noises, N(0, nσ₁²) per packed entry
  (:func:`fedspectral.pca.ldp_from_moment`);
* ``per_holder``: each of the 10 holders releases its sum with the full central σ, no
  secure aggregation: the sum of 10 noises, σ√10;
* ``distributed``: each holder adds σ/√10 and the shares meet in a secure sum: σ
  (:func:`fedspectral.pca.distributed_from_moment`).

Prints the median subspace error ‖V̂V̂ᵀ − VVᵀ‖_F of each model and the ratios
distributed / local and distributed / per-holder (medians of the per-repeat ratios on the
same data).  Then (``--plan-repeats``, 0 to skip) checks ``fedspectral pca-plan --model
distributed --holders 10`` at the seed's covariance independently: rows sampled afresh,
split at random over 10 holders, the real :class:`~fedspectral.pca.DistributedDPPCA`, at
the planned n and at half of it.

Usage::

    nice .venv/bin/python benchmarks/pca_distributed.py [--repeats 20] [--plan-repeats 400]
        [--out docs/results/pca]

Last (``--coverage-repeats``, 0 to skip) the coverage of ``error_interval``.

Writes ``pca_distributed.json`` (every point, the plan check, the coverage), ``pca_distributed.md``
(the table docs/pca.md quotes) and ``pca_distributed.png`` (medians with the interquartile
range of the repeats as a band); ``--redraw docs/results/pca/pca_distributed.json`` draws the
figure again from the JSON alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)

P, K, EPS, DELTA, HOLDERS, TARGET = 40, 5, 1.0, 1e-4, 10, 0.5
NS = (
    10**3,
    3 * 10**3,
    10**4,
    3 * 10**4,
    10**5,
    3 * 10**5,
    10**6,
    3 * 10**6,
    10**7,
    3 * 10**7,
    10**8,
)
MODELS = ("nonprivate", "local", "per_holder", "distributed")
#: every reported series: the error to the truth V, and (``@V0``) to the non-private
#: subspace V₀ of the same S (the error the noise caused)
SERIES = MODELS + ("local@V0", "per_holder@V0", "distributed@V0")


def _errors(n: int, rep: int, seed: int) -> dict[str, float]:
    """Every model's error on one data set (n users, repeat ``rep``)."""
    from fedspectral.experiments.pca_bench import tasks as pb
    from fedspectral.linalg import top_k_eigvecs
    from fedspectral.pca import (
        distributed_from_moment,
        holder_noise,
        ldp_from_moment,
        spiked_covariance,
    )

    rng = np.random.default_rng([seed, n, rep])
    Sigma, V = spiked_covariance(P, K, 1.0, rng)
    S = pb.wishart_moment(Sigma, n, rng)
    s_loc, s_ph, s_d = (int(x) for x in rng.integers(2**63 - 1, size=3))
    V0 = top_k_eigvecs(S, K)[1]
    Vh = {"local": ldp_from_moment(S, n, K, EPS, DELTA, s_loc)[0]}
    for key, secure, s in (("per_holder", False, s_ph), ("distributed", True, s_d)):
        noise = holder_noise(EPS, DELTA, HOLDERS, secure_aggregation=secure)
        Vh[key] = distributed_from_moment(S, n, K, noise, HOLDERS, s)[0]
    out = {"nonprivate": pb.subspace_error(V0, V)} | {
        m: pb.subspace_error(W, V) for m, W in Vh.items()
    }
    # the error the privacy noise alone caused: distance to the same users' exact subspace
    return out | {f"{m}@V0": pb.subspace_error(W, V0) for m, W in Vh.items()}


def _plan_check(repeats: int, seed: int) -> dict[str, object]:
    """``pca-plan --model distributed --holders 10`` at the seed's covariance, checked on
    sampled rows with the real estimator at the planned n and at half of it."""
    from fedspectral.linalg import subspace_distance
    from fedspectral.pca import DistributedDPPCA, required_users, spiked_covariance
    from fedspectral.pca import sample as sample_rows

    plan = required_users(
        P,
        K,
        EPS,
        DELTA,
        eigengap=1 / (10 * P),
        target_error=TARGET,
        model="distributed",
        holders=HOLDERS,
    )
    out: dict[str, object] = {"planned_n": plan.n, "planner_success": plan.success_fraction}
    max_norm = 0.0
    for label, n in (("at_n", plan.n), ("at_half_n", plan.n // 2)):
        hits = 0
        for r in range(repeats):
            rng = np.random.default_rng([seed, 7, n, r])
            Sigma, V = spiked_covariance(P, K, 1.0, rng)
            X = sample_rows(Sigma, n, rng)
            max_norm = max(max_norm, float(np.sqrt(np.einsum("ij,ij->i", X, X).max())))
            est = DistributedDPPCA(K, EPS, DELTA, random_state=int(rng.integers(2**32)))
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)  # no row may need clipping
                est.fit(X, groups=rng.integers(0, HOLDERS, size=n))
            hits += subspace_distance(est.components_.T, V) <= TARGET
        out[label] = {"n": n, "repeats": repeats, "met": hits / repeats}
    out["max_row_norm"] = max_norm
    return out


def _coverage(repeats: int, seed: int) -> list[dict[str, float]]:
    """Coverage of ``DistributedDPPCA.error_interval(0.95)`` (bootstrap from the known noise
    law) for the error the noise caused, ‖V̂V̂ᵀ − V₀V₀ᵀ‖_F with V₀ the same users' exact
    subspace: p = 10, k = 2, spiked model (spike 3), 5 holders, ε = 1, δ = 1e-5."""
    from fedspectral.linalg import subspace_distance, top_k_eigvecs
    from fedspectral.pca import DistributedDPPCA, spiked_covariance
    from fedspectral.pca import sample as sample_rows

    out = []
    for n in (1000, 3000, 20_000):
        hits = resolved = 0
        widths, errs = [], []
        for r in range(repeats):
            rng = np.random.default_rng([seed, 11, n, r])
            Sigma, _ = spiked_covariance(10, 2, 3.0, rng)
            X = sample_rows(Sigma, n, rng)
            est = DistributedDPPCA(2, 1.0, 1e-5, random_state=int(rng.integers(2**32)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a few rows clipped
                est.fit(X, groups=np.arange(n) % 5)
            e = subspace_distance(est.components_.T, top_k_eigvecs(X.T @ X / n, 2)[1])
            lo, hi = est.error_interval(0.95, 200, random_state=r)
            hits += lo <= e <= hi
            resolved += est.bootstrap_["resolved"]
            widths.append(hi - lo)
            errs.append(e)
        out.append(
            {
                "n": n,
                "repeats": repeats,
                "coverage": hits / repeats,
                "resolved": resolved / repeats,
                "median_error": float(np.median(errs)),
                "mean_width": float(np.mean(widths)),
            }
        )
    return out


def _table(
    med: dict[str, dict[int, float]], ratio: dict[str, dict[int, float]], repeats: int
) -> list[str]:
    lines = [
        (
            f"**Local vs distributed private PCA** (p = {P}, k = {K}, ε = {EPS:g}, "
            f"δ = {DELTA:g} per user, replace-one, {HOLDERS} holders, seed's covariance; "
            f"median of {repeats} repeats of ‖V̂V̂ᵀ − VVᵀ‖_F on the same data; random "
            f"level {math.sqrt(2 * K - 2 * K * K / P):.2f})"
        ),
        "",
        (
            "| n | non-private | local | per-holder central (no secure agg.) | "
            "distributed (secure agg.) | distributed / local | distributed / per-holder | "
            "noise-caused: local | noise-caused: distributed | ratio |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in NS:
        lines.append(
            f"| {n:.0e} | {med['nonprivate'][n]:.4f} | {med['local'][n]:.3f} | "
            f"{med['per_holder'][n]:.4f} | {med['distributed'][n]:.4f} | "
            f"{ratio['local'][n]:.4f} | {ratio['per_holder'][n]:.3f} | "
            f"{med['local@V0'][n]:.3f} | {med['distributed@V0'][n]:.4f} | "
            f"{ratio['local@V0'][n]:.4f} |"
        )
    lines += [
        "",
        (
            "Ratios: medians of the per-repeat ratios on the same data. Noise-caused: "
            "distance to the non-private subspace of the same users (what "
            "`error_interval` bounds), without the sampling error both models share."
        ),
    ]
    return lines


#: resolution of the figure (dots per inch)
FIG_DPI = 150
FIG_NAMES = {
    "nonprivate": "non-private",
    "local": "local (Algorithm 1)",
    "per_holder": "per-holder central, no secure aggregation",
    "distributed": "distributed, secure aggregation",
}


def figure(errs: dict[str, dict[int, list[float]]], ns: tuple[int, ...] = NS):
    """The figure (a matplotlib ``Figure``, not saved): top, each model's median subspace
    error against n with the interquartile range (IQR) of the repeats as a band and bars;
    bottom, that IQR relative to the median (the band is thin on the log scale), n repeats
    named in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (ax, ax_iqr) = plt.subplots(
        2,
        1,
        figsize=(6.6, 5.6),
        dpi=FIG_DPI,
        layout="constrained",
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1.1]},
    )
    reps = sorted({len(errs[m][n]) for m in MODELS for n in ns})
    n_rep = " / ".join(map(str, reps))
    for m, color, ls in zip(
        MODELS, ("k", "tab:red", "tab:orange", "tab:blue"), (":", "-", "-", "-"), strict=True
    ):
        q1, med, q3 = np.percentile([errs[m][n] for n in ns], [25, 50, 75], axis=1)
        ax.fill_between(ns, q1, q3, color=color, alpha=0.25, lw=0)
        ax.errorbar(
            ns, med, yerr=[med - q1, q3 - med], marker="o", ms=3, color=color, ls=ls,
            capsize=2, elinewidth=0.8, label=FIG_NAMES[m],
        )  # fmt: skip
        ax_iqr.plot(ns, 100 * (q3 - q1) / med, marker="o", ms=3, color=color, ls=ls)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(
        math.sqrt(2 * K - 2 * K * K / P),
        color="grey",
        lw=0.8,
        ls="--",
        label=r"random subspace, $\sqrt{2k - 2k^2/p}$",
    )
    ax.axhline(TARGET, color="grey", lw=0.8, ls=":", label=f"planner's target {TARGET}")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i] not in FIG_NAMES.values())
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    handles.append(Patch(color="0.5", alpha=0.35, lw=0))
    labels.append(f"band and bars: interquartile range of the {n_rep} repeats")
    ax.set_ylabel(r"subspace error $\|\hat V\hat V^\top - VV^\top\|_F$ (median)")
    ax.set_title(
        f"p = {P}, k = {K}, ε = {EPS:g}, δ = {DELTA:g} per user; median of {n_rep} repeats",
        fontsize=10,
    )
    ax.legend(handles, labels, fontsize=7, loc="lower left")
    ax_iqr.set_ylabel("IQR / median (%)", fontsize=9)
    ax_iqr.set_ylim(bottom=0)
    ax_iqr.set_xlabel(f"users n (split over {HOLDERS} holders)")
    for a in (ax, ax_iqr):
        a.grid(alpha=0.3, which="major")
    return fig


def _figure(errs: dict[str, dict[int, list[float]]], path: Path) -> Path:
    import matplotlib.pyplot as plt

    from fedspectral.plots import save_figure

    fig = figure(errs)
    out = save_figure(fig, path, dpi=FIG_DPI)
    plt.close(fig)
    return out


def read_errors(results: Path) -> dict[str, dict[int, list[float]]]:
    """The per-repeat errors of a written ``pca_distributed.json``; ``ValueError`` naming
    the file when it holds no such errors (read before any figure is drawn)."""
    import json

    try:
        data = json.loads(Path(results).read_text())
        errs = {m: {int(n): v for n, v in data["errors"][m].items()} for m in MODELS}
        for m in MODELS:
            for v in errs[m].values():
                a = np.asarray(v, dtype=float)
                if a.ndim != 1 or not a.size or not np.isfinite(a).all():
                    raise ValueError("an error list is empty or not finite")
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{str(results)!r} holds no per-repeat errors ({why[:200]})") from None
    return errs


def redraw(results: Path, path: Path) -> Path:
    """Draw the figure from a committed ``pca_distributed.json`` (its per-repeat errors)."""
    return _figure(read_errors(results), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=_args.count(2, 10_000), default=20, help="<= 10000")
    ap.add_argument("--plan-repeats", type=_args.count(0, 100_000), default=400)
    ap.add_argument("--coverage-repeats", type=_args.count(0, 100_000), default=200)
    ap.add_argument("--out", type=_args.out_folder, default="docs/results/pca")
    ap.add_argument("--seed", type=_args.seed, default=0)
    ap.add_argument(
        "--redraw",
        metavar="JSON",
        type=_args.in_file,
        help="only draw OUT/pca_distributed.png from a written pca_distributed.json "
        "(e.g. the committed one), without running anything",
    )
    args = ap.parse_args(argv)
    if args.redraw:
        runs = ("repeats", "plan_repeats", "coverage_repeats", "seed")
        _args.refuse(ap, _args.given(ap, argv), runs, "with --redraw")
        try:
            errs = read_errors(Path(args.redraw))
        except ValueError as exc:
            ap.error(f"argument --redraw: {exc}")
        print(_figure(errs, Path(args.out) / "pca_distributed.png"))
        return 0
    from threadpoolctl import threadpool_limits

    from fedspectral.results import versions, write_json, write_text

    t0 = time.perf_counter()
    errs: dict[str, dict[int, list[float]]] = {m: {n: [] for n in NS} for m in SERIES}
    with threadpool_limits(limits=1):
        for n in NS:
            for r in range(args.repeats):
                for m, e in _errors(n, r, args.seed).items():
                    errs[m][n].append(e)
        plan = _plan_check(args.plan_repeats, args.seed) if args.plan_repeats else None
        cover = _coverage(args.coverage_repeats, args.seed) if args.coverage_repeats else []
    med = {m: {n: float(np.median(errs[m][n])) for n in NS} for m in SERIES}
    pairs = {
        "local": ("distributed", "local"),
        "per_holder": ("distributed", "per_holder"),
        "local@V0": ("distributed@V0", "local@V0"),
    }
    ratio = {
        key: {n: float(np.median(np.asarray(errs[a][n]) / np.asarray(errs[b][n]))) for n in NS}
        for key, (a, b) in pairs.items()
    }
    seconds = time.perf_counter() - t0
    cmd = (
        f"benchmarks/pca_distributed.py --repeats {args.repeats} --plan-repeats "
        f"{args.plan_repeats} --coverage-repeats {args.coverage_repeats} --seed {args.seed}"
    )
    lines = [
        f"<!-- generated by `{cmd}` ({seconds:.0f} s) -->",
        "",
        *_table(med, ratio, args.repeats),
    ]
    if plan is not None:
        a, h = plan["at_n"], plan["at_half_n"]
        lines += [
            "",
            (
                f"`pca-plan --model distributed --holders {HOLDERS}` at this covariance "
                f"(target {TARGET}): n = {plan['planned_n']:,}; independent check with "
                f"sampled rows and `DistributedDPPCA`: met in {a['met']:.1%} of "
                f"{a['repeats']} repeats at n, {h['met']:.1%} at n/2 = {h['n']:,} "
                f"(largest row norm {plan['max_row_norm']:.3f}, no clipping)."
            ),
        ]
    if cover:
        lines += [
            "",
            (
                "`DistributedDPPCA.error_interval(0.95)` (bootstrap from the noise law), "
                "coverage of the error the noise caused; p = 10, k = 2, spike 3, "
                "5 holders, ε = 1, δ = 1e-5:"
            ),
            "",
            "| n | repeats | coverage | resolved | median error | mean width |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c['n']} | {c['repeats']} | {c['coverage']:.3f} | {c['resolved']:.2f} | "
            f"{c['median_error']:.3f} | {c['mean_width']:.3f} |"
            for c in cover
        ]
    out = Path(args.out)
    write_text(out / "pca_distributed.md", "\n".join(lines) + "\n")
    write_json(
        out / "pca_distributed.json",
        {
            "command": cmd,
            "config": {
                "p": P,
                "k": K,
                "epsilon": EPS,
                "delta": DELTA,
                "holders": HOLDERS,
                "n": list(NS),
                "repeats": args.repeats,
                "neighbouring": "replace_one",
                "calibration": "analytic",
                "vectorisation": "isometric",
                "sampling": "wishart",
                "covariance": "(VVᵀ + I)/(10p)",
            },
            "median": {m: {str(n): v for n, v in med[m].items()} for m in SERIES},
            "ratio_distributed_over": {
                b: {str(n): v for n, v in r.items()} for b, r in ratio.items()
            },
            "errors": {m: {str(n): v for n, v in errs[m].items()} for m in SERIES},
            "plan_check": plan,
            "error_interval_coverage": cover,
            "seconds": seconds,
            "versions": versions(),
        },
    )
    _figure(errs, out / "pca_distributed.png")
    print("\n".join(lines[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
