"""Normalisation layers shared by the backbones.

``norm`` names
--------------
``"batch"``
    ``BatchNorm`` **without running statistics** (``track_running_stats=False``):
    it normalises with the statistics of the current batch in train *and* eval
    mode alike; there are no buffers for federated averaging to mix.  Caveat: the
    output for a sample depends on the other samples of its batch, so ``z(x; θ)`` is
    not a function of ``x`` alone.  On one-class clients every layer then removes
    the class mean of the client's batch (measured between-class share of the
    variance of ``h`` at initialisation, Fashion-MNIST small CNN: 0.003 in one-class
    batches against 0.246 in mixed batches), so a client trains a representation
    different from the one evaluated on mixed batches; it also breaks DP-CalR's
    per-sample sensitivity.  No default config uses it; explicit opt-in only.
``"batch_running"``
    Standard ``BatchNorm`` with running mean/variance buffers (momentum 0.1),
    used in eval mode; these buffers are part of the ``state_dict``.
``"group"``
    ``GroupNorm`` with the largest group count in (32, 16, 8, 4, 2, 1) that
    leaves at least 4 channels per group (16 ch -> 4 groups, 64 -> 16,
    256 -> 32); independent of the batch, so safe under one-class clients
    (between-class share 0.377 in one-class and mixed batches alike).  The CPU
    default.
``"none"``
    Identity (the official FedSC code is normalisation-free: Fixup ResNet-20 and a
    plain projector; the paper-scale configs use ``fixup_resnet20`` with ``none``).
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
