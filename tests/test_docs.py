"""The documentation site builds with warnings as errors, is complete and works offline.

``make docs`` builds one Sphinx site from ``docs/``: the guide (``docs/*.md``, read by
MyST) and the API reference (``docs/api/*.rst``: autodoc + napoleon on the numpydoc
docstrings, the CLI page from the argparse parsers).  The module fixture builds the whole
site once, as ``make docs`` does (``-W``, one process: about 16 s of CPU), and the tests
read what it wrote: every name the README's Python examples use has its own entry under
its real name (trailing underscore kept), every narrative page is in the site, and no page
loads anything from the network (MathJax is copied in from ``sphinx-mathjax-offline``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"

pytest.importorskip("sphinx", reason="the dev extra installs Sphinx (make install)")
pytest.importorskip("myst_parser", reason="the dev extra installs myst-parser (make install)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    home = tmp_path_factory.mktemp("home")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-j", "1"]
        + ["-d", str(out / ".doctrees"), str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(home)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out / "html"


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="(fedspectral\.[\w.]+)"', html))


def test_every_api_page_is_in_the_toctree():
    index = (API / "index.rst").read_text()
    toc = index.split(".. toctree::", 1)[1]
    pages = {p.stem for p in API.glob("*.rst")} - {"index"}
    assert pages == {"pca", "fed", "models", "privacy", "flower", "cli"}
    assert all(re.search(rf"^\s+{p}$", toc, re.MULTILINE) for p in pages)


def test_every_narrative_page_is_in_the_site(site):
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert "pca" in pages and "flower" in pages
    index = (site / "index.html").read_text()
    for page in pages:
        assert (site / f"{page}.html").is_file(), page
        assert f'href="{page}.html"' in index, page
    readme = (site / "readme.html").read_text()  # docs/readme.md includes the README
    assert "Quickstart" in readme and 'href="pca.html"' in readme
    assert re.search(r'href="_downloads/\w+/LICENSE"', readme)
    pca = (site / "pca.html").read_text()
    assert "Locally private PCA" in pca and "<table" in pca
    # a link to a repository file is a download that the site carries
    links = re.findall(r'class="[^"]*download[^"]*"[^>]*href="(_downloads/[^"]+)"', pca)
    assert links and all((site / link).is_file() for link in links)


def _readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def _readme_names() -> set[tuple[str, str | None]]:
    """(name, None) for each fedspectral name the README's examples import, and
    (class name, attribute) for each attribute they read on an instance of one."""
    names: set[tuple[str, str | None]] = set()
    classes: dict[str, str] = {}  # imported fedspectral class name -> itself
    for block in _readme_python_blocks():
        tree = ast.parse(block)
        imported: dict[str, object] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedspectral"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    imported[alias.asname or alias.name] = getattr(mod, alias.name)
                    names.add((alias.name, None))
                    if inspect.isclass(getattr(mod, alias.name)):
                        classes[alias.asname or alias.name] = alias.name
        instances: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                call = node.value  # Cls(...) or Cls(...).fit(...) (fit returns self)
                while isinstance(call.func, ast.Attribute) and isinstance(
                    call.func.value, ast.Call
                ):
                    call = call.func.value
                if isinstance(call.func, ast.Name) and call.func.id in classes:
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            instances[target.id] = classes[call.func.id]
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in instances
            ):
                names.add((instances[node.value.id], node.attr))
    return names


def test_every_name_of_the_readme_examples_has_its_entry(site):
    names = _readme_names()
    # the examples' own names, so that this test cannot pass on an empty set
    for expected in [
        ("LocalDPPCA", "components_"),
        ("LocalDPPCA", "privacy_"),
        ("LocalDPPCA", "error_interval"),
        ("run_experiment", None),
        ("BudgetAccountant", None),
    ]:
        assert expected in names
    ids = set().union(*(_ids(p.read_text()) for p in (site / "api").glob("*.html")))
    missing = []
    for name, attr in sorted(names, key=str):
        suffix = f".{name}" if attr is None else f".{name}.{attr}"
        if not any(i.endswith(suffix) for i in ids):
            missing.append(suffix[1:])
    assert not missing, f"no entry in the API reference for {missing}"


def test_estimator_entries_are_whole_and_named_as_in_code(site):
    pca = (site / "api" / "pca.html").read_text()
    ids = _ids(pca)
    for attr in ("components_", "n_samples_", "n_features_in_", "ledger_", "privacy_"):
        assert f"fedspectral.pca.estimators.LocalDPPCA.{attr}" in ids
    for meth in ("transform", "error_interval", "fit_transform"):
        assert f"fedspectral.pca.estimators.LocalDPPCA.{meth}" in ids
        assert f"fedspectral.pca.distributed_estimator.DistributedDPPCA.{meth}" in ids
    assert "fedspectral.pca.estimators.LocalDPSparsePCA.lam_" in ids
    # no entry made of several names (on any page), no reference to the private base class
    for page in (site / "api").glob("*.html"):
        whole = re.findall(r'\bid="(fedspectral\.[^"]*)"', page.read_text())
        assert not [i for i in whole if not re.fullmatch(r"[\w.]+", i)], page
    text = re.sub(r"<[^>]+>", "", pca)
    assert "_LocalDPBase" not in text
    assert "n_samples (" not in text
    assert "fedspectral.experiments.train.run_experiment" in _ids(
        (site / "api" / "fed.html").read_text()
    )


def test_pages_load_nothing_from_the_network(site):
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    pca = (site / "api" / "pca.html").read_text()
    assert re.search(r'<script[^>]*src="../_static/mathjax/tex-chtml.js[?"]', pca)
    assert "math notranslate" in pca
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert not re.search(r'<(script|img|iframe)[^>]*\ssrc="(https?:)?//', html), page
        assert not re.search(r'<link[^>]*\shref="(https?:)?//', html), page


def test_cli_page_is_every_command_help(site):
    cli = (site / "api" / "cli.html").read_text()
    for cmd in ("demo", "pca-bench", "pca-plan", "train", "export", "audit", "reproduce"):
        assert f"fedspectral {cmd}" in cli
    assert "--resume" in cli and "RUN_DIR" in cli
    privacy = (site / "api" / "privacy.html").read_text()
    for name in ("BudgetAccountant", "PrivacyLedger", "gaussian_sigma", "BudgetExceededError"):
        assert name in privacy
    assert "Parameters" in privacy and "math notranslate" in privacy  # napoleon, math
