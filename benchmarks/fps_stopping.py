"""How close to the optimum ``fps_admm`` stops, default (accelerated, certified stop)
against the plain ADMM of the R package (``anderson=0``), and at what cost.

Problems: ``benchmarks/pca_perf.py``'s model at p = 100 and 400; ``LocalDPSparsePCA``'s
privatised second moment (``ldp_from_moment``, row-sparse truth, ``lam = auto_lambda``)
at p = 100-400; and the five cross-validation folds of ``tests/privacy/test_budget.py``
at lambda = 0.01.  The optimum is the plain ADMM at ``tol = 1e-8``.  For each solver:
iterations, CPU seconds (one BLAS thread), relative objective error and Frobenius
distance of ``X`` to the optimum.  Prints a table and writes it as JSON.

Usage::

    .venv/bin/python benchmarks/fps_stopping.py --out docs/results/bench/fps_stopping.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from fedspectral.pca import CovarianceAggregator, row_sparse_covariance, sample
from fedspectral.pca.estimators import auto_lambda
from fedspectral.pca.fps import fps_admm, fps_objective
from fedspectral.pca.local import ldp_from_moment, ldp_noise_scale, perturb_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)

PRIVATE = [(200, 20000, 1.0, 5), (400, 20000, 4.0, 10), (100, 100000, 1.0, 2), (100, 5000, 8.0, 3)]


def problems() -> list[tuple[str, np.ndarray, int, float]]:
    from pca_perf import fps_problem  # benchmarks/ is on the path when run as a script

    out = [
        (f"benchmark p={p} seed={s}", *fps_problem(p, s))
        for p in (100, 400)
        for s in (0, 1000, 2000)
    ]
    for p, n, eps, k in PRIVATE:
        Sig, _ = row_sparse_covariance(p, k, 10, 9.0, rng=p + n)
        _, S_hat = ldp_from_moment(Sig / np.trace(Sig), n, k, eps, 1e-4, rng=1)
        lam = auto_lambda(ldp_noise_scale(eps, 1e-4).sigma, n, p)
        out.append((f"private p={p} n={n} eps={eps} k={k}", S_hat, k, lam))
    from sklearn.model_selection import KFold

    Sigma, _ = row_sparse_covariance(p=20, k=2, s=4, lam=9.0, rng=0)
    X = sample(Sigma / (3 * np.trace(Sigma)), 20000, rng=1)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    msgs = perturb_batch(X, 2.0, 1e-5, rng=0)
    for i, (train, _test) in enumerate(KFold(5, shuffle=True, random_state=0).split(msgs)):
        S_tr = CovarianceAggregator(20).add_batch(msgs[train]).covariance()
        out.append((f"test_budget fold {i} lam=0.01", S_tr, 2, 0.01))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=_args.out_file, default="results/bench/fps_stopping.json")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    rows: list[dict[str, Any]] = []
    with threadpool_limits(1):
        for name, S, k, lam in problems():
            star = fps_admm(S, k, lam, tol=1e-8, max_iter=50_000, anderson=0).X
            f_star = fps_objective(S, star, lam)
            row: dict[str, Any] = {"problem": name, "p": S.shape[0], "k": k, "lam": lam}
            for label, kw in (("default", {}), ("plain", {"anderson": 0})):
                c0 = time.process_time()
                res = fps_admm(S, k, lam, **kw)
                row[label] = {
                    "iterations": res.iterations,
                    "cpu_s": time.process_time() - c0,
                    "rel_objective_error": abs(fps_objective(S, res.X, lam) - f_star) / abs(f_star),
                    "distance": float(np.linalg.norm(res.X - star)),
                    "duality_gap": res.duality_gap,
                }
            rows.append(row)
            d, q = row["default"], row["plain"]
            print(
                f"{name:<36} it {d['iterations']:>4} | {q['iterations']:>4}   "
                f"CPU s {d['cpu_s']:.3f} | {q['cpu_s']:.3f}   "
                f"dist {d['distance']:.2g} | {q['distance']:.2g}   "
                f"gap {d['duality_gap']:.1e} | {q['duality_gap']:.1e}",
                flush=True,
            )
    from fedspectral.results import write_text

    write_text(args.out, json.dumps(rows, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
