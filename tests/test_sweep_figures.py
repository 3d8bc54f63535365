"""The sweep's and the stability grid's figures (``scripts/fedsc_sweep.py``), drawn from
the committed summaries: points and options in words (no config slugs), the one seed
flagged, a method or option that was not run named in its panel, compared panels on
one y-axis, at least 150 dpi; several seeds of a point drawn as a band with their n."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "docs" / "results" / "fedsc_sweep" / "sweep.json"
STABILITY = ROOT / "docs" / "results" / "fedsc_stability" / "stability.json"
_spec = importlib.util.spec_from_file_location("fedsc_sweep", ROOT / "scripts" / "fedsc_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_point_names_in_words():
    assert sweep.point_words("w16-lr0.1-alphaend0.6") == "width 16, lr 0.1, α falls to 0.6"
    assert sweep.point_words("w8-lr0.1-alphaq") == "width 8, lr 0.1, α = client's data share"
    assert sweep.point_words("w4-lr0.1-mu2") == "width 4, lr 0.1, clip norm √2"
    assert sweep.point_words("w8-lr0.1-E3") == "width 8, lr 0.1, 3 local epochs"
    assert sweep.point_words("w8-odd") == "width 8, odd"  # unknown tokens kept
    assert sweep.point_words("d5400-T30-B512") == "5400 images per client, 30 rounds, batch 512"
    assert sweep.point_words("d1200-C5") == "1200 images per client, 5 clients per round"
    assert sweep.point_words("Base-dx") == "Base, dx"  # one-letter keys take numbers only


def _shared_y(axes):
    return all(axes[0].get_shared_y_axes().joined(axes[0], a) for a in axes[1:])


@pytest.mark.skipif(not SWEEP.exists(), reason="no committed sweep")
def test_sweep_figure_flags_one_seed_and_names_missing_methods():
    data = json.loads(SWEEP.read_text())["runs"]
    fig = sweep.sweep_figure(data)
    assert fig.get_dpi() >= 150
    assert "ONE SEED (seed 0)" in fig._suptitle.get_text()
    knn, obj = fig.axes[0::2], fig.axes[1::2]
    assert len(knn) == len({r["run"].split("/")[0] for r in data}) == 11
    assert _shared_y(knn) and _shared_y(obj)
    titles = [" ".join(a.get_title().replace("\u00a0", " ").split()) for a in knn]
    assert not any(re.search(r"\bw\d+-|lr\d|alpha|mu\d", t) for t in titles)  # no slugs
    assert all(t.startswith("width ") for t in titles)
    alphaq = next(t for t in titles if t.startswith("width 8, lr 0.1, α = client's data share"))
    assert "not run at this point: FedAvg+SC, centralized SC" in alphaq
    assert "final probe (%): FedSC 54.4" in alphaq
    for ax in obj:  # the round axis is named under each point (shared with its KNN panel)
        assert ax.get_xlabel() == "round"
        assert ax.get_shared_x_axes().joined(ax, knn[obj.index(ax)])


@pytest.mark.skipif(not STABILITY.exists(), reason="no committed stability grid")
def test_stability_figure_names_the_options_not_run():
    data = json.loads(STABILITY.read_text())["runs"]
    fig = sweep.stability_figure(data)
    assert fig.get_dpi() >= 150
    assert "ONE SEED (seed 0)" in fig._suptitle.get_text()
    top, bottom = fig.axes[:6], fig.axes[6:]
    assert _shared_y(top) and _shared_y(bottom)
    missing = [a.get_title() for a in top if "this setting:\nserver lr 0.5" in a.get_title()]
    assert len(missing) == 4  # server lr 0.5 alone ran at lr 0.1 only
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [sweep.OPTION_WORDS[o] for o in sweep.STABILITY_OPTIONS]
    assert not any("_lr" in lab for lab in labels)


def test_several_seeds_of_a_point_are_a_band_named_with_n():
    curve = [{"round": 10, "knn_backbone": 0.4, "knn_projector": 0.3, "sc_objective": -0.9}]
    run = {
        "run": "w8-lr0.1/fedsc",
        "method": "fedsc",
        "overrides": ["run.seed=0"],
        "initial": {"knn_backbone": 0.5, "sc_objective": -0.5},
        "final": {"knn_backbone": 0.4, "linear_probe": 0.5},
        "curve": curve,
    }
    other = copy.deepcopy(run)
    other["overrides"] = ["run.seed=1"]
    other["curve"][0]["knn_backbone"] = 0.44
    fig = sweep.sweep_figure([run, other])
    ax_knn = fig.axes[0]
    assert ax_knn.get_lines()[0].get_label() == "FedSC (n = 2)"
    assert len(ax_knn.collections) == 1  # the ± 1 std band
    assert "seeds [0, 1]" in fig._suptitle.get_text()
    assert "ONE SEED" not in fig._suptitle.get_text()
