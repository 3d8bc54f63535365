"""Bad input, round 3 (issue 39): one output rule for every writer, values parsed where
they enter, privacy settings that fail closed, checks before budget is spent, sizes
bounded where they enter, and one load-and-check of a run's state.  One test per
finding, unit-level (``tmp_path``, nothing trained); docs/bad_input.md lists each
finding and its test."""

from __future__ import annotations

import errno
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedspectral import atomic
from fedspectral.cli import main
from fedspectral.fed.validation import load_config, validate

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "digits_smoke.yaml"
sys.path.insert(0, str(ROOT / "scripts"))
from fuzz_cases_r3 import run_folder_files  # noqa: E402 (scripts/ on the path first)


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
def _make_run(out: Path, tamper: str = "") -> Path:
    """A run folder ``out`` (named ``run``) as ``fedspectral train`` leaves it after one
    round (its config.yaml and a checkpoint of the method's real, untrained weights), built
    without training by the fuzzing harness's :func:`run_folder_files`; ``tamper``
    (``"nan"``, ``"shape"``) edits the server's weights with the digest kept valid."""
    assert out.name == "run"
    for rel, data in run_folder_files(tamper).items():
        (out.parent / rel).parent.mkdir(parents=True, exist_ok=True)
        (out.parent / rel).write_bytes(data)
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
@pytest.mark.parametrize("tamper, match", [("nan", "non-finite value"), ("shape", "has shape (1,")])
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


# ----------------------------------------------------------------------------- full disks
@pytest.fixture
def full_disk(monkeypatch):
    """Every atomic write fails as on a full disk (``ENOSPC`` when its file is flushed)
    after ``allow[0]`` writes have succeeded."""
    allow = [0]
    real = atomic.os.fsync

    def fsync(fd):
        if allow[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        allow[0] -= 1
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    return allow


def test_audit_json_on_a_full_disk_fails_before_its_verdict(tmp_path, capsys, full_disk):
    out = tmp_path / "audit.json"
    assert main(["audit", "ldp-pca", "--samples", "2000", "--json", str(out)]) == 2
    cap = capsys.readouterr()
    assert "No space left on device" in cap.err and str(out) in cap.err
    assert "PASS" not in cap.out and "FAIL" not in cap.out  # no verdict printed
    assert list(tmp_path.iterdir()) == []


def _table_rows():
    rng = np.random.default_rng(0)
    return [
        {
            "experiment": "tables",
            "p": 60,
            "k": 3,
            "s": s,
            "n": n,
            "rep": 0,
            "sampling": "wishart",
            "eps": e,
            "method": m,
            "error": float(rng.uniform(0.1, 0.9)),
            "seconds": 0.001,
        }
        for n in (2000, 10**10)
        for s in (6, 12)
        for e in (1.0, float("inf"))
        for m in ("alg1", "alg2", "alg1_paper", "alg2_paper")
    ]


@pytest.mark.parametrize("allow", [2])
def test_pca_bench_on_a_full_disk_leaves_nothing_behind(allow, tmp_path, monkeypatch, full_disk):
    from fedspectral.experiments.pca_bench import BenchConfig
    from fedspectral.experiments.pca_bench import cli as bench_cli

    monkeypatch.setattr(
        bench_cli, "_run_tasks", lambda cfg, tasks, progress: {"tables": _table_rows()}
    )
    cfg = BenchConfig.quick_config(out=str(tmp_path / "pca"), only=("tables",))
    full_disk[0] = allow  # the first `allow` files are written, the next one fails
    with pytest.raises(OSError, match="No space left"):
        bench_cli.run_bench(cfg, progress=False)
    assert not (tmp_path / "pca").exists() or list((tmp_path / "pca").iterdir()) == []
    full_disk[0] = 10**6
    bench_cli.run_bench(cfg, progress=False)  # and with room, every file is written
    assert {p.name for p in (tmp_path / "pca").iterdir()} >= {
        "tables.csv",
        "pca_bench.json",
        "README_table.md",
    }


@pytest.mark.parametrize(
    "edit, match",
    [
        ({"fig1_k": 5}, "fig1_k must be a list of integers, got 5"),
        ({"delta": [1e-4]}, "delta must be a number, got (0.0001,)"),
        ({"delta": "small"}, "delta must be a number, got 'small'"),
    ],
)
def test_pca_bench_reanalyse_names_a_bad_stored_setting(edit, match, tmp_path, capsys):
    import dataclasses

    from fedspectral.experiments.pca_bench import BenchConfig
    from fedspectral.results import write_json

    out = tmp_path / "pca"
    cfg = dataclasses.asdict(BenchConfig.quick_config(out=str(out), only=("fig1",)))
    write_json(out / "pca_bench.json", {"config": {**cfg, **edit}, "results": {}, "timings": {}})
    before = _snapshot(out)
    assert main(["pca-bench", "--reanalyse", "--out", str(out)]) == 2
    err = _error(capsys, "pca-bench")
    assert match in err and "pca_bench.json" in err and "not iterable" not in err
    assert _snapshot(out) == before


# ----------------------------------------------------------------------------- reproduce
def _rep(out, *argv):
    return main(
        [
            "reproduce",
            "fedsc",
            "--quiet",
            "--configs",
            str(ROOT / "configs"),
            "--out",
            str(out),
            *argv,
        ]
    )


def _quick_report(out, finished=4, planned=4, **extra):
    out.mkdir(parents=True, exist_ok=True)
    (out / "REPORT.md").write_text("# the finished report\n")
    tables = {
        "scale": "quick",
        "tier": "core",
        "overrides": [],
        "runs_planned": planned,
        "runs_finished": finished,
        **extra,
    }
    (out / "tables.json").write_text(json.dumps(tables))


def test_reproduce_report_only_on_an_empty_folder_is_an_error(tmp_path, capsys):
    assert _rep(tmp_path / "rep", "--quick", "--report-only") == 2
    assert "holds no finished run of this plan" in _error(capsys, "reproduce")
    assert not (tmp_path / "rep").exists() or list((tmp_path / "rep").iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [[], ["--quick", "--set", "optim.lr=0.01"], ["--quick", "--tier", "full"]],
    ids=["forgot-quick", "added-set", "tier-full"],
)
def test_reproduce_never_replaces_a_finished_report_with_a_pending_one(argv, tmp_path, capsys):
    out = tmp_path / "rep"
    _quick_report(out)
    before = _snapshot(out)
    assert _rep(out, *argv, "--report-only") == 2
    assert "--report-only" in _error(capsys, "reproduce")
    assert _snapshot(out) == before


def test_reproduce_report_goes_beside_a_report_it_must_keep(tmp_path):
    from fedspectral.experiments.reproduce import build_plan
    from fedspectral.experiments.reproduce.folder import report_folder

    out = tmp_path / "rep"
    quick = build_plan("fedsc", "cpu", quick=True, configs=ROOT / "configs", out=out)
    n = len(quick.runs)
    _quick_report(out, finished=n, planned=n)
    assert report_folder(quick, n) == (out, None)  # the same plan, as many runs: replaced
    folder, why = report_folder(quick, n - 1)  # fewer finished runs: beside
    assert folder == out / "report-quick-core" and "smaller" in why
    cpu = build_plan("fedsc", "cpu", configs=ROOT / "configs", out=out)
    folder, why = report_folder(cpu, 3)  # another plan, mostly pending: beside
    assert folder == out / "report-cpu-core" and "another plan" in why
    assert report_folder(cpu, len(cpu.runs)) == (out, None)  # another plan, complete


def test_reproduce_summary_json_that_is_a_folder_is_named_before_any_write(tmp_path, capsys):
    out = tmp_path / "rep"
    _quick_report(out)
    (out / "summary.json").mkdir()
    before = _snapshot(out)
    assert _rep(out, "--quick", "--report-only") == 2
    assert "summary.json' is a directory" in _error(capsys, "reproduce")
    assert _snapshot(out) == before


# ----------------------------------------------------------------------------- 3. groups
def _rows(n=300, p=4, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, p))
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))


def test_mixed_kinds_of_holder_labels_are_refused():
    from fedspectral.pca import DistributedDPPCA

    with pytest.raises(TypeError, match=r"mixes holder labels of kinds \['int', 'str'\]"):
        DistributedDPPCA(2, 1.0, 1e-5, random_state=0).fit(_rows(), groups=[1, "1", 2, "2"] * 75)
    groups = np.array([1, "1", 2, "2"] * 75, dtype=object)
    with pytest.raises(TypeError, match="would merge into one holder"):
        DistributedDPPCA(2, 1.0, 1e-5, random_state=0).fit(_rows(), groups=groups)
    # one kind is fine: four holders stay four
    est = DistributedDPPCA(2, 1.0, 1e-5, random_state=0).fit(
        _rows(), groups=["a", "b", "c", "d"] * 75
    )
    assert est.holders_ == ["a", "b", "c", "d"]


def test_holder_labels_passed_positionally_are_refused():
    from fedspectral.pca import DistributedDPPCA

    g = np.arange(300) % 3
    with pytest.raises(ValueError, match="y must be None.*groups="):
        DistributedDPPCA(2, 1.0, 1e-5, random_state=0).fit(_rows(), g)
    with pytest.raises(ValueError, match="groups is required"):
        DistributedDPPCA(2, 1.0, 1e-5, random_state=0).fit(_rows())
    with pytest.raises(ValueError, match="one_holder=True"):
        DistributedDPPCA(2, 1.0, 1e-5, one_holder=True).fit(_rows(), groups=g)
    assert DistributedDPPCA(2, 1.0, 1e-5, one_holder=True, random_state=0).fit(
        _rows()
    ).holders_ == ["0"]


@pytest.mark.filterwarnings("ignore:The groups parameter is ignored by KFold")
def test_grid_search_fits_every_candidate_with_the_holders_or_refuses():
    import sklearn
    from sklearn.model_selection import GridSearchCV, KFold

    from fedspectral.pca import DistributedDPPCA

    X, g = _rows(300), np.arange(300) % 3
    seen = []

    def scorer(est, X, y=None):
        seen.append(list(est.holders_))
        return float(est.explained_variance_.sum())

    search = GridSearchCV(
        DistributedDPPCA(1, 1.0, 1e-5, random_state=0),
        {"n_components": [1, 2]},
        cv=KFold(2),
        scoring=scorer,
        refit=False,
    )
    with pytest.raises(ValueError, match="groups is required"):  # without routing: refused
        search.fit(X, groups=g)
    with sklearn.config_context(enable_metadata_routing=True):
        search.fit(X, groups=g)
    assert len(seen) == 4 and all(h == ["0", "1", "2"] for h in seen)


@pytest.mark.parametrize(
    "kw", [{"min_contributors": 3}, {"colluders": 1}, {"secure_sum": lambda m: (0, [])}]
)
def test_secure_sum_settings_without_secure_aggregation_are_refused(kw):
    from fedspectral.pca import DistributedDPPCA

    est = DistributedDPPCA(2, 1.0, 1e-5, secure_aggregation=False, random_state=0, **kw)
    with pytest.raises(ValueError, match="secure_aggregation=False.*no effect"):
        est.fit(_rows(), groups=np.arange(300) % 3)
    assert not hasattr(est, "ledger_")


_PLAN = ["pca-plan", "--p", "10", "--k", "2", "--epsilon", "1", "--delta", "1e-5"]
_PLAN += ["--eigengap", "0.05", "--target-error", "0.3", "--n-sim", "50"]


def test_pca_plan_names_the_option_given_not_one_left_out(capsys):
    assert main([*_PLAN, "--min-contributors", "3"]) == 2
    err = _error(capsys, "pca-plan")
    assert "--min-contributors 3" in err and "None" not in err


def test_pca_plan_never_plans_fewer_users_than_holders(capsys):
    from fedspectral.pca.planner import required_users

    kw = {"target_error": 0.3, "eigengap": 0.05, "n_sim": 50, "random_state": 0}
    plan = required_users(10, 2, 1.0, 1e-5, model="distributed", holders=10**6, **kw)
    assert plan.status == "ok" and plan.n >= 10**6
    assert main([*_PLAN, "--model", "distributed", "--holders", str(10**21)]) == 2
    assert "--holders" in _error(capsys, "pca-plan")


# ----------------------------------------------------------------------------- 4. budget
@pytest.mark.parametrize("make", ["nan", "norm"])
@pytest.mark.parametrize("estimator", ["LocalDPPCA", "LocalDPSparsePCA"])
def test_a_refused_fit_spends_nothing_of_the_budget(make, estimator):
    from fedspectral import pca
    from fedspectral.privacy import BudgetAccountant

    X = _rows(200, 6)
    if make == "nan":
        X[17, 2] = np.nan
    else:
        X[17] *= 3.0
    acc = BudgetAccountant(epsilon=5.0, delta=1e-5)
    cls = getattr(pca, estimator)
    est = cls(2, 1.0, 1e-5, norm_policy="raise", accountant=acc, random_state=0)
    with pytest.raises(ValueError, match="row 17"):
        est.fit(X)
    assert acc.spent() == 0.0 and acc.remaining() == 5.0


def test_an_aggregator_rebuilt_from_its_fields_is_checked_like_from_dict():
    import dataclasses

    from fedspectral.pca import CovarianceAggregator

    a = CovarianceAggregator(3).add_sum(np.arange(6.0), 4)
    b = CovarianceAggregator(**dataclasses.asdict(a))
    assert b == a and b.count == 4 and np.array_equal(b.covariance(), a.covariance())
    for bad, match in (
        ({"_sum": np.ones(5), "_count": 1}, "'_sum' must hold 6 finite floats"),
        ({"_sum": np.full(6, np.nan), "_count": 1}, "'_sum' must hold 6 finite floats"),
        ({"_sum": np.ones(6), "_count": -1}, "_count must be >= 0"),
        ({"_count": 3}, "needs its _sum"),
    ):
        with pytest.raises(ValueError, match=re.escape(match)):
            CovarianceAggregator(3, **bad)


# ----------------------------------------------------------------------------- 5. sizes
@pytest.mark.parametrize(
    "sets, match",
    [
        (["run.threads=100000"], "config run.threads=100000 is above its bound 256"),
        (["method.params.share_views=1000000"], "share_views=1000000 is above its bound 64"),
        (["eval.probe_epochs=100000000"], "eval.probe_epochs=100000000 is above its bound"),
        (
            ["method.name=fedca", "method.params.base_epochs=10000000"],
            "base_epochs=10000000 is above its bound 10,000",
        ),
    ],
)
def test_sizes_in_a_config_are_bounded_where_they_enter(sets, match, tmp_path, monkeypatch):
    from fedspectral.checks import ALLOW_LARGE_ENV

    monkeypatch.delenv(ALLOW_LARGE_ENV, raising=False)
    with pytest.raises(ValueError, match=re.escape(match)) as exc:
        validate(load_config(SMOKE, sets))
    assert ALLOW_LARGE_ENV in str(exc.value)


def _idx_gz(path, dims, body, magic):
    import gzip

    head = magic.to_bytes(4, "big")[:3] + bytes([len(dims)])
    head += b"".join(int(d).to_bytes(4, "big") for d in dims)
    path.write_bytes(gzip.compress(head + body))


def test_an_idx_file_is_inflated_only_up_to_its_header(tmp_path):
    from fedspectral.data.datasets import _read_idx_gz, load_dataset

    bomb = tmp_path / "bomb.gz"
    _idx_gz(bomb, [60000, 1000, 1000], bytes(1 << 20), 2051)  # declares 60 GB
    with pytest.raises(ValueError, match=r"declares \[60000, 1000, 1000\].*above"):
        _read_idx_gz(bomb, 2051)
    long = tmp_path / "long.gz"
    _idx_gz(long, [2, 2, 2], bytes(1 << 20), 2051)  # 8 values declared, 1 MiB follow
    with pytest.raises(ValueError, match="more than the 8 values"):
        _read_idx_gz(long, 2051)
    # an empty label file names the file, not "labels is empty"
    root = tmp_path / "fm"
    root.mkdir()
    _idx_gz(root / "train-images-idx3-ubyte.gz", [0, 28, 28], b"", 2051)
    _idx_gz(root / "train-labels-idx1-ubyte.gz", [0], b"", 2049)
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz: its idx header declares no"):
        load_dataset("fashion_mnist", "train", root)


@pytest.mark.parametrize(
    "make, match",
    [
        ("npz", "is a .npz archive"),
        ("text", "is no .npy array"),
        ("shape", "expected an (n, 4) array with n >= 1, got shape (3,)"),
        ("empty", "got shape (0, 4)"),
        ("folder", "is a directory"),
    ],
)
def test_a_users_file_is_parsed_where_it_enters(make, match, tmp_path):
    from fedspectral.pca.real_data import load_user_rows

    f = tmp_path / "users.npy"
    if make == "npz":
        np.savez(tmp_path / "u.npz", X=np.zeros((3, 4)))
        f = tmp_path / "u.npz"
    elif make == "text":
        f.write_text("1,2,3,4\n")
    elif make == "shape":
        np.save(f, np.zeros(3))
    elif make == "empty":
        np.save(f, np.zeros((0, 4)))
    else:
        f.mkdir()
    with pytest.raises(ValueError, match=re.escape(match)) as exc:
        load_user_rows(f, 4, "node config pca-data")
    assert "node config pca-data" in str(exc.value) and str(f) in str(exc.value)
    np.save(tmp_path / "ok.npy", np.ones((3, 4)))
    assert load_user_rows(tmp_path / "ok.npy", 4, "x").shape == (3, 4)


@pytest.mark.parametrize(
    "method, key",
    [("fedx", "temperature"), ("fedx", "relational_temperature"), ("fedca", "temperature")],
)
def test_a_temperature_that_would_overflow_the_logits_is_refused_at_entry(method, key):
    with pytest.raises(
        ValueError,
        match=rf"method.params.{key}=1e-300: must be a finite number >= 0.001 \(the logits",
    ):
        validate(load_config(SMOKE, [f"method.name={method}", f"method.params.{key}=1e-300"]))


def test_a_knn_k_above_the_bank_is_refused_at_entry():
    # found by the harness: 10**7 neighbours trained and reported a vote over every image
    with pytest.raises(ValueError, match="eval.knn_k=10000000: more neighbours than the"):
        validate(load_config(SMOKE, ["eval.knn_k=10000000"]))
    with pytest.raises(ValueError, match="the 50 images of the KNN bank"):
        validate(load_config(SMOKE, ["eval.bank_size=50", "eval.knn_k=51"]))
    validate(load_config(SMOKE, ["eval.bank_size=50", "eval.knn_k=50"]))


@pytest.mark.parametrize("name", ["tables.csv", "tables_sparse.png", "pca_bench.json"])
def test_pca_bench_checks_each_file_it_writes_before_any_work(name, tmp_path, capsys, monkeypatch):
    from fedspectral.experiments.pca_bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "_run_tasks", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "pca" / name).mkdir(parents=True)
    argv = ["pca-bench", "--quick", "--only", "tables", "--no-progress", "--out"]
    assert main([*argv, str(tmp_path / "pca")]) == 2
    assert f"{name}' is a directory" in _error(capsys, "pca-bench")
