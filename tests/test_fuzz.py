"""The fuzzing harness (scripts/fuzz.py): its fast subset finds nothing, and its classifier
tells every class of issue 24 apart on cases built to fall in each."""

import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
_spec = importlib.util.spec_from_file_location("fuzz", ROOT / "scripts" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)
Case = fuzz.Case


@pytest.fixture(scope="module", autouse=True)
def preloaded():
    fuzz.preload()  # the imports the forked cases share


def _raise(exc):
    def f(folder):
        raise exc

    return f


def _write_then_raise(folder):
    (folder / "half.json").write_text("{")
    raise ValueError("x must be positive, got -1")


def _sleep(folder):
    time.sleep(30)


def _allocate(folder):
    return bytearray(8 * 2**30)  # beyond the case's memory limit


@pytest.mark.parametrize(
    "case, expected",
    [
        (Case("t", "lib", func=lambda f: 1.0, names=["x"]), "ok"),
        (
            Case("t", "lib", func=_raise(ValueError("x must be positive, got -1")), names=["x"]),
            "ok",
        ),
        (Case("t", "lib", func=_raise(ValueError("bad input")), names=["x"]), "unclear"),
        (Case("t", "lib", func=_raise(ValueError("x " * 2000)), names=["x"]), "unclear"),
        (Case("t", "lib", func=_raise(ZeroDivisionError("float division")), names=["x"]), "crash"),
        (Case("t", "lib", func=_allocate, names=["x"]), "crash"),
        (Case("t", "lib", func=lambda f: 1.0, must_fail=True), "wrong"),
        (
            Case(
                "t", "lib", func=lambda f: -1.0, oracle=lambda r, f: "negative" if r < 0 else None
            ),
            "wrong",
        ),
        (Case("t", "lib", func=_write_then_raise, names=["x"]), "partial"),
        (Case("t", "lib", func=_sleep, timeout=1.0), "hang"),
        (
            Case(
                "t",
                "cli",
                argv=[
                    "pca-plan",
                    "--p",
                    "-3",
                    "--k",
                    "1",
                    "--epsilon",
                    "1",
                    "--delta",
                    "1e-5",
                    "--eigengap",
                    "0.01",
                    "--target-error",
                    "0.3",
                ],
                names=["p"],
                must_fail=True,
            ),
            "ok",
        ),
        (Case("t", "cli", argv=["frobnicate"], names=["frobnicate"], must_fail=True), "ok"),
        (
            Case(
                "t",
                "script",
                argv=["benchmarks/pca_isometric.py", "--repeats", "0", "--out", "o"],
                names=["--repeats"],
                must_fail=True,
            ),
            "ok",
        ),
        (
            Case("t", "script", argv=["scripts/fuzz.py", "--cases", "x"], names=["--cases"]),
            "ok",
        ),
    ],
)
def test_the_classifier_tells_the_classes_apart(case, expected):
    res = fuzz.run_case(case, mem_gib=1.0)
    assert res["class"] == expected, res


def test_fast_subset_finds_nothing():
    results = fuzz.run(fuzz.FAST, per_entry=3, base_seed=0, progress=False)
    assert len(results) == 3 * len(fuzz.FAST)
    bad = [r for r in results if r["class"] != "ok"]
    assert not bad, (
        fuzz.table(results)
        + "\n"
        + "\n".join(f"[{r['class']}] {r['case']}: {r['why']}" for r in bad)
    )
