"""``scripts/check_structure.py``: what counts as a code line, the two limits, the exit
status, and the rules on the two packages already split (reproduce, pca_bench)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "check_structure", ROOT / "scripts" / "check_structure.py"
)
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)

SOURCE = '''"""Module docstring
over two lines."""


def small(x):
    """A docstring

    of four lines.
    """
    # a comment
    y = x + 1

    s = """a string
    on two lines"""
    return y, s


class C:
    def method(self):
        def inner():
            return 1
        return inner()
'''


def test_code_lines_leave_out_docstrings_comments_and_blank_lines(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(SOURCE)
    got = {name: n for name, _, n in cs.function_code_lines(f)}
    # small: y = ..., s = """a string / on two lines""", return -> 4 lines
    assert got == {"small": 4, "C.method": 3, "C.method.inner": 1}


def _function(n_lines: int) -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(n_lines - 1))
    return f'def f():\n    """Doc."""\n    # comment\n\n{body}    return 0\n'


def test_limits_and_exit_status(tmp_path, capsys):
    ok = tmp_path / "ok.py"
    ok.write_text(_function(80))
    assert cs.check([ok]) == [] and cs.main([str(ok)]) == 0
    long_fn = tmp_path / "long.py"
    long_fn.write_text(_function(81))
    assert cs.check([long_fn]) == [f"{long_fn}:1: f has 81 code lines (> 80)"]
    long_file = tmp_path / "pkg" / "big.py"
    long_file.parent.mkdir()
    long_file.write_text("x = 1\n" * 701)
    assert cs.check([tmp_path / "pkg"]) == [f"{long_file}: file has 701 lines (> 700)"]
    long_file.write_text("x = 1\n" * 700)
    assert cs.check([tmp_path / "pkg"]) == []
    capsys.readouterr()
    assert cs.main([str(long_fn)]) == 1
    assert "f has 81 code lines" in capsys.readouterr().out


def test_the_split_packages_keep_to_the_limits():
    experiments = ROOT / "src" / "fedspectral" / "experiments"
    assert cs.check([experiments / "reproduce", experiments / "pca_bench"]) == []


def test_the_core_keeps_to_the_limits():
    """The config, the privacy core, PCA and the federated protocol, losses and methods."""
    src = ROOT / "src" / "fedspectral"
    fed = src / "fed"
    assert (
        cs.check(
            [
                src / "config.py",
                src / "checks.py",
                src / "privacy",
                src / "pca",
                fed / "protocol.py",
                fed / "releases.py",
                fed / "correlation.py",
                fed / "losses",
                fed / "methods",
            ]
        )
        == []
    )
