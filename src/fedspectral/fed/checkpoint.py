r"""Checkpoint files: tensors + JSON, read with ``torch.load(weights_only=True)``.

A checkpoint never holds a pickled Python object.  :func:`save_checkpoint` splits the
state into

* ``tensors``: every numpy array of the state, as a ``torch.Tensor`` (flat dict);
* ``meta``: one JSON string of everything else (numbers, strings, lists, dicts), where
  each array is replaced by a reference into ``tensors``;
* ``fingerprint`` (the config's, see :func:`fedspectral.fed.validation.config_fingerprint`),
  ``format`` and ``digest``: SHA-256 over the format, fingerprint, meta and every tensor's
  name, dtype, shape and bytes.

and writes it with ``torch.save`` to a temporary file in the same folder, then
``os.replace`` (atomic).  :func:`load_checkpoint` reads it with
``torch.load(weights_only=True)`` -- PyTorch's restricted unpickler, which only builds
tensors and plain containers, so a crafted file cannot run code -- then checks, in this
order and before anything from the file is used: the layout and ``format``, the
``fingerprint`` (when one is expected), the ``digest`` (so a flipped bit is an error,
not a silently different state), and only then decodes ``meta``.  Every problem is a
:class:`CheckpointError` (a ``ValueError``) naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedspectral.atomic import atomic_write_bytes
from fedspectral.inputs import check_input_file

__all__ = ["FORMAT", "CheckpointError", "load_checkpoint", "read_fingerprint", "save_checkpoint"]

FORMAT = "fedspectral-checkpoint/2"
_TORCH_KINDS = "fbiu"  # numpy kinds stored as tensors (others go to JSON)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, foreign or of another config."""


# ----------------------------------------------------------------------------- encoding
def _encode(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.kind in _TORCH_KINDS and x.dtype.byteorder in "=|":
            try:
                t = torch.from_numpy(np.array(x, order="C", copy=True))  # keeps 0-d arrays 0-d
            except TypeError:  # a dtype torch does not have (e.g. uint32 on old torch)
                t = None
            if t is not None:
                key = f"t{len(tensors)}"
                tensors[key] = t
                return {"__tensor__": key}
        return {"__ndarray__": x.tolist(), "dtype": x.dtype.str}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        if (
            all(isinstance(k, str) for k in x)
            and "__tensor__" not in x
            and "__ndarray__" not in x
            and "__tuple__" not in x
            and "__items__" not in x
        ):
            return {k: _encode(v, tensors) for k, v in x.items()}
        return {"__items__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in x]}
    if isinstance(x, list):
        return [_encode(v, tensors) for v in x]
    if x is None or isinstance(x, bool | int | float | str):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} in a checkpoint")


def _decode(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, dict):
        if "__tensor__" in x:
            key = x["__tensor__"]
            if key not in tensors:
                raise CheckpointError(f"refers to a missing tensor {key!r}")
            return tensors[key].numpy().copy()
        if "__ndarray__" in x:
            return np.array(x["__ndarray__"], dtype=np.dtype(x["dtype"]))
        if "__tuple__" in x:
            return tuple(_decode(v, tensors) for v in x["__tuple__"])
        if "__items__" in x:
            return {_hashable(_decode(k, tensors)): _decode(v, tensors) for k, v in x["__items__"]}
        return {k: _decode(v, tensors) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v, tensors) for v in x]
    return x


def _hashable(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _digest(fingerprint: str, meta: str, tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for part in (FORMAT, fingerprint, meta):
        h.update(part.encode())
        h.update(b"\0")
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# ----------------------------------------------------------------------------- files
def save_checkpoint(path: str | os.PathLike, state: dict[str, Any], fingerprint: str) -> Path:
    """Write ``state`` (plain containers of numpy arrays, numbers and strings) atomically."""
    path = Path(path)
    tensors: dict[str, torch.Tensor] = {}
    meta = json.dumps(_encode(state, tensors), allow_nan=True)
    blob = {
        "format": FORMAT,
        "fingerprint": str(fingerprint),
        "meta": meta,
        "tensors": tensors,
        "digest": _digest(str(fingerprint), meta, tensors),
    }
    buf = io.BytesIO()
    torch.save(blob, buf)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _read_blob(path: Path) -> dict[str, Any]:
    try:
        check_input_file(path, "checkpoint")  # a directory, a FIFO, a device: named as such
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {str(path)!r} is empty")
    try:
        blob = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r} cannot be read safely ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else 'no detail'}); it is truncated, "
            f"corrupt, or not a fedspectral checkpoint"
        ) from exc
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} is not a {FORMAT} file (found {found!r})")
    if not (
        isinstance(blob.get("fingerprint"), str)
        and isinstance(blob.get("meta"), str)
        and isinstance(blob.get("digest"), str)
        and isinstance(blob.get("tensors"), dict)
        and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in blob["tensors"].items()
        )
    ):
        raise CheckpointError(f"checkpoint {str(path)!r} has a malformed layout")
    return blob


def read_fingerprint(path: str | os.PathLike) -> str:
    """The config fingerprint a checkpoint was written for (safe read, nothing decoded)."""
    return _read_blob(Path(path))["fingerprint"]


#: what to do about a checkpoint of another config, said by default (a training run's
#: output folder); callers that are not resuming a run pass their own advice
RESUME_ADVICE = "use another --out or drop --resume"


def load_checkpoint(
    path: str | os.PathLike, fingerprint: str | None = None, advice: str = RESUME_ADVICE
) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`, after the checks of the module docstring.

    ``advice`` ends the message of a fingerprint mismatch (what the caller's user can do).

    Raises
    ------
    CheckpointError
        Unreadable, truncated, empty, a directory, foreign, of another config
        (``fingerprint`` given and different), or corrupt (digest mismatch).
    """
    path = Path(path)
    blob = _read_blob(path)
    if fingerprint is not None and blob["fingerprint"] != fingerprint:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was written by a different config "
            f"(fingerprint {blob['fingerprint'][:16]} != {fingerprint}); {advice}"
        )
    if _digest(blob["fingerprint"], blob["meta"], blob["tensors"]) != blob["digest"]:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupt (its content does not match its digest)"
        )
    try:
        meta = json.loads(blob["meta"])
        state = _decode(meta, blob["tensors"])
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} has an undecodable state: {exc}") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds no state mapping")
    return state
