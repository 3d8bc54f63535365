"""Normalisation layers shared by the backbones.

``norm`` names
--------------
``"batch"``
    ``BatchNorm`` **without running statistics** (``track_running_stats=False``):
    it normalises with the statistics of the current batch in train *and* eval
    mode alike. There are no buffers, so nothing for federated averaging to mix
    and no train/eval mismatch (averaged running variances of one-class clients
    would miss the between-class variance). Consequence: outputs depend on the
    batch they are computed in — evaluate with reasonably large batches (a batch
    of one sample is rejected by torch in train mode).
``"batch_running"``
    Standard ``BatchNorm`` with running mean/variance buffers (momentum 0.1),
    used in eval mode; these buffers are part of the ``state_dict``.
``"group"``
    ``GroupNorm`` with the largest group count in (32, 16, 8, 4, 2, 1) that
    leaves at least 4 channels per group (16 ch -> 4 groups, 64 -> 16,
    256 -> 32); independent of the batch, so safe under one-class clients.
``"none"``
    Identity.
"""

from __future__ import annotations

from torch import nn

NORMS: tuple[str, ...] = ("batch", "batch_running", "group", "none")


def check_norm(norm: str) -> str:
    """Return ``norm`` if valid, else raise ``ValueError`` listing the valid names."""
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; valid: {', '.join(NORMS)}")
    return norm


def group_count(channels: int) -> int:
    """Groups used by ``norm="group"`` for ``channels`` channels."""
    for g in (32, 16, 8, 4, 2, 1):
        if channels % g == 0 and channels // g >= 4:
            return g
    return 1


def make_norm(norm: str, channels: int, dims: int = 2) -> nn.Module:
    """A normalisation layer over ``channels`` (``dims=2``: images, ``1``: vectors)."""
    check_norm(norm)
    if norm == "none":
        return nn.Identity()
    if norm == "group":
        return nn.GroupNorm(group_count(channels), channels)
    bn = nn.BatchNorm2d if dims == 2 else nn.BatchNorm1d
    return bn(channels, track_running_stats=(norm == "batch_running"))
