"""Per-run convergence figure: the series it draws (round 0 = the untrained network, the
training loss of every round, ε against the round for a DP run) and the panels it has."""

from __future__ import annotations

import pytest

from fedspectral.plots import _eps_series, _loss_series, _series, plot_convergence


def _results(dp: bool) -> dict:
    recs = []
    for rnd in range(1, 11):
        rec = {
            "round": rnd,
            "sampled": ["a"],
            "epsilon_rdp": 0.3 * rnd if dp else None,
            "phases": {"train": {"kind": "train", "metrics": {"train_loss": 1.0 / rnd}}},
        }
        if rnd == 10:  # a demo evaluates only at the last round
            rec.update(knn_backbone=0.6, knn_projector=0.5)
        recs.append(rec)
    return {
        "name": "demo",
        "method": "fedsc",
        "records": recs,
        "initial": {"knn_backbone": 0.4, "knn_projector": 0.3},
        "privacy": {"releases": 10 if dp else 0, "target_epsilon": 3.0} if dp else {"releases": 0},
    }


def test_series_start_at_the_untrained_network_and_cover_every_round():
    res = _results(dp=True)
    assert _series(res, "knn_backbone") == ([0, 10], [40.0, 60.0])  # two points, not one
    xs, ys = _loss_series(res)
    assert xs == list(range(1, 11)) and ys[0] == 1.0
    xs, ys = _eps_series(res)
    assert xs == list(range(11)) and ys[0] == 0.0 and ys[-1] == pytest.approx(3.0)
    assert _eps_series(_results(dp=False)) == ([], [])
    # FedSC sharing without DP: releases, each at ε = ∞ (JSON "inf"): no ε panel
    open_share = _results(dp=False)
    open_share["privacy"]["releases"] = 10
    for r in open_share["records"]:
        r["epsilon_rdp"] = "inf"
    assert _eps_series(open_share) == ([], [])


@pytest.mark.parametrize("dp, panels", [(True, 4), (False, 3)])
def test_convergence_figure_panels(tmp_path, monkeypatch, dp, panels):
    import matplotlib.pyplot as plt

    seen = {}
    close = plt.close

    def keep(fig=None):
        seen["axes"] = [ax for ax in fig.axes if ax.get_title()]
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    path = plot_convergence([_results(dp)], tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = seen["axes"]
    assert len(axes) == panels
    assert [len(ax.lines[0].get_xdata()) for ax in axes[:3]] == [2, 2, 10]
    if dp:
        assert "varepsilon" in axes[3].get_title() and len(axes[3].lines[0].get_xdata()) == 11


def test_convergence_figure_names_runs_in_words_at_150_dpi(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from PIL import Image

    seen = {}
    close = plt.close

    def keep(fig=None):
        seen["legend"] = [t.get_text() for t in fig.legends[0].get_texts()]
        seen["title"] = fig._suptitle.get_text()
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    res = _results(dp=False)
    res["config"] = {"run": {"seed": 3}, "data": {"dataset": "fashion_mnist"}}
    path = plot_convergence([res], tmp_path / "c.png")
    assert seen["legend"] == ["FedSC, one run (seed 3)"]  # the method in words, not "fedsc"
    assert seen["title"] == "FedSC on Fashion-MNIST: convergence of one run, no DP"
    dpi = Image.open(path).info["dpi"]
    assert min(dpi) == pytest.approx(150, abs=0.5)
