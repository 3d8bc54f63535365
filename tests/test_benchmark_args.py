"""Issue 48 (finding 8/9): the benchmark scripts refuse a bad argument as argparse does.

Each script of ``benchmarks/`` printed a traceback on a bad argument (``--repeats 0``: a
``StatisticsError`` after the setup; ``--clients 0``: a ``ZeroDivisionError``), ran on
one it cannot mean (``--repeats -1`` ran every regime with no repeat and wrote NaN
tables; ``--out`` a folder failed after all the work) or took one that does nothing
(``--repeats`` with ``--redraw``, ``--n`` with ``--quick``).  Now every such argument is
exit status 2 with one ``error:`` line naming the option and the value, before any work
and before any file is written (``benchmarks/_args.py``).  The scripts' ``main`` runs in
this process: an argument error never reaches the work.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import _args  # noqa: E402

_MODULES: dict[str, object] = {}


def _script(name: str):
    if name not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULES[name] = mod
    return _MODULES[name]


# (script, argv, what the one error line must contain)
CASES = [
    ("augment_perf", ["--reps", "-1"], ["--reps", "'-1'"]),
    ("augment_perf", ["--threads", "99999"], ["--threads", "'99999'"]),
    ("fed_perf", ["--repeats", "0"], ["--repeats", "'0'"]),
    ("fed_perf", ["--out", "adir"], ["--out", "'adir'"]),
    ("fedsc_accuracy", ["--jobs", "0"], ["--jobs", "'0'"]),
    ("fedsc_accuracy", ["--table-only", "--threads", "1"], ["--threads", "--table-only"]),
    ("fedsc_accuracy", ["--val-fraction", "nan"], ["--val-fraction", "'nan'"]),
    ("fedsc_accuracy", ["--val-fraction", "0.3"], ["--val-fraction", "--split val"]),
    ("fedsc_accuracy", ["--set", "method.rounds=-1"], ["--set", "method.rounds=-1"]),
    ("fedsc_accuracy", ["--seeds", "1", "1"], ["--seeds", "1"]),
    ("flower_overhead", ["--rounds", "1"], ["--rounds", "1"]),
    ("flower_overhead", ["--isolation", "subprocess"], ["--isolation", "--deployment"]),
    ("flower_overhead", ["--config", "adir"], ["--config", "'adir'"]),
    ("flower_overhead", ["--set", "optim.lr=-1"], ["--set", "optim.lr=-1"]),
    ("fps_stopping", ["--out", "adir"], ["--out", "'adir'"]),
    ("fps_stopping", ["--out", "afile/x.json"], ["--out", "afile/x.json"]),
    ("noise_perf", ["--repeats", "0"], ["--repeats", "'0'"]),
    ("noise_perf", ["--values", "1000"], ["--opendp-values", "--values 1000"]),
    ("pca_distributed", ["--repeats", "1"], ["--repeats", "'1'"]),
    ("pca_distributed", ["--redraw", "afile"], ["--redraw", "'afile'"]),
    ("pca_distributed", ["--redraw", "afile", "--repeats", "3"], ["--repeats", "--redraw"]),
    ("pca_distributed", ["--out", "afile"], ["--out", "'afile'"]),
    ("pca_error_bars", ["--repeats", "-1"], ["--repeats", "'-1'"]),
    ("pca_error_bars", ["--n-boot", "5"], ["--n-boot", "'5'"]),
    ("pca_isometric", ["--repeats", "1"], ["--repeats", "'1'"]),
    ("pca_isometric", ["--seed", "1e3"], ["--seed", "'1e3'"]),
    ("pca_perf", ["--n", "0"], ["--n", "'0'"]),
    ("pca_perf", ["--quick", "--n", "5"], ["--n", "--quick"]),
    ("pca_perf", ["--parts", "3", "--repeats", "5"], ["--repeats", "part 1"]),
    ("pca_perf", ["--n", "100000000", "--p", "1000"], ["--n", "100000000"]),
    ("pca_plan_check", ["--repeats", "1"], ["--repeats", "'1'"]),
    ("pca_plan_check", ["--n", "1_000"], ["--n", "'1_000'"]),
    ("secagg_cost", ["--clients", "0"], ["--clients", "'0'"]),
    ("secagg_cost", ["--dim", "99999999999999999999"], ["--dim", "'99999999999999999999'"]),
]


@pytest.mark.parametrize(
    ("script", "argv", "names"), CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES]
)
def test_a_bad_argument_is_one_error_line_before_any_work(
    tmp_path, monkeypatch, capsys, script, argv, names
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    mod = _script(script)
    out = "o.json" if script not in ("pca_distributed", "pca_error_bars", "pca_isometric") else "o"
    extra = [] if "--out" in argv or script == "augment_perf" else ["--out", out]
    with pytest.raises(SystemExit) as exc:
        mod.main([*argv, *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in names:
        assert n in lines[0], (n, lines[0])
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(
    ("text", "ok"),
    [("3", True), (" 3 ", True), ("+3", True), ("3.0", False), ("1_0", False)]
    + [("1e3", False), ("\u0663", False), ("", False), ("nan", False), ("10" * 40, False)],
)
def test_a_count_is_ascii_digits_in_its_range(text, ok) -> None:
    parse = _args.count(1, 10**6)
    if ok:
        assert parse(text) == 3
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="must be an integer in"):
            parse(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1_0", "0x10", "0", "1", "", "abc"])
def test_a_real_is_a_finite_decimal_in_its_open_range(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be a number in \(0, 1\)"):
        _args.real(0.0, 1.0, low_open=True, high_open=True)(text)
    assert _args.real(0.0, 1.0, low_open=True, high_open=True)(" .25 ") == 0.25


def test_given_names_the_options_the_command_line_sets() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plan-repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", action="append", default=[])
    assert _args.given(ap, ["--repeats", "3"]) == {"repeats"}  # the default value, given
    assert _args.given(ap, ["--quick", "--set", "a=1"]) == {"quick", "set"}
    assert _args.given(ap, []) == set()
    ns = ap.parse_args([])
    assert ns.repeats == 3 and ns.set == []  # the ordinary parse is unchanged


def test_every_benchmark_script_checks_its_arguments_here() -> None:
    """A new script imports _args too (its options are bounded and checked up front)."""
    scripts = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    missing = [p.name for p in scripts if "import _args" not in p.read_text()]
    assert not missing, missing
    assert os.path.exists(BENCH / "_args.py")
