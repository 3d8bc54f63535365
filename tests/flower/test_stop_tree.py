"""Stopping what a run started: :func:`fedspectral.fed.flower.deploy.processes.stop_tree` against
signalling only the started process's group (what ``LocalDeployment.stop`` did, which
left Flower's detached SuperExec, ``flwr-simulation`` and Ray running)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from fedspectral.fed.flower.deploy.processes import (
    alive,
    descendants,
    live_processes_in_groups,
    proc_pids,
    proc_stat,
    stop_tree,
)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="Linux /proc needed")

#: a root process that starts a grandchild in a session of its own (as the SuperLink starts
#: its SuperExec) and one in its own group, then waits
TREE = "setsid sleep 300 & (exec setsid sleep 301) & sleep 302 & wait"


def _session_leader(pid: int) -> bool:
    """Whether ``pid`` runs ``sleep`` as the leader of its own session (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return comm == "sleep" and int(fields[3]) == pid  # fields[3]: the session id


def _start_tree() -> tuple[subprocess.Popen, dict[int, int]]:
    root = subprocess.Popen(["sh", "-c", TREE], start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tree = descendants([root.pid])
        # sh and its three sleeps, the two setsid ones already in sessions of their own (a
        # child seen before its setsid() call still belongs to the root's group)
        if len(tree) >= 4 and sum(map(_session_leader, tree)) >= 2:
            return root, tree
        time.sleep(0.05)
    stop_tree([root.pid], 1.0)
    raise TimeoutError("the test tree did not start")


def test_signalling_the_group_leaves_detached_descendants_running():
    """The control: the old way (SIGKILL to the root's process group) misses them."""
    root, tree = _start_tree()
    try:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait(timeout=10)
        time.sleep(0.2)
        left = alive(tree)
        assert len(left) == 2  # the two setsid sleeps survive their parent's group
    finally:
        for pid in alive(tree):
            os.kill(pid, signal.SIGKILL)


def test_stop_tree_stops_every_descendant():
    root, tree = _start_tree()
    stop_tree([root.pid], timeout=10.0)
    root.wait(timeout=10)
    assert alive(tree) == {}


def test_a_reused_pid_is_never_signalled():
    root, tree = _start_tree()
    try:
        stale = {pid: start + 1 for pid, start in tree.items()}  # other start times
        assert alive(stale) == {}
    finally:
        stop_tree([root.pid], timeout=5.0)
        root.wait(timeout=10)


def test_the_one_proc_reader_reads_this_process():
    st = proc_stat(os.getpid())
    assert st is not None and (st.ppid, st.pgid, st.state) == (os.getppid(), os.getpgrp(), "R")
    assert os.getpid() in proc_pids() and os.getpid() in live_processes_in_groups([st.pgid])
    assert proc_stat(2**22 + 1) is None  # above pid_max: gone


def test_a_command_name_with_parentheses_and_spaces_is_read_past(tmp_path):
    exe = tmp_path / "a) (b c"
    exe.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(exe), "30"])
    try:
        st = proc_stat(p.pid)
        assert st is not None and st.ppid == os.getpid() and st.state in "RSD"
    finally:
        p.kill()
        p.wait()
