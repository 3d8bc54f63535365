"""Atomic file writes (bottom layer, no project imports): the bytes go to a temporary file
in the target's folder, are flushed to disk, and replace the target in one ``os.replace``,
so a reader sees the old file or the new one, never a partial write.

The file gets the mode an ordinary ``open(path, "w")`` would give it: ``0o666`` less the
process's umask (``0644`` under the usual umask ``022``).  ``tempfile.mkstemp`` creates its
file ``0600`` whatever the umask, which would leave every result unreadable by the group
on a shared machine; the mode is set on the temporary file before the rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "current_umask"]


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux
    ``/proc/self/status``); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # a restrictive value for the instant it is in force
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (parent folders created); returns the path.

    ``mode``: the file's permission bits (default ``0o666 & ~umask``, as ``open`` gives)."""
    path = Path(path)
    mode = (0o666 & ~current_umask()) if mode is None else mode
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _named(exc, path) from exc
    try:
        if hasattr(os, "fchmod"):  # POSIX
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _named(exc, path) from exc
        raise
    return path


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` (a full disk says which file it could not write)."""
    if exc.filename is not None and str(exc.filename) == str(path):
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))
