"""Packaging metadata: the license pyproject.toml declares is the LICENSE file shipped,
its PEP 639 form builds without setuptools' deprecation warning, and CITATION.cff agrees
with pyproject.toml and cites both papers the package implements."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_expression_matches_the_license_file():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"  # PEP 639: an SPDX expression, not a table
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub


def test_metadata_builds_without_deprecation_warning(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates PEP 639 support (77)")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(
        ROOT / "src" / "fedspectral",
        tmp_path / "src" / "fedspectral",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    # -W error: setuptools' "License classifiers / project.license as a TOML table are
    # deprecated" warning (what license = {text = ...} printed) becomes a failure
    code = (
        "from setuptools import build_meta as b; import sys; "
        "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    )
    meta = tmp_path / "meta"
    meta.mkdir()
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, str(meta)],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    metadata = next(meta.glob("*.dist-info")).joinpath("METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata


def test_citation_file_agrees_with_pyproject_and_cites_both_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "type"):
        assert cff[key], key
    assert cff["license"] == PYPROJECT["project"]["license"]
    assert str(cff["version"]) == PYPROJECT["project"]["version"]
    refs = {r["title"].split(":")[0].strip(): r for r in cff["references"]}
    wang = refs["Principal Component Analysis in the Local Differential Privacy Model"]
    assert [a["family-names"] for a in wang["authors"]] == ["Wang", "Xu"]
    assert wang["year"] == 2019
    fedsc = refs["FedSC"]
    assert [a["family-names"] for a in fedsc["authors"]] == ["Jing", "Yu", "Zhang", "Zhang"]
    assert fedsc["year"] == 2024 and "2405.03949" in fedsc["url"]
