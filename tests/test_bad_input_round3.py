"""Bad input, round 3 (issue 39): one output rule for every writer, values parsed where
they enter, privacy settings that fail closed, checks before budget is spent, sizes
bounded where they enter, and one load-and-check of a run's state.  One test per
finding, unit-level (``tmp_path``, nothing trained); docs/bad_input.md lists each
finding and its test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedspectral.cli import main
from fedspectral.config import to_dict
from fedspectral.fed.checkpoint import save_checkpoint
from fedspectral.fed.validation import config_fingerprint, load_config, validate

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "digits_smoke.yaml"


def _error(capsys, cmd):
    err = capsys.readouterr().err
    assert err.startswith(f"fedspectral {cmd}: error: "), err
    assert "Traceback" not in err and len(err) < 1500, err
    return err


def _snapshot(folder):
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# ----------------------------------------------------------------------------- a run folder
def _make_run(out: Path, tamper=None) -> Path:
    """A run folder as ``fedspectral train`` leaves it after one round (its config.yaml
    and a checkpoint of the method's real, untrained weights), built without training;
    ``tamper(weights)`` edits the server's weights before the checkpoint is written
    (its digest stays valid)."""
    import yaml

    from fedspectral.fed.federation import client_ids
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.weights import net_to_arrays

    cfg = validate(load_config(SMOKE, ["method.rounds=1", "eval.every=1"]))
    d = to_dict(cfg)
    method = build_method(cfg)
    weights = net_to_arrays(method.build_net())
    if tamper is not None:
        tamper(weights)
    ids = client_ids(cfg, method)
    rec = {
        "round": 1,
        "sampled": [ids[0]],
        "bytes_up_total": 1,
        "bytes_down_total": 1,
        "seconds_round": 0.1,
        "phases": {"train": {"metrics": {}, "seconds": 0.1, "failures": {}}},
    }
    state = {
        "round": 1,
        "server": {"weights": weights, "arrays": {}, "info": {"clients": list(ids)}},
        "clients": {c: {} for c in ids},
        "ledger": {"releases": []},
        "client_ledger": {"unit": "client"},
        "records": [rec],
        "elapsed": 0.1,
    }
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    save_checkpoint(out / "checkpoint.pt", state, config_fingerprint(d))
    (out / "results.json").write_text(json.dumps({"config": d}))
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _make_run(tmp_path_factory.mktemp("r3") / "run")


# ----------------------------------------------------------------------------- 1. outputs
@pytest.mark.parametrize("name", ["checkpoint.pt", "results.json", "config.yaml"])
def test_export_never_writes_over_the_runs_own_files(name, run_dir, capsys):
    before = _snapshot(run_dir)
    assert main(["export", str(run_dir), "--out", str(run_dir / name)]) == 2
    assert "is a file of the run" in _error(capsys, "export")
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize("make", ["dangling", "folder"])
def test_export_out_that_is_no_file_is_refused_before_work(make, run_dir, tmp_path, capsys):
    out = tmp_path / "e.pt"
    if make == "dangling":
        out.symlink_to(tmp_path / "nowhere" / "x.pt")
    else:
        out.mkdir()
    assert main(["export", str(run_dir), "--out", str(out)]) == 2
    err = _error(capsys, "export")
    assert ("dangling symlink" if make == "dangling" else "is a directory") in err
    assert out.is_symlink() if make == "dangling" else out.is_dir()
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(
    "make, match",
    [
        ("run-is-a-file", "is a regular file, not a folder"),
        ("config-is-a-folder", "config.yaml 'RUN/config.yaml' is a directory"),
        ("checkpoint-is-a-folder", "checkpoint.pt 'RUN/checkpoint.pt' is a directory"),
    ],
)
def test_export_never_calls_an_existing_path_missing(make, match, tmp_path, capsys):
    run = tmp_path / "RUN"
    if make == "run-is-a-file":
        run.write_text("x")
    else:
        run.mkdir()
        (run / "config.yaml").mkdir() if make == "config-is-a-folder" else (
            run / "config.yaml"
        ).write_text(SMOKE.read_text())
        (run / "checkpoint.pt").mkdir()
    assert main(["export", str(run), "--out", str(tmp_path / "e.pt")]) == 2
    assert match.replace("RUN", str(run)) in _error(capsys, "export")
    assert not (tmp_path / "e.pt").exists()


def test_export_of_a_hand_edited_config_gives_export_advice(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for f in ("checkpoint.pt", "results.json"):
        (run / f).write_bytes((run_dir / f).read_bytes())
    (run / "config.yaml").write_text(
        (run_dir / "config.yaml").read_text().replace("rounds: 1", "rounds: 2")
    )
    assert main(["export", str(run), "--out", str(tmp_path / "e.pt")]) == 2
    err = _error(capsys, "export")
    assert "edited after the run" in err and "--resume" not in err


# ----------------------------------------------------------------------------- 6. state
def _nan(weights):
    k = next(k for k, v in weights.items() if v.dtype.kind == "f")
    weights[k] = weights[k].copy()
    weights[k].flat[0] = np.nan


def _reshape(weights):
    k = next(k for k, v in weights.items() if v.ndim == 4)
    weights[k] = np.zeros((1, *weights[k].shape[1:]), weights[k].dtype)


@pytest.mark.parametrize("tamper, match", [(_nan, "non-finite value"), (_reshape, "has shape (1,")])
def test_a_checkpoint_with_a_valid_digest_but_bad_weights_is_refused_on_every_path(
    tamper, match, tmp_path, capsys, monkeypatch
):
    from fedspectral.fed import simulation

    run = _make_run(tmp_path / "run", tamper)
    # export
    assert main(["export", str(run), "--out", str(tmp_path / "e.pt")]) == 2
    err = _error(capsys, "export")
    assert "checkpoint" in err and str(run / "checkpoint.pt") in err and match in err
    assert not (tmp_path / "e.pt").exists()
    # resume: refused before any data is loaded, naming the file, not the model

    def boom(*a, **k):
        raise AssertionError("data were loaded before the checkpoint was checked")

    monkeypatch.setattr(simulation, "prepare_federation", boom)
    cfg = load_config(run / "config.yaml")
    with pytest.raises(ValueError, match=re.escape(match)):
        simulation.load_run_state(run / "checkpoint.pt", cfg)
    argv = ["train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume"]
    assert main([*argv, "--quiet"]) == 2
    err = _error(capsys, "train")
    assert str(run / "checkpoint.pt") in err and match in err


def test_load_encoder_checks_the_file_before_building_anything(run_dir, tmp_path):
    from fedspectral.fed.export import ENCODER_FORMAT, export_encoder, load_encoder

    good = export_encoder(run_dir, tmp_path / "e.pt")
    blob = torch.load(good, weights_only=True)
    cases = {
        "no-config": ({k: v for k, v in blob.items() if k != "config"}, "lacks ['config']"),
        "huge": (
            {
                **blob,
                "config": {**blob["config"], "model": {**blob["config"]["model"], "width": 65536}},
            },
            "has shape",
        ),
        "nan": (
            {
                **blob,
                "state_dict": {
                    k: (v * np.nan if v.is_floating_point() else v)
                    for k, v in blob["state_dict"].items()
                },
            },
            "non-finite",
        ),
    }
    for name, (b, match) in cases.items():
        torch.save(b, tmp_path / f"{name}.pt")
        with pytest.raises(ValueError, match=re.escape(match)) as exc:
            load_encoder(tmp_path / f"{name}.pt")
        assert str(tmp_path / f"{name}.pt") in str(exc.value)
    assert blob["format"] == ENCODER_FORMAT
