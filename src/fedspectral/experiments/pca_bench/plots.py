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
ERROR_LABEL = "subspace error " + r"$\|\hat V\hat V^\top - VV^\top\|_F$" + "\n(lower is better)"
_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _delta_text(delta: float) -> str:
    """δ for a title: a power of ten as ``10⁻⁴`` (no TeX), else ``%g``."""
    k = math.log10(delta) if delta > 0 else 0.0
    if abs(k - round(k)) < 1e-9:
        return "10" + str(round(k)).translate(_SUP)
    return f"{delta:g}"


def _suptitle(fig: Any, text: str, chars_per_inch: float = 15) -> None:
    """The figure's title, wrapped to its width (textwrap breaks at ASCII spaces only, so
    ``ε\u00a0=\u00a01`` stays whole)."""
    import textwrap

    fig.suptitle(textwrap.fill(text, int(fig.get_figwidth() * chars_per_inch)), fontsize=9)


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


#: drawn dashed with large hollow markers on top of the others, since each often lies on
#: another curve (said in its legend entry): the curve beneath shows through the gaps and
#: inside the hollow markers
_ON_TOP = {
    "opendp": ("s", "on the LDP curves"),
    "ldp_paper": ("D", "on LDP, correct σ"),
    "distributed": ("o", "on central Gaussian"),
}


def _label(m: str) -> str:
    """A method's legend entry; a curve drawn on top says what it lies on."""
    if m not in _ON_TOP:
        return LABELS[m]
    note = f"dashed, hollow: {_ON_TOP[m][1]}"
    label = LABELS[m]
    return f"{label[:-1]}; {note})" if label.endswith(")") else f"{label} ({note})"


def _style(m: str) -> dict[str, Any]:
    """The errorbar style of method ``m``: small filled markers, or dashed with large
    hollow markers on top (:data:`_ON_TOP`)."""
    if m in _ON_TOP:
        return {"marker": _ON_TOP[m][0], "ms": 6.5, "mfc": "none", "mew": 1.0, "lw": 1.0,
                "ls": (0, (4, 2)), "zorder": 5}  # fmt: skip
    return {"marker": "o", "ms": 3, "lw": 1.2, "ls": "-", "zorder": 2}


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
        ax.errorbar(n, mu, yerr=sd, label=_label(m), color=COLORS[m], capsize=2, **_style(m))
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
    """The legend entry that names the error bars and their n (OpenDP's only when an
    OpenDP curve is drawn: pass ``None`` otherwise)."""
    od = f" (OpenDP: {opendp_repeats})" if opendp_repeats is not None else ""
    return f"bars: mean ± 1 std over {repeats} repeats{od}"


def _bar_proxy() -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color="0.3", marker="|", ms=8, ls="none", mew=1)


def _fig1_extra(cfg: BenchConfig, opendp: bool) -> dict[str, Any]:
    from matplotlib.lines import Line2D

    split = (
        f"left of it: each user's row simulated (n ≤ {_n_text(max(cfg.n_rows))}); right: the "
        "users' covariance\ndrawn directly from its exact (Wishart) distribution"
    )
    return {
        _bars(cfg.repeats, cfg.opendp_repeats if opendp else None): _bar_proxy(),
        "random subspace (the error's ceiling)": Line2D([], [], color="grey", lw=0.8, ls="--"),
        split: Line2D([], [], color="grey", lw=0.5, ls="-."),
    }


def _plot_fig1(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    """Seed Figure 1: subspace error against n, one panel per (k, ε) and per p; mean ± std
    over the repeats; a title saying what and δ; one legend below the panels."""
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
    delta = _delta_text(cfg.delta)
    _suptitle(
        fig,
        f"Private PCA on synthetic spiked data (paper Figure 1): subspace error against the "
        f"number of users n, p\u00a0=\u00a0{cfg.fig1_p}, one row per rank k and one column per "
        f"ε; every private method (ε,\u00a0δ)-DP with δ\u00a0=\u00a0{delta}; mean over "
        f"{cfg.repeats} repeats",
    )
    opendp = any(d["method"] == "opendp" for d in res["summary"])
    _shared_legend(fig, axes, _fig1_extra(cfg, opendp), ncol=2)
    files = [save_figure(fig, out / "fig1_k_eps.png", dpi=150)]
    plt.close(fig)
    fig, axes = plt.subplots(
        1,
        len(cfg.p_values),
        figsize=(3.4 * len(cfg.p_values), 3.6),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for j, p in enumerate(cfg.p_values):
        _fig1_panel(axes[0][j], by, res, split, "p", p, cfg.p_k, cfg.p_eps)
        axes[0][j].set_xlabel("users n")
    axes[0][0].set_ylabel(ERROR_LABEL, fontsize=9)
    _suptitle(
        fig,
        f"Private PCA on synthetic spiked data (paper Figure 1, dimension p): subspace error "
        f"against the number of users n, k\u00a0=\u00a0{cfg.p_k}, "
        f"(ε,\u00a0δ)\u00a0=\u00a0({cfg.p_eps:g},\u00a0{delta}); mean over {cfg.repeats} "
        f"repeats",
    )
    _shared_legend(fig, axes, _fig1_extra(cfg, opendp), ncol=2)
    files.append(save_figure(fig, out / "fig1_p.png", dpi=150))
    plt.close(fig)
    return files


_SPARSE_STYLE = {
    "alg2": ("-", "o", "Algorithm 2 (FPS, sparse): solid, filled circles"),
    "alg1": ("--", "s", "Algorithm 1 (dense): dashed, hollow squares"),
    "central_gaussian": (":", "x", "central Gaussian: dotted, crosses"),
}
#: the sideways offset (in units of s) of each ε's points, so that equal values stay visible
_DODGE = 0.9


def _plot_tables(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    """Seed Tables 1-2 as a figure: subspace error against the sparsity s, one panel per
    n; line style and marker = method, colour = ε, the ε side by side (:data:`_DODGE`)
    so that curves with equal values stay visible; one legend below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ns = sorted({d["n"] for d in res["table"]})
    fig, axes = plt.subplots(
        1, len(ns), figsize=(3.6 * len(ns), 3.9), squeeze=False, sharey=True, layout="constrained"
    )
    n_eps = len(cfg.sparse_eps)
    for ax, n in zip(axes[0], ns, strict=False):
        for ci, eps in enumerate(cfg.sparse_eps):
            shift = _DODGE * (ci - (n_eps - 1) / 2)
            for m, (ls, mk, _) in _SPARSE_STYLE.items():
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
                        [x["s"] + shift for x in d],
                        [x["mean"] for x in d],
                        yerr=[x["std"] for x in d],
                        ls=ls,
                        marker=mk,
                        ms=6 if mk == "s" else 4,
                        mfc="none" if mk == "s" else None,
                        lw=1.1,
                        capsize=2,
                        color=f"C{ci}",
                    )
        ax.axhline(res["saturation"], color="grey", lw=0.8, ls=(0, (1, 3)))
        ax.set_xlabel("sparsity s")
        ax.set_xticks(sorted({d["s"] for d in res["table"]}))
        ax.tick_params(labelsize=8)
        ax.set_title(
            f"p = {cfg.sparse_p}, k = {cfg.sparse_k}, n = {_n_text(n)}"
            + (
                "\n(covariance drawn directly)"
                if n != cfg.sparse_n
                else "\n(users' rows simulated)"
            ),
            fontsize=9,
        )
    axes[0][0].set_ylabel(ERROR_LABEL, fontsize=9)
    extra = {
        lab: Line2D([], [], color="k", ls=ls, marker=mk, mfc="none" if mk == "s" else None)
        for ls, mk, lab in _SPARSE_STYLE.values()
    }
    extra.update(
        {
            f"ε = {_eps_text(e)}" + (" (no DP)" if math.isinf(e) else ""): Line2D(
                [], [], color=f"C{i}", lw=3
            )
            for i, e in enumerate(cfg.sparse_eps)
        }
    )
    extra["random subspace"] = Line2D([], [], color="grey", lw=0.8, ls=(0, (1, 3)))
    extra[_bars(cfg.sparse_repeats)] = _bar_proxy()
    _suptitle(
        fig,
        f"Sparse private PCA (paper Tables 1-2): subspace error against the sparsity s, "
        f"p\u00a0=\u00a0{cfg.sparse_p}, k\u00a0=\u00a0{cfg.sparse_k}; (ε,\u00a0δ)-DP with "
        f"δ\u00a0=\u00a0{_delta_text(cfg.delta)}; the ε drawn side by side around each s",
    )
    _shared_legend(fig, axes, extra, ncol=3)
    f = save_figure(fig, out / "tables_sparse.png", dpi=150)
    plt.close(fig)
    return [f]


def _plot_real(cfg: BenchConfig, res: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5.2), layout="constrained")
    drawn = set()
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
            drawn.add(m)
            style = _style(m) if m in _ON_TOP and m != "ldp_paper" else _style("")
            ax.errorbar(
                [x["eps"] for x in d],
                [x["mean"] for x in d],
                yerr=[x["std"] for x in d],
                capsize=2,
                color=COLORS[m],
                label=LABELS[m],
                **style,
            )
    ax.axhline(res["saturation"], color="grey", lw=0.8, ls=":", label="random subspace")
    ax.set_xscale("log")
    ax.set_xlabel("privacy budget ε (larger: less private)")
    ax.set_ylabel(
        "distance to the non-private subspace " + r"$\|\cdot\|_F$" + "\n(lower is better)"
    )
    _suptitle(
        fig,
        f"Private PCA on Fashion-MNIST images pooled to 7×7 pixels (n\u00a0=\u00a0"
        f"{_n_text(res['n'])} images, p\u00a0=\u00a0{res['p']}, k\u00a0=\u00a0{res['k']}): "
        f"distance of the private top-{res['k']} subspace to the non-private one; "
        f"(ε,\u00a0δ)-DP with δ\u00a0=\u00a0{_delta_text(cfg.delta)}",
        chars_per_inch=13,
    )
    handles, labels = ax.get_legend_handles_labels()
    od = cfg.real_opendp_repeats if drawn & {"opendp", "opendp_uncentred"} else None
    fig.legend(
        [*handles, _bar_proxy()], [*labels, _bars(cfg.real_repeats, od)],
        loc="outside lower center", ncol=2, fontsize=7, frameon=False,
    )  # fmt: skip
    f = save_figure(fig, out / "real_fmnist.png", dpi=150)
    plt.close(fig)
    return [f]
