"""The API reference builds with warnings as errors (docs/api, Sphinx autodoc + napoleon).

The full site (``make docs``) takes minutes on a loaded 2-core machine; this test builds a
subset with the same configuration and extension: the privacy core (autodoc + napoleon on
numpydoc docstrings, math) and the CLI page (rendered from the argparse parsers), and
checks what the pages say.  Every page of docs/api must be in the index's toctree (Sphinx
itself warns on an orphan page in the full build)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"

pytest.importorskip("sphinx", reason="the dev extra installs Sphinx (make install)")


def test_every_page_is_in_the_toctree():
    index = (API / "index.rst").read_text()
    toc = index.split(".. toctree::", 1)[1]
    pages = {p.stem for p in API.glob("*.rst")} - {"index"}
    assert pages == {"pca", "fed", "privacy", "flower", "cli"}
    assert all(re.search(rf"^\s+{p}$", toc, re.MULTILINE) for p in pages)


def test_api_reference_subset_builds_without_warnings(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(API / "conf.py", src / "conf.py")
    shutil.copytree(API / "_ext", src / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    for page in ("privacy.rst", "cli.rst"):
        shutil.copy(API / page, src / page)
    (src / "index.rst").write_text(
        "fedspectral\n===========\n\n.. toctree::\n\n   privacy\n   cli\n"
    )
    out = tmp_path / "html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-W",
            "--keep-going",
            "-q",
            "-j",
            "1",
            str(src),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    privacy = (out / "privacy.html").read_text()
    for name in ("BudgetAccountant", "PrivacyLedger", "gaussian_sigma", "BudgetExceededError"):
        assert name in privacy
    assert "Parameters" in privacy and "math notranslate" in privacy  # napoleon, math
    cli = (out / "cli.html").read_text()
    for cmd in ("demo", "pca-bench", "train", "export", "audit"):
        assert f"fedspectral {cmd}" in cli
    assert "--resume" in cli and "RUN_DIR" in cli
