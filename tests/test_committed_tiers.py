"""The committed mechanism tiers (``docs/results/fedsc_tiers``) say what their numbers say:
every row of a tier has the same seeds (paired across methods), each run is named once,
and every verdict README.md quotes is SciPy's paired t interval of the per-run numbers in
the tier's ``summary.json``, recomputed here independently of the project's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
TIERS = REPO / "docs" / "results" / "fedsc_tiers"
README = (REPO / "README.md").read_text(encoding="utf-8")
LABELS = {
    "FedSC − FedAvg+SC": (("fedsc", "main"), ("fedavg_sc", "main")),
    "FedSC − untrained network": (("fedsc", "main"), ("untrained", "main")),
    "FedAvg+SC − untrained network": (("fedavg_sc", "main"), ("untrained", "main")),
    "centralized SC (same steps) − FedSC": (("central_sc", "main"), ("fedsc", "main")),
}


def _runs(tier):
    return json.loads((TIERS / tier / "summary.json").read_text(encoding="utf-8"))["runs"]


def _finals(runs, setting, method, variant, metric):
    return {
        r["seed"]: 100 * r["final"][metric]
        for r in runs
        if (r["setting"], r["method"], r["variant"], r["dp"]) == (setting, method, variant, None)
    }


def _fmt(x):
    return f"{x:+.2f}".replace("-", "−")


def test_lowdrift_rows_are_paired_by_seed_and_every_run_named_once():
    runs = _runs("lowdrift")
    keys = [(r["setting"], r["method"], r["variant"], r["seed"], json.dumps(r["dp"])) for r in runs]
    assert len(keys) == len(set(keys))
    assert {r["setting"] for r in runs} == {"10x1-lowdrift"}
    seeds = set(_finals(runs, "10x1-lowdrift", "fedsc", "main", "linear_probe"))
    assert len(seeds) >= 2
    for method in ("untrained", "fedavg_sc"):
        assert set(_finals(runs, "10x1-lowdrift", method, "main", "linear_probe")) >= seeds


def _readme_rows():
    """``{label: (knn cell, probe cell, seeds)}`` of README's low-drift verdict table."""
    start = README.index("<!-- lowdrift verdicts -->")
    rows = {}
    for line in README[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in LABELS:
            rows[cells[0]] = (cells[1], cells[2], int(cells[3]))
    return rows


@pytest.mark.parametrize("label", sorted(LABELS))
def test_readme_quotes_scipys_paired_t_intervals(label):
    rows = _readme_rows()
    assert label in rows, f"README's low-drift table lacks {label!r}"
    runs = _runs("lowdrift")
    (a, b), (knn, probe, n) = LABELS[label], rows[label]
    for metric, quoted in (("knn_backbone", knn), ("linear_probe", probe)):
        x = _finals(runs, "10x1-lowdrift", *a, metric)
        y = _finals(runs, "10x1-lowdrift", *b, metric)
        seeds = sorted(set(x) & set(y))
        assert len(seeds) == n
        xs, ys = [x[s] for s in seeds], [y[s] for s in seeds]
        ci = stats.ttest_rel(xs, ys).confidence_interval(0.95)
        mean = sum(u - v for u, v in zip(xs, ys, strict=True)) / len(seeds)
        assert quoted == f"{_fmt(mean)} [{_fmt(ci.low)}, {_fmt(ci.high)}]", (label, metric)


#: the hetero tier's rows in README: label -> setting
HETERO = {
    "Dirichlet 0.1, 10 clients": "dir0.1",
    "Dirichlet 0.5, 10 clients": "dir0.5",
    "5 clients × 2 classes": "5x2",
}


def _cell(x, y, metric):
    seeds = sorted(set(x) & set(y))
    xs, ys = [x[s] for s in seeds], [y[s] for s in seeds]
    ci = stats.ttest_rel(xs, ys).confidence_interval(0.95)
    mean = sum(u - v for u, v in zip(xs, ys, strict=True)) / len(seeds)
    return f"{_fmt(mean)} [{_fmt(ci.low)}, {_fmt(ci.high)}]", len(seeds)


def test_hetero_rows_are_paired_by_seed_and_every_run_named_once():
    runs = _runs("hetero")
    keys = [(r["setting"], r["method"], r["variant"], r["seed"], json.dumps(r["dp"])) for r in runs]
    assert len(keys) == len(set(keys))
    assert {r["setting"] for r in runs} == set(HETERO.values())


def _check_fedsc_row(doc, marker, label, tier, setting):
    """The row ``label`` of the table after ``marker`` in ``doc``: FedSC − FedAvg+SC and
    FedSC − untrained on KNN h and the probe, each SciPy's paired t interval over the seeds
    both rows have, and the seeds."""
    start = doc.index(marker)
    row = next(
        [c.strip() for c in line.strip("|").split("|")]
        for line in doc[start:].splitlines()
        if line.startswith(f"| {label} |")
    )
    runs = _runs(tier)
    quoted = iter(row[1:5])
    seeds = set()
    for other in ("fedavg_sc", "untrained"):
        for metric in ("knn_backbone", "linear_probe"):
            x = _finals(runs, setting, "fedsc", "main", metric)
            y = _finals(runs, setting, other, "main", metric)
            text, n = _cell(x, y, metric)
            assert next(quoted) == text, (label, other, metric)
            seeds.add(n)
    assert int(row[5]) == max(seeds)


@pytest.mark.parametrize("label", sorted(HETERO))
def test_readme_quotes_the_hetero_tiers_paired_t_intervals(label):
    """README's heterogeneity table, per setting (:func:`_check_fedsc_row`)."""
    _check_fedsc_row(README, "<!-- hetero verdicts -->", label, "hetero", HETERO[label])


DRIFT = {"1": "10x1-lowdrift", "2": "10x1-steps2", "4": "10x1-protocol", "5": "10x1-steps5"}
DRIFT_DOC = (TIERS / "README.md").read_text(encoding="utf-8")


def test_drift_rows_are_paired_by_seed_and_every_run_named_once():
    runs = _runs("drift")
    keys = [(r["setting"], r["method"], r["variant"], r["seed"], json.dumps(r["dp"])) for r in runs]
    assert len(keys) == len(set(keys))
    assert {r["setting"] for r in runs} == set(DRIFT.values())
    for s in DRIFT.values():  # at least 5 paired seeds a point (the bar)
        both = set(_finals(runs, s, "fedsc", "main", "knn_backbone")) & set(
            _finals(runs, s, "fedavg_sc", "main", "knn_backbone")
        )
        assert len(both) >= 5, s


@pytest.mark.parametrize("steps", sorted(DRIFT))
def test_the_drift_curve_quotes_scipys_paired_t_intervals(steps):
    """The results page's drift table, per point (:func:`_check_fedsc_row`)."""
    _check_fedsc_row(DRIFT_DOC, "<!-- drift verdicts -->", steps, "drift", DRIFT[steps])
