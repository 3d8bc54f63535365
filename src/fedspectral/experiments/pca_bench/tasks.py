"""The experiments' tasks: one data set each (Figure 1 point, Tables 1-2 cell, real-data
repeat), every method on it, and running them (one BLAS thread per task, ``--jobs``
worker processes)."""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from fedspectral.experiments.pca_bench.config import INF, BenchConfig
from fedspectral.linalg import subspace_distance, top_k_eigvecs


def task_rng(cfg: BenchConfig, *key: int) -> np.random.Generator:
    """Independent, reproducible stream per task (independent of --jobs)."""
    return np.random.default_rng([cfg.seed, *[int(x) for x in key]])


def wishart_moment(Sigma: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    r""":math:`S = W/n`, :math:`W \sim W_p(\Sigma, n)`: the exact distribution of
    :math:`X^\top X/n` for ``n`` iid :math:`N(0,\Sigma)` rows (Bartlett decomposition,
    O(p³) whatever ``n``)."""
    from scipy.stats import wishart

    W = wishart.rvs(df=n, scale=Sigma, random_state=rng)
    W = np.atleast_2d(W) / n
    return 0.5 * (W + W.T)


def subspace_error(V_hat: np.ndarray, V: np.ndarray) -> float:
    return float(subspace_distance(V_hat, V))


# ----------------------------------------------------------------------------- tasks
def _ldp_V(
    cfg: BenchConfig,
    X: np.ndarray | None,
    S: np.ndarray,
    n: int,
    k: int,
    eps: float,
    seed: int,
    calibration: str,
    vectorisation: str,
) -> np.ndarray:
    """Algorithm 1's estimate of the top-k subspace: on the users' rows ``X`` when the task
    sampled them (aggregate noise), else on their second moment ``S`` (Wishart draw)."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import LocalDPPCA, ldp_from_moment

    if X is not None:
        est = LocalDPPCA(
            k,
            eps,
            cfg.delta,
            calibration=calibration,
            noise_mode="aggregate",
            random_state=seed,
            vectorisation=vectorisation,
        ).fit(X)
        return est.components_.T
    return ldp_from_moment(
        S,
        n,
        k,
        eps,
        cfg.delta,
        np.random.default_rng(seed),
        calibration=calibration,
        vectorisation=vectorisation,
    )[0]


def _fig1_task(
    cfg: BenchConfig,
    panel: str,
    p: int,
    k: int,
    eps_list: tuple[float, ...],
    n: int,
    n_idx: int,
    rep: int,
) -> list[dict[str, Any]]:
    """One data set (p, k, n, rep): every method at every ε."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import sample as sample_rows
    from fedspectral.pca import spiked_covariance  # lazy: pulls in scikit-learn and dp-accounting

    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.comparators import (
        central_gaussian_from_moment,
        nonprivate_pca,
        second_moment,
    )

    rng = task_rng(cfg, 1 if panel == "k" else 2, p, k, n_idx, rep)
    Sigma, V = spiked_covariance(p, k, cfg.spike, rng)
    rows = n <= max(cfg.n_rows)
    base = {
        "experiment": "fig1",
        "panel": panel,
        "p": p,
        "k": k,
        "n": n,
        "rep": rep,
        "sampling": "rows" if rows else "wishart",
    }
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    max_norm = float("nan")
    if rows:
        X = sample_rows(Sigma, n, rng)
        max_norm = float(np.sqrt(np.einsum("ij,ij->i", X, X).max()))
        S = second_moment(X)
        V_np = nonprivate_pca(X, k).V
    else:
        X = None
        S = wishart_moment(Sigma, n, rng)
        V_np = top_k_eigvecs(S, k)[1]
    out.append(
        base
        | {
            "eps": INF,
            "method": "nonprivate",
            "error": subspace_error(V_np, V),
            "max_row_norm": max_norm,
        }
    )
    for eps in eps_list:
        seed = int(rng.integers(2**63 - 1))
        cg = central_gaussian_from_moment(S, n, k, eps, cfg.delta, seed)
        out.append(
            base | {"eps": eps, "method": "central_gaussian", "error": subspace_error(cg.V, V)}
        )
        for calib, vec, key in (
            ("paper", "upper", "ldp_paper"),
            ("analytic", "upper", "ldp_correct"),
            ("analytic", "isometric", "ldp_isometric"),
        ):
            Vh = _ldp_V(cfg, X, S, n, k, eps, seed, calib, vec)
            out.append(base | {"eps": eps, "method": key, "error": subspace_error(Vh, V)})
        for key, secure in (("per_holder_central", False), ("distributed", True)):
            Vh = _distributed_V(cfg, X, S, n, k, eps, seed, secure)
            out.append(base | {"eps": eps, "method": key, "error": subspace_error(Vh, V)})
        if X is not None and n <= cfg.opendp_max_n and rep < cfg.opendp_repeats:  # rows
            od, status = _opendp_or_none(X, k, eps, timeout=cfg.opendp_timeout)
            out.append(
                base
                | {
                    "eps": eps,
                    "method": "opendp",
                    "opendp_status": status,
                    "error": subspace_error(od.V, V) if od is not None else float("nan"),
                }
            )
    out[0]["seconds"] = time.perf_counter() - t0
    return out


def _distributed_V(
    cfg: BenchConfig,
    X: np.ndarray | None,
    S: np.ndarray,
    n: int,
    k: int,
    eps: float,
    seed: int,
    secure: bool,
) -> np.ndarray:
    """The distributed model (``secure``: shares summed by secure aggregation) or the
    per-holder central one over ``cfg.holders`` holders (rows dealt round-robin), at the
    replace-one relation: :class:`DistributedDPPCA` on rows, its noise law on a Wishart
    ``S``."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import DistributedDPPCA, distributed_from_moment, holder_noise

    m = min(cfg.holders, n)
    if X is not None:
        est = DistributedDPPCA(k, eps, cfg.delta, secure_aggregation=secure, random_state=seed)
        return est.fit(X, groups=np.arange(n) % m).components_.T
    noise = holder_noise(eps, cfg.delta, m, secure_aggregation=secure)
    return distributed_from_moment(S, n, k, noise, m, np.random.default_rng(seed))[0]


#: OpenDP's eigenvector sampler (rejection sampling from a Bingham distribution with an
#: angular-central-Gaussian envelope, Amin et al. 2019) stops finishing in reasonable time
#: when a_max = (ε per eigenvector / 4)·(λ_max − λ_min) of the row-sum matrix XᵀX exceeds
#: a few units (measured here: a_max <= 3 takes < 1.5 s, a_max >= 5.4 > 8 s, often hangs).
#: Points above this limit are skipped and counted; a timer guards the rest.
OPENDP_AMAX = 4.0


def _opendp_amax(X: np.ndarray, k: int, eps: float, center: bool) -> float:
    Xc = X - X.mean(axis=0) if center else X
    w = np.linalg.eigvalsh(Xc.T @ Xc)
    # OpenDP's default split: eps/3 mean, eps/3 eigenvalues, eps/3 over min(k, p-1) vectors
    eps_vec = eps / 3.0 / min(k, X.shape[1] - 1)
    return eps_vec / 4.0 * float(w[-1] - w[0])


def _opendp_or_none(
    X: np.ndarray, k: int, eps: float, center: bool = True, timeout: float = 20.0
) -> tuple[Any, str]:
    """OpenDP's PCA, or None and the reason (unavailable, predicted too slow, timed out)."""
    import signal

    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.comparators import opendp_available, opendp_pca

    if not opendp_available()[0]:
        return None, "unavailable"
    if _opendp_amax(X, k, eps, center) > OPENDP_AMAX:
        return None, "skipped_sampler_infeasible"

    def _alarm(signum: int, frame: Any) -> None:
        raise TimeoutError("OpenDP PCA timed out")

    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return opendp_pca(X, k, eps, center=center), "ok"
    except Exception:  # noqa: BLE001 - the timer fires inside OpenDP's callback
        return None, "timeout"
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _sparse_algorithms(
    cfg: BenchConfig,
    base: dict[str, Any],
    X: np.ndarray | None,
    S: np.ndarray,
    V: np.ndarray,
    eps: float,
    seed: int,
    calib: str,
    suffix: str,
    lam: float | str,
    lam_np: float,
) -> list[dict[str, Any]]:
    """Algorithms 1 and 2 at one ε and calibration on one data set: on the users' rows
    ``X`` when the task sampled them, else on their second moment ``S`` (Wishart draw)."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import (
        LocalDPPCA,
        LocalDPSparsePCA,
        auto_lambda,
        ldp_from_moment,
        ldp_noise_scale,
    )
    from fedspectral.pca.fps import fps_admm  # lazy: pulls in scikit-learn and dp-accounting

    p, k, n = cfg.sparse_p, cfg.sparse_k, base["n"]
    t0 = time.perf_counter()
    if X is not None:
        a1 = LocalDPPCA(k, eps, cfg.delta, calibration=calib, random_state=seed).fit(X)
        t1 = time.perf_counter()
        if calib == "paper":
            # FPS on noise-dominated inputs can need hundreds of ADMM iterations
            # at p = 400; at this n every private estimate is at the random level
            # anyway, so the paper's calibration is shown for Algorithm 1 only
            error = subspace_error(a1.components_.T, V)
            return [
                base | {"eps": eps, "method": "alg1" + suffix, "error": error, "seconds": t1 - t0}
            ]
        a2 = LocalDPSparsePCA(k, eps, cfg.delta, lam=lam, calibration=calib, random_state=seed).fit(
            X
        )
        # same seed, same simulation: both algorithms see the same noisy S_hat
        assert np.array_equal(a1.covariance_, a2.covariance_)
        V1, V2 = a1.components_.T, a2.components_.T
        lam_used, it, conv = a2.lam_, a2.fps_.iterations, a2.fps_.converged
    else:
        V1, S_hat = ldp_from_moment(
            S, n, k, eps, cfg.delta, np.random.default_rng(seed), calibration=calib
        )
        t1 = time.perf_counter()
        sig = ldp_noise_scale(eps, cfg.delta, calib).sigma
        lam_used = lam_np if math.isinf(eps) else auto_lambda(sig, n, p)
        res = fps_admm(S_hat, k, lam_used, tol=1e-3)
        V2 = top_k_eigvecs(res.X, k)[1]
        it, conv = res.iterations, res.converged
    t2 = time.perf_counter()
    alg2 = {"lam": lam_used, "fps_iterations": it, "fps_converged": conv}
    return [
        base
        | {
            "eps": eps,
            "method": "alg1" + suffix,
            "error": subspace_error(V1, V),
            "seconds": t1 - t0,
        },
        base
        | {
            "eps": eps,
            "method": "alg2" + suffix,
            "error": subspace_error(V2, V),
            "seconds": t2 - t1,
        }
        | alg2,
    ]


def _sparse_task(cfg: BenchConfig, s: int, rep: int, large: bool) -> list[dict[str, Any]]:
    """One row-sparse data set: Algorithms 1 and 2 at every ε on the same Ŝ (correct and
    paper's calibration), central Gaussian and OpenDP (dense) on the same data."""
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import LAM_AUTO_CONSTANT, row_sparse_covariance

    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca import sample as sample_rows

    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.comparators import central_gaussian_from_moment, second_moment

    p, k = cfg.sparse_p, cfg.sparse_k
    n = cfg.sparse_n_large if large else cfg.sparse_n
    rng = task_rng(cfg, 3, s, rep, int(large))
    Sigma, V = row_sparse_covariance(p, k, s, cfg.spike, rng)
    if large:
        X, S = None, wishart_moment(Sigma, n, rng)
    else:
        X = sample_rows(Sigma, n, rng)
        S = second_moment(X)
    lam_np = LAM_AUTO_CONSTANT * float(np.mean(np.diag(S))) * math.sqrt(math.log(p) / n)
    base = {
        "experiment": "tables",
        "p": p,
        "k": k,
        "s": s,
        "n": n,
        "rep": rep,
        "sampling": "wishart" if large else "rows",
    }
    out: list[dict[str, Any]] = []
    for eps in cfg.sparse_eps:
        seed = int(rng.integers(2**63 - 1))
        lam: float | str = lam_np if math.isinf(eps) else "auto"
        # the paper's calibration only differs at finite eps
        calibs = (("analytic", ""),) if math.isinf(eps) else (("analytic", ""), ("paper", "_paper"))
        for calib, suffix in calibs:
            out += _sparse_algorithms(cfg, base, X, S, V, eps, seed, calib, suffix, lam, lam_np)
        if not math.isinf(eps):
            cg = central_gaussian_from_moment(S, n, k, eps, cfg.delta, seed)
            out.append(
                base | {"eps": eps, "method": "central_gaussian", "error": subspace_error(cg.V, V)}
            )
            if X is not None and rep < cfg.opendp_repeats:  # not large
                od, status = _opendp_or_none(X, k, eps, timeout=cfg.opendp_timeout)
                out.append(
                    base
                    | {
                        "eps": eps,
                        "method": "opendp",
                        "opendp_status": status,
                        "error": subspace_error(od.V, V) if od is not None else float("nan"),
                    }
                )
    return out


_REAL_CACHE: dict[tuple[Any, ...], Any] = {}


def _real_data(cfg: BenchConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled Fashion-MNIST rows and the two non-private targets (uncentred, centred)."""
    key = (cfg.real_n, cfg.seed, cfg.real_k)
    if key not in _REAL_CACHE:
        # lazy: pulls in scikit-learn and dp-accounting
        from fedspectral.pca.real_data import load_fashion_mnist_pooled

        X, _ = load_fashion_mnist_pooled("train", n=cfg.real_n, rng=cfg.seed)
        V_unc = top_k_eigvecs(X.T @ X / len(X), cfg.real_k)[1]
        Xc = X - X.mean(axis=0)
        V_cen = top_k_eigvecs(Xc.T @ Xc / len(X), cfg.real_k)[1]
        _REAL_CACHE[key] = (X, V_unc, V_cen)
    return _REAL_CACHE[key]


def _real_task(cfg: BenchConfig, rep: int) -> list[dict[str, Any]]:
    from fedspectral.pca import LocalDPPCA  # lazy: pulls in scikit-learn and dp-accounting

    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.comparators import central_gaussian_pca

    X, V_unc, V_cen = _real_data(cfg)
    k = cfg.real_k
    rng = task_rng(cfg, 4, rep)
    base = {
        "experiment": "real",
        "dataset": "fashion_mnist_pooled_7x7",
        "n": len(X),
        "p": X.shape[1],
        "k": k,
        "rep": rep,
    }
    out = []
    for eps in cfg.real_eps:
        seed = int(rng.integers(2**63 - 1))
        cg = central_gaussian_pca(X, k, eps, cfg.delta, seed)
        out.append(
            base
            | {
                "eps": eps,
                "method": "central_gaussian",
                "target": "uncentred",
                "error": subspace_error(cg.V, V_unc),
            }
        )
        for calib, vec, key in (
            ("paper", "upper", "ldp_paper"),
            ("analytic", "upper", "ldp_correct"),
            ("analytic", "isometric", "ldp_isometric"),
        ):
            est = LocalDPPCA(
                k, eps, cfg.delta, calibration=calib, random_state=seed, vectorisation=vec
            ).fit(X)
            out.append(
                base
                | {
                    "eps": eps,
                    "method": key,
                    "target": "uncentred",
                    "error": subspace_error(est.components_.T, V_unc),
                }
            )
        if rep < cfg.real_opendp_repeats:
            for center, key, target in (
                (True, "opendp", V_cen),
                (False, "opendp_uncentred", V_unc),
            ):
                od, status = _opendp_or_none(X, k, eps, center=center, timeout=cfg.opendp_timeout)
                out.append(
                    base
                    | {
                        "eps": eps,
                        "method": key,
                        "opendp_status": status,
                        "target": "centred" if center else "uncentred",
                        "error": subspace_error(od.V, target) if od is not None else float("nan"),
                    }
                )
    return out


# ----------------------------------------------------------------------------- running
def _tasks(cfg: BenchConfig) -> list[tuple[str, Callable[..., list[dict]], tuple]]:
    tasks: list[tuple[str, Callable[..., list[dict]], tuple]] = []
    ns = list(cfg.n_rows) + list(cfg.n_wishart)
    if "fig1" in cfg.only:
        for k in cfg.fig1_k:
            for i, n in enumerate(ns):
                for r in range(cfg.repeats):
                    tasks.append(
                        ("fig1", _fig1_task, (cfg, "k", cfg.fig1_p, k, cfg.fig1_eps, n, i, r))
                    )
        for p in cfg.p_values:
            for i, n in enumerate(ns):
                for r in range(cfg.repeats):
                    tasks.append(
                        ("fig1", _fig1_task, (cfg, "p", p, cfg.p_k, (cfg.p_eps,), n, i, r))
                    )
    if "tables" in cfg.only:
        for large in (False, True):
            for s in cfg.sparse_s:
                for r in range(cfg.sparse_repeats):
                    tasks.append(("tables", _sparse_task, (cfg, s, r, large)))
    if "real" in cfg.only:
        for r in range(cfg.real_repeats):
            tasks.append(("real", _real_task, (cfg, r)))
    return tasks


def _call(fn: Callable[..., list[dict]], args: tuple) -> list[dict]:
    from threadpoolctl import threadpool_limits

    # one BLAS thread per task: on a shared 2-core machine multithreaded eigh on
    # 400 x 400 matrices was 8x slower than single-threaded
    with threadpool_limits(limits=1):
        return fn(*args)


def _run_tasks(cfg: BenchConfig, tasks: list, progress: bool = True) -> dict[str, list[dict]]:
    from tqdm.auto import tqdm

    rows: dict[str, list[dict]] = defaultdict(list)
    bar = tqdm(
        total=len(tasks), desc="pca-bench", disable=not progress, file=sys.stderr, mininterval=1.0
    )
    if cfg.jobs == 1:
        for exp, fn, args in tasks:
            rows[exp].extend(_call(fn, args))
            bar.update()
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=cfg.jobs) as pool:
            futs = {pool.submit(_call, fn, args): exp for exp, fn, args in tasks}
            for f in as_completed(futs):
                rows[futs[f]].extend(f.result())
                bar.update()
    bar.close()
    # deterministic order whatever the completion order
    for exp_rows in rows.values():
        exp_rows.sort(
            key=lambda r: tuple(
                str(r.get(c)) for c in ("panel", "p", "k", "s", "n", "rep", "eps", "method")
            )
        )
    return dict(rows)
