"""Atomic file writes (bottom layer, no project imports): the bytes go to a temporary file
in the target's folder, are flushed to disk, and replace the target in one ``os.replace``,
so a reader sees the old file or the new one, never a partial write.

The file gets the mode an ordinary ``open(path, "w")`` would give it: ``0o666`` less the
process's umask (``0644`` under the usual umask ``022``).  ``tempfile.mkstemp`` creates its
file ``0600`` whatever the umask, which would leave every result unreadable by the group
on a shared machine; the mode is set on the temporary file before the rename.

:func:`atomic_batch` makes several files one write: inside it, :func:`atomic_write_bytes`
only writes (and flushes) its temporary file; when the block ends without an exception
every temporary file is renamed onto its target, and when it raises (a full disk on the
fifth file) every temporary file is removed, so a command that writes a report of many
files leaves all of them new or none of them touched.  Renames take no disk space, so
once every temporary file is written the renames do not fail for want of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

__all__ = ["WRITE_TARGET", "atomic_batch", "atomic_write_bytes", "current_umask", "write_failure"]

#: the temporary files (temporary path, target) of the innermost open :func:`atomic_batch`
_BATCH: ContextVar[list[tuple[str, Path]] | None] = ContextVar("fedspectral_batch", default=None)


@contextmanager
def atomic_batch() -> Iterator[None]:
    """Every :func:`atomic_write_bytes` inside the block lands together at its end, or,
    when the block raises, none does (their temporary files are removed).  Nested
    blocks join the outer one."""
    if _BATCH.get() is not None:
        yield
        return
    staged: list[tuple[str, Path]] = []
    token = _BATCH.set(staged)
    try:
        yield
    except BaseException:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    finally:
        _BATCH.reset(token)
    done = 0
    try:
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise _named(exc, path) from exc
            done += 1
    finally:
        for tmp, _ in staged[done:]:
            if os.path.exists(tmp):
                os.unlink(tmp)


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
        batch = _BATCH.get()
        if batch is not None:
            batch.append((tmp, path))  # renamed when the batch ends
            return path
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _named(exc, path) from exc
        raise
    return path


#: the attribute of an ``OSError`` raised by a write here: the path it could not write
#: (the command line says ``cannot write '<path>': <reason>`` for it)
WRITE_TARGET = "fedspectral_write_target"


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` (a full disk says which file it could not write), marked
    as a failed write of it (:data:`WRITE_TARGET`)."""
    if exc.filename is None or str(exc.filename) != str(path):
        exc = type(exc)(exc.errno, exc.strerror or str(exc), str(path))
    setattr(exc, WRITE_TARGET, str(path))
    return exc


def write_failure(exc: BaseException) -> str | None:
    """``cannot write '<path>': <reason>`` for an ``OSError`` of a write here, else ``None``."""
    path = getattr(exc, WRITE_TARGET, None)
    if not isinstance(exc, OSError) or path is None:
        return None
    return f"cannot write {path!r}: {exc.strerror or type(exc).__name__}"
