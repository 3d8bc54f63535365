"""``flwr run flower/`` as a new user runs it: Flower's default local simulation.

A fresh Flower home (no ``config.toml``: ``flwr`` writes its default, whose ``local``
connection starts a local simulation SuperLink in the background) and nothing started
by hand.  That SuperLink installs the app's dependencies at run time (its default):
the app declares none, so the step installs nothing and needs no package index.  One
round of the app's default experiment (FedSC on digits, 2 virtual SuperNodes, DP on),
with a strict node policy in the SuperLink's environment that the virtual nodes do not
follow (theirs comes with the simulation); then a ``dp=false`` run that every node
refuses, which fails with one line giving their reason and marks its folder failed;
then every process of the runs -- the SuperLink Flower left behind included -- is
stopped, and none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedspectral.fed.flower.deploy.local import free_port

APP_DIR = Path(__file__).resolve().parents[2] / "flower"

pytestmark = pytest.mark.slow


def _tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``tag`` (``NAME=value``)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if tag.encode() in env and stat[stat.rindex(")") + 2] != "Z":
            out.append(int(d.name))
    return out


def _stop(tag: str) -> None:
    """SIGTERM the process groups of the tagged processes, then SIGKILL what is left."""
    own = os.getpgrp()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _tagged(tag):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                pgid = os.getpgid(pid)
                if pgid != own:
                    os.killpg(pgid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + 10.0
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.2)


def test_flwr_run_flower_app_on_the_default_local_simulation(tmp_path) -> None:
    home, out = tmp_path / "flwr-home", tmp_path / "out"
    strict = tmp_path / "strict-policy.toml"
    strict.write_text("[privacy]\nmax-epsilon = 0.01\n")  # would refuse every release
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        # a strict policy in the SuperLink's environment: the simulation's virtual nodes
        # follow the app's local policy whatever environment the SuperLink started in
        "FEDSPECTRAL_NODE_POLICY": str(strict),
        # the local SuperLink's ports, free ones instead of Flower's 39091/39093
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", None)  # Flower's default: on
    tag = f"FLWR_HOME={home}"
    flwr = str(Path(sys.executable).parent / "flwr")

    def run(config: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [flwr, "run", str(APP_DIR), "--stream", "--run-config", config],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    try:
        for _ in range(3):
            res = run(f'num-server-rounds=1 out-dir="{out}"')
            log = res.stdout + res.stderr
            # `flwr` gives the SuperLink it starts a fixed 15 s to come up (then kills it);
            # on a loaded machine the imports alone can take longer: try again, as a user
            # would
            if "Failed to start local SuperLink" not in log:
                break
        assert res.returncode == 0, log
        assert "Starting local SuperLink" in log  # nothing was started by hand
        assert "No additional application dependencies needed installation" in log, log
        results = json.loads((out / "results.json").read_text())
        assert (results["rounds_done"], results["engine"]) == (1, "flower")
        eps = results["records"][0]["epsilon_rdp"]
        assert eps is not None and 0 < eps <= 3.0  # dp-epsilon = 3 over the planned rounds
        # the ServerApp's lines, through Flower's logger (what `flwr log` shows): round 0
        # (untrained), then round 1 with the replies of each phase
        assert re.search(r"round 0/1 \(untrained\) knn_projector=\S+ knn_backbone=\S+", log)
        line = re.search(
            r"round 1/1 share 2/2 train 2/2 loss=(\S+) .*eps=(\S+) \(delta=1e-05\)", log
        )
        assert line is not None, log
        assert float(line.group(2)) == pytest.approx(eps, rel=1e-3)
        assert f"results in {out}" in log
        assert log.count("is a smoke run") <= 1, log  # the note once
        assert "FutureWarning" not in log and "Manually terminating" not in log, log
        # dp=false: every node refuses FedSC's non-private share phase; the run fails with
        # their reason (flwr run itself exits 0: Flower's behaviour) instead of ending
        # "done" as FedAvg+SC; its checkpoint is in a folder of its own
        res = run("num-server-rounds=1 dp=false")
        log = res.stdout + res.stderr
        assert res.returncode == 0, log
        assert "every client asked in fedsc's 'share' phase (2) refused or failed" in log, log
        assert "allow-nonprivate" in log and "fedspectral: done" not in log, log
        # one line, no Ray traceback, no metrics line for the failed round, no warning
        # that is not the user's business (issue 46)
        assert log.count("fedspectral: run FAILED: ") == 1, log
        assert log.count("PolicyRefusal: ") == 1, log
        for noise in ("Traceback", "FutureWarning", "Manually terminating", "round 1/1"):
            assert noise not in log, (noise, log)
        status = subprocess.run(
            [flwr, "ls", "--format", "json"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        runs = json.loads(status.stdout[status.stdout.index("{") :])["runs"]
        assert sorted(r["status"] for r in runs) == ["finished:completed", "finished:failed"]
        failed = next(r for r in runs if r["status"] == "finished:failed")
        run_dir = tmp_path / "results" / "flower_app" / f"run-{failed['run-id']}"
        assert (run_dir / "checkpoint.pt").is_file(), sorted(tmp_path.rglob("*"))
        assert "allow-nonprivate" in (run_dir / "FAILED").read_text()  # marked failed
    finally:
        _stop(tag)
    assert _tagged(tag) == []
