"""The figures of ``pca-bench`` (PNG, from the analysed results)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fedspectral.experiments.pca_bench.analysis import _saturation
from fedspectral.experiments.pca_bench.config import COLORS, INF, LABELS, BenchConfig
from fedspectral.plots import save_figure

#: the y-axis of every subspace-error panel, in mathtext
ERROR_LABEL = r"subspace error $\|\hat V\hat V^\top - VV^\top\|_F$"


def _eps_text(eps: float) -> str:
    """ε for a label: ``∞`` for no privacy, else ``%g``."""
    return "∞" if math.isinf(eps) else f"{eps:g}"


def _n_text(n: float) -> str:
    """n for a title: a power of ten as mathtext ``10^k``, else with thin-space groups."""
    k = math.log10(n) if n > 0 else 0.0
    if n >= 1e5 and abs(k - round(k)) < 1e-9:
        return f"$10^{{{round(k)}}}$"
    return f"{n:,.0f}".replace(",", "\u2009")


def _shared_legend(fig: Any, axes: Any, extra: dict[str, Any], ncol: int = 3) -> None:
    """One legend for the whole figure, below the panels (never over data): the union of
    the panels' entries, then ``extra`` (label -> proxy artist)."""
    entries: dict[str, Any] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(lab, h)
    entries.update(extra)
    fig.legend(
        list(entries.values()),
        list(entries),
        loc="outside lower center",
        ncol=ncol,
        fontsize=7,
        frameon=False,
    )


#: drawn dashed on top of the others, since each often lies on another curve: OpenDP on
#: LDP (random level), the paper's sigma_1 on the correct sigma's, the distributed release
#: on the central Gaussian (the same total noise, by design); the curve beneath shows
#: through the gaps
_DASHED_ON_TOP = frozenset({"opendp", "ldp_paper", "distributed"})


def _fig1_panel(
    ax: Any, by: dict, res: dict[str, Any], split: float, pan: str, p: int, k: int, eps: float
) -> None:
    for m in (
        "nonprivate",
        "central_gaussian",
        "opendp",
        "ldp_paper",
        "ldp_correct",
        "ldp_isometric",
        "per_holder_central",
        "distributed",
    ):
        d = by.get((pan, p, k, eps if m != "nonprivate" else INF, m))
        if d is None:
            continue
        n, mu, sd = map(np.asarray, (d["n"], d["mean"], d["std"]))
        od = m == "opendp"
        top = m in _DASHED_ON_TOP
        ax.errorbar(
            n,
            mu,
            yerr=sd,
            label=LABELS[m],
            color=COLORS[m],
            marker="s" if od else "o",
            ms=4 if od else (5 if top else 3),
            mfc="none" if top and not od else None,  # hollow: the marker beneath shows
            lw=1.2,
            capsize=2,
            ls="--" if top else "-",
            zorder=5 if top else 2,
        )
    rate = res["theorem1_sqrt_rate"].get(f"{pan}|{p}|{k}|{eps}")
    d = by.get((pan, p, k, eps, "ldp_correct"))
    if rate and d:
        c = d["mean"][-1] / rate[-1]  # anchored at the largest n
        ax.plot(
            d["n"],
            c * np.asarray(rate),
            "k:",
            lw=1,
            label=r"Theorem 1 rate $\propto (kp/n\varepsilon^2)^{1/2}$",
        )
    ax.axhline(_saturation(k, p), color="grey", lw=0.8, ls="--")
    ax.axvline(split, color="grey", lw=0.5, ls="-.")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"p = {p}, k = {k}, ε = {_eps_text(eps)}", fontsize=9)
    ax.tick_params(labelsize=8)


def _bars(repeats: int, opendp_repeats: int | None = None) -> str:
    """The legend entry that names the error bars and their n."""
    od = f" (OpenDP: {opendp_repeats})" if opendp_repeats is not None else ""
    return f"bars: mean ± 1 std over {repeats} repeats{od}"


def _bar_proxy() -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color="0.3", marker="|", ms=8, ls="none", mew=1)


def _fig1_extra(cfg: BenchConfig) -> dict[str, Any]:
    from matplotlib.lines import Line2D

    return {
        _bars(cfg.repeats, cfg.opendp_repeats): _bar_proxy(),
        "random subspace (the error's ceiling)": Line2D([], [], color="grey", lw=0.8, ls="--"),
        f"rows simulated up to n = {_n_text(max(cfg.n_rows))}; exact Wishart draw beyond": Line2D(
            [], [], color="grey", lw=0.5, ls="-."
        ),
    }


def _plot_fig1(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    """Seed Figure 1: subspace error against n, one panel per (k, ε) and per p; mean ± std
    over the repeats.  No suptitle (the caption belongs to the document); one legend
    below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(d["panel"], d["p"], d["k"], d["eps"], d["method"]): d for d in res["summary"]}
    split = max(cfg.n_rows) * 3
    ks, es = cfg.fig1_k, cfg.fig1_eps
    fig, axes = plt.subplots(
        len(ks),
        len(es),
        figsize=(3.0 * len(es), 2.3 * len(ks) + 1.0),
        squeeze=False,
        sharex=True,
        sharey="row",  # the ε of one k compared on one scale
        layout="constrained",
    )
    for i, k in enumerate(ks):
        for j, e in enumerate(es):
            _fig1_panel(axes[i][j], by, res, split, "k", cfg.fig1_p, k, e)
    for ax in axes[-1]:
        ax.set_xlabel("users n")
    for row in axes:
        row[0].set_ylabel(ERROR_LABEL, fontsize=9)
    _shared_legend(fig, axes, _fig1_extra(cfg), ncol=2 if len(es) < 3 else 3)
    files = [save_figure(fig, out / "fig1_k_eps.png", dpi=150)]
    plt.close(fig)
    fig, axes = plt.subplots(
        1,
        len(cfg.p_values),
        figsize=(3.0 * len(cfg.p_values), 3.6),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for j, p in enumerate(cfg.p_values):
        _fig1_panel(axes[0][j], by, res, split, "p", p, cfg.p_k, cfg.p_eps)
        axes[0][j].set_xlabel("users n")
    axes[0][0].set_ylabel(ERROR_LABEL, fontsize=9)
    _shared_legend(fig, axes, _fig1_extra(cfg), ncol=2 if len(cfg.p_values) < 3 else 3)
    files.append(save_figure(fig, out / "fig1_p.png", dpi=150))
    plt.close(fig)
    return files


_SPARSE_STYLE = {
    "alg2": ("-", "Algorithm 2 (FPS, sparse)"),
    "alg1": ("--", "Algorithm 1 (dense)"),
    "central_gaussian": (":", "central Gaussian"),
}


def _plot_tables(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    """Seed Tables 1-2 as a figure: subspace error against the sparsity s, one panel per
    n; line style = method, colour = ε (one legend below the panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from fedspectral.plots import save_figure

    ns = sorted({d["n"] for d in res["table"]})
    fig, axes = plt.subplots(
        1, len(ns), figsize=(3.4 * len(ns), 3.3), squeeze=False, sharey=True, layout="constrained"
    )
    for ax, n in zip(axes[0], ns, strict=False):
        for ci, eps in enumerate(cfg.sparse_eps):
            for m, (ls, _) in _SPARSE_STYLE.items():
                d = sorted(
                    (
                        x
                        for x in res["table"]
                        if x["n"] == n and x["eps"] == eps and x["method"] == m
                    ),
                    key=lambda x: x["s"],
                )
                if d:
                    ax.errorbar(
                        [x["s"] for x in d],
                        [x["mean"] for x in d],
                        yerr=[x["std"] for x in d],
                        ls=ls,
                        marker="o",
                        ms=3,
                        capsize=2,
                        color=f"C{ci}",
                    )
        ax.axhline(res["saturation"], color="grey", lw=0.8, ls=(0, (1, 3)))
        ax.set_xlabel("sparsity s")
        ax.set_xticks(sorted({d["s"] for d in res["table"]}))
        ax.tick_params(labelsize=8)
        ax.set_title(
            f"p = {cfg.sparse_p}, k = {cfg.sparse_k}, n = {_n_text(n)}"
            + (" (Wishart draw of S)" if n != cfg.sparse_n else ""),
            fontsize=9,
        )
    axes[0][0].set_ylabel(ERROR_LABEL, fontsize=9)
    extra = {lab: Line2D([], [], color="k", ls=ls) for ls, lab in _SPARSE_STYLE.values()}
    extra.update(
        {
            f"ε = {_eps_text(e)}": Line2D([], [], color=f"C{i}", lw=3)
            for i, e in enumerate(cfg.sparse_eps)
        }
    )
    extra["random subspace"] = Line2D([], [], color="grey", lw=0.8, ls=(0, (1, 3)))
    extra[_bars(cfg.sparse_repeats)] = _bar_proxy()
    _shared_legend(fig, axes, extra, ncol=3)
    f = save_figure(fig, out / "tables_sparse.png", dpi=150)
    plt.close(fig)
    return [f]


def _plot_real(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.plots import save_figure

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for m in (
        "central_gaussian",
        "opendp",
        "opendp_uncentred",
        "ldp_paper",
        "ldp_correct",
        "ldp_isometric",
    ):
        d = sorted((x for x in res["table"] if x["method"] == m), key=lambda x: x["eps"])
        if d:
            ax.errorbar(
                [x["eps"] for x in d],
                [x["mean"] for x in d],
                yerr=[x["std"] for x in d],
                marker="o",
                ms=3,
                capsize=2,
                color=COLORS[m],
                label=LABELS[m],
            )
    ax.axhline(res["saturation"], color="grey", lw=0.8, ls=":", label="random subspace")
    ax.set_xscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel(r"distance to the non-private subspace, $\|\cdot\|_F$")
    ax.set_title(f"Fashion-MNIST 7x7 (n={res['n']}, p={res['p']}, k={res['k']})", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        [*handles, _bar_proxy()], [*labels, _bars(cfg.real_repeats, cfg.real_opendp_repeats)],
        fontsize=6,
    )  # fmt: skip
    f = save_figure(fig, out / "real_fmnist.png", dpi=150)
    plt.close(fig)
    return [f]
