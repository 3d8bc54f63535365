"""Stopping a process *tree*: the processes we started and everything they started.

Flower's SuperLink starts its SuperExec detached (a new session), the SuperExec starts
``flwr-simulation``, and Ray, started there, puts its own processes (GCS, raylet, workers)
in process groups of their own.  Signalling the process group of the SuperLink we
started therefore leaves them running (and, once their parent is gone, they belong to
init).  :func:`stop_tree` instead takes a snapshot of the whole tree of descendants
(``/proc``: parent links) *before* any signal, signals every process of it and the groups
they lead (never the caller's own group), re-reads the tree while it waits (a process
started during the shutdown is caught too), and sends ``SIGKILL`` to whatever is left
after ``timeout`` seconds.  A process is identified by its pid *and* its start time, so
a pid reused after a process exits is never signalled.

Linux only (``/proc``); elsewhere only the given processes and their groups are
signalled.  The package's one reader of ``/proc/<pid>/stat`` is here (:func:`proc_stat`,
:func:`proc_pids`); :mod:`.local` and :mod:`.node_runtime` ask it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ProcStat",
    "alive",
    "descendants",
    "live_processes_in_groups",
    "proc_pids",
    "proc_stat",
    "stop_tree",
]


class ProcStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` the package reads."""

    ppid: int
    pgid: int
    state: str  # "R", "S", ..., "Z" (a zombie: exited, not reaped)
    start: int  # start time (clock ticks after boot): a reused pid has another


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of ``pid``, or ``None`` if it is gone (or there is no ``/proc``).
    The command name (field 2) may hold spaces and parentheses: the fields are read after
    its last ``)``."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return ProcStat(int(rest[1]), int(rest[2]), rest[0], int(rest[19]))


def proc_pids() -> list[int]:
    """The pids listed in ``/proc`` (``[]`` without it)."""
    try:
        return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return []


def live_processes_in_groups(pgids: Iterable[int]) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is one of ``pgids``."""
    want = set(pgids)
    return [
        pid
        for pid in proc_pids()
        if (st := proc_stat(pid)) is not None and st.state != "Z" and st.pgid in want
    ]


def descendants(roots: Iterable[int]) -> dict[int, int]:
    """``{pid: start time}`` of ``roots`` and all their live descendants."""
    parent: dict[int, list[int]] = {}
    info = {}
    for pid in proc_pids():
        st = proc_stat(pid)
        if st is not None:
            info[pid] = st
            parent.setdefault(st.ppid, []).append(pid)
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        st = info.get(pid) or proc_stat(pid)
        if st is None:
            continue
        out[pid] = st.start
        todo.extend(parent.get(pid, []))
    return out


def alive(tree: dict[int, int]) -> dict[int, int]:
    """The processes of ``tree`` still running (same start time, not a zombie)."""
    out = {}
    for pid, start in tree.items():
        st = proc_stat(pid)
        if st is not None and st.start == start and st.state != "Z":
            out[pid] = start
    return out


def _signal(tree: dict[int, int], sig: int) -> None:
    own = os.getpgrp()
    for pid in alive(tree):
        st = proc_stat(pid)
        if st is None:
            continue
        if st.pgid == pid and st.pgid != own:  # a group leader: its whole group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_tree(roots: Iterable[int], timeout: float = 10.0) -> None:
    """``SIGTERM`` ``roots`` and all their descendants (and the groups they lead), wait up
    to ``timeout`` seconds for them to exit, then ``SIGKILL`` what is left."""
    roots = list(roots)
    if not Path("/proc").is_dir():  # pragma: no cover - not Linux: the groups only
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in roots:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
            time.sleep(0 if sig == signal.SIGKILL else min(timeout, 2.0))
        return
    tree = descendants(roots)
    _signal(tree, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tree.update(descendants(alive(tree)))  # started during the shutdown
        if not alive(tree):
            return
        time.sleep(0.1)
    for _ in range(3):
        tree.update(descendants(alive(tree)))
        _signal(tree, signal.SIGKILL)
        time.sleep(0.1)
        if not alive(tree):
            return
