"""``benchmarks/pca_distributed.py``'s figure, drawn from the committed JSON: the y-label
is rendered mathtext (no literal ``‖…‖_F``), the medians carry the interquartile range of
the repeats named with their n, a panel shows that range, at least 150 dpi."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "pca" / "pca_distributed.json"
_spec = importlib.util.spec_from_file_location(
    "pca_distributed", ROOT / "benchmarks" / "pca_distributed.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.skipif(not RESULTS.exists(), reason="no committed results")
def test_figure_from_the_committed_errors_names_its_spread():
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    data = json.loads(RESULTS.read_text())
    errs = {m: {int(n): v for n, v in data["errors"][m].items()} for m in bench.MODELS}
    fig = bench.figure(errs)
    try:
        assert fig.get_dpi() >= 150
        ax, ax_iqr = fig.axes
        fig.canvas.draw()  # raises on mathtext that does not parse
        ylabel = ax.get_ylabel()
        assert ylabel.count("$") == 2 and r"\|" in ylabel and "‖" not in ylabel
        assert ax_iqr.get_xlabel().startswith("users n") and ax_iqr.get_ylabel()
        assert ax.get_shared_x_axes().joined(ax, ax_iqr)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "band and bars: interquartile range of the 20 repeats" in labels
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == len(bench.MODELS)  # one IQR band per model
        # the drawn band of the distributed model is its 25-75 % range over the repeats
        band = bands[bench.MODELS.index("distributed")].get_paths()[0].vertices
        q1 = np.percentile([errs["distributed"][n] for n in bench.NS], 25, axis=1)
        lows = {round(x): y for x, y in band[1 : len(bench.NS) + 1]}
        np.testing.assert_allclose([lows[n] for n in bench.NS], q1, rtol=1e-12)
    finally:
        plt.close(fig)
