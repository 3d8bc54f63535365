"""The command-line dispatcher and the demo's argument checks."""

import importlib

import pytest

from fedspectral.cli import COMMANDS, main


def test_every_command_module_has_the_interface():
    for name, module, _ in COMMANDS:
        mod = importlib.import_module(module)
        assert callable(mod.add_arguments) and callable(mod.run), name


def test_help_lists_every_command(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name, _, _ in COMMANDS:
        assert name in out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pca-bnech"])
    assert exc.value.code == 2
    assert "pca-bnech" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, match",
    [
        (["--rounds", "0"], "--rounds"),
        (["--max-train", "10"], "--max-train"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--delta", "1.5"], "--delta"),
    ],
)
def test_demo_rejects_bad_options_before_any_work(args, match, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedspectral demo: error: ") and match in err
    assert "Traceback" not in err
    assert not out.exists()
    with pytest.raises(ValueError, match=match):  # --debug: the exception itself
        main(["demo", "--out", str(out), "--debug", *args])


def test_demo_prints_the_committed_full_run_beside_its_own():
    """The demo's reference rows come from docs/results/fedsc_cpu/summary.json: the main
    runs of the 10 x 1, 10/10 setting (each run says ``variant: main``), 3 seeds, the means
    the README's core table quotes; the late-start control and the DP runs are left out."""
    import json
    from pathlib import Path

    from fedspectral.experiments.demo import COMMITTED, committed_table

    path = Path(__file__).resolve().parents[1] / COMMITTED[-1]  # the full tier
    table, seeds = committed_table(path)
    assert seeds == 3
    assert {"untrained", "central_sc", "fedavg_sc", "fedsc"} <= set(table)
    assert table["fedsc"]["linear_probe"] == pytest.approx(0.6317, abs=5e-5)
    assert table["central_sc"]["knn_backbone"] == pytest.approx(0.6455, abs=5e-5)
    runs = json.loads(path.read_text())["runs"]
    fedsc = [r for r in runs if r["setting"] == "10x1-10/10" and r["method"] == "fedsc"]
    assert {r["variant"] for r in fedsc} == {"main", "late_start", "dp"}  # all in the file
    probe = [r["final"]["linear_probe"] for r in fedsc if r["variant"] == "main"]
    assert table["fedsc"]["linear_probe"] == pytest.approx(sum(probe) / len(probe), abs=1e-12)
