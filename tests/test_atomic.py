"""Atomic writes give result files the mode an ordinary ``open`` would (0o666 & ~umask),
not tempfile's 0600, so a group on a shared machine can read a run's results."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from fedspectral.atomic import atomic_write_bytes, current_umask
from fedspectral.fed.checkpoint import load_checkpoint, save_checkpoint
from fedspectral.results import write_csv, write_json, write_text

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


@pytest.fixture
def umask():
    """Set the process umask for one test, restore it afterwards."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda m: os.umask(m)
    os.umask(before)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing(umask):
    umask(0o027)
    assert current_umask() == 0o027
    assert current_umask() == 0o027  # unchanged by the read


@pytest.mark.parametrize(
    "mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)]
)
def test_result_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    paths = [
        write_json(tmp_path / "r.json", {"a": 1}),
        write_text(tmp_path / "c.yaml", "a: 1\n"),
        write_csv(tmp_path / "r.csv", [{"a": 1}]),
        save_checkpoint(tmp_path / "checkpoint.pt", {"w": np.ones(3)}, "fp"),
    ]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what open() gives under this umask: the reference
    assert _mode(plain) == expected
    for p in paths:
        assert _mode(p) == expected, (p.name, oct(_mode(p)))
    assert load_checkpoint(tmp_path / "checkpoint.pt", "fp")["w"].tolist() == [1.0, 1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_overwrite_takes_the_current_mode_and_explicit_mode_wins(tmp_path, umask):
    umask(0o077)
    p = atomic_write_bytes(tmp_path / "f", b"old")
    assert _mode(p) == 0o600
    umask(0o022)
    atomic_write_bytes(p, b"new")
    assert p.read_bytes() == b"new" and _mode(p) == 0o644
    atomic_write_bytes(p, b"secret", mode=0o600)
    assert _mode(p) == 0o600
