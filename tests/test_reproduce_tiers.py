"""The mechanism tiers of ``fedspectral reproduce fedsc`` (``lowdrift``, ``hetero``,
``drift``, ``lowdrift-dp``): what each plans, the paired verdicts against an independent
paired t test, where the report goes, and one tiny run end to end.

Budget: plans and synthetic results (no training) except the end-to-end run: two tiny
FedAvg+SC runs on digits, about 10 s of CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedspectral.cli import main
from fedspectral.experiments import reproduce as rp
from fedspectral.experiments.reproduce.tiers import CLIENT_IMAGES, LOWDRIFT_ROUNDS, TIER_DEFS

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def _plan(tier, out="/nonexistent/never-written", **kw):
    return rp.build_plan("fedsc", "cpu", configs=CONFIGS, out=out, tier=tier, **kw)


def _steps(cfg, n=CLIENT_IMAGES):
    """Local gradient steps a round as fed/methods/_local.py runs them."""
    return (n // min(cfg.optim.batch_size, n)) * cfg.method.local_epochs


def test_lowdrift_plans_one_step_rounds_alpha_q_and_the_union_batch_twin():
    plan = _plan("lowdrift")
    assert plan.seeds == list(range(10)) and plan.report_out == plan.out / "lowdrift"
    rows = {(r.row, r.seed): r.config for r in plan.runs}
    assert {r for r, _ in rows} == {"fedsc", "fedsc_stable", "fedavg_sc", "central_sc"}
    for (row, _), cfg in rows.items():
        assert cfg.method.rounds == LOWDRIFT_ROUNDS and cfg.eval.test_size == 10_000
        assert cfg.partition.scheme == "class" and cfg.partition.classes_per_client == 1
        if row == "central_sc":  # the same number of steps, the union of the batches
            assert cfg.optim.batch_size == 10 * CLIENT_IMAGES
            assert _steps(cfg, 10 * CLIENT_IMAGES) == 1
        else:
            assert cfg.optim.batch_size == CLIENT_IMAGES and _steps(cfg) == 1
            assert cfg.method.weighted is True
        if row.startswith("fedsc"):
            assert cfg.method.params["alpha"] == "q"
    stable = rows[("fedsc_stable", 0)].method.params
    assert stable["server_lr"] == 0.5 and stable["cross_term"] == "tracked"
    # the stable rows come last: a grid stopped early holds whole seeds of the comparison
    assert all(r.stable for r in plan.runs[-10:])


def test_hetero_plans_dirichlet_and_two_class_splits_with_weighted_averaging():
    plan = _plan("hetero")
    by_key = {s.key: s for s in plan.scale.settings}
    assert set(by_key) == {"dir0.1", "dir0.5", "5x2"}
    for r in plan.runs:
        c = r.config
        assert c.method.weighted is True and c.eval.test_size == 10_000
        assert c.optim.batch_size == 64 and c.method.rounds == 100  # the protocol's epoch
        if r.setting.key.startswith("dir"):
            assert c.partition.scheme == "dirichlet" and c.partition.num_clients == 10
            assert c.partition.dirichlet_alpha == float(r.setting.key[3:])
        else:
            assert (c.partition.scheme, c.partition.num_clients) == ("class", 5)
        if r.method == "fedsc":
            assert c.method.params["alpha"] == "linear"  # the protocol's FedSC
    central = [r for r in plan.runs if r.method == "central_sc"]
    assert len(central) == 10  # pooled data: once per seed


def test_drift_points_have_equal_total_gradient_steps():
    plan = _plan("drift")
    assert plan.seeds == list(range(5))
    steps = {}
    for r in plan.runs:
        c = r.config
        steps[r.setting.key] = _steps(c)
        assert _steps(c) * c.method.rounds == LOWDRIFT_ROUNDS
        assert _steps(c) == r.setting.tier.local_steps
    assert sorted(steps.values()) == [1, 2, 4, 5]
    # the 1-step point is the low-drift tier's runs themselves: same names, same configs
    low = {r.name: r.config for r in _plan("lowdrift").runs}
    for r in plan.runs:
        if r.setting.key == "10x1-lowdrift":
            assert r.name in low and low[r.name] == r.config


def test_lowdrift_dp_calibrates_eps_3_and_6_and_shares_the_noise_free_runs():
    plan = _plan("lowdrift-dp")
    dp = [r for r in plan.runs if r.dp is not None]
    assert sorted({r.dp for r in dp}) == [(3.0, 1e-5), (6.0, 1e-5)] and len(dp) == 20
    for r in dp:
        assert r.config.method.params["share_start"] == LOWDRIFT_ROUNDS // 2 + 1
        assert r.config.method.params["alpha"] == "q" and r.config.dp.plan == "worst_case"
    low = {r.name for r in _plan("lowdrift").runs}
    main_runs = [r for r in plan.runs if r.dp is None and not r.late]
    assert main_runs and all(r.name in low for r in main_runs)


@pytest.mark.parametrize("tier", sorted(TIER_DEFS))
def test_mechanism_tiers_are_cpu_only(tier):
    with pytest.raises(ValueError, match="CPU tier"):
        rp.build_plan("fedsc", "paper", configs=CONFIGS, out="/nonexistent/p", tier=tier)


def _synthetic(plan, rng):
    """Results with seed-level noise: FedSC +3 over FedAvg+SC, untrained 50 %."""
    shift = {"fedsc": 0.55, "fedsc_stable": 0.54, "fedavg_sc": 0.52, "central_sc": 0.60}
    results = {}
    for r in plan.runs:
        base = shift[r.row] + rng.normal(0, 0.01)
        final = {
            "knn_backbone": base,
            "knn_projector": base - 0.02,
            "linear_probe": base + rng.normal(0.05, 0.01),
        }
        results[r.name] = {
            "final": final,
            "initial": {
                "knn_backbone": 0.50 + 0.001 * r.seed,
                "knn_projector": 0.49,
                "linear_probe": 0.60 + 0.001 * r.seed,
            },
            "records": [
                {"round": k, "knn_backbone": base, "knn_projector": base - 0.02} for k in (25, 50)
            ],
            "timings": {"total_seconds": 1.0},
        }
    return results


def test_tier_verdicts_are_scipys_paired_t_intervals_and_the_report_lists_them(tmp_path):
    plan = _plan("lowdrift", out=tmp_path)
    results = _synthetic(plan, np.random.default_rng(3))
    summary = rp.summarize(plan, results)
    ver = {(v["setting"], v["a"], v["b"], v["metric"]): v for v in summary["tier_verdicts"]}
    for a, b in TIER_DEFS["lowdrift"].comparisons:
        for metric in ("knn_backbone", "linear_probe"):

            def per_seed(row, metric=metric):
                if row == "untrained":
                    return [
                        100 * results[f"10x1-lowdrift__fedsc__s{s}"]["initial"][metric]
                        for s in range(10)
                    ]
                name = "fedsc-stable" if row == "fedsc_stable" else row
                return [
                    100 * results[f"10x1-lowdrift__{name}__s{s}"]["final"][metric]
                    for s in range(10)
                ]

            ci = stats.ttest_rel(per_seed(a), per_seed(b)).confidence_interval(0.95)
            d = ver[("10x1-lowdrift", a, b, metric)]["diff"]
            assert d["n"] == 10 and d["paired"]
            assert (d["lo"], d["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert ver[("10x1-lowdrift", "fedsc", "fedavg_sc", "knn_backbone")]["verdict"] == "holds"
    assert ver[("10x1-lowdrift", "central_sc", "fedsc", "knn_backbone")]["verdict"] == "holds"
    paths = rp.write_report(plan, summary, results)
    assert Path(paths["report"]).parent == tmp_path / "lowdrift"
    text = Path(paths["report"]).read_text()
    assert "## Verdicts of the `lowdrift` tier" in text
    assert "| 10x1 cls, 10/10, 1 step(s)/round | FedSC − FedAvg+SC |" in text
    data = json.loads(Path(paths["summary"]).read_text())
    assert {r["setting"] for r in data["runs"]} == {"10x1-lowdrift"}


def test_drift_tier_settings_keep_distinct_ids_in_summary_json(tmp_path):
    plan = _plan("drift", out=tmp_path, seeds=2)
    results = _synthetic(plan, np.random.default_rng(0))
    data = rp.summary.protocol_summary(plan, results)
    ids = {r["setting"] for r in data["runs"]}
    assert ids == {"10x1-lowdrift", "10x1-steps2", "10x1-steps5", "10x1-protocol"}
    ver = rp.summarize(plan, results)["tier_verdicts"]
    assert sorted({v["local_steps"] for v in ver}) == [1, 2, 4, 5]


def test_a_tiny_tier_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "r"
    argv = [
        "reproduce",
        "fedsc",
        "--quick",
        "--tier",
        "hetero",
        "--methods",
        "fedavg_sc",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "eval.test_size=200",
        "--set",
        "eval.every=2",
    ]
    assert main(argv) == 0
    report = (out / "hetero" / "REPORT.md").read_text()
    assert "Verdicts of the `hetero` tier" in report
    data = json.loads((out / "hetero" / "summary.json").read_text())
    fed = [r for r in data["runs"] if r["method"] == "fedavg_sc"]
    assert {r["setting"] for r in fed} == {"dir0.1", "dir0.5", "5x2"}
    cfg = (out / "runs" / "dir0.1__fedavg_sc__s0" / "config.yaml").read_text()
    assert "dirichlet" in cfg and "weighted: true" in cfg
    # each run's CPU time (user + system) is recorded beside it and summed in the report
    cost = json.loads((out / "runs" / "dir0.1__fedavg_sc__s0" / "cost.json").read_text())
    assert cost["attempts"] == 1 and cost["cpu_seconds"] > 0
    assert "CPU: " in report and "over the 3 finished run(s)" in report
    assert (out / "tiers.png").is_file()  # the tiers' figure, redrawn after the report


@pytest.mark.parametrize("value", ["-1", "20"])
def test_nice_out_of_range_is_refused_before_any_work(tmp_path, value, capsys):
    argv = ["reproduce", "fedsc", "--quick", "--tier", "hetero", "--out", str(tmp_path / "r")]
    assert main([*argv, "--nice", value]) == 2
    assert "--nice must be an integer in [0, 19]" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_tiers_figure_draws_from_summaries_and_says_what_is_missing(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedspectral.experiments.reproduce import tiers_figure

    plan = _plan("lowdrift", out=tmp_path, seeds=3)
    res = _synthetic(plan, np.random.default_rng(1))
    rp.write_report(plan, rp.summarize(plan, res), res)
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    out = tiers_figure.draw_tiers(tmp_path)
    assert out == tmp_path / "tiers.png" and out.stat().st_size > 10_000
    (fig,) = figs
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle]  # titles, axis labels, legends and notes (not tick labels)
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    texts = [t for t in texts if t is not None and t.get_text().strip()]
    words = " ".join(t.get_text() for t in texts)
    assert "not run yet" in words and "--tier drift" in words and "--tier hetero" in words
    assert "__" not in words and ".py" not in words and "_s0" not in words
    box = fig.bbox
    for t in texts:
        e = t.get_window_extent(renderer)
        assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1, t.get_text()
        assert box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1, t.get_text()
    # panel (a) plots the four rows and the untrained line; its values are the summaries'
    a = fig.axes[0]
    labels = [line.get_label() for line in a.get_lines()]
    assert sum("(n=3)" in lab for lab in labels) == 4 and any("untrained" in x for x in labels)
    plt.close("all")
