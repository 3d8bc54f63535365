"""Backbones (small CNN, ResNet-20, Fixup ResNet-20, ResNet-18/50) and SSL heads."""

from __future__ import annotations

from torch import nn

from fedspectral.models.heads import Predictor, Projector, SSLNet, module_dim
from fedspectral.models.norm import NORMS, check_norm, make_norm
from fedspectral.models.resnet import (
    FixupResNet20,
    ResNet20,
    resnet18_cifar,
    resnet20,
    resnet50_cifar,
)
from fedspectral.models.small_cnn import SmallCNN

BACKBONES: tuple[str, ...] = ("small_cnn", "resnet20", "fixup_resnet20", "resnet18", "resnet50")


def build_backbone(name: str, in_channels: int, norm: str | None = None, **kw: object) -> nn.Module:
    """Build a backbone by name; the result has a ``feature_dim`` attribute.

    Parameters
    ----------
    name : {"small_cnn", "resnet20", "fixup_resnet20", "resnet18", "resnet50"}
    in_channels : int
    norm : str, optional
        ``"group"`` (default), ``"batch"``, ``"batch_running"`` or ``"none"``
        (see :mod:`fedspectral.models.norm`). ``fixup_resnet20`` has no
        normalisation: ``None`` or ``"none"`` only.
    **kw
        Passed on: ``width`` (small_cnn, resnet20, fixup_resnet20; fixup default 8).

    Raises
    ------
    ValueError
        Unknown ``name`` or ``norm``, or a normalisation asked of ``fixup_resnet20``.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; valid: {', '.join(BACKBONES)}")
    if name == "fixup_resnet20":
        if norm not in (None, "none"):
            raise ValueError(f"fixup_resnet20 is normalisation-free; got norm={norm!r}")
        return FixupResNet20(in_channels=in_channels, **kw)  # type: ignore[arg-type]
    norm = check_norm("group" if norm is None else norm)
    if name == "small_cnn":
        return SmallCNN(in_channels=in_channels, norm=norm, **kw)  # type: ignore[arg-type]
    if name == "resnet20":
        return resnet20(in_channels=in_channels, norm=norm, **kw)  # type: ignore[arg-type]
    if kw:
        raise ValueError(f"{name} takes no extra arguments, got {sorted(kw)}")
    builder = resnet18_cifar if name == "resnet18" else resnet50_cifar
    return builder(in_channels=in_channels, norm=norm)


__all__ = [
    "BACKBONES",
    "NORMS",
    "FixupResNet20",
    "Predictor",
    "Projector",
    "ResNet20",
    "SSLNet",
    "SmallCNN",
    "build_backbone",
    "check_norm",
    "make_norm",
    "module_dim",
    "resnet18_cifar",
    "resnet20",
    "resnet50_cifar",
]
