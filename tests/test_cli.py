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
