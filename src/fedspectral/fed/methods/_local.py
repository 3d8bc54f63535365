r"""The client's local SGD loop, shared by every method that trains a network.

:func:`sgd_epochs` runs ``epochs`` passes over ``rt.data``: a random permutation of
the client's samples per epoch (from ``rt.generator``), batches of
:math:`B = \min(\text{batch\_size}, n)` (the incomplete last batch dropped), and per
batch ``loss = batch_loss(xb, idx)``, ``backward``, optional gradient-norm clipping,
an SGD step (fresh optimizer per call: momentum does not cross rounds) and an
optional ``after_step()``.  The per-batch callable does the augmentation, so the
generator is consumed in the order permutation, then that batch's augmentations.
Used by :func:`fedspectral.fed.methods.sc.local_train` (the SC methods) and
:func:`fedspectral.fed.methods.baseline.train_two_views` (the baselines).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from fedspectral.checks import NonFiniteError, nonfinite_raises
from fedspectral.fed.protocol import ClientRuntime

__all__ = ["sgd_epochs"]


def sgd_epochs(
    rt: ClientRuntime,
    params: Sequence[nn.Parameter],
    batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    grad_clip: float | None = None,
    after_step: Callable[[], None] | None = None,
    check_finite: bool = True,
) -> dict[str, float]:
    r"""Local SGD of ``batch_loss`` over ``params`` in ``rt.net`` (put in train mode).

    Parameters
    ----------
    rt : ClientRuntime
        The client: ``net``, ``data.images``, ``device``, ``augment``, ``generator``.
    params : sequence of nn.Parameter
        What the optimizer updates (and what gradient clipping measures).
    batch_loss : callable
        ``batch_loss(xb, idx)`` with ``xb`` the batch's images on the device and
        ``idx`` their sample indices (CPU); returns the scalar loss.
    lr, epochs, batch_size, momentum, weight_decay, grad_clip
        SGD settings; ``grad_clip=None`` means no clipping.
    after_step : callable or None
        Called after every optimizer step (e.g. BYOL's target EMA update).
    check_finite : bool
        Raise :class:`~fedspectral.checks.NonFiniteError` on a non-finite loss (before
        its backward; default on -- the loss is read every step anyway).

    Returns
    -------
    dict
        ``loss`` (mean over steps), ``steps``, ``num-examples``.
    """
    net = rt.net
    net.train()
    images = rt.data.images
    dev = torch.device(rt.device)
    if images.device != dev:
        images = images.to(dev)
    n = images.shape[0]
    b = min(batch_size, n)
    steps_per_epoch = n // b
    params = list(params)
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    g = rt.generator
    total, steps = 0.0, 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        for s in range(steps_per_epoch):
            idx = perm[s * b : (s + 1) * b]
            xb = images[idx.to(dev)] if dev.type != "cpu" else images[idx]
            loss = batch_loss(xb, idx)
            value = float(loss.detach())
            if check_finite and not math.isfinite(value) and nonfinite_raises():
                raise NonFiniteError(
                    f"client {rt.cid}: non-finite loss {value} at local step {steps}"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            if after_step is not None:
                after_step()
            total += value
            steps += 1
    return {"loss": total / max(steps, 1), "steps": float(steps), "num-examples": float(n)}
