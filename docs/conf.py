"""Sphinx configuration of the fedspectral site (``make docs``): the narrative pages
(``docs/*.md``, read by MyST) and the API reference (``docs/api/*.rst``).

Built with warnings as errors (``sphinx-build -W``); autodoc reads the docstrings, napoleon
parses their numpydoc sections, the CLI page is rendered from the argparse parsers
(``_ext/cli_help.py``).  Nothing is fetched when a page is read: MathJax comes from the
``sphinx-mathjax-offline`` package (a wheel on PyPI: no LaTeX, no Debian package, no
CDN), copied into ``_static/mathjax``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "src"))

from fedspectral import __version__  # noqa: E402 - importable once src is on sys.path

project = "fedspectral"
author = "The fedspectral authors"
copyright = "the fedspectral authors, Apache-2.0"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",  # the narrative pages, docs/*.md
    "cli_help",
    "attribute_docs",
    "repo_links",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# the committed results' tables are linked from the pages (as downloads), not pages
exclude_patterns = ["_build", "api/_build", "results/**"]
myst_heading_anchors = 3  # [..](pca.md#10-...) links to a section
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    # scikit-learn's generated metadata-routing setters and BaseEstimator's own API
    "exclude-members": (
        "set_fit_request, set_transform_request, set_output, "
        "get_metadata_routing, set_score_request"
    ),
}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autoclass_content = "class"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# the baselines' run-config parameters, rendered like a Parameters section
napoleon_custom_sections = [("Parameters (method.params)", "params_style")]
napoleon_use_ivar = False  # each attribute its own indexed entry (components_, privacy_)
napoleon_preprocess_types = False
# a docstring's cross-reference that autodoc cannot resolve is not an error: the
# references to third-party classes (numpy, torch, Flower) have no inventory offline
nitpicky = False
suppress_warnings = ["ref.python"]

html_theme = "alabaster"
html_title = f"fedspectral {version} API reference"
html_theme_options = {
    "description": "Private spectral learning from distributed data",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "240px",
}
# MathJax 3 from the sphinx-mathjax-offline package (its static/mathjax folder) into
# _static/mathjax, not a CDN: the pages' formulas render without a network.  Its own Sphinx
# extension does the same but declares no parallel safety (a warning under -j auto).
MATHJAX_STATIC = Path(importlib.import_module("sphinx-mathjax-offline").__file__).parent / "static"
html_static_path = [str(MATHJAX_STATIC)]
mathjax_path = "mathjax/tex-chtml.js"


def _public_bases(app, name, obj, options, bases: list) -> None:
    """ "Bases:" names public classes: a private base (``_LocalDPBase``) is replaced by
    its own bases, as its members are documented on each subclass."""
    out: list = []
    todo = list(bases)
    while todo:
        b = todo.pop(0)
        if getattr(b, "__name__", "").startswith("_") and b is not object:
            todo[:0] = [c for c in b.__bases__ if c is not object]
        elif b not in out:
            out.append(b)
    bases[:] = out


def setup(app):
    app.connect("autodoc-process-bases", _public_bases)
