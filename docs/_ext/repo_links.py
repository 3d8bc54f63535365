"""Links of the narrative pages (``docs/*.md``) to files of the repository outside the site.

The pages link to the repository's files (``../src/fedspectral/pca/local.py``,
``results/pca/pca_distributed.csv``, ``../README.md``, a folder such as ``../tests/fed``) so
that they read well on a code host.  In the site, a link to a file that is not one of its
pages becomes a download link (Sphinx copies the file into ``_downloads``, so the link
works offline), and a link to a folder keeps its text without the link (a site has no
folder listings); a link of an included file (``docs/readme.md`` includes the README)
is read relative to that file; in a heading, a link to a repository file keeps only its
text.  MyST itself only does the first for files it does not take for pages:
a ``.md`` file outside the site (``README.md``, the committed results' reports) or a folder
would be an unresolved reference, a warning and, in a heading, a broken table of contents.
"""

from __future__ import annotations

import os
from pathlib import Path

from docutils import nodes
from sphinx import addnodes


def _target_path(app, node) -> Path | None:
    target = node.get("reftarget") or ""
    if node.get("refdomain") == "doc":  # MyST's guess: a page (``README``, ``results/x/T``)
        if target in app.env.found_docs:
            return None
        suffix = ".md"
    elif node.get("refdomain") is None:
        suffix = ""
    else:
        return None
    doc_dir = Path(app.env.doc2path(node.get("refdoc") or app.env.docname)).parent
    if node.get("refdomain") == "doc":  # absolute docname, relative to the source folder
        path = Path(app.srcdir) / (target + suffix)
    else:
        path = doc_dir / target.split("#", 1)[0]
        if not path.exists() and node.source:  # an included file's link (README.md's)
            path = Path(node.source).parent / target.split("#", 1)[0]
    return path.resolve()


def rewrite_repo_links(app, doctree: nodes.document) -> None:
    # a link in a heading: its text only (Sphinx's page toc copies the heading and
    # expects every reference in it to be the toc's own; an <a> inside an <a> besides)
    for title in doctree.findall(nodes.title):
        for node in list(title.findall(addnodes.download_reference)):
            node.replace_self(node.children)
        for node in list(title.findall(addnodes.pending_xref)):
            if node.get("reftype") == "myst" and _target_path(app, node) is not None:
                node.replace_self(node.children)
    for node in list(doctree.findall(addnodes.pending_xref)):
        if node.get("reftype") != "myst":
            continue
        path = _target_path(app, node)
        if path is None or not path.exists():
            continue
        if path.is_dir():
            node.replace_self(node.children)
            continue
        doc_dir = Path(app.env.doc2path(app.env.docname)).parent.resolve()
        target = os.path.relpath(path, doc_dir)  # Sphinx reads it relative to the page
        dl = addnodes.download_reference(
            "",
            "",
            *node.children,
            refdomain=None,
            reftype="myst",
            reftarget=target,
            refdoc=app.env.docname,
            refexplicit=True,
            classes=["xref", "download", "myst"],
        )
        node.replace_self(dl)


def setup(app):
    # before Sphinx's DownloadFileCollector (priority 500) registers the downloads
    app.connect("doctree-read", rewrite_repo_links, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
