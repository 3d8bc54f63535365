"""Every output says what it is (issue 46, item 3): "no DP" where epsilon would be inf,
the budget's spent figure explained, a clipping warning at the user's line, counts as
integers in rounds.csv, hints that name each interface."""

from __future__ import annotations

import warnings

import numpy as np


def test_train_summary_says_no_dp_instead_of_inf() -> None:
    from fedspectral.experiments.train import _summary

    res = {
        "name": "x",
        "method": "fedsc",
        "rounds_done": 1,
        "timings": {"total_seconds": 1.0},
        "privacy": {"releases": 4, "epsilon_rdp": float("inf"), "delta": 1e-5},
    }
    text = _summary(res)
    assert "no DP" in text and "inf," not in text and "eps_pld" not in text


def test_budget_repr_explains_the_spent_figure() -> None:
    from fedspectral.pca import LocalDPPCA
    from fedspectral.privacy import BudgetAccountant

    acc = BudgetAccountant(epsilon=2.0, delta=1e-5)
    X = np.random.default_rng(0).normal(size=(200, 4)) / 8
    LocalDPPCA(2, epsilon=1.0, delta=1e-6, accountant=acc, random_state=0).fit(X)
    text = repr(acc)
    assert "1 fit," in text and "at delta=1e-05" in text and "composed by pld" in text


def test_a_clipping_warning_points_at_the_callers_line() -> None:
    from fedspectral.pca import LocalDPPCA

    X = np.random.default_rng(0).normal(size=(50, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LocalDPPCA(2, epsilon=1.0, delta=1e-6, random_state=0).fit(X)
    clip = [w for w in caught if "clipped" in str(w.message)]
    assert len(clip) == 1 and clip[0].filename == __file__, [(w.filename, w.lineno) for w in clip]


def test_rounds_csv_counts_are_integers() -> None:
    from fedspectral.results import round_row

    rec = {
        "round": 1,
        "sampled": ["a", "b"],
        "phases": {
            "train": {
                "kind": "train",  # a training phase's metrics are unprefixed
                "metrics": {"clients": 2.0, "lr": 0.05},
                "seconds": 1.0,
                "failures": {},
            },
            "share": {"kind": "query", "metrics": {"clients": 2.0}, "seconds": 1.0, "failures": {}},
        },
        "bytes_up_total": 1,
        "bytes_down_total": 1,
    }
    row = round_row(rec)
    assert row["clients"] == 2 and isinstance(row["clients"], int)
    assert isinstance(row["share_clients"], int) and row["lr"] == 0.05


def test_hints_name_each_interface() -> None:
    import pytest

    from fedspectral.config import ConfigError, from_dict
    from fedspectral.fed.validation import validate

    with pytest.raises((ConfigError, ValueError)) as e:
        validate(from_dict({"name": "x", "dp": {"enabled": True, "epsilon": float("inf")}}))
    assert "dp=false on the Flower app" in str(e.value)
    assert "--set dp.enabled=false on the CLI" in str(e.value)


def test_a_repository_config_loads_from_any_directory(tmp_path, monkeypatch) -> None:
    """README's ``load_config("configs/digits_smoke.yaml")`` runs outside the repository:
    a relative ``configs/NAME`` missing from the working directory is the repository's;
    a file of that name in the working directory comes first; a missing one is named."""
    import pytest

    from fedspectral.config import REPO_CONFIGS
    from fedspectral.fed.validation import load_config

    monkeypatch.chdir(tmp_path)
    assert load_config("configs/digits_smoke.yaml", ["method.rounds=2"]).name == "digits_smoke"
    local = tmp_path / "configs"
    local.mkdir()
    text = (REPO_CONFIGS / "digits_smoke.yaml").read_text(encoding="utf-8")
    (local / "digits_smoke.yaml").write_text(text.replace("name: digits_smoke", "name: mine"))
    assert load_config("configs/digits_smoke.yaml").name == "mine"
    with pytest.raises(ValueError, match="configs/no_such.yaml"):
        load_config("configs/no_such.yaml")


def test_the_privacy_report_repr_is_one_line_and_says_no_dp() -> None:
    import json

    from fedspectral.privacy.report import PrivacyReport

    big = {"x": list(range(2000))}
    nodp = PrivacyReport(
        delta=1e-5, releases=4, ledger=big, epsilon_rdp=float("inf"), epsilon_pld=float("inf")
    )
    text = repr(nodp)
    assert "no DP: 4 release(s)" in text and "\n" not in text and len(text) < 300
    assert json.loads(json.dumps({"privacy": nodp}))["privacy"]["releases"] == 4
    dp = PrivacyReport(delta=1e-5, releases=5, ledger=big, epsilon_rdp=3.0, epsilon_pld=2.768)
    assert "epsilon 3 (rdp), 2.768 (pld) at delta=1e-05 over 5 release(s)" in repr(dp)
    assert "nothing released" in repr(PrivacyReport(delta=1e-5, releases=0, ledger={}))
    assert dict(dp)["epsilon_rdp"] == 3.0  # still the documented mapping


def test_the_demo_says_its_stage_and_an_estimate_from_measured_speed(
    tmp_path, monkeypatch, capsys
) -> None:
    """Each federated run of the demo is announced with the time left, estimated from the
    runs this machine has finished (fake runs of 60 s each: 3 left after the first)."""
    import argparse
    import itertools

    from fedspectral.experiments import demo, train

    clock = itertools.count(0.0, 60.0)  # every perf_counter call advances 60 s
    monkeypatch.setattr(demo.time, "perf_counter", lambda: next(clock) / 2)
    res = {"final": {"knn_backbone": 0.5, "knn_projector": 0.5, "linear_probe": 0.6}}
    monkeypatch.setattr(train, "run_experiment", lambda cfg: {**res, "initial": res["final"]})
    cfgs = [(k, k, None) for k in ("central_sc", "fedavg_sc", "fedsc", "fedsc_dp")]
    args = argparse.Namespace(max_train=3000, rounds=2)
    demo._fed_part(args, tmp_path, cfgs)
    out = capsys.readouterr().out
    assert "run 1/4: central_sc\n" in out
    assert "run 2/4: fedavg_sc, about 1.5 min left" in out  # 30 s a run so far, 3 to go
    assert "run 4/4: fedsc_dp, about 0.5 min left" in out
