#!/usr/bin/env python3
"""Structure rules of the source tree: no function longer than 80 code lines, no file
longer than 700 lines.

::

    python scripts/check_structure.py [PATH ...]     # default: src/

A function's *code lines* are the lines of its body (nested functions included) that
hold a Python token other than a comment, not counting blank lines, comment-only lines
and docstrings (of the function or of anything defined inside it).  A file's length is
its number of lines.  Prints every function and file over its limit, one per line,
and exits with status 1 if there is any (0 otherwise).
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

MAX_FUNCTION_CODE_LINES = 80
MAX_FILE_LINES = 700

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def _token_lines(source: str) -> set[int]:
    """Line numbers holding at least one token that is not a comment or layout."""
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _NOT_CODE:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class and function docstring."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _qualname(stack: list[str], name: str) -> str:
    return ".".join([*stack, name])


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST) -> Iterator[tuple[str, Function]]:
    """Every function and method with its dotted name (``Class.method``, ``outer.inner``)."""

    def visit(node: ast.AST, stack: list[str]) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield _qualname(stack, child.name), child
                yield from visit(child, [*stack, child.name])
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, [*stack, child.name])
            else:
                yield from visit(child, stack)

    yield from visit(tree, [])


def function_code_lines(path: Path) -> list[tuple[str, int, int]]:
    """``(name, first line, code lines)`` of every function in ``path``."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    code = _token_lines(source) - _docstring_lines(tree)
    out = []
    for name, fn in _functions(tree):
        # the body only: decorators and the signature are not counted
        start = fn.body[0].lineno
        n = sum(1 for line in range(start, fn.end_lineno + 1) if line in code)
        out.append((name, fn.lineno, n))
    return out


def check(paths: list[Path]) -> list[str]:
    """The violations under ``paths``, as printable lines."""
    problems = []
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})
    for f in files:
        n_lines = len(f.read_text(encoding="utf-8").splitlines())
        if n_lines > MAX_FILE_LINES:
            problems.append(f"{f}: file has {n_lines} lines (> {MAX_FILE_LINES})")
        for name, lineno, n in function_code_lines(f):
            if n > MAX_FUNCTION_CODE_LINES:
                problems.append(
                    f"{f}:{lineno}: {name} has {n} code lines (> {MAX_FUNCTION_CODE_LINES})"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=None,
        help="files or folders to check (default: src/ of the repository)",
    )
    args = parser.parse_args(argv)
    paths = args.paths or [Path(__file__).resolve().parents[1] / "src"]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {missing}")
    problems = check(paths)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
