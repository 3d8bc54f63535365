"""scripts/fedsc_sweep.py's data grid: issue 36's criterion per point, decided from the
runs' untrained (round 0) and final figures, and the grid on the validation split only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fedsc_sweep", ROOT / "scripts" / "fedsc_sweep.py")
sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sw)


def _run(point, method, knn0, probe0, knn, probe):
    return {
        "run": f"{point}/{method}",
        "method": method,
        "initial": {"knn_backbone": knn0, "linear_probe": probe0},
        "final": {"knn_backbone": knn, "linear_probe": probe},
        "cost": {"cpu_seconds": 120.0},
        "setup": {"images_per_client": 1200, "local_steps_per_round": 19},
    }


def test_criterion_needs_every_part_at_its_threshold():
    data = [
        # FedAvg+SC +3.0 KNN / +2.0 probe (the thresholds), central +5 / +5: holds
        _run("a", "fedavg_sc", 0.50, 0.60, 0.53, 0.62),
        _run("a", "central_sc", 0.50, 0.60, 0.55, 0.65),
        # the probe 0.1 short of +2: fails
        _run("b", "fedavg_sc", 0.50, 0.60, 0.60, 0.619),
        _run("b", "central_sc", 0.50, 0.60, 0.70, 0.70),
        # centralized SC +4.9 on the probe: fails although FedAvg+SC passes
        _run("c", "fedavg_sc", 0.50, 0.60, 0.60, 0.70),
        _run("c", "central_sc", 0.50, 0.60, 0.70, 0.649),
        # no centralized run yet: undecided unless FedAvg+SC already fails
        _run("d", "fedavg_sc", 0.50, 0.60, 0.60, 0.70),
        _run("e", "fedavg_sc", 0.50, 0.60, 0.40, 0.70),
        _run("e", "fedsc", 0.50, 0.60, 0.90, 0.90),  # FedSC is not part of it
    ]
    c = sw.criterion(data)
    assert c["a"] == {"fedavg_sc": True, "central_sc": True, "holds": True}
    assert c["b"]["fedavg_sc"] is False and c["b"]["holds"] is False
    assert c["c"] == {"fedavg_sc": True, "central_sc": False, "holds": False}
    assert c["d"] == {"fedavg_sc": True, "central_sc": None, "holds": None}
    assert c["e"]["holds"] is False
    rows = {r["run"]: r for r in sw.data_rows(data)}
    assert rows["e/fedavg_sc"]["delta_knn_backbone"] == pytest.approx(-10.0)
    table = sw.data_table(data)
    assert "| a | yes | yes | **holds** |" in table and "| e | no | — | no |" in table
    assert "| e | fedsc |" in table and "(not in it)" in table


def test_data_grid_chooses_on_the_validation_split_only():
    sw.GRID = "data"
    try:
        runs = sw.runs()
    finally:
        sw.GRID = "protocol"
    assert {m for _, m, _ in runs} == {"fedavg_sc", "central_sc", "fedsc"}
    for key, _, over in runs:
        assert "data.eval_split=val" in over, key
        fraction = [o for o in over if o.startswith("data.val_fraction=")]
        assert fraction and float(fraction[-1].split("=")[1]) > 0, key
        assert "eval.initial=true" in over and "eval.probe_solver=lbfgs" in over, key


def test_keep_partial_points_and_device(tmp_path, monkeypatch):
    """--keep carries a summary's runs the run folder lacks, in the grid's order; --points
    selects NAME or NAME/METHOD; --device goes into every run's overrides; an unfinished
    run is read from its checkpoint (round reached of those planned, curve so far)."""
    import json

    from fedspectral.fed.checkpoint import save_checkpoint

    monkeypatch.setattr(sw, "GRID", "data")
    monkeypatch.setattr(sw, "ONLY", ("d300/fedavg_sc", "d1200-w8"))
    monkeypatch.setattr(sw, "DEVICE", "cuda")
    keys = [k for k, _, _ in sw.runs()]
    assert keys == ["d300/fedavg_sc", "d1200-w8/fedavg_sc", "d1200-w8/central_sc"]
    assert all(o[-1] == "run.device=cuda" for _, _, o in sw.runs())
    monkeypatch.setattr(sw, "ONLY", ())
    monkeypatch.setattr(sw, "DEVICE", None)
    kept = _run("d1200", "fedavg_sc", 0.5, 0.6, 0.4, 0.5) | {"curve": []}
    (tmp_path / "old.json").write_text(json.dumps({"runs": [kept]}))
    assert [r["run"] for r in sw.summarise(tmp_path, tmp_path / "old.json")["runs"]] == [
        "d1200/fedavg_sc"
    ]
    d = tmp_path / "d1200-w8" / "fedavg_sc"
    d.mkdir(parents=True)
    meta = {
        "round": 12,
        "initial": {"knn_backbone": 0.6},
        "records": [{"round": 10, "knn_backbone": 0.5}, {"round": 11}, {"round": 12}],
    }
    save_checkpoint(d / "checkpoint.pt", meta, "fingerprint")
    (part,) = sw.partial_runs(tmp_path)
    assert (part["run"], part["round"], part["rounds"]) == ("d1200-w8/fedavg_sc", 12, 100)
    assert part["curve"] == [{"round": 10, "knn_backbone": 0.5}]
    assert "| d1200-w8 | fedavg_sc | 12 / 100 | 60.0 | 50.0 (10) | -10.0 |" in sw.partial_table(
        [part]
    )


def test_setup_counts_local_steps_as_the_local_loop_runs_them():
    """floor(n / min(B, n)) steps an epoch (fed/methods/_local.py drops the last partial
    batch): 300 images at batch 64 are 4 steps, not 5; a batch above n is one step."""

    def res(n, b, e=1):
        return {
            "config": {
                "optim": {"batch_size": b},
                "method": {"local_epochs": e, "clients_per_round": None, "rounds": 100},
                "model": {"width": 4},
                "run": {},
            },
            "data": {
                "client_sizes": {str(j): n for j in range(10)},
                "eval_split": "val",
                "eval_size": 2000,
                "bank_size": 6000,
            },
        }

    assert sw._setup(res(300, 64))["local_steps_per_round"] == 4
    assert sw._setup(res(1200, 256))["local_steps_per_round"] == 4
    assert sw._setup(res(300, 300))["local_steps_per_round"] == 1
    assert sw._setup(res(300, 3000, e=2))["local_steps_per_round"] == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grid", "data", "--out", "{tmp}", "--summarise", "{tmp}/p.md"], "writes a .json"),
        (["--grid", "data", "--out", "{tmp}", "--summarise", "{tmp}/p.json"], "no finished run"),
        (["--out", "{tmp}", "--summarise", "{tmp}/a.json", "--table", "{tmp}/b.md"], "exclude"),
        (["--plot", "{tmp}/a.png", "--from-summary", "{tmp}/none.json"], "not a --summarise"),
        (["--grid", "data", "--out", "{tmp}", "--keep", "{tmp}/k.json"], "--keep goes with"),
        (
            ["--grid", "data", "--out", "{tmp}", "--table", "{tmp}/t.md", "--points", "d300"],
            "--points selects runs",
        ),
        (["--out", "{tmp}", "--jobs", "0"], "--jobs must lie"),
    ],
)
def test_bad_arguments_are_one_line_errors_and_write_nothing(tmp_path, args, needle):
    import subprocess
    import sys

    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fedsc_sweep.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []
