"""The figures of ``pca-bench`` (PNG, from the analysed results)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedspectral.experiments.pca_bench.analysis import _saturation
from fedspectral.experiments.pca_bench.config import COLORS, INF, LABELS, BenchConfig


def _plot_fig1(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.experiments.results import save_figure

    by = {(d["panel"], d["p"], d["k"], d["eps"], d["method"]): d for d in res["summary"]}
    files = []
    n_split = max(cfg.n_rows)

    def panel(ax: Any, pan: str, p: int, k: int, eps: float) -> None:
        for m in ("nonprivate", "central_gaussian", "opendp", "ldp_paper", "ldp_correct",
                  "ldp_isometric", "per_holder_central", "distributed"):
            d = by.get((pan, p, k, eps if m != "nonprivate" else INF, m))
            if d is None:
                continue
            n, mu, sd = map(np.asarray, (d["n"], d["mean"], d["std"]))
            od = m == "opendp"  # drawn on top, dashed: it often coincides with LDP
            ax.errorbar(n, mu, yerr=sd, label=LABELS[m], color=COLORS[m],
                        marker="s" if od else "o", ms=4 if od else 3, lw=1.2, capsize=2,
                        ls="--" if od else "-", zorder=5 if od else 2)
        rate = res["theorem1_sqrt_rate"].get(f"{pan}|{p}|{k}|{eps}")
        d = by.get((pan, p, k, eps, "ldp_correct"))
        if rate and d:
            c = d["mean"][-1] / rate[-1]  # anchored at the largest n
            ax.plot(d["n"], c * np.asarray(rate), "k:", lw=1,
                    label="Theorem 1 rate ∝ (kp/nε²)^½")
        ax.axhline(_saturation(k, p), color="grey", lw=0.8, ls="--")
        ax.axvline(n_split * 3, color="grey", lw=0.5, ls="-.")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"p={p}, k={k}, ε={eps:g}", fontsize=9)

    ks, es = cfg.fig1_k, cfg.fig1_eps
    fig, axes = plt.subplots(len(ks), len(es), figsize=(3.2 * len(es), 2.6 * len(ks)),
                             squeeze=False, sharex=True, layout="constrained")
    for i, k in enumerate(ks):
        for j, e in enumerate(es):
            panel(axes[i][j], "k", cfg.fig1_p, k, e)
    for ax in axes[-1]:
        ax.set_xlabel("n")
    for row in axes:
        row[0].set_ylabel("‖V̂V̂ᵀ − VVᵀ‖_F")
    axes[0][0].legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Seed Figure 1: error vs n (δ={cfg.delta:g}, {cfg.repeats} repeats, mean ± "
                 f"std). Rows up to n={max(cfg.n_rows):.0e}, exact Wishart draw of XᵀX/n "
                 "beyond (dash-dot line); dashed: random subspace", fontsize=9)
    files.append(save_figure(fig, out / "fig1_k_eps.png"))
    plt.close(fig)
    fig, axes = plt.subplots(1, len(cfg.p_values), figsize=(3.6 * len(cfg.p_values), 3.0),
                             squeeze=False)
    for j, p in enumerate(cfg.p_values):
        panel(axes[0][j], "p", p, cfg.p_k, cfg.p_eps)
        axes[0][j].set_xlabel("n")
    axes[0][0].set_ylabel("‖V̂V̂ᵀ − VVᵀ‖_F")
    axes[0][0].legend(fontsize=6, loc="lower left")
    fig.suptitle("Seed Figure 1 (p varied)", fontsize=10)
    files.append(save_figure(fig, out / "fig1_p.png"))
    plt.close(fig)
    return files


def _plot_tables(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.experiments.results import save_figure

    ns = sorted({d["n"] for d in res["table"]})
    fig, axes = plt.subplots(1, len(ns), figsize=(4.5 * len(ns), 3.2), squeeze=False)
    for ax, n in zip(axes[0], ns, strict=False):
        for ci, eps in enumerate(cfg.sparse_eps):
            for m, ls in (("alg1", "--"), ("alg2", "-"), ("central_gaussian", ":")):
                d = sorted((x for x in res["table"] if x["n"] == n and x["eps"] == eps
                            and x["method"] == m), key=lambda x: x["s"])
                if d:
                    ax.errorbar([x["s"] for x in d], [x["mean"] for x in d],
                                yerr=[x["std"] for x in d], ls=ls, marker="o", ms=3,
                                capsize=2, color=f"C{ci}",
                                label=f"{ {'alg1': 'Alg 1', 'alg2': 'Alg 2'}.get(m, 'central')}"
                                f", ε={eps:g}")
        ax.axhline(res["saturation"], color="grey", lw=0.8, ls=":")
        ax.set_xlabel("sparsity s")
        ax.set_title(f"p={cfg.sparse_p}, k={cfg.sparse_k}, n={n:.0e}"
                     + (" (Wishart draw of S)" if n != cfg.sparse_n else ""), fontsize=9)
    axes[0][0].set_ylabel("‖V̂V̂ᵀ − VVᵀ‖_F")
    axes[0][0].legend(fontsize=6)
    fig.suptitle("Seed Tables 1-2: LDP sparse (FPS, solid) vs LDP dense (dashed) vs central "
                 "Gaussian (dotted)", fontsize=10)
    f = save_figure(fig, out / "tables_sparse.png")
    plt.close(fig)
    return [f]


def _plot_real(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.experiments.results import save_figure

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for m in ("central_gaussian", "opendp", "opendp_uncentred", "ldp_paper", "ldp_correct",
              "ldp_isometric"):
        d = sorted((x for x in res["table"] if x["method"] == m), key=lambda x: x["eps"])
        if d:
            ax.errorbar([x["eps"] for x in d], [x["mean"] for x in d],
                        yerr=[x["std"] for x in d], marker="o", ms=3, capsize=2,
                        color=COLORS[m], label=LABELS[m])
    ax.axhline(res["saturation"], color="grey", lw=0.8, ls=":", label="random subspace")
    ax.set_xscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("distance to non-private subspace")
    ax.set_title(f"Fashion-MNIST 7x7 (n={res['n']}, p={res['p']}, k={res['k']})",
                 fontsize=9)
    ax.legend(fontsize=6)
    f = save_figure(fig, out / "real_fmnist.png")
    plt.close(fig)
    return [f]
