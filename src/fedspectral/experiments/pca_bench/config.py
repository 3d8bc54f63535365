"""The settings of a ``pca-bench`` run (:class:`BenchConfig`), their validation, and the
method labels and colours of the tables and figures."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedspectral.checks import check_size
from fedspectral.inputs import check_nonempty_path, check_output_file, check_output_path, short

EXPERIMENTS = ("fig1", "tables", "real")
#: bounds on the repeats (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts them): time grows linearly
#: with them, and at the bounds a run takes on the order of a day on two cores
MAX_REPEATS = 1000
MAX_SPARSE_REPEATS = 100
INF = math.inf

# method keys -> labels (plot legends, tables)
LABELS = {
    "nonprivate": "non-private PCA",
    "central_gaussian": "central Gaussian",
    "opendp": "OpenDP central PCA",
    "opendp_uncentred": "OpenDP (origin 0)",
    "ldp_paper": "LDP, paper's σ₁",
    "ldp_correct": "LDP, correct σ (analytic, √2), upper triangle",
    "ldp_isometric": "LDP, correct σ, isometric",
    "per_holder_central": "per-holder central (no secure aggregation)",
    "distributed": "distributed (holders' shares, secure aggregation)",
    "alg1": "Algorithm 1 (dense)",
    "alg2": "Algorithm 2 (FPS)",
    "alg1_paper": "Algorithm 1, paper's σ₁",
    "alg2_paper": "Algorithm 2, paper's σ₁",
}
COLORS = {
    "nonprivate": "k",
    "central_gaussian": "tab:blue",
    "opendp": "tab:green",
    "opendp_uncentred": "tab:olive",
    "ldp_paper": "tab:orange",
    "ldp_correct": "tab:red",
    "ldp_isometric": "tab:purple",
    "per_holder_central": "tab:brown",
    "distributed": "tab:cyan",
}


# ----------------------------------------------------------------------------- config
@dataclass
class BenchConfig:
    """Every setting of a ``pca-bench`` run (stored in the JSON)."""

    quick: bool = False
    repeats: int = 20
    out: str = "results/pca"
    jobs: int = 1
    only: tuple[str, ...] = EXPERIMENTS
    seed: int = 0
    delta: float = 1e-4
    spike: float = 1.0
    # Figure 1
    fig1_p: int = 40
    fig1_k: tuple[int, ...] = (5, 10, 15, 20)
    fig1_eps: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    n_rows: tuple[int, ...] = (1000, 3000, 10_000, 30_000, 100_000)
    n_wishart: tuple[int, ...] = (
        10**6,
        3 * 10**6,
        10**7,
        3 * 10**7,
        10**8,
        3 * 10**8,
        10**9,
        3 * 10**9,
        10**10,
    )
    p_values: tuple[int, ...] = (20, 40, 80)
    p_k: int = 5
    p_eps: float = 1.0
    #: data holders of the distributed and per-holder central models (Figure 1)
    holders: int = 10
    opendp_repeats: int = 3
    opendp_max_n: int = 100_000
    opendp_timeout: float = 20.0
    # Tables 1-2
    sparse_k: int = 10
    sparse_n: int = 2000
    sparse_n_large: int = 10**10
    sparse_p: int = 400
    sparse_s: tuple[int, ...] = (15, 20, 40, 80)
    sparse_eps: tuple[float, ...] = (0.5, 1.0, 2.0, INF)
    sparse_repeats: int = 3
    # real data
    real_k: int = 5
    real_eps: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
    real_n: int | None = None
    real_repeats: int = 20
    real_opendp_repeats: int = 3

    @classmethod
    def quick_config(cls, **kw: Any) -> BenchConfig:
        """Small version for ``make demo`` and the tests (well under a minute)."""
        base: dict[str, Any] = {
            "quick": True,
            "repeats": 3,
            "fig1_k": (2, 5),
            "fig1_eps": (1.0, 4.0),
            "fig1_p": 20,
            "n_rows": (1000, 10_000),
            "n_wishart": (10**6, 10**8, 10**10),
            "p_values": (10, 20),
            "p_k": 2,
            "p_eps": 4.0,
            "opendp_repeats": 1,
            "opendp_max_n": 10_000,
            "opendp_timeout": 5.0,
            "sparse_k": 3,
            "sparse_n": 2000,
            "sparse_n_large": 10**10,
            "sparse_p": 60,
            "sparse_s": (6, 12),
            "sparse_eps": (1.0, INF),
            "sparse_repeats": 2,
            "real_k": 3,
            "real_eps": (1.0, 16.0),
            "real_n": 5000,
            "real_repeats": 2,
            "real_opendp_repeats": 1,
        }
        return cls(**(base | kw))


#: what each annotation of :class:`BenchConfig` accepts, in words, and the test of it
def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_number(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, (float, np.floating)) and not math.isnan(v))


_KINDS: dict[str, tuple[str, Any]] = {
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("an integer", _is_int),
    "float": ("a number", _is_number),
    "str": ("a string", lambda v: isinstance(v, str)),
    "int | None": ("an integer or null", lambda v: v is None or _is_int(v)),
    "tuple[int, ...]": (
        "a list of integers",
        lambda v: isinstance(v, (tuple, list)) and all(_is_int(x) for x in v),
    ),
    "tuple[float, ...]": (
        "a list of numbers",
        lambda v: isinstance(v, (tuple, list)) and all(_is_number(x) for x in v),
    ),
    "tuple[str, ...]": (
        "a list of strings",
        lambda v: isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v),
    ),
}


def check_types(cfg: BenchConfig) -> None:
    """Each setting of ``cfg`` has the kind its field declares (``fig1_k`` a list of
    integers, ``delta`` a number, ...); else ``ValueError`` naming the setting, the kind
    and the value -- a hand-edited ``pca_bench.json`` read by ``--reanalyse`` included."""
    import dataclasses

    for f in dataclasses.fields(cfg):
        words, test = _KINDS[str(f.type)]
        value = getattr(cfg, f.name)
        if not test(value):
            raise ValueError(f"{f.name} must be {words}, got {short(value)}")


#: the files each experiment writes besides its raw-error CSV
_FIGURES = {"fig1": ("fig1_k_eps.png", "fig1_p.png"), "tables": ("tables_sparse.png",)}
_FIGURES["real"] = ("real_fmnist.png",)


def output_files(cfg: BenchConfig) -> list[str]:
    """The names of the files a run of ``cfg`` writes in ``cfg.out``."""
    out = [f"{e}.csv" for e in EXPERIMENTS if e in cfg.only]
    out += [f for e in EXPERIMENTS if e in cfg.only for f in _FIGURES[e]]
    return [*out, "README_table.md", "pca_bench.json"]


def validate(cfg: BenchConfig) -> None:
    """Raise ValueError naming the bad option before any work or I/O."""
    check_types(cfg)

    def pos_int(v: Any, name: str) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")

    pos_int(cfg.repeats, "--repeats")
    pos_int(cfg.sparse_repeats, "--sparse-repeats")
    check_size(
        "--repeats",
        cfg.repeats,
        MAX_REPEATS,
        why="repeats per Figure-1 point: the default 20 take about 8 minutes here",
    )
    check_size(
        "--sparse-repeats",
        cfg.sparse_repeats,
        MAX_SPARSE_REPEATS,
        why="repeats per Tables 1-2 cell: the default 3 take a few minutes here",
    )
    pos_int(cfg.jobs, "--jobs")
    pos_int(cfg.holders, "holders")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, (int, np.integer)) or cfg.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {cfg.seed!r}")
    if cfg.jobs > (os.cpu_count() or 1) * 4:
        raise ValueError(f"--jobs {cfg.jobs} is more than 4x the {os.cpu_count()} CPUs")
    if not cfg.only or any(o not in EXPERIMENTS for o in cfg.only):
        raise ValueError(f"--only must be among {EXPERIMENTS}, got {cfg.only!r}")
    if not 0 < cfg.delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {cfg.delta!r}")
    check_nonempty_path(str(cfg.out), "--out")
    out = check_output_path(cfg.out, "--out")  # no dangling symlink or loop on the way
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {cfg.out!r} exists and is not a directory")
    probe = out
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ValueError(f"--out {cfg.out!r} cannot be created: {str(probe)!r} is a file")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"--out {cfg.out!r} is not writable ({str(probe)!r})")
    for name in output_files(cfg):  # each file the run writes, before any work
        check_output_file(out / name, "--out file")
    for name in ("fig1_k", "n_rows", "n_wishart", "p_values", "sparse_s"):
        for v in getattr(cfg, name):
            pos_int(v, name)
    for k in cfg.fig1_k:
        if k >= cfg.fig1_p:
            raise ValueError(f"fig1_k {k} must be < p = {cfg.fig1_p}")
    if cfg.p_k >= min(cfg.p_values):
        raise ValueError(f"p_k {cfg.p_k} must be < every p in {cfg.p_values}")
    for s in cfg.sparse_s:
        if not cfg.sparse_k <= s <= cfg.sparse_p:
            raise ValueError(
                f"sparsity s={s} must satisfy k={cfg.sparse_k} <= s <= p={cfg.sparse_p}"
            )
    if min(cfg.n_wishart, default=cfg.fig1_p + 1) <= max(cfg.p_values + (cfg.fig1_p,)):
        raise ValueError("Wishart sample sizes must exceed p")
    for e in (*cfg.fig1_eps, cfg.p_eps, *cfg.real_eps):
        if not (0 < e < INF):
            raise ValueError(f"epsilon must be finite and > 0 here, got {e!r}")
    for e in cfg.sparse_eps:
        if not e > 0:
            raise ValueError(f"epsilon must be > 0, got {e!r}")
