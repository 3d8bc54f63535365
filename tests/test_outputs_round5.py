"""A full disk or a read-only output folder (issue 48, item 8): every output goes through
the atomic writer (``fedspectral.atomic``), so a failed write ends in one line,
``fedspectral <cmd>: error: cannot write '<path>': <reason>`` (exit status 2), with every
file of the folder as it was and no temporary file; a command that can check its output
folder first refuses a read-only one before any work.  Each case is shown on a weakened
writer (the defence monkeypatched away) and on the real one.

The machine's tests may run as root, for whom ``chmod`` does not make a folder
read-only: the read-only file system (``EROFS``) and the refused permission (``EACCES``)
are then injected where the writer meets them (its temporary file, its rename)."""

from __future__ import annotations

import contextlib
import errno
import os

import numpy as np
import pytest

from fedspectral import atomic, cli, results
from fedspectral.results import write_results

ERRORS = {
    "ENOSPC": errno.ENOSPC,
    "EROFS": errno.EROFS,
    "EACCES": errno.EACCES,
}


def _raise(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


def _files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize("name", list(ERRORS))
@pytest.mark.parametrize("where", ["mkstemp", "fsync", "replace"])
def test_a_failed_write_is_one_line_naming_the_file_and_leaves_nothing(
    name, where, tmp_path, capsys, monkeypatch
):
    code = ERRORS[name]
    target = {
        "mkstemp": (atomic.tempfile, "mkstemp"),  # a read-only folder: no file can be made
        "fsync": (atomic.os, "fsync"),  # a full disk: the data cannot be flushed
        "replace": (atomic.os, "replace"),  # the rename refused
    }[where]
    monkeypatch.setattr(*target, _raise(code))
    out = tmp_path / "res" / "audit.json"
    out.parent.mkdir()
    rc = cli.main(["audit", "ldp-pca", "--samples", "2000", "--json", str(out)])
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert rc == 2 and len(err) == 1, cap.err
    assert err[0] == f"fedspectral audit: error: cannot write {str(out)!r}: {os.strerror(code)}"
    assert "PASS" not in cap.out and "FAIL" not in cap.out  # no verdict without its file
    assert _files(out.parent) == []  # no temporary file, no half-written one


def test_without_the_atomic_writer_a_full_disk_leaves_a_half_written_file(tmp_path):
    """What the atomic writer prevents: a plain write that fails half-way leaves a file
    that reads as a (truncated) result."""
    path = tmp_path / "results.json"

    def plain_write(p, data):  # the weakened writer: straight into the target
        with open(p, "wb") as fh:
            fh.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError):
        plain_write(path, b'{"config": {}, "records": []}\n')
    assert path.exists() and path.read_bytes().startswith(b'{"config"')
    path.unlink()
    with pytest.raises(OSError, match="No space left") as exc, pytest.MonkeyPatch.context() as m:
        m.setattr(atomic.os, "fsync", _raise(errno.ENOSPC))
        atomic.atomic_write_bytes(path, b'{"config": {}, "records": []}\n')
    assert atomic.write_failure(exc.value) == f"cannot write {str(path)!r}: No space left on device"
    assert _files(tmp_path) == []


def _results():
    return {"name": "r5", "config": {"name": "r5"}, "records": []}


def test_a_runs_result_files_land_together_or_not_at_all(tmp_path, monkeypatch):
    """``write_results`` is one write: a full disk on its third file leaves the folder as
    it was (a weakened writer, without the batch, leaves a new table beside no
    results.json)."""
    out = tmp_path / "run"
    allow = [1]
    real = atomic.os.fsync

    def fsync(fd):  # the first file is flushed, then the disk is full
        if allow[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        allow[0] -= 1
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    with monkeypatch.context() as m:
        m.setattr(results, "atomic_batch", contextlib.nullcontext)
        with pytest.raises(OSError):
            write_results(_results(), out)
    assert _files(out) == ["rounds.csv"]  # weakened: a table of a run with no results
    for f in out.iterdir():
        f.unlink()
    allow[0] = 1
    with pytest.raises(OSError, match="No space left"):
        write_results(_results(), out)
    assert _files(out) == []
    allow[0] = 10
    write_results(_results(), out)
    assert _files(out) == ["config.yaml", "results.json", "rounds.csv"]


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod does not stop writes")
def test_a_read_only_folder_is_refused_before_any_work(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc = cli.main(["audit", "ldp-pca", "--samples", "2000", "--json", str(ro / "a.json")])
        err = capsys.readouterr().err
        assert rc == 2 and "is not writable" in err and _files(ro) == []
    finally:
        ro.chmod(0o755)


def test_the_flower_apps_check_their_output_folder_before_any_work(tmp_path, monkeypatch):
    """``flwr run`` with an ``out-dir`` that is a file, or in a folder this user cannot
    write: refused before the grid is used (``grid=None`` here: any use would raise)."""
    import tomllib
    from pathlib import Path

    from flwr.app import Context, RecordDict
    from flwr.common.config import flatten_dict

    from fedspectral.fed.flower.apps.runner import train_server_main
    from fedspectral.pca.flower.app import pca_server_main

    doc = tomllib.loads((Path(__file__).parents[1] / "flower" / "pyproject.toml").read_text())
    defaults = flatten_dict(doc["tool"]["flwr"]["app"]["config"])
    (tmp_path / "file").write_text("x")

    def ctx(**rc):
        return Context(
            run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config={**defaults, **rc}
        )

    for main in (train_server_main, pca_server_main):
        with pytest.raises(ValueError, match=r"run config out-dir .* is a file, not a folder"):
            main(None, ctx(**{"out-dir": str(tmp_path / "file" / "run")}))
        with monkeypatch.context() as m:  # as a read-only folder reads to os.access
            m.setattr("fedspectral.inputs.os.access", lambda *a, **k: False)
            with pytest.raises(ValueError, match=r"run config out-dir .* is not writable"):
                main(None, ctx(**{"out-dir": str(tmp_path / "out")}))
    assert not (tmp_path / "out").exists()


def test_the_ldp_pca_apps_two_files_land_together(tmp_path, monkeypatch):
    from fedspectral.pca.flower import app

    out = tmp_path / "pca"
    rc = {"out-dir": str(out)}
    monkeypatch.setattr(app, "_opt", lambda rc, key: rc.get(key))
    monkeypatch.setattr(app, "result_line", lambda result: "line")
    calls = [0]
    real = atomic.os.fsync

    def fsync(fd):  # the JSON is flushed, the subspace file meets a full disk
        calls[0] += 1
        if calls[0] > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"):
        app._write({"n": 3}, np.eye(3), rc)
    assert _files(out) == []  # no ldp_pca.json without its subspace
    calls[0] = -10
    app._write({"n": 3}, np.eye(3), rc)
    assert _files(out) == ["ldp_pca.json", "ldp_pca_subspace.npy"]
    assert np.array_equal(np.load(out / "ldp_pca_subspace.npy"), np.eye(3))
