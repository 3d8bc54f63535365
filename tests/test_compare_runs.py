"""scripts/compare_runs.py, the behaviour proof of refactors: it must say DIFFERENT for
runs that differ in one tensor element, one dtype, one checkpoint metadata field or one
results field, IDENTICAL for a copy (also when only wall-clock seconds differ), and its
run list must cover every registered method.  Small fake run folders, no training."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from fedspectral.fed.methods import ssl_methods

METHODS = ssl_methods()  # compare_runs covers the SSL pillar (the PCA methods: their own tests)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "scripts" / "compare_runs.py")
cr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cr)


def _write_run(run: Path, seconds: float = 1.5) -> None:
    run.mkdir(parents=True)
    results = {
        "method": "fedsc",
        "rounds_done": 2,
        "config": {"run": {"out": str(run)}},
        "final": {"knn_backbone": 0.75, "knn_projector": 0.705},
        "records": [{"round": 1, "seconds": seconds, "phases": {"share": {"bytes_up": 10}}}],
        "privacy": {"epsilon_rdp": 1.9999, "releases": 10},
        "versions": {"torch": "2.x"},
    }
    (run / "results.json").write_text(json.dumps(results))
    meta = {"round": 2, "elapsed": seconds, "ledger": [{"sigma": 3.25, "party": "client-0"}]}
    gen = torch.Generator().manual_seed(0)
    ckpt = {
        "format": 1,
        "fingerprint": "0123456789abcdef",
        "meta": json.dumps(meta),
        "tensors": {
            "server/conv.weight": torch.randn(4, 3, generator=gen),
            "server/A": torch.randn(6, dtype=torch.float64, generator=gen),
        },
        "digest": f"hash over the meta text with its seconds {seconds}",
    }
    torch.save(ckpt, run / "checkpoint.pt")


def _edit_ckpt(run: Path, fn) -> None:
    raw = torch.load(run / "checkpoint.pt", weights_only=True)
    fn(raw)
    torch.save(raw, run / "checkpoint.pt")


def _edit_results(run: Path, fn) -> None:
    res = json.loads((run / "results.json").read_text())
    fn(res)
    (run / "results.json").write_text(json.dumps(res))


@pytest.fixture
def pair(tmp_path):
    a, b = tmp_path / "before", tmp_path / "after"
    _write_run(a / "r")
    shutil.copytree(a, b)
    _edit_results(b / "r", lambda r: r["config"]["run"].update(out=str(b / "r")))
    return a, b


def _verdict(a: Path, b: Path, capsys) -> tuple[int, str]:
    rc = cr.main([str(a), str(b), "r"])
    return rc, capsys.readouterr().out


def test_a_copy_is_identical_even_with_other_wall_clock_seconds(pair, capsys):
    a, b = pair
    rc, out = _verdict(a, b, capsys)
    assert rc == 0 and out.splitlines()[-1] == "IDENTICAL", out
    assert "checkpoint 2 tensors torch.equal, 4 meta fields, 0 differ" in out
    shutil.rmtree(b / "r")
    _write_run(b / "r", seconds=99.0)  # records' seconds, meta elapsed, digest: ignored
    rc, out = _verdict(a, b, capsys)
    assert rc == 0 and out.splitlines()[-1] == "IDENTICAL", out


def _ulp(raw, key="server/A", i=3):
    t = raw["tensors"][key]
    t[i] = torch.nextafter(t[i], torch.tensor(float("inf"), dtype=t.dtype))


@pytest.mark.parametrize(
    "edit, where",
    [
        (_ulp, "ckpt /tensors/server/A 1 of 6 elements differ"),  # one element, one ulp
        (lambda raw: _ulp(raw, "server/conv.weight", (2, 1)), "ckpt /tensors/server/conv.weight"),
        (
            lambda raw: raw["tensors"].update(A64=raw["tensors"]["server/A"].float().double()),
            "ckpt /tensors/A64",
        ),  # a tensor only one side has
        (
            lambda raw: raw["tensors"].update(
                {"server/conv.weight": raw["tensors"]["server/conv.weight"].double()}
            ),
            "ckpt /tensors/server/conv.weight",
        ),  # same values, another dtype
        (
            lambda raw: raw.update(meta=raw["meta"].replace("3.25", "3.2500000000000004")),
            "ckpt /meta/ledger[0]/sigma",
        ),
    ],
)
def test_one_checkpoint_difference_is_found(pair, capsys, edit, where):
    a, b = pair
    _edit_ckpt(b / "r", edit)
    rc, out = _verdict(a, b, capsys)
    assert rc == 1 and out.splitlines()[-1] == "DIFFERENT", out
    assert "1 differ" in out.splitlines()[0] and where in out


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda r: r["final"].update(knn_projector=0.7050000000000001), "/final/knn_projector"),
        (
            lambda r: r["records"][0]["phases"]["share"].update(bytes_up=11),
            "/records[0]/phases/share/bytes_up",
        ),
        (lambda r: r["privacy"].pop("releases"), "/privacy/releases"),  # missing on one side
    ],
)
def test_one_results_difference_is_found(pair, capsys, edit, where):
    a, b = pair
    _edit_results(b / "r", edit)
    rc, out = _verdict(a, b, capsys)
    assert rc == 1 and out.splitlines()[-1] == "DIFFERENT", out
    assert "(1 differ;" in out and f"results {where}" in out


def test_a_missing_run_is_different(pair, capsys):
    a, b = pair
    (b / "r" / "checkpoint.pt").unlink()
    rc, out = _verdict(a, b, capsys)
    assert rc == 1 and "checkpoint.pt is missing" in out and out.endswith("DIFFERENT\n")


def test_the_run_list_covers_every_method_both_engines_dp_secure_and_resume():
    assert set(cr.METHODS) == set(METHODS)
    inproc = {cr.RUNS[m][0][0] for m in cr.METHODS}
    assert inproc == {f"method.name={m}" for m in METHODS}
    assert all(cr.RUNS[m][1] == "inprocess" for m in cr.METHODS)
    flower = [o for o, engine, _ in cr.RUNS.values() if engine == "flower"]
    assert () in flower and any("method.name=" in " ".join(o) for o in flower)
    both = [n for n, (o, _, _) in cr.RUNS.items() if set(cr.DP) | set(cr.SECURE) <= set(o)]
    assert {cr.RUNS[n][1] for n in both} == {"inprocess", "flower"}
    assert [n for n, r in cr.RUNS.items() if r[2]] == ["fedsc_resumed"]


def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cr.main(["--reuse-before", str(tmp_path), "--out", str(tmp_path / "o"), "--only", "x"])
    assert "invalid choice: 'x'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no-such-rev"):
        cr.main(["--before", "no-such-rev", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_a_reused_before_side_trained_with_other_settings_is_refused(tmp_path):
    cr._record_source(tmp_path, ["fedsc", "fedu"], "test")
    assert cr.stale_before(tmp_path, ["fedsc", "fedu", "fedx"]) == {}  # fedx: not recorded
    rec = json.loads((tmp_path / "SOURCE.json").read_text())
    rec["runs"]["fedu"]["set"].remove("eval.test_size=200")
    (tmp_path / "SOURCE.json").write_text(json.dumps(rec))
    stale = cr.stale_before(tmp_path, ["fedsc", "fedu"])
    assert list(stale) == ["fedu"] and "train it again" in stale["fedu"]
