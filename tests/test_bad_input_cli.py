"""Bad input, round 2 (issue 24), the command-line side: nothing lost, nothing silently
wrong, bounded, clear.  One test per finding, in-process (``fedspectral.cli.main``), with
the data loader replaced by one that fails (the checks must come first) and nothing
trained unless the finding needs it; docs/bad_input.md lists each finding and its test."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from fedspectral import atomic
from fedspectral.checks import ALLOW_LARGE_ENV, check_size
from fedspectral.cli import main
from fedspectral.config import to_dict
from fedspectral.fed import simulation
from fedspectral.fed.checkpoint import load_checkpoint, read_fingerprint, save_checkpoint
from fedspectral.fed.records import PhaseRecord, RoundRecord
from fedspectral.fed.validation import config_fingerprint, load_config, validate
from fedspectral.inputs import MAX_YAML_NODES, load_yaml
from fedspectral.kinds import PhaseKind

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "digits_smoke.yaml"
CONFIGS = ROOT / "configs"


@pytest.fixture
def no_data(monkeypatch):
    """Any attempt to load the data fails the test (the checks must come first)."""

    def boom(*a, **k):
        raise AssertionError("data were loaded before the input was checked")

    monkeypatch.setattr(simulation, "prepare_federation", boom)


def _train(out, *extra, config=SMOKE):
    return ["train", "--config", str(config), "--out", str(out), "--quiet", *extra]


def _error(capsys, cmd="train"):
    err = capsys.readouterr().err
    assert err.startswith(f"fedspectral {cmd}: error: "), err
    assert "Traceback" not in err and len(err) < 1500, err
    return err


def _sets(*items):
    return [a for s in items for a in ("--set", s)]


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "text, line",
    [
        ("name: a\nmethod: {rounds: 2}\noptim: {lr: 0.1}\nmethod: {rounds: 5}\n", 4),
        ("name: a\nmethod:\n  rounds: 2\n  views: 1\n  rounds: 5\n", 5),
    ],
)
def test_duplicate_yaml_keys_are_refused_with_both_lines(text, line, tmp_path, capsys, no_data):
    cfg = tmp_path / "dup.yaml"
    cfg.write_text(text)
    assert main(_train(tmp_path / "o", config=cfg)) == 2
    err = _error(capsys)
    assert "duplicate key" in err and f"at line {line}" in err and "dup.yaml" in err
    # a merge key (<<) may be overridden: that is what it is for
    assert load_yaml("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\n", "t")["b"] == {"k": 2}


def test_a_bad_value_in_a_config_file_names_the_file_and_line(tmp_path, capsys, no_data):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\ndata: {dataset: digits}\nmethod:\n  name: fedsc\n  rounds: 0\n")
    assert main(_train(tmp_path / "o", config=cfg)) == 2
    assert f"method.rounds=0: must be an integer >= 1 (config file {str(cfg)!r}, line 5)" in _error(
        capsys
    )
    # the same value from --set is the option's, not the file's: no line
    assert main(_train(tmp_path / "o", "--set", "method.rounds=0")) == 2
    assert "line" not in _error(capsys)
    cfg.write_text("name: x\nmethod: {rounds: two}\n")
    assert main(_train(tmp_path / "o", config=cfg)) == 2
    assert f"config file {str(cfg)!r}: config key method.rounds must be int" in _error(capsys)


def test_a_yaml_alias_bomb_is_refused_with_a_short_message(tmp_path, capsys, no_data):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text("\n".join(levels) + "\n")
    assert len(cfg.read_bytes()) < 600  # 9^9 = 387 million strings once expanded
    assert main(_train(tmp_path / "o", config=cfg)) == 2
    err = _error(capsys)
    assert "aliases" in err and "bomb.yaml" in err
    few = "a: &a [1, 2]\n" + "".join(f"b{i}: [{', '.join(['*a'] * 9)}]\n" for i in range(9))
    assert load_yaml(few, "t")["b0"][0] == [1, 2]  # 81 aliases, few nodes: fine
    wide = "a: &a [" + ", ".join(["1"] * 200) + "]\n" + "".join(f"b{i}: *a\n" for i in range(60))
    with pytest.raises(ValueError, match=f"more than {MAX_YAML_NODES} nodes"):
        load_yaml(wide, "t")


@pytest.mark.parametrize(
    "name, match",
    [
        ("../escaped", "a name, not a path"),
        ("a/b", "a name, not a path"),
        ("..", "a name, not a path"),
        ("a\0b", "contains a NUL character (\\x00 at position 1)"),
    ],
)
def test_run_names_are_names_not_paths(name, match, tmp_path, capsys, no_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(SMOKE), "--quiet", "--set", f"name={name}"]) == 2
    assert match in _error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "sets, match",
    [
        (["dp.enabled=true", "dp.epsilon=.inf"], "dp.epsilon=inf: must be a finite number > 0"),
        (["optim.lr=0.05", "optim.min_lr=0.1"], "optim.min_lr=0.1: must be <= optim.lr=0.05"),
        (["optim.weight_decay=1e300"], "lr x weight_decay = 5e+298 >= 1"),
        (
            ["dp.enabled=true", "dp.epsilon=4.0", "method.params.mu=1e300"],
            "method.params.mu=1e+300: must be <= 1e+15: the loss and the correlation are float32",
        ),
    ],
)
def test_silently_wrong_settings_are_refused(sets, match, tmp_path, capsys, no_data):
    assert main(_train(tmp_path / "o", *_sets(*sets))) == 2
    assert match in _error(capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "sets, match",
    [
        (["method.views=100000"], "config method.views=100000 is above its bound 64"),
        (["optim.batch_size=1000000"], "config optim.batch_size=1000000 is above its bound 16,384"),
        (["eval.batch_size=1000000"], "config eval.batch_size=1000000 is above its bound 16,384"),
        (
            ["method.views=64", "optim.batch_size=1024"],
            "2 x method.views x optim.batch_size=131072",
        ),
        (
            ["method.rounds=1000000000"],
            "config method.rounds=1000000000 is above its bound 100,000",
        ),
        (["method.local_epochs=100000"], "config method.local_epochs=100000 is above its bound"),
    ],
)
def test_step_sizes_are_bounded_and_the_bound_can_be_lifted(
    sets, match, tmp_path, capsys, no_data, monkeypatch
):
    assert main(_train(tmp_path / "o", *_sets(*sets))) == 2
    err = _error(capsys)
    assert match in err and f"{ALLOW_LARGE_ENV}=1" in err
    monkeypatch.setenv(ALLOW_LARGE_ENV, "1")
    validate(load_config(SMOKE, sets))  # passes, knowingly


def test_check_size_says_the_bound_and_how_to_pass_it(monkeypatch):
    monkeypatch.delenv(ALLOW_LARGE_ENV, raising=False)
    assert check_size("n", np.int64(10), 10) == 10
    with pytest.raises(
        ValueError,
        match=r"n=11 is above its bound 10 \(why\); .*"
        f"{ALLOW_LARGE_ENV}=1",
    ):
        check_size("n", 11, 10, why="why")
    with pytest.raises(TypeError, match="n must be an integer, got bool True"):
        check_size("n", True, 10)
    monkeypatch.setenv(ALLOW_LARGE_ENV, "1")
    assert check_size("n", 11, 10) == 11
    with pytest.raises(ValueError, match="n must be >= 1"):
        check_size("n", 0, 10)


def _special_file(kind, tmp_path):
    if kind == "directory":
        return tmp_path, "is a directory, not a regular file"
    if kind == "fifo":
        p = tmp_path / "pipe"
        os.mkfifo(p)
        return p, "is a FIFO (named pipe), not a regular file"
    if kind == "device":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        return Path("/dev/zero"), "is a character device, not a regular file"
    if kind == "dangling":
        p = tmp_path / "link"
        p.symlink_to(tmp_path / "nowhere")
        return p, "is a dangling symlink"
    p = tmp_path / "loop"
    p.symlink_to(p)
    return p, "is a symlink loop"


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "dangling", "loop"])
def test_non_regular_files_are_named_as_such(kind, tmp_path, capsys, no_data):
    path, match = _special_file(kind, tmp_path)
    assert main(_train(tmp_path / "o", config=path)) == 2  # never reads a FIFO or /dev/zero
    assert f"config file {str(path)!r} {match}" in _error(capsys)
    assert (
        main(
            [
                "pca-plan",
                "--p",
                "4",
                "--k",
                "1",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--spectrum",
                str(path),
                "--target-error",
                "0.1",
            ]
        )
        == 2
    )
    assert f"--spectrum {str(path)!r} {match}" in _error(capsys, "pca-plan")
    from fedspectral.fed.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=f"checkpoint '.*' {re.escape(match)}"):
        load_checkpoint(path)


# ----------------------------------------------------------------------------- outputs
ONE_ROUND = ["method.rounds=1", "eval.every=1"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The files of a finished one-round run of the smoke config, as its writers write them
    (results.json with its config, checkpoint.pt of a structurally valid state)."""
    from fedspectral.results import write_json

    out = tmp_path_factory.mktemp("finished") / "run"
    cfg = to_dict(validate(load_config(SMOKE, ONE_ROUND)))
    write_json(
        out / "results.json",
        {"name": "digits_smoke", "config": cfg, "rounds_done": 1, "records": [], "final": {}},
    )
    # the typed record (fed/records.py) of a one-phase round, as the runner writes it
    rec = RoundRecord(
        1,
        ("client-0",),
        {"train": PhaseRecord(PhaseKind.TRAIN, ("client-0",), {}, {}, {}, 0.1, 0.1, {})},
        {},
        {},
        {"seconds_round": 0.1},
    ).to_dict()
    state = {
        "round": 1,
        "server": {"weights": {"w": np.ones(3, np.float32)}, "arrays": {}, "info": {}},
        "clients": {f"client-{i}": {} for i in range(5)},
        "ledger": {"releases": []},
        "client_ledger": {"unit": "client"},
        "records": [rec],
        "elapsed": 0.1,
    }
    save_checkpoint(out / "checkpoint.pt", state, config_fingerprint(cfg))
    return out


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _copy(src, dst):
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.is_file():
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


@pytest.mark.parametrize(
    "extra, match",
    [
        ([], "holds the results of another config"),
        (["--resume"], "holds the results of another config"),
    ],
)
def test_another_configs_results_are_never_overwritten(
    extra, match, finished_run, tmp_path, capsys, no_data
):
    out = _copy(finished_run, tmp_path / "run")
    before = _snapshot(out)
    assert main(_train(out, *_sets("method.rounds=1", "optim.lr=0.01"), *extra)) == 2
    err = _error(capsys)
    assert match in err and "'digits_smoke', 1 rounds" in err and "another --out" in err
    assert _snapshot(out) == before


def test_another_configs_checkpoint_is_never_replaced(finished_run, tmp_path, capsys, no_data):
    out = _copy(finished_run, tmp_path / "run")
    (out / "results.json").unlink()  # an interrupted run: only its checkpoint
    before = _snapshot(out)
    assert main(_train(out, *_sets("method.rounds=1", "optim.lr=0.01"))) == 2
    err = _error(capsys)
    assert "checkpoint" in err and "written by a different config" in err
    assert "could still resume from it" in err
    assert _snapshot(out) == before


def test_resume_without_a_checkpoint_is_an_error(tmp_path, capsys, no_data):
    assert main(_train(tmp_path / "o", "--resume")) == 2
    assert "--resume: there is no checkpoint to resume from in" in _error(capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "content, match",
    [
        (b"[]", "found a list"),
        (b'{"config": 5}', "found 'config': int"),
        (b"{not json", "is not JSON"),
    ],
)
def test_a_foreign_results_json_is_a_clear_error(content, match, tmp_path, capsys, no_data):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_bytes(content)
    assert main(_train(out)) == 2
    err = _error(capsys)
    assert match in err and "results.json" in err and "another --out" in err
    assert (out / "results.json").read_bytes() == content


def test_a_read_only_old_result_is_found_before_work(tmp_path, capsys, no_data):
    out = tmp_path / "run"
    out.mkdir()
    (out / "rounds.csv").write_text("round\n")
    (out / "rounds.csv").chmod(0o444)
    if os.access(out / "rounds.csv", os.W_OK):
        pytest.skip("running as root: read-only files are writable")
    assert main(_train(out)) == 2
    assert "rounds.csv' is read-only for this user" in _error(capsys)


def test_every_output_is_checked_before_work(tmp_path, capsys, no_data, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "rounds.csv").symlink_to(tmp_path / "nowhere")
    assert main(_train(out)) == 2
    assert "rounds.csv' is a dangling symlink" in _error(capsys)
    (out / "rounds.csv").unlink()
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 1000))
    assert main(_train(out)) == 2
    assert "MiB free on its disk, less than the" in _error(capsys)


@pytest.mark.parametrize("make", ["dangling", "loop"])
def test_out_under_a_bad_symlink_fails_before_work(make, tmp_path, capsys, no_data):
    link = tmp_path / "l"
    link.symlink_to(tmp_path / "nowhere" if make == "dangling" else link)
    assert main(_train(link / "run")) == 2
    assert ("is a dangling symlink" if make == "dangling" else "is a symlink loop") in _error(
        capsys
    )


def _inconsistent(finished_run, out, kind):
    src = finished_run / "checkpoint.pt"
    st = load_checkpoint(src)
    st["round"], st["records"] = 0, []  # a resumable checkpoint of round 0 of 1
    if kind == "empty records":
        st["round"], st["records"] = 1, [{}]
    else:
        st["clients"]["client-99"] = st["clients"].pop("client-0")
    out.mkdir()
    save_checkpoint(out / "checkpoint.pt", st, read_fingerprint(src))  # a valid digest


@pytest.mark.parametrize(
    "kind, match",
    [
        ("empty records", "the record of round 1 says round None"),
        ("unknown client", "client-99"),
    ],
)
def test_an_inconsistent_checkpoint_is_refused_before_it_is_rewritten(
    kind, match, finished_run, tmp_path, capsys, no_data
):
    out = tmp_path / "run"
    _inconsistent(finished_run, out, kind)
    before = (out / "checkpoint.pt").read_bytes()
    assert main(_train(out, "--resume", *_sets(*ONE_ROUND))) == 2
    err = _error(capsys)
    assert "holds an invalid state" in err and match in err
    assert (out / "checkpoint.pt").read_bytes() == before


def test_a_full_disk_names_the_file_and_leaves_the_run_unfinished(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as exc:
        atomic.atomic_write_bytes(tmp_path / "x.json", b"{}")
    assert exc.value.filename == str(tmp_path / "x.json") and exc.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # no temporary file left
    # results.json is written last: a failed write never leaves it saying "finished"
    from fedspectral import results as results_mod

    written = []
    real = results_mod.atomic_write_bytes

    def record(path, data):
        written.append(Path(path).name)
        return real(path, data)

    monkeypatch.undo()
    monkeypatch.setattr(results_mod, "atomic_write_bytes", record)
    res = {"config": {"name": "x"}, "records": []}
    results_mod.write_results(res, tmp_path / "r")
    assert written[-1] == "results.json"


# ----------------------------------------------------------------------------- demo
def test_demo_with_nothing_to_do_says_so(capsys):
    assert main(["demo", "--skip-pca", "--skip-fed"]) == 2
    assert "leave nothing to do" in _error(capsys, "demo")
    assert main(["demo", "--out", ""]) == 2  # was: the demo ran in the current folder
    assert "--out must be a non-empty path" in _error(capsys, "demo")


def test_demo_checks_every_run_before_any_work(tmp_path, capsys, monkeypatch):
    from fedspectral.experiments import pca_bench, train

    def no_work(*a, **k):
        raise AssertionError("work started before every run was checked")

    monkeypatch.setattr(train, "run_experiment", no_work)
    monkeypatch.setattr(pca_bench, "run_bench", no_work)
    monkeypatch.chdir(ROOT)  # the demo reads configs/
    assert main(["demo", "--out", str(tmp_path / "d"), "--epsilon", "1e-7"]) == 2
    err = _error(capsys, "demo")
    assert "FedSC, DP eps=1e-07 run" in err and "dp.epsilon=1e-07" in err
    assert not (tmp_path / "d").exists()


# ----------------------------------------------------------------------------- reproduce
def _reproduce(tmp_path, *argv, configs=CONFIGS):
    return main(
        [
            "reproduce",
            "fedsc",
            "--quick",
            "--quiet",
            "--configs",
            str(configs),
            "--out",
            str(tmp_path / "rep"),
            *argv,
        ]
    )


def test_reproduce_user_errors_follow_the_cli_contract(tmp_path, capsys):
    assert _reproduce(tmp_path, "--dry-run", "--report-only") == 2
    assert "exclude each other" in _error(capsys, "reproduce")
    assert main(["reproduce", "fedsc", "--quick", "--dry-run", "--out", ""]) == 2
    assert "--out must be a non-empty path" in _error(capsys, "reproduce")
    for methods, match in (
        ("fedsc,foo", "--methods: unknown method(s) ['foo']"),
        ("", "--methods names no method"),
    ):
        assert _reproduce(tmp_path, "--dry-run", "--methods", methods) == 2
        assert match in _error(capsys, "reproduce")
    assert _reproduce(tmp_path, "--dry-run", "--seeds", "1000000000") == 2
    err = _error(capsys, "reproduce")
    assert "--seeds=1000000000 is above its bound 100" in err and ALLOW_LARGE_ENV in err


def test_reproduce_names_a_broken_base_config(tmp_path, capsys):
    cfgs = tmp_path / "configs"
    cfgs.mkdir()
    (cfgs / "digits_smoke.yaml").write_text("name: x\nmethod: {rounds: 2\n")
    assert _reproduce(tmp_path, "--dry-run", configs=cfgs) == 2
    err = _error(capsys, "reproduce")
    assert "digits_smoke.yaml' is not valid YAML" in err and "line 3" in err


@pytest.mark.parametrize("content", [b"[]", b'{"config": 5}'])
def test_reproduce_treats_a_foreign_results_json_as_stale(content, tmp_path, capsys):
    from fedspectral.experiments import reproduce as rp

    plan = rp.build_plan("fedsc", "cpu", quick=True, configs=CONFIGS, out=tmp_path / "rep")
    d = plan.run_dir(plan.runs[0])
    d.mkdir(parents=True)
    (d / "results.json").write_bytes(content)
    assert rp.run_status(plan, plan.runs[0]) == "stale"
    assert _reproduce(tmp_path, "--dry-run") == 0
    assert "stale 1" in capsys.readouterr().out
    assert _reproduce(tmp_path) == 2
    assert "a results.json that is not a run's" in _error(capsys, "reproduce")
    assert (d / "results.json").read_bytes() == content


def test_reproduce_checks_every_run_before_any_trains(tmp_path, capsys, monkeypatch):
    from fedspectral.experiments import reproduce as rp
    from fedspectral.experiments import train

    def no_work(*a, **k):
        raise AssertionError("a run trained before every run was checked")

    monkeypatch.setattr(train, "run_experiment", no_work)
    plan = rp.build_plan("fedsc", "cpu", quick=True, configs=CONFIGS, out=tmp_path / "rep")
    last = plan.run_dir(plan.runs[-1])
    (last / "rounds.csv").mkdir(parents=True)  # only the last run cannot write its files
    assert _reproduce(tmp_path) == 2
    err = _error(capsys, "reproduce")
    assert f"run {plan.runs[-1].name}: " in err and "rounds.csv' is a directory" in err


# ----------------------------------------------------------------------------- pca-plan
def test_pca_plan_json_is_strict_json(capsys, monkeypatch):
    from fedspectral.experiments import pca_plan
    from fedspectral.pca import planner

    plan = planner.UsersPlan(
        "unreachable",
        None,
        "m",
        4,
        1,
        1.0,
        1e-5,
        1e-9,
        0.9,
        "analytic",
        "isometric",
        1.0,
        1.0,
        float("inf"),
        50,
        3,
        bracket=(1.0, float("inf")),
    )
    monkeypatch.setattr(planner, "required_users", lambda *a, **k: plan)
    assert (
        main(
            [
                "pca-plan",
                "--p",
                "4",
                "--k",
                "1",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--eigengap",
                "0.01",
                "--target-error",
                "1e-9",
                "--json",
            ]
        )
        == 2
    )
    out = capsys.readouterr().out
    d = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert d["n_rate"] is None and d["bracket"] == [1.0, None]
    assert d["non_finite"] == {"n_rate": "inf", "bracket[1]": "inf"}
    assert json.loads(pca_plan.plan_json(dataclasses.replace(plan, n_rate=2.0)))["non_finite"] == {
        "bracket[1]": "inf"
    }


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--seed", "-1"], "--seed must be >= 0, got -1"),
        (["--n-sim", "10000000"], "--n-sim=10000000 is above its bound 100,000"),
        (["--p", "100000"], "--p=100000 is above its bound 1,000"),
        (["--p", "1000", "--n-sim", "400"], "--n-sim x --p^2=400000000 is above its bound"),
    ],
)
def test_pca_plan_sizes_and_seed_are_checked_before_work(argv, match, capsys, monkeypatch):
    from fedspectral.pca import planner

    monkeypatch.setattr(planner, "required_users", lambda *a, **k: pytest.fail("work ran"))
    base = {"--p": "4", "--n-sim": "400"}
    for k, v in zip(argv[::2], argv[1::2], strict=True):
        base[k] = v
    args = [a for kv in base.items() for a in kv]
    assert (
        main(
            [
                "pca-plan",
                *args,
                "--k",
                "1",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--eigengap",
                "0.01",
                "--target-error",
                "0.1",
            ]
        )
        == 2
    )
    err = _error(capsys, "pca-plan")
    assert match in err


# ----------------------------------------------------------------------------- audit
@pytest.mark.parametrize(
    "argv, match",
    [
        (["ldp-pca", "--samples", "100000000"], "--samples=100000000 is above its bound"),
        (["dp-calr", "--samples", "10000000"], "--samples=10000000 is above its bound"),
        (
            ["ldp-pca", "--epsilon", "0.999", "--calibration", "classic", "--violation", "5"],
            (
                "holds for epsilon < 1 only, and the mechanism runs at epsilon x violation = "
                "0.999 x 5 = 4.995"
            ),
        ),
        (["dp-calr", "--calibration", ""], "--calibration must be one of"),  # not the default
        (
            ["ldp-pca", "--violation", "1e79"],
            (
                "epsilon x violation = 2 x 1e+79 = 2e+79, which cannot be calibrated "
                "(epsilon=2e+79 is outside the calibrated range"
            ),
        ),
        (["dp-calr", "--violation", "1e79"], "epsilon x violation = 2 x 1e+79"),
    ],
)
def test_audit_bad_sizes_and_settings_are_clear(argv, match, capsys):
    assert main(["audit", *argv]) == 2
    err = _error(capsys, "audit")
    assert match in err and "force" not in err


@pytest.mark.parametrize("make", ["directory", "dangling", "under-a-file"])
def test_audit_json_path_is_checked_before_the_audit(make, tmp_path, capsys, monkeypatch):
    from fedspectral.experiments import audit

    monkeypatch.setattr(audit, "audit", lambda *a, **k: pytest.fail("the audit ran"))
    target = {
        "directory": tmp_path,
        "dangling": tmp_path / "d" / "x.json",
        "under-a-file": tmp_path / "f" / "x.json",
    }[make]
    if make == "dangling":
        (tmp_path / "d").symlink_to(tmp_path / "nowhere")
    if make == "under-a-file":
        (tmp_path / "f").write_text("")
    assert main(["audit", "ldp-pca", "--samples", "200", "--json", str(target)]) == 2
    assert "--json" in _error(capsys, "audit")


# ----------------------------------------------------------------------------- pca-bench
def _bench_json(out, results):
    from fedspectral.experiments.pca_bench import BenchConfig
    from fedspectral.results import write_json

    cfg = BenchConfig.quick_config(out=str(out), only=("fig1",))
    out.mkdir()
    write_json(
        out / "pca_bench.json",
        {"config": dataclasses.asdict(cfg), "results": results, "timings": {}},
    )
    return (out / "pca_bench.json").read_bytes()


@pytest.mark.parametrize("csv", [None, "", "a,b\n1,2\n"])
def test_reanalyse_never_destroys_what_it_cannot_rebuild(csv, tmp_path, capsys):
    out = tmp_path / "pca"
    before = _bench_json(out, {"fig1": {"stored": "results"}})
    if csv is not None:
        (out / "fig1.csv").write_text(csv)
    assert main(["pca-bench", "--reanalyse", "--out", str(out)]) == 2
    err = _error(capsys, "pca-bench")
    assert "fig1.csv" in err and "nothing was written" in err
    assert (out / "pca_bench.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["pca_bench.json"] + ([] if csv is None else ["fig1.csv"])
    )


_HEAD = "experiment,panel,p,k,n,rep,sampling,eps,method,error,opendp_status\n"


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("fig1,k,40,5,1000,0,rows,0.5,ldp_correct,nan,\n", "and no opendp_status says why"),
        ("fig1,k,40,5,1000,0,rows,0.5,ldp_correct,-0.5,\n", "error -0.5 is not a subspace"),
        ("fig1,k,40,5,1000,0,rows,0.5,ldp_correct,inf,\n", "error inf is not a subspace"),
        ("fig1,k,40,5,1000,0,rows,0.5,mystery,0.5,\n", "unknown method 'mystery'"),
    ],
)
def test_reanalyse_refuses_rows_the_bench_cannot_have_written(row, needle, tmp_path, capsys):
    out = tmp_path / "pca"
    before = _bench_json(out, {"fig1": {"stored": "results"}})
    (out / "fig1.csv").write_text(_HEAD + row)
    assert main(["pca-bench", "--reanalyse", "--out", str(out)]) == 2
    err = _error(capsys, "pca-bench")
    assert needle in err and "fig1.csv' line 2" in err and "nothing was written" in err
    assert (out / "pca_bench.json").read_bytes() == before


def test_pca_bench_repeats_are_bounded(tmp_path, capsys):
    assert (
        main(
            ["pca-bench", "--quick", "--sparse-repeats", "1000000000", "--out", str(tmp_path / "o")]
        )
        == 2
    )
    err = _error(capsys, "pca-bench")
    assert "--sparse-repeats=1000000000 is above its bound 100" in err
    assert not (tmp_path / "o").exists()


def test_pca_bench_blames_the_file_not_an_option_it_was_not_given(tmp_path, capsys):
    out = tmp_path / "pca"
    out.mkdir()
    (out / "pca_bench.json").write_text(json.dumps({"config": {"only": []}}))
    assert main(["pca-bench", "--reanalyse", "--out", str(out)]) == 2
    assert "pca_bench.json' holds an invalid config" in _error(capsys, "pca-bench")


# ----------------------------------------------------------------------------- signals
def test_sigterm_unwinds_a_command_like_ctrl_c(tmp_path, capsys, monkeypatch):
    import signal

    from fedspectral.experiments import train

    cleaned = []

    def killed(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("SIGTERM did not interrupt the command")
        finally:
            cleaned.append(True)

    monkeypatch.setattr(train, "run_experiment", killed)
    before = signal.getsignal(signal.SIGTERM)
    assert main(_train(tmp_path / "o")) == 143
    assert cleaned == [True] and "fedspectral train: terminated" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_reproduce_empty_configs_is_named(tmp_path) -> None:
    """Found by the long fuzzing run (seed 5): ``--configs ''`` read as the current folder."""
    from fedspectral.experiments.reproduce.plan import build_plan

    with pytest.raises(ValueError, match="--configs '' is empty"):
        build_plan("fedsc", "cpu", quick=True, configs="", out=str(tmp_path / "r"))


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"overrides": ["=1"]}, r"override '=1': key ''"),
        ({"out": "AFILE"}, "exists and is not a folder"),
    ],
)
def test_reproduce_fuzz_seed5_cases(tmp_path, over, match) -> None:
    """Found by the long fuzzing run restricted to reproduce (seed 5): ``--set =1`` did not
    name the override; ``--out`` naming a file passed a dry run."""
    from fedspectral.experiments.reproduce.plan import build_plan

    (tmp_path / "AFILE").write_text("x")
    kw = {"out": str(tmp_path / "r"), **over}
    if kw["out"] == "AFILE":
        kw["out"] = str(tmp_path / "AFILE")
    with pytest.raises(ValueError, match=match):
        build_plan("fedsc", "cpu", quick=True, **kw)


def test_pca_plan_names_the_option_of_a_library_error(capsys) -> None:
    """Long fuzzing run, seed 6: ``--target-error 1e400 --model distributed`` said
    ``target_error must be finite`` without naming the option."""
    from fedspectral.cli import main

    code = main(
        [
            "pca-plan",
            "--p",
            "5",
            "--k",
            "1",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--eigengap",
            "0.01",
            "--target-error",
            "1e400",
            "--n-sim",
            "50",
            "--model",
            "distributed",
            "--json",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--target-error inf" in err and "target_error" in err
