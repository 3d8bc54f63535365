"""Checks of the tensors a loss receives, shared by the loss families of this package.

Scalars (temperatures, ``mu``, ``alpha``) are checked with :mod:`fedspectral.checks`;
these helpers check what is specific to tensors: shape, dtype, device, finiteness of
the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedspectral.checks import NonFiniteError, nonfinite_raises

__all__ = ["check_2d", "check_alike", "check_same_shape", "finite_loss"]


def check_2d(name: str, z: Tensor) -> None:
    """``z`` is a floating-point tensor of shape (B, d) with B, d >= 1."""
    if not isinstance(z, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {z.dtype}")
    if z.ndim != 2:
        raise ValueError(f"{name} must have shape (B, d), got shape {tuple(z.shape)}")
    if z.shape[0] == 0 or z.shape[1] == 0:
        raise ValueError(
            f"{name} must have B >= 1 rows and d >= 1 columns, got shape {tuple(z.shape)}"
        )


def check_same_shape(names: tuple[str, str], a: Tensor, b: Tensor) -> None:
    """``a`` and ``b`` have the same shape (ValueError naming both)."""
    if a.shape != b.shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same shape, got "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )


def check_alike(names: Sequence[str], tensors: Sequence[Tensor]) -> None:
    """Same dtype and device for tensors that are combined (clear error, not RuntimeError)."""
    t0 = tensors[0]
    for name, t in zip(names[1:], tensors[1:], strict=True):
        if t.dtype != t0.dtype:
            raise TypeError(
                f"{names[0]} and {name} must have the same dtype, got {t0.dtype} and {t.dtype}"
            )
        if t.device != t0.device:
            raise ValueError(
                f"{names[0]} and {name} must be on the same device, got {t0.device} and {t.device}"
            )


def finite_loss(loss: Tensor, inputs: dict[str, Tensor]) -> Tensor:
    """``loss`` if finite; otherwise a :class:`NonFiniteError` naming the first
    non-finite input, or saying that finite inputs overflowed.  One scalar check per
    call (the training loop reads the loss anyway)."""
    if bool(torch.isfinite(loss.detach())) or not nonfinite_raises():
        return loss
    for name, t in inputs.items():
        if not bool(torch.isfinite(t.detach()).all()):
            raise NonFiniteError(
                f"{name} contains NaN or infinite values (the loss would be {float(loss.detach())})"
            )
    big = max(float(t.detach().abs().max()) for t in inputs.values())
    raise NonFiniteError(
        f"the loss overflows ({float(loss.detach())}) for finite inputs up to "
        f"{big:.3g} in magnitude; clip the rows (mu) or rescale the inputs"
    )
