"""``scripts/structure_metrics.py`` on a tiny generated tree whose numbers are known: a
circle through a function-local import, none through a ``TYPE_CHECKING`` import, one
function of 61 code lines beside one of 60, and known ``Any`` parameters and
``dict[str, Any]`` returns."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "structure_metrics", ROOT / "scripts" / "structure_metrics.py"
)
assert _spec is not None and _spec.loader is not None
sm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sm)


def _function(name: str, code_lines: int) -> str:
    body = "\n".join(f"    x{i} = {i}" for i in range(code_lines - 1))
    return f'def {name}():\n    """Doc."""\n    # a comment\n\n{body}\n    return 0\n'


FILES = {
    "__init__.py": '"""The package."""\n',
    # a -> b at the top, b -> a inside a function: one circle {a, b}
    "a.py": "from pkg import b\nfrom pkg.sub import c\n",
    "b.py": "def f():\n    import pkg.a\n\n    return pkg.a\n",
    # c -> d only under TYPE_CHECKING (its else branch runs: c -> e), d -> c: no circle
    "sub/__init__.py": "",
    "sub/c.py": (
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n    from pkg.sub import d\nelse:\n    from . import e\n"
    ),
    "sub/d.py": "from .c import *\nimport os\n",
    "sub/e.py": "import json\n",
    "long.py": _function("long61", 61) + "\n\n" + _function("short60", 60),
    "sig.py": (
        "from typing import Any, Dict\nimport typing\n\n\n"
        "def f(x: Any, *args: Any, y: 'Any', z: dict[str, Any], w: Any | None,"
        " **kw: Any) -> dict[str, Any]:\n    return {}\n\n\n"
        "def g(v: typing.Any) -> 'Dict[str, Any]':\n    return {}\n\n\n"
        "def h(u: Any) -> dict[str, Any] | None:\n    return None\n\n\n"
        "class K:\n    def m(self, q: Any) -> typing.Dict[str, Any]:\n        return {}\n"
    ),
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        path = tmp_path / "src" / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_the_numbers_of_a_known_tree(tree: Path) -> None:
    m = sm.measure(tree)
    assert m["modules"] == len(FILES)
    assert m["lines"] == sum(len(t.splitlines()) for t in FILES.values())
    assert m["circles"] == [["pkg.a", "pkg.b"]] and m["import_circles"] == 1
    assert m["long_functions"] == 1 and m["long_function_names"][0].startswith("pkg.long.long61")
    # Any: f's x, *args, y (quoted) and **kw; g's v; h's u; K.m's q (not z, w or self)
    assert m["any_params"] == 7
    # dict[str, Any]: f, g (quoted Dict), K.m (typing.Dict); not h (| None)
    assert m["dict_any_returns"] == 3


def test_the_import_graph_resolves_relative_and_dotted_imports(tree: Path) -> None:
    graph = sm.import_graph(sm.package_files(tree / "src" / "pkg"))
    assert graph["pkg.a"] == {"pkg.b", "pkg.sub.c"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.c"] == {"pkg.sub.e"}  # not d: a TYPE_CHECKING import
    assert graph["pkg.sub.d"] == {"pkg.sub.c"}
    assert sm.circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]


def test_json_and_table_side_by_side(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sm.main([str(tree), "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)
    assert out["import_circles"] == 1 and "mypy_errors" not in out
    assert sm.main([str(tree), str(tree)]) == 0
    table = capsys.readouterr().out
    assert "| import circles | 1 | 1 |" in table
    assert "| parameters annotated Any | 7 | 7 |" in table


@pytest.mark.skipif(
    shutil.which("mypy") is None and not Path(sm.sys.executable).with_name("mypy").exists(),
    reason="mypy is not installed",
)
def test_mypy_counts_the_errors(tree: Path) -> None:
    (tree / "src" / "pkg" / "bad.py").write_text('x: int = "one"\ny: str = 2\n')
    m = sm.measure(tree, run_mypy=True)
    assert m["mypy_errors"] == 2
    assert m["mypy_command"] == "mypy --ignore-missing-imports src"
