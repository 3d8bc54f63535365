"""The reproduction's convergence figure starts at round 0, the untrained network of each
run's seed, and ``scripts/redraw_convergence.py`` redraws it from ``summary.json`` alone
with the same curves as the report's tables (``docs/results/fedsc_cpu``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fedspectral.experiments.reproduce.report import _mean_curve_from_zero

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "docs" / "results" / "fedsc_cpu"
_spec = importlib.util.spec_from_file_location(
    "redraw_convergence", ROOT / "scripts" / "redraw_convergence.py"
)
redraw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(redraw)


def test_curves_start_at_each_seeds_untrained_network():
    runs = [
        {"seed": 0, "rounds": [10, 20], "knn_backbone": [40.0, 41.0]},
        {"seed": 1, "rounds": [10, 20], "knn_backbone": [44.0, 45.0]},
    ]
    rounds, ys = _mean_curve_from_zero(runs, "knn_backbone", {0: 50.0, 1: 52.0})
    assert rounds == [0, 10, 20]
    np.testing.assert_array_equal(ys, [[50.0, 40.0, 41.0], [52.0, 44.0, 45.0]])
    # a seed without an untrained row: no round 0 rather than another seed's value
    rounds, ys = _mean_curve_from_zero(runs, "knn_backbone", {0: 50.0})
    assert rounds == [10, 20] and ys.shape == (2, 2)
    # a run that evaluated round 0 itself keeps its own value
    own = [{"seed": 0, "rounds": [0, 10], "knn_backbone": [49.0, 40.0]}]
    assert _mean_curve_from_zero(own, "knn_backbone", {0: 50.0})[1][0, 0] == 49.0


@pytest.mark.skipif(not (CPU / "summary.json").exists(), reason="no committed CPU results")
def test_redraw_from_summary_json_uses_the_reports_curves(tmp_path):
    summary = json.loads((CPU / "summary.json").read_text())
    tables = json.loads((CPU / "tables.json").read_text())
    data, settings = redraw.grid_input(summary, summary["protocol"]["scale"])
    assert [s.key for s in settings] == [s["key"] for s in tables["settings"]]
    assert data["curves"]  # every curve the figure draws is the report's, seed for seed
    for key, curves in data["curves"].items():
        want = {c["seed"]: c for c in tables["curves"][key]}
        assert len(curves) == len(want)
        for c in curves:
            w = want[c["seed"]]
            assert c["rounds"] == w["rounds"]
            for k in redraw.KEYS:
                np.testing.assert_allclose(c[k], w[k], rtol=0, atol=1e-9)
    for k in redraw.KEYS:
        for setting, cell in data["table2"][k]["untrained"].items():
            ref = tables["table2"][k]["untrained"][setting]
            assert cell["seeds"] == ref["seeds"]
            np.testing.assert_allclose(cell["values"], ref["values"], rtol=0, atol=1e-9)
            assert cell["mean"] == pytest.approx(ref["mean"], abs=1e-9)
    from fedspectral.experiments.reproduce.report import _plot_convergence_grid

    assert _plot_convergence_grid(data, settings, tmp_path / "c.png").stat().st_size > 0
