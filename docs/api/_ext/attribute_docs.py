"""Keep a module constant's or attribute's docstring as written.

napoleon reads the first line of an attribute docstring as ``type: description`` and so
turns ``Constant c of lam="auto": λ = ...`` into a type field.  This handler runs before
napoleon (priority 400 < 500) and starts such docstrings with an empty line, which napoleon
reads as "no inline type", leaving the text unchanged."""

from __future__ import annotations


def _no_inline_type(app, what, name, obj, options, lines):
    if what in ("attribute", "data", "property") and lines and lines[0].strip():
        lines.insert(0, "")


def setup(app):
    app.connect("autodoc-process-docstring", _no_inline_type, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
