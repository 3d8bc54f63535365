"""Every figure the docs show, drawn from the committed results by the code that draws it,
has text a reader can use (issue 46 item 4): no run slugs or config names, no TeX left
raw, no code paths, and no text cut off at the figure's edge or running out of its panel.

Figures: the reproduction's convergence figure (core tier and the full CPU scale), the
protocol sweep, the stability grid and the data sweep (``scripts/fedsc_sweep.py``), the
four ``pca-bench`` figures of the full run, and a run's own ``convergence.png`` (with DP
and without).  Each is drawn into a temporary folder; tick labels are left out of the
text checks (numbers), every other text object is checked."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- the checks --------------------------------------------------------------------------
_MATH = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$")
_SLUG = re.compile(
    r"__|_s\d|\bs\d{1,3}\b|\b(?:w|lr|mu|alpha|d|T|B|E|C)\d+(?:\.\d+)?-|\bseed 0\d\d\b"
    r"|\b\d+x\d+-\w|\bfedavg_sc\b|\bcentral_sc\b|\bfedsc_\w"
)
_PATH = re.compile(r"\.py\b|\.ya?ml\b|\bsrc/|\bconfigs/|\bdocs/|\bresults/|[A-Za-z_]\w*/[A-Za-z_]")


def _texts(fig: Any) -> list[Any]:
    """Every visible, non-empty text object of ``fig`` but the tick labels."""
    from matplotlib.text import Text

    ticks = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks |= {id(t) for t in axis.get_ticklabels(which="both")}
            ticks.add(id(axis.get_offset_text()))
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in ticks
    ]


def check_figure(fig: Any, what: str) -> int:
    """Assert the text rules on ``fig``; the number of texts checked."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    problems = []
    texts = _texts(fig)
    inside = {id(t): ax for ax in fig.axes for t in ax.texts}
    for t in texts:
        s = t.get_text()
        if s.count("$") - s.count(r"\$") & 1:
            problems.append(f"unbalanced $ (raw TeX): {s!r}")
        plain = _MATH.sub(" ", s)  # mathtext is rendered; the rest must read as words
        if "\\" in plain or "$" in plain:
            problems.append(f"raw TeX: {s!r}")
        if "_" in plain or _SLUG.search(plain):
            problems.append(f"slug-like: {s!r}")
        if _PATH.search(plain):
            problems.append(f"code path: {s!r}")
        ext = t.get_window_extent(renderer)
        if not (
            ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1
            and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1
        ):  # fmt: skip
            problems.append(f"outside the figure: {s!r} at {ext.extents} in {box.extents}")
        ax = inside.get(id(t))
        if ax is not None:  # a note placed in a panel stays in it
            a = ax.get_window_extent(renderer)
            if ext.x0 < a.x0 - 1 or ext.x1 > a.x1 + 1 or ext.y0 < a.y0 - 1 or ext.y1 > a.y1 + 1:
                problems.append(f"runs out of its panel: {s!r}")
    assert not problems, f"{what}:\n" + "\n".join(problems)
    return len(texts)


# -- the figures -------------------------------------------------------------------------
def _reproduce(folder: Path) -> Callable[[], Any]:
    def draw() -> Any:
        from fedspectral.experiments.reproduce import SCALES
        from fedspectral.experiments.reproduce.figure import convergence_figure

        tables = json.loads((folder / "tables.json").read_text())
        return [convergence_figure(tables, SCALES["cpu"].settings)]

    return draw


def _sweep(grid: str, summary: Path) -> Callable[[], Any]:
    def draw() -> Any:
        sweep = _script("fedsc_sweep")
        sweep.GRID = grid
        runs = json.loads(summary.read_text())["runs"]
        return [sweep.stability_figure(runs) if grid == "stability" else sweep.sweep_figure(runs)]

    return draw


def _pca(tmp: Path, monkeypatch: Any) -> list[Any]:
    """The pca-bench figures of the committed full run, from its stored analysis (what
    ``pca-bench --reanalyse`` draws), each kept before it is closed."""
    import fedspectral.plots
    from fedspectral.experiments.pca_bench import plots
    from fedspectral.experiments.pca_bench.cli import config_from_payload

    meta = json.loads((RESULTS / "pca" / "full" / "pca_bench.json").read_text())
    cfg = config_from_payload(meta)
    figs = []

    def keep(fig: Any, path: Any, dpi: int = 150) -> Path:
        figs.append(fig)
        return Path(path)

    monkeypatch.setattr(plots, "save_figure", keep)
    monkeypatch.setattr(fedspectral.plots, "save_figure", keep)
    res = meta["results"]
    plots._plot_fig1(cfg, res["fig1"], tmp)
    plots._plot_tables(cfg, res["tables"], tmp)
    plots._plot_real(cfg, res["real"], tmp)
    return figs


def _run(dp: bool) -> dict[str, Any]:
    """A run's results as ``fedspectral train`` writes them (eval at rounds 5 and 10)."""
    recs = []
    for rnd in range(1, 11):
        rec: dict[str, Any] = {
            "round": rnd,
            "epsilon_rdp": 0.3 * rnd if dp else None,
            "phases": {"train": {"kind": "train", "metrics": {"train_loss": 1.0 / rnd}}},
        }
        if rnd % 5 == 0:
            rec.update(knn_backbone=0.5 + rnd / 100, knn_projector=0.4 + rnd / 100)
        recs.append(rec)
    privacy = {"releases": 10, "target_epsilon": 3.0, "delta": 1e-5} if dp else {"releases": 0}
    return {
        "name": "digits_smoke__fedsc__dp_s0",  # a slug the title must not show
        "method": "fedsc",
        "config": {"run": {"seed": 0}, "data": {"dataset": "digits"}},
        "records": recs,
        "initial": {"knn_backbone": 0.4, "knn_projector": 0.3},
        "privacy": privacy,
    }


FIGURES = {
    "reproduce core": (
        RESULTS / "fedsc_cpu" / "core" / "tables.json",
        _reproduce(RESULTS / "fedsc_cpu" / "core"),
    ),
    "reproduce full": (RESULTS / "fedsc_cpu" / "tables.json", _reproduce(RESULTS / "fedsc_cpu")),
    "protocol sweep": (
        RESULTS / "fedsc_sweep" / "sweep.json",
        _sweep("protocol", RESULTS / "fedsc_sweep" / "sweep.json"),
    ),
    "stability grid": (
        RESULTS / "fedsc_stability" / "stability.json",
        _sweep("stability", RESULTS / "fedsc_stability" / "stability.json"),
    ),
    "data sweep": (
        RESULTS / "fedsc_data_sweep" / "sweep.json",
        _sweep("data", RESULTS / "fedsc_data_sweep" / "sweep.json"),
    ),
}


@pytest.fixture(autouse=True)
def _close():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("name", list(FIGURES))
def test_fedsc_figures_text(name):
    source, draw = FIGURES[name]
    if not source.exists():
        pytest.skip(f"no committed {name}")
    (fig,) = draw()
    assert check_figure(fig, name) >= 5


@pytest.mark.skipif(
    not (RESULTS / "pca" / "full" / "pca_bench.json").exists(), reason="no committed pca run"
)
def test_pca_bench_figures_text(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "close", lambda fig=None: None)  # checked below, then closed
    figs = _pca(tmp_path, monkeypatch)
    assert len(figs) == 4  # fig1_k_eps, fig1_p, tables_sparse, real_fmnist
    for fig in figs:
        assert fig._suptitle is not None and "δ" in fig._suptitle.get_text()
        check_figure(fig, fig._suptitle.get_text()[:40])
    legends = [t.get_text() for f in figs for lg in f.legends for t in lg.get_texts()]
    if not any("OpenDP" in t and "bars" not in t for t in legends[-8:]):
        assert not any("(OpenDP:" in t for t in legends[-8:])  # real_fmnist: no OpenDP line


@pytest.mark.parametrize("dp", [True, False], ids=["dp", "no-dp"])
def test_run_convergence_text(tmp_path, monkeypatch, dp):
    import matplotlib.pyplot as plt

    from fedspectral.plots import plot_convergence

    seen = []
    monkeypatch.setattr(plt, "close", lambda fig=None: seen.append(fig))
    plot_convergence([_run(dp)], tmp_path / "convergence.png")
    (fig,) = seen
    check_figure(fig, "run convergence")
    title = fig._suptitle.get_text()
    assert "digits_smoke" not in title and ("δ = 1e-05" in title if dp else "no DP" in title)
    knn = fig.axes[0].lines[0]
    assert knn.get_linestyle() != "None" and list(knn.get_xdata()) == [0, 5, 10]
    one_eval = _run(dp)
    for r in one_eval["records"][:9]:
        r.pop("knn_backbone", None)
        r.pop("knn_projector", None)
    seen.clear()
    plot_convergence([one_eval], tmp_path / "one.png")
    line = seen[0].axes[0].lines[0]  # round 0 and round 10 only: markers, no line
    assert list(line.get_xdata()) == [0, 10] and line.get_linestyle() == "None"
    plt.close(seen[0])
