"""Bad input on the command line: a clear ``fedspectral <cmd>: error: ...``, a non-zero exit,
no traceback (unless ``--debug``), nothing written, and no data loaded before the checks."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedspectral.cli import main
from fedspectral.config import to_dict
from fedspectral.fed import simulation
from fedspectral.fed.checkpoint import (
    FORMAT,
    CheckpointError,
    load_checkpoint,
    read_fingerprint,
    save_checkpoint,
)
from fedspectral.fed.validation import config_fingerprint, load_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "digits_smoke.yaml")


@pytest.fixture
def no_data(monkeypatch):
    """Any attempt to load the data fails the test (the checks must come first)."""

    def boom(*a, **k):
        raise AssertionError("data were loaded before the input was checked")

    monkeypatch.setattr(simulation, "prepare_federation", boom)


def _train(tmp_path, *extra, out=None):
    out = tmp_path / "out" if out is None else out
    return ["train", "--config", SMOKE, "--out", str(out), "--quiet", *extra]


def _error(capsys, cmd="train"):
    err = capsys.readouterr().err
    assert err.startswith(f"fedspectral {cmd}: error: "), err
    assert "Traceback" not in err
    return err


BAD_SETS = [
    (["model.width=-8"], "model.width=-8: must be an integer >= 1"),
    (["model.width=100000000"], "model.width=100000000: must be <= 65536"),
    (["model.width=1e8"], "model.width must be int or null, got '1e8'"),
    (["model.width=4000"], "parameters, more than the 1e+09 accepted"),
    (["model.projector_out=0"], "model.projector_out=0: must be an integer >= 1"),
    (["model.backbone=foo"], "model.backbone='foo': unknown backbone"),
    (["model.norm=foo"], "model.norm='foo': unknown normalisation"),
    (["model.backbone=fixup_resnet20", "model.norm=group"], "normalisation-free"),
    (["model.kwargs.depth=3"], "cannot be built"),
    (["run.device=cuda:99"], "run.device='cuda:99'"),
    (["method.rounds=["], "override 'method.rounds=[': the value is not valid YAML"),
    (["name="], "override 'name=': name must be a non-empty string"),
    (["dp.enabled=true", "dp.sigma=-1"], "dp.sigma=-1.0: must be a finite number > 0"),
    (["dp.enabled=true", "dp.sigma=1e300"], "dp.sigma=1e+300: must be <= 1e+100"),
]


@pytest.mark.parametrize("sets, match", BAD_SETS)
def test_bad_settings_are_one_line_errors_before_data(sets, match, tmp_path, capsys, no_data):
    args = _train(tmp_path)
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    assert match in _error(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dp", [["dp.sigma=0.5"], ["dp.epsilon=2.0"]])
def test_privacy_failures_surface_before_data(dp, tmp_path, capsys, no_data, monkeypatch):
    from fedspectral.privacy import PrivacyLedger

    def fail(self, delta, party=None, accountant="rdp"):
        raise ValueError(f"{accountant} cannot account this")

    monkeypatch.setattr(PrivacyLedger, "epsilon", fail)
    args = _train(tmp_path, "--set", "dp.enabled=true", "--set", dp[0])
    assert main(args) == 2
    err = _error(capsys)
    assert dp[0].replace("=", "=") in err and "rdp cannot account this" in err
    assert "planned release(s)" in err


@pytest.mark.parametrize(
    "dp",
    ["dp.sigma=1e99", "dp.sigma=1e-300", "dp.epsilon=1e-12", "dp.epsilon=0.001", "dp.epsilon=1e6"],
)
def test_privacy_extremes_are_accepted_or_refused_clearly(dp):
    from fedspectral.experiments.preflight import check_privacy

    cfg = load_config(SMOKE, ["dp.enabled=true", dp, "dp.accountant=rdp"])
    try:
        check_privacy(cfg, accountants=("rdp",))
    except ValueError as exc:
        assert dp.split("=")[0] in str(exc)


def test_cuda_without_a_gpu_is_refused(tmp_path, capsys, no_data):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(_train(tmp_path, "--set", "run.device=cuda")) == 2
    assert "no CUDA GPU is available" in _error(capsys)


@pytest.mark.parametrize(
    "text, match",
    [
        (b"name: x\nmethod:\n\trounds: 2\n", "is not valid YAML: found character '\\t'"),
        (b"name: [\n", "is not valid YAML"),
        (b"", "is empty"),
        (b"# only a comment\n", "is empty"),
        (b"name: caf\xe9\n", "is not UTF-8 text (byte 9"),
        (b"- 1\n- 2\n", "must hold a mapping of sections, got list"),
    ],
)
def test_bad_config_files_are_named(text, match, tmp_path, capsys, no_data):
    cfg = tmp_path / "bad.yaml"
    cfg.write_bytes(text)
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = _error(capsys)
    assert match in err and str(cfg) in err
    with pytest.raises((ValueError, TypeError), match="bad.yaml"):
        load_config(cfg)


def test_bad_output_folders(tmp_path, capsys, no_data):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, match in ((afile, "exists and is not a folder"), (afile / "sub", "is a file")):
        assert main(_train(tmp_path, out=out)) == 2
        assert match in _error(capsys)
    assert main(["train", "--config", SMOKE, "--out", ""]) == 2
    assert "--out must be a non-empty path" in _error(capsys)
    (tmp_path / "d" / "results.json").mkdir(parents=True)
    assert main(_train(tmp_path, out=tmp_path / "d")) == 2
    assert "results.json' is a directory" in _error(capsys)
    (tmp_path / "e" / "checkpoint.pt").mkdir(parents=True)
    assert main(_train(tmp_path, "--resume", out=tmp_path / "e")) == 2
    assert "checkpoint.pt' is a directory" in _error(capsys)
    assert afile.read_text() == "x"


def test_debug_shows_the_traceback_and_unexpected_errors_say_so(tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError, match="model.width=-8"):
        main(_train(tmp_path, "--set", "model.width=-8", "--debug"))
    from fedspectral.experiments import train

    def bug(*a, **k):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(train, "run_experiment", bug)
    assert main(_train(tmp_path)) == 1
    err = _error(capsys)
    assert "unexpected RuntimeError: an internal bug" in err and "--debug" in err


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_divergence_stops_with_the_round_and_a_hint(tmp_path, capsys):
    out = tmp_path / "lr"
    # weight decay off: lr x weight_decay >= 1 is refused before training
    assert (
        main(
            _train(
                tmp_path,
                "--set",
                "optim.lr=1e30",
                "--set",
                "optim.weight_decay=0",
                "--set",
                "method.rounds=1",
                "--set",
                "run.threads=1",
                out=out,
            )
        )
        == 2
    )
    err = _error(capsys)
    assert "training diverged in round 1" in err and "smaller learning rate" in err
    assert "optim.lr=1e+30" in err
    assert not (out / "results.json").exists()


# ----------------------------------------------------------------------------- checkpoints
def _fingerprint():
    return config_fingerprint(to_dict(load_config(SMOKE)))


def _state(rnd=0):
    return {
        "round": rnd,
        "server": {
            "weights": {"w": np.full((3, 2), 1.2345, np.float32)},
            "arrays": {},
            "info": {"clients": ["client-0"]},
        },
        "clients": {"client-0": {}},
        "ledger": {"releases": []},
        "records": [{}] * rnd,
        "elapsed": 0.0,
    }


def test_checkpoint_round_trip_keeps_types(tmp_path):
    state = {
        "a": np.arange(6, dtype=np.int64).reshape(2, 3),
        "b": np.array([True, False]),
        "c": np.float32(2.5),
        "t": (1, "x", [2.0, float("nan")]),
        "k": {3: "int key"},
        "s": np.array(["text"]),
        "e": np.zeros((0, 4), np.float32),
        "n": None,
        "zero_d": np.array(0.25),
        "f": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "tricky": {"__tensor__": "not a reference"},
    }
    buf = tmp_path / "c.pt"
    save_checkpoint(buf, state, "fp")
    back = load_checkpoint(buf, "fp")
    np.testing.assert_array_equal(back["a"], state["a"])
    assert back["a"].dtype == np.int64 and back["b"].dtype == np.bool_
    assert back["c"] == 2.5 and back["t"][:2] == (1, "x") and np.isnan(back["t"][2][1])
    assert back["k"] == {3: "int key"} and back["s"].tolist() == ["text"]
    assert back["e"].shape == (0, 4) and back["n"] is None
    assert back["zero_d"].shape == () and float(back["zero_d"]) == 0.25
    np.testing.assert_array_equal(back["f"], state["f"])
    assert back["tricky"] == {"__tensor__": "not a reference"}
    assert read_fingerprint(buf) == "fp"
    with pytest.raises(CheckpointError, match="different config"):
        load_checkpoint(buf, "other")


def _flip_in_tensor(path: Path) -> None:
    data = bytearray(path.read_bytes())
    i = data.find(np.float32(1.2345).tobytes())
    assert i > 0
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def _corrupt(kind: str, path: Path, fp: str) -> None:
    if kind == "directory":
        path.mkdir()
        return
    save_checkpoint(path, _state(), fp)
    raw = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "bit-flipped":
        _flip_in_tensor(path)
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "foreign":
        torch.save({"model": torch.ones(3)}, path)
    elif kind == "old-format":
        torch.save({"fingerprint": fp, "round": 1}, path)
    elif kind == "wrong-digest":
        blob = torch.load(path, weights_only=True)
        blob["tensors"]["t0"] = blob["tensors"]["t0"] + 1
        torch.save(blob, path)
    elif kind == "other-config":
        save_checkpoint(path, _state(), "0123456789abcdef")
    elif kind == "round-5-of-2":
        save_checkpoint(path, _state(5), fp)
    elif kind == "bad-state":
        save_checkpoint(path, {"round": 0}, fp)


@pytest.mark.parametrize(
    "kind, match",
    [
        ("directory", "is a directory"),
        ("truncated", "cannot be read safely"),
        ("empty", "is empty"),
        ("bit-flipped", "corrupt"),
        ("garbage", "cannot be read safely"),
        ("foreign", f"is not a {FORMAT} file"),
        ("old-format", f"is not a {FORMAT} file"),
        ("wrong-digest", "is corrupt"),
        ("other-config", "written by a different config"),
        ("round-5-of-2", "round 5 is outside 0..2"),
        ("bad-state", "holds an invalid state"),
    ],
)
def test_resume_from_a_bad_checkpoint_is_a_clear_error(kind, match, tmp_path, capsys, no_data):
    out = tmp_path / "run"
    out.mkdir()
    _corrupt(kind, out / "checkpoint.pt", _fingerprint())
    assert main(_train(tmp_path, "--resume", out=out)) == 2
    err = _error(capsys)
    assert match in err and "checkpoint.pt" in err


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_payload_in_a_checkpoint_never_runs(tmp_path, capsys, no_data):
    marker = tmp_path / "pwned"
    out = tmp_path / "run"
    out.mkdir()
    payload = {"format": FORMAT, "fingerprint": _fingerprint(), "x": _Payload(str(marker))}
    torch.save(payload, out / "checkpoint.pt")
    # the control: an unrestricted load would run it (so this test can fail)
    with open(out / "checkpoint.pt", "rb") as fh:
        torch.load(io.BytesIO(fh.read()), weights_only=False)
    assert marker.exists()
    marker.unlink()
    assert main(_train(tmp_path, "--resume", out=out)) == 2
    assert "cannot be read safely" in _error(capsys)
    assert not marker.exists()
    with pytest.raises(CheckpointError):
        read_fingerprint(out / "checkpoint.pt")
    assert not marker.exists()


# ----------------------------------------------------------------------------- pca-bench
@pytest.mark.parametrize(
    "args, match",
    [
        (["--sparse-repeats", "0"], "--sparse-repeats must be a positive integer, got 0"),
        (["--repeats", "0"], "--repeats must be a positive integer, got 0"),
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["--out", ""], "--out must be a non-empty path"),
    ],
)
def test_pca_bench_bad_options(args, match, tmp_path, capsys):
    args = ["pca-bench", "--quick", "--no-progress", *args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert match in _error(capsys, "pca-bench")
    assert not (tmp_path / "o").exists()


def test_pca_bench_bad_paths(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["pca-bench", "--quick", "--out", str(afile / "x")]) == 2
    assert "is a file" in _error(capsys, "pca-bench")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "pca_bench.json").write_text('{"config": ')
    assert main(["pca-bench", "--reanalyse", "--out", str(bad)]) == 2
    assert "pca_bench.json' is not valid JSON" in _error(capsys, "pca-bench")
    (bad / "pca_bench.json").write_text("[1, 2]")
    assert main(["pca-bench", "--reanalyse", "--out", str(bad)]) == 2
    assert "is not a pca-bench result" in _error(capsys, "pca-bench")
    assert json.loads((bad / "pca_bench.json").read_text()) == [1, 2]  # left as it was
