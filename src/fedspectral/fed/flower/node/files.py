"""The node's own files (its policy, its secure-sum roster and identity key), read failing
closed: what is not a small regular file of UTF-8 text is refused, its path named."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MAX_POLICY_BYTES", "read_node_file"]

#: the largest policy file a node reads
MAX_POLICY_BYTES = 1 << 20


def read_node_file(path: str | os.PathLike, where: str, text: bool = True) -> bytes:
    """The bytes of one of the node's own files (a policy, a roster, a key), failing
    closed with ``where`` named: a path that is not a regular file (a folder, a device,
    a pipe: said so, never called missing), one over :data:`MAX_POLICY_BYTES`, or (with
    ``text``) bytes that are not UTF-8."""
    import stat

    p = Path(path).expanduser()
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{where} not found") from None
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({type(exc).__name__}: {exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{where} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a character device"
            if stat.S_ISCHR(st.st_mode)
            else "a block device"
            if stat.S_ISBLK(st.st_mode)
            else "a named pipe"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        raise ValueError(f"{where} is {kind}, not a file")
    if st.st_size > MAX_POLICY_BYTES:
        raise ValueError(
            f"{where} has {st.st_size} bytes, more than a policy file may ({MAX_POLICY_BYTES})"
        )
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({type(exc).__name__}: {exc})") from None
    if text:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{where} is not UTF-8 text (invalid byte at offset {exc.start})"
            ) from None
    return raw
