"""``SIGTERM`` (or Ctrl-C) during ``fedspectral train --engine flower`` stops every process
the run started and removes its temporary folders (issue 24, "Nothing lost").

One Flower simulation run, in a ``fedspectral train`` subprocess: once round 1 is
checkpointed (the SuperLink, its detached SuperExec, ``flwr-simulation`` and Ray's
processes are all up), the test records the whole process tree under the command, sends
it ``SIGTERM``, and checks: exit status 143, every recorded process gone (none of the
8-10 the first fuzzing round saw left running), the run's ``fedspectral-flower-*``
temporary folders removed, and nothing recreated there afterwards (the ServerApp's
hand-back once arrived in a folder the caller had removed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from fedspectral.config import to_dict
from fedspectral.fed.flower.deploy.processes import alive, descendants, stop_tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc needed"),
]


def _cmdlines(pids) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):  # the process is gone
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


def test_sigterm_stops_the_flower_simulation_and_removes_its_folders(tiny, tmp_path):
    cfg = to_dict(tiny(rounds=50))  # never finishes within the test
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    tmp = Path(tempfile.mkdtemp(prefix="fsi", dir="/tmp"))  # short: Ray's socket paths
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fedspectral.cli",
            "train",
            "--config",
            str(tmp_path / "cfg.yaml"),
            "--engine",
            "flower",
            "--out",
            str(out),
            "--quiet",
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    tree: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 480
        while not (out / "checkpoint.pt").exists():  # round 1 done: everything is up
            assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "round 1 was not checkpointed in time"
            time.sleep(0.5)
        tree = descendants([proc.pid])
        names = " ".join(_cmdlines(tree))
        assert "flwr-simulation" in names and "raylet" in names, names
        assert any(p.name.startswith("fedspectral-flower") for p in tmp.iterdir())
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 143, output[-3000:]
        assert "fedspectral train: terminated" in output
        assert alive(tree) == {}, _cmdlines(alive(tree))
        left = [p.name for p in tmp.iterdir() if p.name.startswith("fedspectral")]
        assert left == []
        time.sleep(3)  # nothing arrives later either
        assert [p.name for p in tmp.iterdir() if p.name.startswith("fedspectral")] == []
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_tree(list(alive(tree)) or [proc.pid], timeout=5.0)
        shutil.rmtree(tmp, ignore_errors=True)
