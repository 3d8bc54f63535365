#!/usr/bin/env python3
"""Counts of the typed seams of issue 47: ``dict[str, Any]`` returns, private names
imported across packages, function-local imports of the project.

::

    python scripts/structure_counts.py [PACKAGE] [--json] [--list]

``PACKAGE`` is the package folder (default: ``src/fedspectral`` of this repository).
Nothing is imported: the sources are read with :mod:`ast` and :mod:`tokenize`.

modules, lines
    ``.py`` files of the package and their lines (all of them).
dict[str, Any] returns
    function definitions whose return annotation reads ``dict[str, Any]`` (``Dict`` and
    ``typing.`` spellings and a quoted annotation too; ``dict[str, Any] | None`` is not).
private names imported across packages
    an imported name (``from M import _x``) or a module path component
    (``import a._b``, ``from a._b import x``, ``from a import _b``) that starts with one
    underscore, where the importing module's package differs from the package of the
    module that owns the private name.  A module's package is its dotted parent (a
    package's ``__init__`` belongs to the package itself).  Inside one package, a private
    name imported from another module and a private module imported by its own package's
    modules (what a private module is for) are counted separately.  Every import
    statement counts (top level, in a function, under ``if TYPE_CHECKING:``), each name
    once per statement; only imports of the package count.
function-local imports
    import statements of the package (``fedspectral...`` or relative) inside a function
    body.  Of those: *re-imports* import from a module the module's top-level imports
    already import (or import from), so the module is loaded anyway when this one is and
    the import could move up; *with a reason* carry a ``#`` comment on one
    of the import's lines or on the line just above.  Top-level imports are those outside
    any function or class, ``if TYPE_CHECKING:`` bodies excepted.

``--list`` prints every counted private import and function-local import, one per line.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# an annotation as structure_metrics.py reads it (one reading of "-> dict[str, Any]")
_spec = importlib.util.spec_from_file_location("structure_metrics", HERE / "structure_metrics.py")
assert _spec is not None and _spec.loader is not None
_structure_metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_structure_metrics)
_annotation = _structure_metrics._annotation
DEFAULT = HERE.parent / "src" / "fedspectral"


@dataclass
class Counts:
    modules: int = 0
    lines: int = 0
    dict_any_returns: int = 0
    private_across_packages: int = 0
    private_across_modules: int = 0
    private_modules_inside: int = 0
    local_imports: int = 0
    local_reimports: int = 0
    local_with_reason: int = 0
    items: dict[str, list[str]] = field(default_factory=dict)


LABELS = (
    ("modules", "modules"),
    ("lines", "lines"),
    ("dict_any_returns", "-> dict[str, Any] returns"),
    ("private_across_packages", "private names imported across packages"),
    ("private_across_modules", "private names imported across modules of one package"),
    ("private_modules_inside", "private modules imported inside their own package"),
    ("local_imports", "function-local imports of project modules"),
    ("local_reimports", "  of which re-import a top-level import"),
    ("local_with_reason", "  of which carry a reason comment"),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _comment_lines(source: str) -> set[int]:
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            lines.add(tok.start[0])
    return lines


def _type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


class _Walker(ast.NodeVisitor):
    """Sorts the import statements of one module into top level and function-local."""

    def __init__(self) -> None:
        self.top: list[ast.Import | ast.ImportFrom] = []
        self.local: list[ast.Import | ast.ImportFrom] = []
        self.every: list[ast.Import | ast.ImportFrom] = []
        self._depth = 0  # functions and classes around the node
        self._in_function = 0
        self._type_checking = 0

    def _scope(self, node: ast.AST, function: bool) -> None:
        self._depth += 1
        self._in_function += function
        self.generic_visit(node)
        self._depth -= 1
        self._in_function -= function

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scope(node, True)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, False)

    def visit_If(self, node: ast.If) -> None:
        if _type_checking(node.test):
            self._type_checking += 1
            for stmt in node.body:
                self.visit(stmt)
            self._type_checking -= 1
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.every.append(node)
        if self._in_function:
            self.local.append(node)
        elif self._depth == 0 and not self._type_checking:
            self.top.append(node)

    visit_Import = _import
    visit_ImportFrom = _import


def _package_of(module: str, modules: dict[str, Path]) -> str:
    path = modules.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def _base(node: ast.ImportFrom, here: list[str]) -> str:
    if not node.level:
        return node.module or ""
    up = here[: len(here) - node.level + 1]
    return ".".join([*up, *([node.module] if node.module else [])])


def count(root: Path) -> Counts:
    """Every number of the module docstring over the package folder ``root``."""
    top_name = root.name
    files = sorted(root.rglob("*.py"))
    modules = {module_name(p, root): p for p in files}
    out = Counts(modules=len(files))
    listing: dict[str, list[str]] = {
        "private_across_packages": [],
        "private_across_modules": [],
        "private_modules_inside": [],
        "local_imports": [],
    }
    for mod, path in modules.items():
        source = path.read_text(encoding="utf-8")
        out.lines += len(source.splitlines())
        tree = ast.parse(source, filename=str(path))
        rel = path.relative_to(root.parent)
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        own_package = ".".join(here)

        out.dict_any_returns += sum(
            1
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and _annotation(node.returns) == "dict[str,Any]"
        )

        walker = _Walker()
        walker.visit(tree)

        def ours(dotted: str) -> bool:
            return dotted == top_name or dotted.startswith(top_name + ".")

        # -- private names
        for node in walker.every:
            if isinstance(node, ast.Import):
                paths = [a.name for a in node.names]
            else:
                base = _base(node, here)
                paths = [f"{base}.{a.name}" for a in node.names]
            for dotted in paths:
                if not ours(dotted):
                    continue
                parts = dotted.split(".")
                for i, part in enumerate(parts):
                    if not _is_private(part):
                        continue
                    prefix = ".".join(parts[: i + 1])
                    if prefix in modules:  # a private module belongs to its package
                        owner, owner_package = prefix, ".".join(parts[:i])
                    else:  # a private attribute to its module's package
                        owner = ".".join(parts[:i])
                        owner_package = _package_of(owner, modules)
                    if owner == mod:
                        continue
                    if owner_package != own_package:
                        key = "private_across_packages"
                    elif prefix in modules:
                        key = "private_modules_inside"
                    else:
                        key = "private_across_modules"
                    listing[key].append(f"{rel}:{node.lineno}: {dotted}")
                    break

        # -- function-local imports
        comments = _comment_lines(source)
        bound_top: set[tuple[str, str]] = set()  # (module, name) pairs
        top_modules: set[str] = set()  # modules the top level imports or imports from
        for node in walker.top:
            if isinstance(node, ast.Import):
                for a in node.names:
                    top_modules.add(a.name)
                    bound_top.add((a.name, ""))
            else:
                base = _base(node, here)
                top_modules.add(base)
                for a in node.names:
                    bound_top.add((base, a.name))
                    if f"{base}.{a.name}" in modules:
                        top_modules.add(f"{base}.{a.name}")
        for node in walker.local:
            if isinstance(node, ast.Import):
                names = [(a.name, "") for a in node.names if ours(a.name)]
            else:
                base = _base(node, here)
                names = [(base, a.name) for a in node.names] if ours(base) else []
            if not names:
                continue
            out.local_imports += 1
            again = any(pair in bound_top or pair[0] in top_modules for pair in names)
            lines = range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)
            reason = any(n in comments for n in lines)
            out.local_reimports += again
            out.local_with_reason += reason
            tags = ("re-import " if again else "") + ("reason " if reason else "")
            stmt = ast.unparse(node).replace("\n", " ")
            listing["local_imports"].append(f"{rel}:{node.lineno}: {tags}| {stmt}")
    out.private_across_packages = len(listing["private_across_packages"])
    out.private_across_modules = len(listing["private_across_modules"])
    out.private_modules_inside = len(listing["private_modules_inside"])
    out.items = listing
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--list", action="store_true", help="print every counted import")
    args = parser.parse_args(argv)
    root = args.package.resolve()
    if not (root / "__init__.py").is_file():
        parser.error(f"{root}: not a package folder (no __init__.py)")
    found = count(root)
    numbers = {key: getattr(found, key) for key, _ in LABELS}
    if args.json:
        print(json.dumps({**numbers, **({"items": found.items} if args.list else {})}, indent=2))
        return 0
    width = max(len(label) for _, label in LABELS)
    for key, label in LABELS:
        print(f"{label:<{width}}  {numbers[key]}")
    if args.list:
        for key, rows in found.items.items():
            print(f"\n{key}:")
            print("\n".join(f"  {row}" for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
