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
signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["alive", "descendants", "stop_tree"]


def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """``(ppid, pgid, state, start time)`` of ``pid``, or ``None`` if it is gone."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[2]), rest[0], int(rest[19])


def descendants(roots: Iterable[int]) -> dict[int, int]:
    """``{pid: start time}`` of ``roots`` and all their live descendants."""
    parent: dict[int, list[int]] = {}
    try:
        entries = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        entries = []
    info = {}
    for pid in entries:
        st = _stat(pid)
        if st is not None:
            info[pid] = st
            parent.setdefault(st[0], []).append(pid)
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        st = info.get(pid) or _stat(pid)
        if st is None:
            continue
        out[pid] = st[3]
        todo.extend(parent.get(pid, []))
    return out


def alive(tree: dict[int, int]) -> dict[int, int]:
    """The processes of ``tree`` still running (same start time, not a zombie)."""
    out = {}
    for pid, start in tree.items():
        st = _stat(pid)
        if st is not None and st[3] == start and st[2] != "Z":
            out[pid] = start
    return out


def _signal(tree: dict[int, int], sig: int) -> None:
    own = os.getpgrp()
    for pid in alive(tree):
        st = _stat(pid)
        if st is None:
            continue
        if st[1] == pid and st[1] != own:  # a group leader: its whole group
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
