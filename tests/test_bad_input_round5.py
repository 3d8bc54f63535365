"""Issue 48, bad input found by the fifth fuzzing round (``scripts/fuzz_cases_r5.py``):
each fix with a test that fails on the code before it."""

from __future__ import annotations

import pytest

from fedspectral.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--repeats", "5"], "--repeats 5"),
        (["--quick"], "--quick"),
        (["--sparse-repeats", "2"], "--sparse-repeats 2"),
        (["--jobs", "1"], "--jobs 1"),
        (["--seed", "0"], "--seed 0"),
        (["--only", "fig1", "--only", "real"], "--only fig1 real"),
    ],
)
def test_pca_bench_reanalyse_refuses_the_options_of_a_run(tmp_path, capsys, argv, named) -> None:
    """``--reanalyse`` redoes the analysis with the finished run's own settings:
    ``--repeats`` (and every option that sets up a run) did nothing there, silently."""
    assert main(["pca-bench", "--reanalyse", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert f"{named}: no effect with --reanalyse" in err
    assert list(tmp_path.iterdir()) == []
