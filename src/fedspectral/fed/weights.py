r"""A network's weights as named numpy arrays: what every payload carries.

* :func:`net_to_arrays` / :func:`arrays_to_net` -- a torch module's ``state_dict`` as
  ``{name: numpy array}`` (copies) and back (strict: names and shapes must match);
* :func:`mean_arrays` -- the (weighted) mean of such dicts, entry by entry (FedAvg's
  aggregation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["arrays_to_net", "mean_arrays", "net_to_arrays"]


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
    (seed 001, Algorithm 1: :math:`\\theta^t = |\\mathcal J^t|^{-1}\\sum_j \\theta_j`).
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
