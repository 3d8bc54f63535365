"""``fedspectral reproduce fedsc``: the plan, its validation, the DP calibration it
asks for, the computed observations, and the ``--quick`` run end to end.

Budget: the quick reproduction (9 tiny runs on digits) dominates, about 1.5 CPU
minutes; the rest are plans (no training) and two short reruns.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from fedspectral.cli import main
from fedspectral.experiments import reproduce as rp
from fedspectral.experiments.reproduce import stats as rp_stats
from fedspectral.experiments.reproduce.plan import STABLE, STABLE_VARIANT
from fedspectral.experiments.reproduce.verdicts import verdict_positive
from fedspectral.fed.methods import method_class, ssl_methods

METHODS = ssl_methods()  # the FedSC reproduction runs the SSL pillar

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def _cpu_plan(**kw):
    kw.setdefault("tier", "full")
    return rp.build_plan("fedsc", "cpu", configs=CONFIGS, out="/nonexistent/never-written", **kw)


# --------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------
def test_cpu_plan_covers_every_registered_method_and_setting():
    plan = _cpu_plan()
    sc = rp.SCALES["cpu"]
    assert plan.seeds == [0, 1, 2]
    assert set(plan.methods) == set(METHODS)  # nothing registered is skipped
    assert plan.excluded == []
    t2 = [r for r in plan.runs if "table2" in r.tables]
    fed = [m for m in METHODS if m != rp.CENTRAL]
    for s in sc.settings:
        for m in fed:
            seeds = sorted(r.seed for r in t2 if r.row == m and r.setting.key == s.key)
            assert seeds == [0, 1, 2], (s.key, m)
        # FedSC with its stability options, paired by seed with every Table 2 run
        stable = [r for r in t2 if r.setting.key == s.key and r.stable]
        assert sorted(r.seed for r in stable) == [0, 1, 2] and {r.row for r in stable} == {STABLE}
        for r in stable:
            p = r.config.method.params
            assert r.method == "fedsc" and (p["cross_term"], p["server_lr"]) == ("tracked", 0.5)
    # centralized SC pools the data: once per dataset and seed
    central = [r for r in t2 if r.method == rp.CENTRAL]
    assert sorted(r.seed for r in central) == [0, 1, 2]
    # DP: delta=1e-2 eps {3,6} on two settings, delta=1e-4 eps {3,8} on one
    dp = sorted((r.setting.key, r.dp) for r in plan.runs if r.dp is not None and r.seed == 0)
    assert dp == sorted(
        [
            ("10x1-full", (3.0, 1e-2)),
            ("10x1-full", (6.0, 1e-2)),
            ("10x1-2of10", (3.0, 1e-2)),
            ("10x1-2of10", (6.0, 1e-2)),
            ("10x1-2of10", (3.0, 1e-4)),
            ("10x1-2of10", (8.0, 1e-4)),
        ]
    )
    # and FedSC without noise but with the DP runs' late sharing, on each DP setting
    late = sorted(r.setting.key for r in plan.runs if r.late and r.seed == 0)
    assert late == ["10x1-2of10", "10x1-full"]
    # the Table 2 runs use no batch statistics, so they are the DP rows' like-for-like
    # comparators: no extra GroupNorm runs are planned
    assert [r for r in plan.runs if r.gn] == []
    assert all(
        r.config.model.norm != "batch" and r.config.model.projector_norm != "batch"
        for r in plan.runs
    )
    per_seed = 4 * len(fed) + 4 + 1 + 6 + 2  # + FedSC stable per setting
    assert len(plan.runs) == 3 * per_seed
    assert len({r.name for r in plan.runs}) == len(plan.runs)
    # the eps = inf row is the Table 2 FedSC run itself (shared, not re-run)
    inf = [r for r in plan.runs if r.name == "10x1-2of10__fedsc__s0"]
    assert len(inf) == 1 and {"table2", "dp0.01", "dp0.0001"} <= set(inf[0].tables)


def test_grid_overrides_only_what_it_varies():
    from fedspectral.fed.validation import load_config

    plan = _cpu_plan()
    base = load_config(CONFIGS / "fmnist_fedsc.yaml")
    spec = next(r for r in plan.runs if r.name == "5x2-2of5__fedsc__s1")
    c = spec.config
    assert (c.partition.num_clients, c.partition.classes_per_client) == (5, 2)
    assert c.method.clients_per_round == 2 and c.run.seed == 1 and c.eval.linear_probe
    assert spec.base.name == "fmnist_fedsc.yaml"
    # untouched: model, optimiser, the FedSC parameters of the base config
    assert c.model == base.model and c.optim == base.optim
    assert c.method.params == base.method.params
    # the base config is the protocol as it is: no reduction, at least 100 rounds,
    # the untrained network evaluated before round 1
    assert rp.CPU_REDUCTIONS == () and c.method.rounds == base.method.rounds >= 100
    assert c.data.max_train == base.data.max_train and c.eval.initial
    # a baseline borrowing the FedSC file keeps only the keys it declares
    byol = next(r for r in plan.runs if r.method == "fedavg_byol").config
    assert set(byol.method.params) == set(method_class("fedavg_byol").default_params)
    # a method with its own file uses it
    assert (
        next(r for r in plan.runs if r.method == "fedavg_sc").base.name == "fmnist_fedavg_sc.yaml"
    )


def test_dp_runs_start_late_and_sigma_is_calibrated_for_the_worst_case():
    import dp_accounting
    from dp_accounting import rdp

    from fedspectral.fed.correlation import correlation_sensitivity
    from fedspectral.fed.methods.fedsc import FedSC

    plan = _cpu_plan(seeds=1)
    for spec in [r for r in plan.runs if r.late]:  # the noise-free control of the DP runs
        c = spec.config
        assert not c.dp.enabled and c.method.params["share_start"] == c.method.rounds // 2 + 1
        assert c.model.norm == "group"
    for spec in [r for r in plan.runs if r.gn]:  # like the Table 2 run but with GroupNorm
        c = spec.config
        t2 = next(
            r
            for r in plan.runs
            if r.variant is None
            and r.method == spec.method
            and r.setting.key == spec.setting.key
            and r.seed == spec.seed
        ).config
        assert not c.dp.enabled and c.model.norm == "group" and t2.model.norm == "batch"
        assert c.method.params == t2.method.params and c.optim == t2.optim
        assert c.model.backbone == t2.model.backbone
    for spec in [r for r in plan.runs if r.dp is not None]:
        c = spec.config
        eps, delta = spec.dp
        T = c.method.rounds
        assert c.dp.enabled and c.dp.epsilon == eps and c.dp.delta == delta
        assert c.dp.plan == "worst_case" and c.dp.accountant == "rdp"
        assert c.method.params["share_start"] == T // 2 + 1
        method = FedSC(c)
        releases = method.planned_releases()
        # worst case: every sharing round, whatever the participation
        assert releases == T - (T // 2 + 1) + 1
        n = 300 if c.partition.num_clients == 10 else 600  # 3000 images, class split
        sigma = method.noise_sigma(n)
        z = sigma / correlation_sensitivity(c.method.params["mu"], n, "zero_out")

        def eps_of(noise_multiplier: float, count: int, delta: float) -> float:
            acc = rdp.RdpAccountant()  # add/remove neighbouring
            acc.compose(
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(noise_multiplier), count
                )
            )
            return acc.get_epsilon(delta)

        # independent accountant: the target is met, and not by a wide margin
        assert eps_of(z, releases, delta) <= eps * (1 + 1e-3)
        assert eps_of(0.97 * z, releases, delta) > eps


def test_paper_plan_mirrors_the_seed():
    plan = rp.build_plan(
        "fedsc", "paper", configs=CONFIGS, out="/nonexistent/x", seeds=1, tier="full"
    )
    keys = {r.setting.paper for r in plan.runs}
    assert keys == {
        ("SVHN", "5/5"),
        ("CIFAR-10", "10/10"),
        ("CIFAR-100", "20/20"),
        ("SVHN", "2/5"),
        ("CIFAR-10", "2/10"),
        ("CIFAR-100", "4/20"),
    }
    for r in plan.runs:
        assert r.config.method.rounds == 200 and r.config.method.local_epochs == 5
        assert r.config.run.device == "cuda"
        assert (
            r.config.data.dataset
            == {"SVHN": "svhn", "CIFAR-10": "cifar10", "CIFAR-100": "cifar100"}[r.setting.paper[0]]
        )
    dp = {(r.setting.paper, r.dp) for r in plan.runs if r.dp is not None}
    assert (("CIFAR-100", "20/20"), (12.0, 1e-2)) in dp
    assert (("CIFAR-10", "2/10"), (8.0, 1e-4)) in dp
    assert (("CIFAR-10", "10/10"), (8.0, 1e-4)) not in dp  # the seed: partial only
    assert len(plan.runs) == 6 * 7 + 6 + 3 + 8 + 4 + 6 + 6  # + FedSC stable per setting


def test_dry_runs_print_the_plan_and_estimate(capsys):
    assert (
        main(
            [
                "reproduce",
                "fedsc",
                "--scale",
                "paper",
                "--dry-run",
                "--tier",
                "full",
                "--configs",
                str(CONFIGS),
                "--out",
                "/nonexistent/p",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "runs: 225 distinct" in out and "estimated total: not available" in out
    assert "cifar100-20x5-4of20__fedsc-dp-eps3-delta0.0001__s2" in out
    assert not Path("/nonexistent/p").exists()
    assert (
        main(
            [
                "reproduce",
                "fedsc",
                "--dry-run",
                "--tier",
                "full",
                "--configs",
                str(CONFIGS),
                "--out",
                "/nonexistent/c",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "runs: 123 distinct" in out and "min single-threaded" in out
    for m in METHODS:
        assert f"__{m}__s0" in out
    assert "planned releases 5" in out  # 10 rounds, sharing from round 6


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--methods", "fedsc,fedbogus"], "fedbogus"),
        (["--quick", "--scale", "paper"], "--quick"),
        (["--set", "method.name=fedsc"], "method.name"),
        (["--set", "dp.epsilon=1"], "dp.epsilon"),
        (["--set", "method.params.ema=0.5"], "ema"),  # a BYOL parameter given to FedSC
        (["--seeds", "0"], "--seeds"),
        (["--jobs", "0"], "--jobs"),
        (["--methods", "fedx"], "--tier full"),  # a baseline is not in the core tier
    ],
)
def test_bad_options_are_rejected_before_any_run(tmp_path, argv, needle, capsys):
    out = tmp_path / "never"
    # the CLI contract: `fedspectral reproduce: error: ...`, exit status 2 (a user error)
    assert main(["reproduce", "fedsc", "--configs", str(CONFIGS), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedspectral reproduce: error: ") and needle in err
    assert not out.exists()


def test_missing_base_config_names_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="fmnist_fedsc.yaml"):
        rp.build_plan("fedsc", "cpu", configs=tmp_path, out=tmp_path / "o")


# --------------------------------------------------------------------------------------
# the observations are computed, not asserted
# --------------------------------------------------------------------------------------
def _cell(values):
    return rp_stats.seed_cell(list(enumerate(values)))


def _summary(fedsc, fedavg, others=(), central=None):
    methods = ["fedavg_sc", "fedsc"] + [m for m, _ in others] + (["central_sc"] if central else [])
    s = {
        "key": "10x1-full",
        "label": "10x1 cls, 10/10",
        "participation": "10/10",
        "full": True,
        "prefix": "fmnist",
        "num_clients": 10,
        "classes_per_client": 1,
    }
    cells = {"fedsc": _cell(fedsc), "fedavg_sc": _cell(fedavg), **{m: _cell(v) for m, v in others}}
    if central:
        cells["central_sc"] = _cell(central)
    t = {m: {"10x1-full": cells[m]} for m in methods}
    return {
        "settings": [s],
        "methods": methods,
        "dp": [],
        "curves": {},
        "table2": {k: t for k in rp.METRICS},
    }


def test_observation_verdicts_follow_the_rule():
    def verdict(obs, oid):
        return next(o for o in obs if o["id"] == oid)["verdict"]

    # FedSC above FedAvg+SC by 3 points on every seed: holds
    obs = rp.observations(_summary([80, 81, 82], [77, 78, 79]))
    assert verdict(obs, "fedsc_vs_fedavg_sc") == "holds"
    # below by 3 on every seed: does not hold
    obs = rp.observations(_summary([77, 78, 79], [80, 81, 82]))
    assert verdict(obs, "fedsc_vs_fedavg_sc").startswith("does not hold")
    # noisy: +1, -1, +3 -> mean 1, se 1.15: inconclusive
    obs = rp.observations(_summary([81, 79, 83], [80, 80, 80]))
    assert verdict(obs, "fedsc_vs_fedavg_sc").startswith("inconclusive")
    # one seed is never enough
    obs = rp.observations(_summary([90], [70]))
    assert verdict(obs, "fedsc_vs_fedavg_sc").startswith("inconclusive")
    # comparable to the best other method: within 2 SE -> holds; far below -> does not
    obs = rp.observations(_summary([80, 81, 82], [70, 70, 70], others=[("fedca", [80, 82, 81])]))
    assert verdict(obs, "sota") == "holds"
    obs = rp.observations(_summary([70, 71, 72], [70, 70, 70], others=[("fedca", [80, 81, 82])]))
    assert verdict(obs, "sota").startswith("does not hold")
    # the central upper bound
    obs = rp.observations(_summary([80, 81, 82], [77, 78, 79], central=[90, 91, 92]))
    assert verdict(obs, "central_upper_bound") == "holds"


def test_dp_verdict_compares_like_for_like_normalisation():
    """The DP cost is measured against the noise-free run with the DP runs'
    normalisation when it exists, not against the batch-statistics Table 2 run."""

    def row(method, eps, vals, late=False, gn=False):
        return {
            "method": method,
            "epsilon": eps,
            "late": late,
            "gn": gn,
            "cells": {"10x1-full": {"linear_probe": _cell(vals)}},
        }

    rows = [
        row("fedavg_sc", None, [80, 80, 80]),
        row("fedavg_sc", "gn", [70, 70, 70], gn=True),
        row("fedsc", 3.0, [71, 71.5, 72]),
        row("fedsc", math.inf, [72, 72, 72], late=True),
        row("fedsc", math.inf, [72, 72.5, 73], gn=True),
        row("fedsc", math.inf, [80, 81, 82]),
    ]
    for r in rows:
        if r["late"] or r["gn"]:
            r["epsilon"] = math.inf
    summ = _summary([80, 81, 82], [80, 80, 80])
    summ["dp"] = [{"delta": 0.01, "settings": ["10x1-full"], "rows": rows}]
    obs = next(o for o in rp.observations(summ) if o["id"] == "dp_cost")
    # cost 1 point against the GroupNorm run (not 9.5 against the Table 2 run); 1.5 above
    # the GroupNorm FedAvg+SC (not 8.5 below the Table 2 one)
    assert obs["verdict"] == "modest decline: holds; above FedAvg+SC: holds"
    assert "FedSC(inf, GroupNorm) − FedSC(eps) = +1.00" in obs["evidence"][0]
    # without the GroupNorm rows the Table 2 runs are the comparators
    summ["dp"][0]["rows"] = [r for r in rows if not r["gn"]]
    obs = next(o for o in rp.observations(summ) if o["id"] == "dp_cost")
    assert obs["verdict"].startswith("modest decline: does not hold")


def test_report_with_groupnorm_comparators_from_synthetic_results(tmp_path):
    """summarize + write_report on a plan that has the GroupNorm comparators (the quick
    plan with batch statistics), from made-up results: the DP table shows them and the
    DP verdict uses them."""
    plan = rp.build_plan(
        "fedsc", "cpu", quick=True, tier="full", out=tmp_path, overrides=["model.norm=batch"]
    )
    gn = sorted(r.name for r in plan.runs if r.gn)
    assert gn == ["5x2-full__fedavg_sc-gn__s0", "5x2-full__fedsc-gn__s0"]
    probe = {"fedsc-gn": 0.70, "fedavg_sc-gn": 0.66, "fedsc": 0.80, "fedavg_sc": 0.78}
    results = {}
    for r in plan.runs:
        key = r.name.split("__")[1]
        lp = 0.695 if r.dp is not None or r.late else probe.get(key, 0.75)
        final = {"linear_probe": lp, "knn_backbone": lp - 0.1, "knn_projector": lp - 0.1}
        res = {
            "final": final,
            "records": [
                {"round": t, "knn_backbone": lp - 0.1, "knn_projector": lp - 0.1} for t in (1, 2)
            ],
            "timings": {"total_seconds": 1.0},
        }
        if r.dp is not None:
            res["privacy"] = {
                "epsilon_rdp": 2.5,
                "epsilon_pld": 2.0,
                "sigma": {"client-0": 0.1},
                "ledger": {"releases": [{"party": "client-0", "count": 1}]},
                "warnings": ["dp.delta=0.01 >= 1/|D_j| for 5 of 5 clients"],
            }
        results[r.name] = res
    summary = rp.summarize(plan, results)
    rows = summary["dp"][0]["rows"]
    assert [(r["method"], r.get("gn", False), r.get("late", False)) for r in rows] == [
        ("fedavg_sc", False, False),
        ("fedavg_sc", True, False),
        ("fedsc", False, False),
        ("fedsc", False, True),
        ("fedsc", True, False),
        ("fedsc", False, False),
    ]
    obs = next(o for o in summary["observations"] if o["id"] == "dp_cost")
    assert "FedSC(inf, GroupNorm) − FedSC(eps) = +0.50" in obs["evidence"][0]
    assert "FedSC(eps) − FedAvg+SC(GroupNorm) = +3.50" in obs["evidence"][0]
    paths = rp.write_report(plan, summary, results)
    report = Path(paths["report"]).read_text()
    assert "eps = inf, no noise, GroupNorm like the DP runs (ours only) | 70.00" in report
    assert "FedAvg+SC, GroupNorm like the DP runs (ours only) | 66.00" in report
    # the DP runs' delta >= 1/|D_j| is stated in the report (defect 7)
    assert "**Warning: delta >= 1/|D_j|**" in report and "5 of 5 clients" in report


def test_paired_difference_matches_a_direct_computation():
    from scipy import stats

    a, b = _cell([80.0, 82.0, 81.0]), _cell([79.0, 79.5, 78.0])
    d = rp_stats.paired_diff(a, b)
    diffs = [1.0, 2.5, 3.0]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2)
    assert d["mean"] == pytest.approx(mean) and d["std"] == pytest.approx(sd)
    assert d["se"] == pytest.approx(sd / math.sqrt(3)) and d["n"] == 3
    # the 95 % interval is scipy's paired t test's (an independent computation)
    ci = stats.ttest_rel([80.0, 82.0, 81.0], [79.0, 79.5, 78.0]).confidence_interval(0.95)
    assert (d["lo"], d["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    # t(0.975, 2) = 4.303: 2 SE would call this established, the t interval does not
    a, b = _cell([81.0, 82.0, 83.0]), _cell([80.0, 80.0, 80.0])
    d = rp_stats.paired_diff(a, b)
    assert d["mean"] - 2 * d["se"] > 0 > d["lo"]
    assert verdict_positive(d) == "inconclusive"


def test_summary_json_names_every_run_by_setting_method_variant_seed_dp(tmp_path):
    """(setting, method, variant, seed, dp) is unique in summary.json: the Table 2 FedSC
    run and the noise-free late-start control share (setting, method, seed, dp) and are
    told apart by ``variant`` only."""
    plan = _cpu_plan(seeds=2)
    results = {
        r.name: {
            "final": {"knn_backbone": 0.5, "knn_projector": 0.5, "linear_probe": 0.6},
            "initial": {"knn_backbone": 0.4, "knn_projector": 0.4, "linear_probe": 0.5},
            "records": [{"round": 1, "knn_backbone": 0.5, "knn_projector": 0.5}],
            "timings": {"total_seconds": 1.0},
        }
        for r in plan.runs
    }
    runs = rp.summary.protocol_summary(plan, results)["runs"]
    keys = [
        (
            r["setting"],
            r["method"],
            r["variant"],
            r["seed"],
            None if r["dp"] is None else (r["dp"]["epsilon"], r["dp"]["delta"]),
        )
        for r in runs
    ]
    assert len(keys) == len(set(keys)) == len(plan.runs) + 4 * 2  # + untrained per setting, seed
    assert {r["variant"] for r in runs} == {"main", "late_start", "dp", STABLE_VARIANT}
    loose = [k[:2] + k[3:] for k in keys]
    assert len(loose) > len(set(loose))  # without the variant, runs would be confused
    late = [r for r in runs if r["variant"] == "late_start"]
    assert late and all(r["method"] == "fedsc" and r["dp"] is None for r in late)
    assert all(r["variant"] == "dp" for r in runs if r["dp"] is not None)


# --------------------------------------------------------------------------------------
# --quick end to end
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "quick"
    rc = main(
        [
            "reproduce",
            "fedsc",
            "--quick",
            "--tier",
            "full",
            "--out",
            str(out),
            "--quiet",
            "--set",
            "run.threads=1",
        ]
    )
    return rc, out


@pytest.mark.slow
def test_quick_end_to_end(quick):
    rc, out = quick
    assert rc == 0
    plan = rp.build_plan(
        "fedsc", "cpu", quick=True, tier="full", out=out, overrides=["run.threads=1"]
    )
    assert {r.method for r in plan.runs} == set(METHODS)
    assert any(r.dp is not None for r in plan.runs)
    for name in (
        "REPORT.md",
        "summary.json",
        "tables.json",
        "table2.csv",
        "dp.csv",
        "convergence.png",
    ):
        assert (out / name).is_file(), name
    for spec in plan.runs:
        res = json.loads((out / "runs" / spec.name / "results.json").read_text())
        assert res["rounds_done"] == 2 and res["method"] == spec.method
        assert {"linear_probe", "knn_backbone", "knn_projector"} <= set(res["final"])
    summary = json.loads((out / "tables.json").read_text())
    assert {"table2", "dp", "privacy", "observations", "timing", "settings", "missing"} <= set(
        summary
    )
    assert summary["missing"] == [] and summary["runs_finished"] == len(plan.runs)
    assert set(summary["table2"]["linear_probe"]) == set(METHODS) | {"untrained", STABLE}
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert {r["method"] for r in runs} == set(METHODS) | {"untrained"}
    # privacy of the DP run: read from its ledger, within the target
    (p,) = summary["privacy"]
    assert p["epsilon_target"] == 3.0 and p["delta"] == 1e-2
    assert 0 < p["epsilon_rdp"] <= 3.0 * (1 + 1e-3)
    assert 0 < p["epsilon_pld"] <= p["epsilon_rdp"]
    assert p["releases_max"] <= p["planned_releases"] == 1
    report = (out / "REPORT.md").read_text()
    for m in METHODS:
        assert rp.METHOD_LABELS.get(m, m) in report, m
    assert "80.06" in report or "90.52" in report  # the paper's numbers beside ours
    assert "Smoke run" in report and "eps RDP" in report
    assert len(summary["observations"]) == 7 + 6


@pytest.mark.slow
def test_quick_rerun_skips_finished_runs_and_resumes_an_interrupted_one(quick, capsys):
    rc, out = quick
    assert rc == 0
    plan = rp.build_plan(
        "fedsc", "cpu", quick=True, tier="full", out=out, overrides=["run.threads=1"]
    )
    stamps = {
        r.name: os.stat(out / "runs" / r.name / "results.json").st_mtime_ns for r in plan.runs
    }
    outcomes = rp.execute_plan(plan, progress=False)
    assert set(outcomes.values()) == {"skipped"}
    assert stamps == {
        r.name: os.stat(out / "runs" / r.name / "results.json").st_mtime_ns for r in plan.runs
    }

    # interrupt the DP run after round 1: it resumes from its checkpoint and ends where
    # the uninterrupted run ended
    from faults import StopAfter  # tests/faults.py
    from fedspectral.fed.simulation import Simulation

    spec = next(r for r in plan.runs if r.dp is not None)
    d = out / "runs" / spec.name
    before = json.loads((d / "results.json").read_text())
    (d / "results.json").unlink()
    (d / "checkpoint.pt").unlink()
    Simulation(spec.config, out_dir=d, callbacks=[StopAfter(1)]).run()
    assert rp.run_status(plan, spec) == "resume"
    outcomes = rp.execute_plan(plan, progress=False)
    assert outcomes[spec.name] == "resumed"
    after = json.loads((d / "results.json").read_text())
    assert after["resumed_from"] == 1
    assert after["final"]["knn_projector"] == before["final"]["knn_projector"]
    assert after["privacy"]["epsilon_rdp"] == before["privacy"]["epsilon_rdp"]

    # another config over the same folder is refused before anything runs
    other = rp.build_plan(
        "fedsc",
        "cpu",
        quick=True,
        tier="full",
        out=out,
        overrides=["run.threads=1", "optim.lr=0.01"],
    )
    with pytest.raises(ValueError, match="different config"):
        rp.execute_plan(other, progress=False)


@pytest.mark.slow
def test_two_jobs_in_subprocesses_reproduce_the_in_process_runs(quick):
    _, out = quick
    plan = rp.build_plan(
        "fedsc", "cpu", quick=True, tier="full", out=out, overrides=["run.threads=1"]
    )
    redo = [r for r in plan.runs if r.method in ("fedavg_sc", "central_sc")]
    before = {}
    for r in redo:
        d = out / "runs" / r.name
        before[r.name] = json.loads((d / "results.json").read_text())["final"]
        shutil.rmtree(d)
    outcomes = rp.execute_plan(plan, jobs=2, progress=False)
    for r in redo:
        assert outcomes[r.name] == "done", outcomes[r.name]
        final = json.loads((out / "runs" / r.name / "results.json").read_text())["final"]
        for k in ("knn_backbone", "knn_projector", "linear_probe"):
            assert final[k] == before[r.name][k], (r.name, k)
        assert (out / "runs" / r.name / "run.log").is_file()


# --------------------------------------------------------------------------------------
# the core tier, summary.json and the protocol's own checks
# --------------------------------------------------------------------------------------
def test_core_tier_is_the_default_and_holds_only_the_central_comparison():
    plan = rp.build_plan("fedsc", "cpu", configs=CONFIGS, out="/nonexistent/core")
    assert plan.tier == "core"
    assert sorted(plan.methods) == ["central_sc", "fedavg_sc", "fedsc"]
    assert [s.key for s in plan.scale.settings] == ["10x1-full", "10x1-2of10"]
    assert all(r.dp is None and not r.late and not r.gn for r in plan.runs)
    assert all(r.config.eval.initial for r in plan.runs)  # the untrained row comes free
    # 10 seeds (paired t intervals) x (FedAvg+SC, FedSC, FedSC stable at two
    # participations + centralized SC once); --seeds 3 for a quick run
    assert plan.seeds == list(range(10)) and len(plan.runs) == 10 * 7
    assert plan.rows == ["fedavg_sc", "fedsc", STABLE, "central_sc"]
    # the stable FedSC runs last: a grid stopped early holds whole seeds of the comparison
    assert [r.stable for r in plan.runs] == [False] * 50 + [True] * 20
    assert len(rp.build_plan("fedsc", "cpu", configs=CONFIGS, out="/n/c", seeds=3).runs) == 21
    full = rp.build_plan(
        "fedsc", "cpu", configs=CONFIGS, out="/nonexistent/f", tier="full", seeds=10
    )
    assert {r.name for r in plan.runs} <= {r.name for r in full.runs}


def _synthetic_core(
    tmp_path, fedsc_curve, fedavg_curve, central=0.80, untrained=0.70, stable_curve=None
):
    plan = rp.build_plan("fedsc", "cpu", configs=CONFIGS, out=tmp_path, seeds=3)
    results = {}
    rows = {"fedsc": fedsc_curve, "fedavg_sc": fedavg_curve, STABLE: stable_curve or fedsc_curve}
    for r in plan.runs:
        curve = rows.get(r.row, [central] * len(fedsc_curve))
        curve = [v + 0.002 * r.seed for v in curve]
        recs = [
            {
                "round": 10 * (i + 1),
                "knn_backbone": v,
                "knn_projector": v - 0.05,
                "sc_objective": -1.0 - i,
            }
            for i, v in enumerate(curve)
        ]
        results[r.name] = {
            "final": {
                "knn_backbone": curve[-1],
                "knn_projector": curve[-1] - 0.05,
                "linear_probe": curve[-1] + 0.05,
            },
            "initial": {
                "knn_backbone": untrained + 0.001 * r.seed,
                "knn_projector": untrained - 0.05,
                "sc_objective": -0.5,
                "linear_probe": untrained + 0.05 + 0.001 * r.seed,
            },
            "records": recs,
            "timings": {"total_seconds": 1.0},
        }
    return plan, results


def test_summary_json_has_the_documented_schema(tmp_path):
    plan, results = _synthetic_core(tmp_path, [0.72, 0.74, 0.76, 0.76], [0.72, 0.71, 0.70, 0.69])
    summary = rp.summarize(plan, results)
    paths = rp.write_report(plan, summary, results)
    data = json.loads(Path(paths["summary"]).read_text())
    assert set(data) == {"protocol", "runs"}
    assert data["protocol"]["tier"] == "core" and data["protocol"]["model"]["norm"] != "batch"
    settings = {"10x1-10/10", "10x1-2/10"}
    methods = {"untrained", "central_sc", "fedavg_sc", "fedsc"}
    assert {r["setting"] for r in data["runs"]} == settings
    assert {r["method"] for r in data["runs"]} == methods
    for r in data["runs"]:
        assert set(r) >= {"setting", "method", "seed", "dp", "final", "curve"}
        assert r["dp"] is None and isinstance(r["seed"], int)
        assert set(r["final"]) == {"knn_backbone", "knn_projector", "linear_probe"}
        assert all(0.0 <= v <= 1.0 for v in r["final"].values())
        for c in r["curve"]:
            assert set(c) == {"round", "knn_backbone", "knn_projector", "sc_objective"}
    untrained = [r for r in data["runs"] if r["method"] == "untrained"]
    assert len(untrained) == 2 * 3  # one per (setting, seed)
    assert untrained[0]["curve"][0]["round"] == 0
    report = Path(paths["report"]).read_text()
    assert "| untrained network (initial weights) | 75.10 ± 0.10 |" in report
    assert "--tier core" in report


def test_protocol_observations_follow_their_rules(tmp_path):
    # FedSC rises, FedAvg+SC declines, centralized SC 10 points above the untrained net
    plan, results = _synthetic_core(
        tmp_path, [0.72, 0.74, 0.76, 0.77], [0.72, 0.71, 0.70, 0.69], untrained=0.60
    )
    obs = {o["id"]: o for o in rp.summarize(plan, results)["observations"]}
    assert obs["learns"]["verdict"] == "holds"
    assert obs["above_untrained"]["verdict"] == "holds"
    assert obs["target_gain"]["verdict"] == "holds"  # +8 points on the probe
    assert obs["curve_shape"]["verdict"] == "holds"
    # both decline; centralized SC only 3 points up; FedSC 1 point ahead
    plan, results = _synthetic_core(
        tmp_path / "b", [0.70, 0.69, 0.68, 0.66], [0.69, 0.68, 0.67, 0.65], central=0.73
    )
    obs = {o["id"]: o for o in rp.summarize(plan, results)["observations"]}
    assert obs["learns"]["verdict"].startswith("does not hold")
    assert obs["above_untrained"]["verdict"].startswith("does not hold")
    assert obs["target_gain"]["verdict"].startswith("does not hold")
    assert obs["curve_shape"]["verdict"].startswith("does not hold")


def test_stable_row_and_gap_share_claims(tmp_path):
    # FedSC as FedAvg+SC; its stable variant 8 points up, closing 8 of the 11 points to
    # centralized SC (73 %) and 12 above the untrained network on the probe
    plan, results = _synthetic_core(
        tmp_path,
        [0.70, 0.69, 0.69, 0.69],
        [0.70, 0.69, 0.69, 0.69],
        untrained=0.60,
        stable_curve=[0.72, 0.74, 0.76, 0.77],
    )
    summary = rp.summarize(plan, results)
    assert summary["rows"] == ["fedavg_sc", "fedsc", STABLE, "central_sc"]
    cell = summary["table2"]["linear_probe"][STABLE]["10x1-full"]
    assert cell["n"] == 3 and cell["mean"] == pytest.approx(100 * (0.82 + 0.002))
    obs = {o["id"]: o for o in summary["observations"]}
    assert obs["stable"]["verdict"] == "holds"
    assert "against the paper's FedSC: holds" in obs["stable"]["rule"]
    assert obs["fedsc_vs_fedavg_sc"]["verdict"] == "inconclusive (0 of 2 hold)"
    share = (0.82 - 0.74) / (0.85 - 0.74)
    ev = obs["gap_share"]["evidence"]
    assert f"FedSC, stable closes {100 * share:.0f} % -> holds" in ev[2]
    assert "FedSC closes 0 % -> does not hold" in ev[0]
    assert obs["gap_share"]["verdict"].startswith("does not hold (1 of 6)")
    report = Path(rp.write_report(plan, summary, results)["report"]).read_text()
    assert rp.METHOD_LABELS[STABLE] in report


# ----------------------------------------------------------------------------- cost model fit
def _timed_results(
    method: str,
    rounds: int,
    clients: list[list[str]],
    train_s: list[float],
    share_s: list[float] | None,
    eval_s: dict[int, float],
) -> dict:
    recs = []
    for t in range(rounds):
        # the phases by kind, as results.json holds them
        ph = {"train": {"kind": "train", "participants": clients[t], "seconds": train_s[t]}}
        if share_s is not None:
            ph["share"] = {"kind": "query", "participants": clients[t], "seconds": share_s[t]}
        rec = {"round": t + 1, "phases": ph, "seconds_round": train_s[t]}
        if t + 1 in eval_s:
            rec["seconds_eval"] = eval_s[t + 1]
        recs.append(rec)
    return {"method": method, "records": recs}


def test_cost_fit_recovers_the_per_unit_seconds_of_synthetic_timings():
    """Rounds timed as exactly c x units (units counted here by hand from the CPU
    config: 300 images per client, 2 000 test images) give back c; the median ignores
    one slow round; a pooled method counts every client's data."""
    from fedspectral.experiments.reproduce.costs import COSTS, fit_costs, run_unit_seconds
    from fedspectral.fed.validation import load_config

    cfg = load_config(CONFIGS / "fmnist_fedsc.yaml")
    central = load_config(CONFIGS / "fmnist_central_sc.yaml")
    ids = [f"client-{i}" for i in range(10)]
    parts = [ids, ids[:2], ids[:2], ids, ids[:5]]
    c_tr, c_sh, c_ev = 3e-4, 5e-5, 1e-4
    train = [c_tr * len(p) * 300 for p in parts]
    train[1] *= 50  # one slow round (a busy machine): the median ignores it
    share = [c_sh * len(p) * 300 * 2 for p in parts]  # share_views 2
    ev = {2: c_ev * (3000 + 2000), 4: c_ev * (3000 + 2000)}
    fedsc = _timed_results("fedsc", 5, parts, train, share, ev)
    units = run_unit_seconds(fedsc, cfg)
    assert units["train"] == pytest.approx(c_tr, rel=1e-12)
    assert units["share"] == pytest.approx(c_sh, rel=1e-12)
    assert units["eval"] == pytest.approx(c_ev, rel=1e-12)
    # centralized SC: one participant, the pooled 3 000 images
    pooled = _timed_results("central_sc", 3, [["server"]] * 3, [2e-4 * 3000] * 3, None, {})
    assert run_unit_seconds(pooled, central)["train"] == pytest.approx(2e-4, rel=1e-12)
    assert run_unit_seconds(pooled, central)["share"] is None
    fitted = fit_costs([("fedsc", fedsc, cfg), ("central_sc", pooled, central)])
    assert fitted["train_sample"]["fedsc"] == pytest.approx(c_tr, rel=1e-12)
    assert fitted["train_sample"]["central_sc"] == pytest.approx(2e-4, rel=1e-12)
    assert fitted["share_view_sample"] == pytest.approx(c_sh, rel=1e-12)
    assert fitted["eval_image"] == pytest.approx(c_ev, rel=1e-12)
    # untouched: methods without runs, and the constants no round times
    assert fitted["train_sample"]["fedx"] == COSTS["train_sample"]["fedx"]
    assert fitted["run_overhead"] == COSTS["run_overhead"]
    assert COSTS["train_sample"]["fedsc"] != c_tr  # the fit returns a copy


# ------------------------------------------------------------------- interrupting --jobs N
_SLEEPER = """
import os, signal, sys, time
from pathlib import Path
d = Path(sys.argv[1])
def stop(*_):
    (d / "stopped").write_text("SIGTERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
(d / "started").write_text(str(os.getpid()))
time.sleep(20)
"""


def test_an_interrupt_with_jobs_starts_no_further_run_and_stops_the_running_ones(
    tmp_path, monkeypatch
):
    # before: the pool's exit waited for every queued run, so an interrupted grid went
    # on starting runs (a SIGTERM'd `reproduce --jobs 2` kept training)
    import _thread
    import signal
    import sys
    import threading

    from fedspectral.experiments.reproduce import execute

    plan = rp.build_plan("fedsc", "cpu", quick=True, tier="full", out=tmp_path / "g")
    assert len(plan.runs) >= 4
    monkeypatch.setattr(
        execute,
        "_worker_command",
        lambda cfg, run_dir, resume: [sys.executable, "-c", _SLEEPER, str(run_dir)],
    )

    def interrupt_once_two_run():
        while len(list((tmp_path / "g" / "runs").glob("*/started"))) < 2:
            threading.Event().wait(0.1)
        _thread.interrupt_main()

    # Ctrl-C's own handler (a library loaded by an earlier test may have replaced it)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_once_two_run, daemon=True).start()
    lines: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt):
            rp.execute_plan(plan, jobs=2, progress=False, echo=lines.append)
    finally:
        signal.signal(signal.SIGINT, previous)
    started = sorted(p.parent.name for p in (tmp_path / "g" / "runs").glob("*/started"))
    stopped = sorted(p.parent.name for p in (tmp_path / "g" / "runs").glob("*/stopped"))
    assert len(started) == 2 and stopped == started  # no third run; both got SIGTERM
    assert any(f"{len(plan.runs)} not finished" in line for line in lines)
