"""Keep a module constant's or an attribute's docstring as written.

napoleon reads the first line of an attribute docstring as ``type: description`` (its
"inline attribute" form), so ``#: Constant c of lam="auto": λ = ...`` above a constant, or
a role broken across the lines of a ``#:`` comment, turned into a bogus ``Type:`` field.
This project never writes the inline-type form (types come from annotations), so this
extension makes napoleon leave such docstrings unchanged."""

from __future__ import annotations

from sphinx.ext.napoleon.docstring import GoogleDocstring


def _verbatim(self):  # the remaining lines, as written
    return self._consume_to_end()


def setup(app):
    if not hasattr(GoogleDocstring, "_parse_attribute_docstring"):  # pragma: no cover
        raise RuntimeError(
            "napoleon changed: _parse_attribute_docstring is gone; "
            "update docs/_ext/attribute_docs.py"
        )
    GoogleDocstring._parse_attribute_docstring = _verbatim  # NumpyDocstring inherits it
    return {"parallel_read_safe": True, "parallel_write_safe": True}
