"""`fedspectral train` end to end (tiny digits runs) and config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedspectral.cli import main
from fedspectral.config import apply_overrides, from_dict, to_dict
from fedspectral.fed.methods import method_class
from fedspectral.fed.validation import load_config, validate

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "digits_smoke.yaml")


@pytest.mark.filterwarnings("ignore:partition_by_class")
@pytest.mark.parametrize("method", ["fedavg_byol", "fedu", "fedema", "fedx", "fedca"])
def test_every_baseline_trains_through_cli(method, tmp_path):
    out = tmp_path / method
    args = [
        "train",
        "--config",
        SMOKE,
        "--set",
        f"method.name={method}",
        "--set",
        "run.threads=1",
        "--out",
        str(out),
        "--quiet",
    ]
    if method == "fedca":
        args += ["--set", "method.params.public_size=100", "--set", "method.params.base_epochs=3"]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["method"] == method and res["rounds_done"] == 2
    assert 0.2 < res["final"]["knn_backbone"] <= 1.0
    if method == "fedca":  # the alignment module ran on a held-out public split
        text = json.dumps(res)
        assert '"public_size": 100' in text and '"aligned": 1.0' in text


@pytest.mark.parametrize("method", ["fedsc", "fedavg_sc", "central_sc"])
def test_smoke_run_through_cli(method, tmp_path, capsys):
    out = tmp_path / method
    args = [
        "train",
        "--config",
        SMOKE,
        "--set",
        f"method.name={method}",
        "--set",
        "run.threads=1",
        "--out",
        str(out),
        "--quiet",
    ]
    if method == "fedsc":
        args += ["--set", "dp.enabled=true", "--set", "dp.epsilon=2.0", "--set", "dp.delta=1e-3"]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["method"] == method and res["rounds_done"] == 2
    assert 0.2 < res["final"]["knn_backbone"] <= 1.0  # well above chance (0.1) on digits
    assert (out / "rounds.csv").read_text().count("\n") == 3
    assert (out / "convergence.png").stat().st_size > 1000
    assert (out / "checkpoint.pt").is_file()
    assert load_config(out / "config.yaml").method.name == method  # the config round-trips
    if method == "fedsc":
        assert res["privacy"]["releases"] == 10  # 5 clients x 2 sharing rounds
        assert res["privacy"]["epsilon_rdp"] <= 2.0 + 1e-6
    else:
        assert res["privacy"]["releases"] == 0
    if method == "central_sc":
        assert list(res["data"]["client_sizes"]) == ["client-0"]
    assert "rounds in" in capsys.readouterr().out
    from fedspectral.plots import summary_table

    row = summary_table([out]).splitlines()[2]
    assert row.startswith(f"| {method} | {100 * res['final']['knn_backbone']:.1f} |")


def test_resume_through_cli(tmp_path):
    out = tmp_path / "r"
    base = [
        "train",
        "--config",
        SMOKE,
        "--set",
        "method.name=fedavg_sc",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "run.threads=1",
    ]
    assert main(base) == 0
    first = json.loads((out / "results.json").read_text())
    assert main([*base, "--resume"]) == 0  # already complete: nothing to redo
    again = json.loads((out / "results.json").read_text())
    assert again["resumed_from"] == 2 and again["final"] == first["final"]


BAD = [
    (["method.name=fedfoo"], "fedfoo"),
    (["data.dataset=mnist3"], "mnist3"),
    (["partition.num_clients=11", "partition.classes_per_client=1"], "num_clients=11"),
    (["partition.num_clients=6"], "num_clients=6"),  # 6 x 2 classes > 10
    (["method.params.mu=0"], "mu=0"),
    (["method.params.mu=-2.0"], "mu=-2.0"),
    (["method.params.alpha_start=1.5"], "alpha_start=1.5"),
    (["method.params.alpha_end=-0.1"], "alpha_end=-0.1"),
    (["dp.enabled=true", "dp.epsilon=0"], "epsilon=0"),
    (["dp.enabled=true", "dp.epsilon=-1"], "epsilon=-1"),
    (["dp.enabled=true", "dp.epsilon=1", "dp.delta=1.5"], "delta=1.5"),
    (["dp.enabled=true", "dp.epsilon=1", "dp.delta=0"], "delta=0"),
    (["dp.epsilon=3"], "dp.enabled=False"),
    (["dp.enabled=true"], "exactly one of dp.sigma and dp.epsilon"),
    (["method.name=fedavg_sc", "dp.enabled=true", "dp.epsilon=3"], "only fedsc"),
    (["data.max_train=3"], "num_clients=5"),  # a client would be empty
    (["partition.samples_per_client=0"], "samples_per_client=0"),
    (["method.clients_per_round=9"], "clients_per_round=9"),
    (["optim.lr=fast"], "optim.lr"),
    (["optim.bogus=1"], "optim.bogus"),
    (["method.params.ema=0.99"], "ema"),
    (["method.params.share_start=50"], "share_start=50"),
    (["data.eval_split=val"], "val_fraction"),
    # batch statistics make one sample move the others: DP-CalR's sensitivity fails
    (["model.norm=batch", "dp.enabled=true", "dp.epsilon=3"], "model.norm"),
]


@pytest.mark.parametrize("overrides, match", BAD)
def test_bad_config_rejected_before_training(overrides, match, tmp_path, capsys):
    with pytest.raises((ValueError, TypeError), match=match):
        load_config(SMOKE, overrides)
    out = tmp_path / "never"
    args = ["train", "--config", SMOKE, "--out", str(out), "--quiet"]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 2
    assert match.split("=")[0] in capsys.readouterr().err
    assert not out.exists()  # nothing written


def test_overrides_are_typed():
    cfg = load_config(SMOKE, ["optim.lr=0.1", "method.params.mu=2", "eval.test_size=null"])
    assert cfg.optim.lr == 0.1 and isinstance(cfg.method.params["mu"], float)
    assert cfg.eval.test_size is None
    cfg2 = apply_overrides(cfg, ["optim.batch_size=32"])
    assert cfg2.optim.batch_size == 32 and cfg.optim.batch_size == 64  # a copy
    with pytest.raises(ValueError, match="optim.batch_size"):
        apply_overrides(cfg, ["optim.batch_size=3.5"])
    assert to_dict(validate(cfg)) == to_dict(cfg)  # a loaded config is already complete


def test_validate_returns_a_completed_copy_and_leaves_its_input_alone():
    cfg = from_dict({"name": "t", "data": {"dataset": "digits"}, "method": {"name": "fedsc"}})
    before = to_dict(cfg)
    done = validate(cfg)
    assert done is not cfg and done.method.params is not cfg.method.params
    assert to_dict(cfg) == before and cfg.method.params == {}
    assert set(done.method.params) == set(method_class("fedsc").default_params)
    assert to_dict(validate(done)) == to_dict(done)  # idempotent


def test_shipped_configs_validate():
    names = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
    assert {"fmnist_fedsc.yaml", "fmnist_fedavg_sc.yaml", "fmnist_central_sc.yaml"} <= set(names)
    for p in (ROOT / "configs").glob("*.yaml"):
        load_config(p)


def test_flower_engine_is_explicit(tmp_path):
    from fedspectral.experiments.train import run_experiment

    cfg = load_config(SMOKE)
    with pytest.raises(ValueError, match="engine"):
        run_experiment(cfg, engine="ray", out_dir=tmp_path)


def test_resume_without_a_checkpoint_is_an_error(tmp_path, capsys):
    out = tmp_path / "fresh"
    args = ["train", "--config", SMOKE, "--out", str(out), "--quiet", "--resume"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no checkpoint to resume from" in err and "without --resume" in err
    assert not (out / "results.json").exists()  # refused before any training
    assert main([*args, "--set", "run.checkpoint=false"]) == 2
    assert "run.checkpoint=false" in capsys.readouterr().err
    from fedspectral.fed.checkpoint import CheckpointError
    from fedspectral.fed.simulation import Simulation

    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        Simulation(load_config(SMOKE), out_dir=tmp_path / "lib").run(resume=True)


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_a_warning_prints_once_as_one_line(tmp_path, capsys):
    """The delta >= 1/|D_j| warning: once, as `fedspectral train: warning: ...`, not as a
    raw Python warning with its source line, and not again in the summary."""
    args = [
        "train",
        "--config",
        SMOKE,
        "--out",
        str(tmp_path / "w"),
        "--quiet",
        "--set",
        "run.threads=1",
        "--set",
        "method.rounds=1",
        "--set",
        "dp.enabled=true",
        "--set",
        "dp.epsilon=2.0",
        "--set",
        "dp.delta=1e-2",
    ]
    assert main(args) == 0
    cap = capsys.readouterr()
    text = cap.out + cap.err
    hits = [ln for ln in text.splitlines() if "1/|D_j|" in ln]
    assert len(hits) == 1, text
    assert hits[0].startswith("fedspectral train: warning: dp.delta=0.01 >= 1/|D_j|")
    assert "UserWarning" not in text and "warnings.warn" not in text
    res = json.loads((tmp_path / "w" / "results.json").read_text())
    assert "1/|D_j|" in res["privacy"]["warnings"][0]  # still recorded with the results


def test_two_runs_into_one_folder_the_second_is_refused(tmp_path, capsys):
    """A run holds its output folder's lock while it trains: a second run into the same
    folder (another process, or here the same one) stops before any work with exit status
    2, and the folder is left as the first run has it; once the lock is released the
    folder is usable again (no stale lock file: the lock is on the folder itself)."""
    import os

    from fedspectral.experiments.train import lock_output

    out = tmp_path / "run"
    held = lock_output(out)  # what a running `fedspectral train --out run` holds
    try:
        argv = ["train", "--config", SMOKE, "--set", "method.rounds=1", "--out", str(out)]
        assert main([*argv, "--quiet"]) == 2
        assert "another run is writing to" in capsys.readouterr().err
        assert list(out.iterdir()) == []
    finally:
        os.close(held)
    again = lock_output(out)  # released with its descriptor
    os.close(again)
    assert list(out.iterdir()) == []
