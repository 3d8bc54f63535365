"""The package's layers point down only: no module of the lower layers imports the
command-line layer ``fedspectral.experiments`` (at module level or inside a function).

The check reads the sources with :mod:`ast` (nothing is imported), so a lazy import
hidden in a function body is found as well as one at the top of a file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedspectral"
LOWER = ("fed", "pca", "privacy", "data", "models", "eval")
BOTTOM = (
    "kinds.py",
    "config.py",
    "config_checks.py",
    "config_frozen.py",
    "results.py",
    "plots.py",
    "atomic.py",
    "checks.py",
    "linalg.py",
    "inputs.py",
)
TOP = "fedspectral.experiments"


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def upward_imports(path: Path, root: Path = SRC) -> list[str]:
    """``line: imported name`` for each import of ``fedspectral.experiments`` in ``path``
    (a file of the package at ``root``; absolute or relative imports, ``import x`` or
    ``from x import y``, at any depth)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        hits += [f"{node.lineno}: {n}" for n in names if n == TOP or n.startswith(TOP + ".")]
    return hits


def _lower_modules() -> list[Path]:
    files = [p for layer in LOWER for p in sorted((SRC / layer).rglob("*.py"))]
    files += [SRC / name for name in BOTTOM]
    return files


def test_the_lower_layers_exist_and_hold_modules():
    files = _lower_modules()
    for layer in LOWER:
        assert any(p.is_relative_to(SRC / layer) for p in files), layer
    assert all(p.is_file() for p in files)
    assert len(files) > 30


@pytest.mark.parametrize("path", _lower_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_lower_module_imports_the_experiments_layer(path):
    assert upward_imports(path) == []


@pytest.mark.parametrize(
    "source",
    [
        "from fedspectral.experiments.config import to_dict\n",
        "def f():\n    from fedspectral.experiments import train\n",
        "import fedspectral.experiments.results as r\n",
        "class A:\n    def m(self):\n        from ...experiments.config import validate\n",
        "from ... import experiments\n",  # fed.flower -> fedspectral
    ],
)
def test_the_check_finds_every_form_of_an_upward_import(tmp_path, source):
    root = tmp_path / "fedspectral"
    fake = root / "fed" / "flower" / "x.py"  # relative imports resolve from fed.flower
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    assert upward_imports(fake, root), source


@pytest.mark.parametrize(
    "source",
    [
        "from fedspectral.config import to_dict\n",
        "from ...results import write_json\n",
        "from ..simulation import Simulation\n",
        "import fedspectral.experimental_thing\n",
    ],
)
def test_the_check_leaves_other_imports_alone(tmp_path, source):
    root = tmp_path / "fedspectral"
    fake = root / "fed" / "flower" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    assert upward_imports(fake, root) == []


# -- the whole layer order ---------------------------------------------------------------
#: rank of each layer, bottom first; an import may point to its own rank or lower
_RANKS = {
    **{
        m: 0
        for m in (
            "checks",
            "linalg",
            "atomic",
            "kinds",
            "config",
            "config_checks",
            "config_frozen",
            "inputs",
            "results",
            "plots",
        )
    },
    "privacy": 1,
    **{m: 2 for m in ("data", "models", "eval", "pca")},
    "fed": 3,
    "fed.flower": 4,  # the Flower layer: fed/flower/{apps,node,deploy}/ and the PCA app
    "pca.flower": 4,
    "experiments": 5,
    "cli": 6,
}


def _rank(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "fedspectral" or len(parts) < 2:
        return None
    if parts[1] in ("fed", "pca") and len(parts) > 2 and parts[2] == "flower":
        return _RANKS[f"{parts[1]}.flower"]
    return _RANKS.get(parts[1])


def layer_violations(root: Path = SRC) -> list[tuple[str, str, int, bool]]:
    """``(module, imported, line, at module level)`` for every import of a higher layer."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(p for p in rel.parts if p != "__init__")
        own = _rank(module)
        if own is None:
            continue
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                continue
            for name in names:
                rank = _rank(name)
                if rank is not None and rank > own:
                    out.append((module, name, node.lineno, id(node) in top_level))
    return out


def test_every_import_points_down():
    assert layer_violations() == []


def test_the_layer_walk_finds_a_planted_upward_import(tmp_path):
    root = tmp_path / "fedspectral"
    (root / "privacy").mkdir(parents=True)
    (root / "privacy" / "x.py").write_text("from ..fed import protocol\n")
    (root / "data").mkdir()
    (root / "data" / "y.py").write_text("def f():\n    import fedspectral.pca\n")
    assert layer_violations(root) == [("fedspectral.privacy.x", "fedspectral.fed", 1, True)]


# -- the table as the docs draw it -------------------------------------------------------
ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"


def drawn_layers(text: str) -> dict[str, int]:
    """``{path as drawn: rank}`` from the layer block of an architecture page: the first
    fenced block after ``## The layers``, one line per rank, ``N  path path ...`` (a path
    ends in ``/`` or ``.py``), then a description; continuation lines start with spaces."""
    block = text.split("## The layers", 1)[1].split("```", 2)[1]
    out: dict[str, int] = {}
    for line in block.splitlines():
        m = re.match(r"\s*(\d)\s+(.*)", line)
        if not m:
            continue
        for token in m.group(2).split():
            if not re.fullmatch(r"[a-z_]+(/[a-z_]+)*(/|\.py)", token):
                break
            out[token] = int(m.group(1))
    return out


def _as_drawn(module: str) -> str:
    path = module.replace(".", "/")
    return path + "/" if (SRC / path).is_dir() else path + ".py"


def test_the_architecture_page_draws_the_layer_table():
    assert drawn_layers(ARCHITECTURE.read_text(encoding="utf-8")) == {
        _as_drawn(m): r for m, r in _RANKS.items()
    }


def test_the_drawing_is_read_rank_by_rank_up_to_the_description():
    text = "## The layers\n```\n 1  a/ b.py   b and a/ again\n    c/ (continued)\n 0  d.py\n```\n"
    assert drawn_layers(text) == {"a/": 1, "b.py": 1, "d.py": 0}


def test_every_module_has_a_layer():
    """Every package and module of ``src/fedspectral`` has a rank (a new one cannot escape
    the walk above), and every rank names a module that exists."""
    top = {
        p.stem
        for p in SRC.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    }
    assert top == {m.split(".")[0] for m in _RANKS}
    assert all(
        (SRC / m.replace(".", "/")).is_dir() or (SRC / (m.replace(".", "/") + ".py")).is_file()
        for m in _RANKS
    )


# -- no import circles -------------------------------------------------------------------
# An import counts when it runs: at module level or inside a function body (a function-local
# import that closes a circle only hides it until the function is called).  Imports under
# ``if TYPE_CHECKING:`` never run and are left out.  ``from pkg import name`` is an edge to
# the module ``pkg.name`` when that is a module, else to ``pkg``.


def _runtime_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += _runtime_imports(node.orelse)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    out += _runtime_imports([child])
                elif isinstance(child, ast.excepthandler):
                    out += _runtime_imports(child.body)
    return out


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """``{module: project modules it imports when it runs}`` over the package at ``root``."""
    paths = {
        ".".join(
            p for p in path.relative_to(root.parent).with_suffix("").parts if p != "__init__"
        ): path
        for path in sorted(root.rglob("*.py"))
    }

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in paths:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [f"{mod}.{a.name}" for a in node.names]
            edges |= {r for n in names if (r := resolve(n)) is not None and r != module}
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles():
    assert import_cycles(import_graph()) == []


@pytest.mark.parametrize(
    ("a", "b", "circle"),
    [
        ("from fedspectral import b\n", "import fedspectral.a\n", True),
        ("from . import b\n", "def f():\n    from .a import x\n", True),  # a local import counts
        (
            "from .b import y\n",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
            False,
        ),
        ("from .b import y\n", "try:\n    pass\nexcept ImportError:\n    from .a import x\n", True),
        ("from .b import y\n", "import os\n", False),
    ],
)
def test_the_circle_check_finds_a_planted_circle(tmp_path, a, b, circle):
    root = tmp_path / "fedspectral"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text(a)
    (root / "b.py").write_text(b)
    found = import_cycles(import_graph(root))
    assert found == ([("fedspectral.a", "fedspectral.b")] if circle else [])
