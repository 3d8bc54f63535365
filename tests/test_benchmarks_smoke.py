"""`make bench`'s scripts run to the end at small sizes.

The benchmarks are not timed in tests (their verdicts depend on the machine), but a
script that crashes prints no ratio at all: benchmarks/fed_perf.py read the method's
parameters as a dict and its round record as a dict for several sessions after both
became typed objects, and nothing noticed. Each script runs here with its smoke sizes
and must write its JSON with every ratio it reports; a timing verdict of FAIL (exit 1
by design) is accepted, a traceback is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, tmp_path: Path) -> dict:
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_fed_perf_quick_reports_every_ratio(tmp_path):
    r = _run("fed_perf.py", "--quick", "--repeats", "1", tmp_path=tmp_path)
    assert r["train_phase"]["ratio"] > 0
    assert r["share_phase"]["ratio"] > 0
    assert r["phase_ratio_ours"] > 0
    assert {row["method"] for row in r["rounds"]} >= {"fedsc", "fedavg_sc"}
    assert all(row["round_s"] > 0 and row["bytes_up"] > 0 for row in r["rounds"])


@pytest.mark.slow
def test_pca_perf_quick_reports_every_ratio(tmp_path):
    r = _run(
        "pca_perf.py",
        "--quick",
        "--repeats",
        "2",
        "--fps-repeats",
        "1",
        "--parts",
        "1",
        "3",
        tmp_path=tmp_path,
    )
    assert r["aggregate"]["ratio_median"] > 0
    for p in ("60", "100"):
        sm = r["fps"]["summary"][p]
        assert sm["speedup_cpu_min"] > 0
        # the measuring stick of the objective is certified (duality gap of the reference)
        assert sm["reference_duality_gap_max"] <= 1e-8
        assert sm["rel_objective_gap_admm_max"] < 1e-3
