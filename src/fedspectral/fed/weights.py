r"""A network's weights as named numpy arrays: what every payload carries.

* :func:`net_to_arrays` / :func:`arrays_to_net` -- a torch module's ``state_dict`` as
  ``{name: numpy array}`` (copies) and back (strict: names and shapes must match);
* :func:`check_weights` -- weights read from a file (a checkpoint, an exported encoder)
  against the shapes a model expects: every name, every shape, every value finite; the
  one check every load path (resume, ``export``, ``load_encoder``) runs before the
  weights are used;
* :func:`expected_shapes` -- those shapes, read from a model built on PyTorch's ``meta``
  device (no memory: a file asking for a width of 65536 is refused before anything of
  that size is allocated);
* :func:`mean_arrays` -- the (weighted) mean of such dicts, entry by entry (FedAvg's
  aggregation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["arrays_to_net", "check_weights", "expected_shapes", "mean_arrays", "net_to_arrays"]


def expected_shapes(build: Any) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the ``state_dict`` of the module ``build()`` returns, built on
    PyTorch's ``meta`` device (shapes only, no memory)."""
    import torch

    with torch.device("meta"):
        net = build()
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def check_weights(weights: Any, expected: Mapping[str, tuple[int, ...]], source: str) -> None:
    """``weights`` (``{name: array or tensor}``) has exactly the names of ``expected``,
    each with its shape, and every floating value finite; else ``ValueError`` naming
    ``source`` (the file), the weight and what is wrong -- before the weights are used,
    so that a state that passed its file's digest but holds a NaN or a tensor of another
    shape is named as such, not blamed later on the model or on a diverged run."""
    import torch

    if not isinstance(weights, Mapping):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"{source} holds no mapping of weights (found {type(weights).__name__})"
        )
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected), key=str)
    if missing or extra:
        raise ValueError(
            f"{source}: its weights do not match the model of its config: missing "
            f"{missing[:5]}, unexpected {extra[:5]}"
        )
    for k, shape in expected.items():
        w = weights[k]
        if isinstance(w, torch.Tensor):
            w = w.detach().cpu().numpy() if w.device.type != "meta" else None
        if not isinstance(w, np.ndarray):
            raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
                f"{source}: weight {k!r} is a {type(w).__name__}, not an array"
            )
        if tuple(w.shape) != tuple(shape):
            raise ValueError(
                f"{source}: weight {k!r} has shape {tuple(w.shape)}, the model of its "
                f"config expects {tuple(shape)}"
            )
        if w.dtype.kind not in "fiub":
            raise ValueError(f"{source}: weight {k!r} has dtype {w.dtype}, not a number")
        if w.dtype.kind == "f" and not np.isfinite(w).all():
            bad = int(np.size(w) - np.isfinite(w).sum())
            raise ValueError(
                f"{source}: weight {k!r} holds {bad} non-finite value(s) (NaN or inf); "
                f"the file is damaged or was written from a diverged state"
            )


def net_to_arrays(net: Any) -> dict[str, np.ndarray]:
    """``state_dict`` of a torch module as numpy arrays (copies)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def arrays_to_net(net: Any, weights: Mapping[str, np.ndarray]) -> None:
    """Load numpy weights into ``net`` in place (strict: names and shapes must match)."""
    import torch

    sd = net.state_dict()
    missing = set(sd) - set(weights)
    extra = set(weights) - set(sd)
    if missing or extra:
        raise ValueError(
            f"weights do not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(extra)[:5]}"
        )
    with torch.no_grad():
        for k, t in sd.items():
            src = torch.from_numpy(np.asarray(weights[k]))
            if src.shape != t.shape:
                raise ValueError(
                    f"weight {k!r} has shape {tuple(src.shape)}, model expects {tuple(t.shape)}"
                )
            t.copy_(src)


def mean_arrays(
    items: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float] | None = None
) -> dict[str, np.ndarray]:
    """(Weighted) mean of dicts of arrays, key by key, in float64 then cast back.

    Integer arrays (e.g. BatchNorm's ``num_batches_tracked``) are averaged and
    rounded.  ``weights`` are normalised to sum to 1; ``None`` is the plain mean
    (the FedSC paper, Algorithm 1: :math:`\\theta^t = |\\mathcal J^t|^{-1}\\sum_j \\theta_j`).
    """
    if not items:
        raise ValueError("mean_arrays needs at least one item")
    w = np.full(len(items), 1.0 / len(items)) if weights is None else np.asarray(weights, float)
    if w.shape != (len(items),) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"weights must be {len(items)} non-negative numbers, got {weights!r}")
    w = w / w.sum()
    out: dict[str, np.ndarray] = {}
    for k in items[0]:
        ref = np.asarray(items[0][k])
        acc = np.zeros(ref.shape, dtype=np.float64)
        for wi, it in zip(w, items, strict=True):
            acc += wi * np.asarray(it[k], dtype=np.float64)
        out[k] = (
            np.rint(acc).astype(ref.dtype)
            if np.issubdtype(ref.dtype, np.integer)
            else acc.astype(ref.dtype)
        )
    return out
