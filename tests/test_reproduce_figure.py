"""The reproduction's convergence figure (``fedspectral.experiments.reproduce.figure``):
settings in words, the data set named, bands named with their n, the final linear probe
beside KNN, a row of the paired differences with the report's own 95 % paired t
intervals, shared axes where panels are compared, at least 150 dpi; checked on the
matplotlib Figure drawn from the committed core tier (``docs/results/fedsc_cpu/core``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fedspectral.experiments.reproduce import SCALES
from fedspectral.experiments.reproduce.figure import (
    FIG_DPI,
    convergence_figure,
    paired_rows,
    setting_words,
)

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "docs" / "results" / "fedsc_cpu" / "core"
FULL = CORE.parent
_spec = importlib.util.spec_from_file_location(
    "redraw_convergence", ROOT / "scripts" / "redraw_convergence.py"
)
redraw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(redraw)

needs_core = pytest.mark.skipif(
    not (CORE / "tables.json").exists(), reason="no committed core tier"
)


def test_settings_in_words():
    words = [setting_words(s) for s in SCALES["cpu"].settings]
    assert words == [
        "10 clients × 1 class, all 10 per round",
        "10 clients × 1 class, 2 of 10 per round",
        "5 clients × 2 classes, all 5 per round",
        "5 clients × 2 classes, 2 of 5 per round",
    ]


@pytest.fixture(scope="module")
def core_figure():
    import matplotlib.pyplot as plt

    tables = json.loads((CORE / "tables.json").read_text())
    fig = convergence_figure(tables, SCALES["cpu"].settings)
    yield fig, tables
    plt.close(fig)


@needs_core
def test_the_figure_names_what_it_shows(core_figure):
    fig, _ = core_figure
    assert fig.get_dpi() >= 150 and FIG_DPI >= 150
    axes = fig.axes
    assert len(axes) == 6 * 2  # 3 rows + 3 difference rows x the 2 settings of the core tier
    title = fig._suptitle.get_text()
    assert "Fashion-MNIST" in title and "n\u00a0=\u00a010 seeds" in title
    assert "±\u00a01 std" in title and "95\u00a0% paired t interval" in title
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "shaded: ± 1 std over the seeds" in texts
    assert "FedSC (n = 10 seeds)" in texts and "FedAvg+SC (n = 10 seeds)" in texts
    assert "paired difference: mean, 95 % CI" in texts
    top = axes[:2]  # row-major: the first row's two panels
    assert [a.get_title() for a in top] == [setting_words(s) for s in SCALES["cpu"].settings[:2]]
    for ax in axes:  # every axis named; no code jargon, no TeX left raw
        for lab in (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()):
            assert "cls" not in lab and "$" not in lab and "\\" not in lab
        assert ax.get_xlabel()
    ylabels = [axes[2 * i].get_ylabel() for i in range(6)]
    assert "KNN accuracy (%)" in ylabels[0] and "backbone" in ylabels[0]
    assert "projector" in ylabels[1] and "linear probe" in ylabels[2]
    assert all("higher is better" in y for y in ylabels[:3])
    assert ylabels[3:] == [
        "difference:\nlinear probe",
        "difference:\nKNN on h",
        "difference:\nKNN on z",
    ]
    assert axes[10].get_xlabel() == "difference (percentage points)"


@needs_core
def test_compared_panels_share_their_axis(core_figure):
    fig, _ = core_figure
    ax = fig.axes
    for row in range(3):  # curves and probe: one y scale across the settings
        a, b = ax[2 * row], ax[2 * row + 1]
        assert a.get_shared_y_axes().joined(a, b)
        assert a.get_ylim() == b.get_ylim()
    for row in range(3, 6):  # each difference row: one x scale across the settings
        assert ax[2 * row].get_shared_x_axes().joined(ax[2 * row], ax[2 * row + 1])


@needs_core
def test_the_differences_row_is_the_reports_intervals(core_figure):
    """Every paired difference drawn is the one the report prints, to its 2 decimals."""
    fig, tables = core_figure
    evidence = [e for o in tables["observations"] for e in o.get("evidence", [])]
    words = {s["key"]: s["label"] for s in tables["settings"]}
    long = {"FedSC stable": "FedSC, stable", "untrained": "untrained"}
    seen = 0
    for key, label in words.items():
        rows = paired_rows(tables, key)
        comps = {c for c, _, _ in rows}
        assert {"FedSC − FedAvg+SC", "FedSC stable − FedSC", "FedSC − untrained"} <= comps
        for comp, metric, d in rows:
            a, b = comp.split(" − ")
            line = (
                f"{label}, {metric}: {long.get(a, a)} − {long.get(b, b)} = {d['mean']:+.2f} "
                f"[95 % CI {d['lo']:+.2f}, {d['hi']:+.2f}] (sd {d['std']:.2f}, n={d['n']})"
            )
            assert any(line in e for e in evidence), line
            seen += 1
    assert seen == 2 * (3 * 3 + 1)
    # the differences row draws them all: one error bar per difference
    assert sum(len(ax.containers) for ax in fig.axes[6:]) == seen


@needs_core
@pytest.mark.parametrize("folder", [CORE, FULL], ids=["core", "full"])
def test_redraw_rebuilds_the_reports_table_from_summary_json(folder):
    """``scripts/redraw_convergence.py`` draws the probe row and the differences from the
    table it rebuilds out of ``summary.json``: the report's ``table2``, seed for seed."""
    summary = json.loads((folder / "summary.json").read_text())
    tables = json.loads((folder / "tables.json").read_text())
    data, _ = redraw.grid_input(summary, summary["protocol"]["scale"])
    checked = 0
    for metric, rows in data["table2"].items():
        for method, cells in rows.items():
            for key, cell in cells.items():
                ref = tables["table2"][metric][method][key]
                assert cell["seeds"] == ref["seeds"]
                assert cell["values"] == pytest.approx(ref["values"], abs=1e-9)
                assert cell["std"] == pytest.approx(ref["std"], abs=1e-9)
                checked += 1
    assert checked >= 3 * 4 * len(tables["settings"])
    for key in (s["key"] for s in tables["settings"]):
        assert paired_rows(data, key) == paired_rows(tables, key)
