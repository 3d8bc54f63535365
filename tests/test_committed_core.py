"""The committed 10-seed core tier (``docs/results/fedsc_cpu/core``) says what its numbers
say: every row has the same ten seeds (paired across methods), each run is named once by
(setting, method, variant, seed, dp), and the report's central verdicts are SciPy's paired
t intervals of the per-run numbers in ``summary.json``, recomputed here independently of
the report's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats

CORE = Path(__file__).resolve().parents[1] / "docs" / "results" / "fedsc_cpu" / "core"
SETTINGS = {"10x1-10/10": "10x1 cls, 10/10", "10x1-2/10": "10x1 cls, 2/10"}
STABLE = "tracked+server_lr0.5"


@pytest.fixture(scope="module")
def runs():
    return json.loads((CORE / "summary.json").read_text())["runs"]


def _finals(runs, setting, method, variant, metric="linear_probe"):
    return {
        r["seed"]: 100 * r["final"][metric]
        for r in runs
        if (r["setting"], r["method"], r["variant"], r["dp"]) == (setting, method, variant, None)
    }


def test_every_row_has_the_same_ten_seeds_and_every_run_one_name(runs):
    keys = [(r["setting"], r["method"], r["variant"], r["seed"], json.dumps(r["dp"])) for r in runs]
    assert len(keys) == len(set(keys))
    rows = {
        "10x1-10/10": [
            ("untrained", "main"),
            ("central_sc", "main"),
            ("fedavg_sc", "main"),
            ("fedsc", "main"),
            ("fedsc", STABLE),
        ],
        "10x1-2/10": [
            ("untrained", "main"),
            ("fedavg_sc", "main"),
            ("fedsc", "main"),
            ("fedsc", STABLE),
        ],
    }
    for setting, want in rows.items():
        for method, variant in want:
            assert set(_finals(runs, setting, method, variant)) == set(range(10)), (
                setting,
                method,
                variant,
            )
    assert {r["setting"] for r in runs} == set(SETTINGS)
    assert all(r["dp"] is None for r in runs)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize(
    ("a", "b", "label"),
    [
        (("fedsc", "main"), ("fedavg_sc", "main"), "FedSC − FedAvg+SC"),
        (("fedsc", STABLE), ("fedavg_sc", "main"), "FedSC, stable − FedAvg+SC"),
        (("fedsc", STABLE), ("fedsc", "main"), "FedSC, stable − FedSC"),
        (("fedsc", "main"), ("untrained", "main"), "FedSC − untrained"),
    ],
)
def test_the_reported_intervals_are_scipys_paired_t_intervals(runs, setting, a, b, label):
    x, y = _finals(runs, setting, *a), _finals(runs, setting, *b)
    seeds = sorted(x)
    d = [x[s] - y[s] for s in seeds]
    ci = stats.ttest_rel([x[s] for s in seeds], [y[s] for s in seeds]).confidence_interval(0.95)
    mean = sum(d) / len(d)
    line = (
        f"{SETTINGS[setting]}, linear_probe: {label} = {mean:+.2f} "
        f"[95 % CI {ci.low:+.2f}, {ci.high:+.2f}]"
    )
    report = (CORE / "REPORT.md").read_text()
    tables = json.loads((CORE / "tables.json").read_text())
    evidence = [e for o in tables["observations"] for e in o.get("evidence", [])]
    assert any(line in e for e in evidence), line
    assert line in report
    # no claim is said to hold on an interval that covers 0
    verdicts = {e.split(" -> ")[1] for e in evidence if e.startswith(line)}
    if ci.low <= 0 <= ci.high:
        assert verdicts and "holds" not in verdicts


def test_the_demo_prints_the_core_tier_beside_its_short_run(runs, monkeypatch):
    """``fedspectral demo`` (run from the repository) takes the committed core tier when
    it exists: ten seeds, the means of its main runs (no stable-FedSC row)."""
    from fedspectral.experiments.demo import committed_summary, committed_table

    monkeypatch.chdir(CORE.parents[3])
    assert committed_summary().resolve() == CORE / "summary.json"
    table, seeds = committed_table()
    assert seeds == 10
    probe = _finals(runs, "10x1-10/10", "fedsc", "main")  # in %
    assert 100 * table["fedsc"]["linear_probe"] == pytest.approx(sum(probe.values()) / 10)
