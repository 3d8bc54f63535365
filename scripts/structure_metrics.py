#!/usr/bin/env python3
"""Structure numbers of a source tree, for a before/after note (issue 37).

::

    python scripts/structure_metrics.py [ROOT ...] [--json] [--mypy]

``ROOT`` is a checkout (default: this repository); the package read is the one folder of
``ROOT/src`` with an ``__init__.py`` (``--package`` names another).  Several roots print
one column each, side by side.  Nothing is imported: the sources are read with
:mod:`ast`.  The numbers:

modules
    ``.py`` files of the package.
lines
    their lines, all of them (blank, comments and docstrings included).
import circles
    strongly connected components of more than one module in the graph "module A imports
    module B" over the package's modules: every ``import`` / ``from ... import`` in the
    file, at the top or inside a function, except those under ``if TYPE_CHECKING:``.  An
    import names the most specific module of the package it reaches (``from a.b import c``
    is ``a.b.c`` when that is a module, else ``a.b``); the packages above it are not edges.
    ``--json`` lists each circle's modules.
functions > 60 code lines
    functions and methods whose body has more than 60 code lines, counted as
    ``scripts/check_structure.py`` counts them (no blank lines, comments or docstrings).
dict[str, Any] returns
    functions annotated ``-> dict[str, Any]`` (``Dict`` and ``typing.`` spellings too).
Any parameters
    parameters annotated ``Any`` itself (``*args: Any`` and ``**kw: Any`` included;
    ``dict[str, Any]`` and ``Any | None`` are not).
mypy errors (``--mypy``)
    the count of ``error:`` lines of ``mypy`` run in ``ROOT`` over ``src``: with the
    tree's own ``[tool.mypy]`` configuration when its ``pyproject.toml`` has one, else
    with ``--ignore-missing-imports``.  The command is printed with the table.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LONG_FUNCTION = 60

_spec = importlib.util.spec_from_file_location("check_structure", HERE / "check_structure.py")
assert _spec is not None and _spec.loader is not None
_check_structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_check_structure)
function_code_lines = _check_structure.function_code_lines

ROWS = (
    ("modules", "modules"),
    ("lines", "lines of src"),
    ("import_circles", "import circles"),
    ("long_functions", f"functions > {LONG_FUNCTION} code lines"),
    ("dict_any_returns", "functions returning dict[str, Any]"),
    ("any_params", "parameters annotated Any"),
    ("mypy_errors", "mypy errors"),
)


# ----------------------------------------------------------------------------- the tree
def find_package(root: Path) -> Path:
    """The one package folder of ``root/src`` (a folder with an ``__init__.py``)."""
    found = sorted(p.parent for p in (root / "src").glob("*/__init__.py"))
    if len(found) != 1:
        raise SystemExit(f"{root}/src: expected one package, found {[p.name for p in found]}")
    return found[0]


def module_name(path: Path, package: Path) -> str:
    """``pkg.sub.mod`` of ``path`` (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_files(package: Path) -> dict[str, Path]:
    """``{module name: path}`` of every ``.py`` file under ``package``."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


# ----------------------------------------------------------------------------- imports
def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` outside ``if TYPE_CHECKING:`` bodies."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.orelse:  # the else branch runs
                visit(stmt)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a module of the package."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` (see the module docstring)."""
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = here[: len(here) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if base else a.name for a in node.names]
            for target in targets:
                hit = _resolve(target, modules)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative), each
    sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out, key=lambda c: (-len(c), c))


# ----------------------------------------------------------------------------- signatures
def _annotation(node: ast.expr | None) -> str | None:
    """An annotation as normalised source text (a quoted one is unquoted)."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    else:
        text = ast.unparse(node)
    text = re.sub(r"\btyping\.", "", text.replace(" ", ""))
    return re.sub(r"\bDict\b", "dict", text)


def signature_counts(path: Path) -> tuple[int, int]:
    """``(functions returning dict[str, Any], parameters annotated Any)`` of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    returns = params = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if _annotation(node.returns) == "dict[str,Any]":
            returns += 1
        a = node.args
        every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        params += sum(
            1 for arg in every if arg is not None and _annotation(arg.annotation) == "Any"
        )
    return returns, params


# ----------------------------------------------------------------------------- mypy
def mypy_errors(root: Path, package: Path) -> tuple[int, str]:
    """``(error count, command)`` of mypy over ``root/src`` (module docstring)."""
    exe = shutil.which("mypy") or str(Path(sys.executable).with_name("mypy"))
    cmd = [exe, str(package.parent.relative_to(root))]
    pyproject = root / "pyproject.toml"
    if not (pyproject.is_file() and "[tool.mypy]" in pyproject.read_text(encoding="utf-8")):
        cmd.insert(1, "--ignore-missing-imports")
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed in {root}:\n{proc.stdout}{proc.stderr}")
    count = sum(1 for line in proc.stdout.splitlines() if ": error:" in line)
    return count, " ".join(["mypy", *cmd[1:]])


# ----------------------------------------------------------------------------- all
def measure(root: Path, package: Path | None = None, run_mypy: bool = False) -> dict[str, Any]:
    """Every number of the module docstring for the checkout ``root``."""
    pkg = package if package is not None else find_package(root)
    files = package_files(pkg)
    found = circles(import_graph(files))
    long_functions: list[str] = []
    returns = params = lines = 0
    for mod, path in files.items():
        lines += len(path.read_text(encoding="utf-8").splitlines())
        for name, lineno, n in function_code_lines(path):
            if n > LONG_FUNCTION:
                long_functions.append(f"{mod}.{name}:{lineno} ({n})")
        r, p = signature_counts(path)
        returns += r
        params += p
    out: dict[str, Any] = {
        "root": str(root),
        "package": str(pkg),
        "modules": len(files),
        "lines": lines,
        "import_circles": len(found),
        "long_functions": len(long_functions),
        "dict_any_returns": returns,
        "any_params": params,
        "circles": found,
        "long_function_names": long_functions,
    }
    if run_mypy:
        out["mypy_errors"], out["mypy_command"] = mypy_errors(root, pkg)
    return out


def table(results: list[dict[str, Any]]) -> str:
    """The numbers as a Markdown table, one column per tree."""
    head = ["", *[Path(r["root"]).name or r["root"] for r in results]]
    rows = [head, ["---"] * len(head)]
    for key, label in ROWS:
        if all(key in r for r in results):
            rows.append([label, *[str(r[key]) for r in results]])
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    for r in results:
        if "mypy_command" in r:
            lines.append(f"{r['root']}: {r['mypy_command']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "roots",
        nargs="*",
        type=Path,
        help="checkouts to measure (default: this repository)",
    )
    parser.add_argument("--package", type=Path, help="the package folder (one root only)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--mypy", action="store_true", help="also run mypy (slow)")
    args = parser.parse_args(argv)
    roots = args.roots or [HERE.parent]
    if args.package is not None and len(roots) != 1:
        parser.error("--package takes one root")
    results = [measure(r.resolve(), args.package, args.mypy) for r in roots]
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
