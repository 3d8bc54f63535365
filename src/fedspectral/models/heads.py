r"""Projection and prediction heads, and the encoder :math:`z = g(f(x))`.

The FedSC representation is the projector output :math:`z` (the official code
measures KNN accuracy on it); the backbone output :math:`h = f(x)` is what a
linear probe reads.
"""

from __future__ import annotations

import operator

import torch
from torch import nn

from fedspectral.checks import check_int
from fedspectral.models.norm import check_norm, make_norm


def _check_dim(name: str, v: object) -> int:
    return check_int(name, v, low=1)


def module_dim(module: nn.Module, attr: str) -> int:
    """The integer attribute ``attr`` of ``module``: a backbone's ``feature_dim``, a
    projector's ``out_dim`` (``TypeError`` when it is not an integer)."""
    return operator.index(getattr(module, attr))


class Projector(nn.Module):
    """``Linear(in_dim, hidden) - [norm] - ReLU - Linear(hidden, out)``.

    The official FedSC code uses ``Linear(512, 1024) - ReLU - Linear(1024, 512)``
    with no normalisation (``norm=None``, the default).

    Parameters
    ----------
    in_dim, hidden, out : int
    norm : None or {"none", "batch", "batch_running", "group"}
        Normalisation after the hidden layer (``"batch"``: batch statistics in
        train and eval mode, see :mod:`fedspectral.models.norm`).
    """

    def __init__(
        self, in_dim: int, hidden: int = 1024, out: int = 512, norm: str | None = None
    ) -> None:
        super().__init__()
        in_dim = _check_dim("in_dim", in_dim)
        hidden = _check_dim("hidden", hidden)
        out = _check_dim("out", out)
        norm = check_norm("none" if norm is None else norm)
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            make_norm(norm, hidden, dims=1),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, out),
        )
        self.in_dim, self.out_dim = in_dim, out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class Predictor(Projector):
    """BYOL predictor ``Linear - BatchNorm - ReLU - Linear`` (``out`` defaults to ``in_dim``).

    ``norm="batch"`` by default (BYOL, Grill et al. 2020), ``"none"`` drops it.
    """

    def __init__(
        self, in_dim: int, hidden: int = 1024, out: int | None = None, norm: str | None = "batch"
    ) -> None:
        super().__init__(in_dim, hidden, in_dim if out is None else out, norm)


class SSLNet(nn.Module):
    """Backbone followed by a projector; optionally an input normalisation first.

    Parameters
    ----------
    backbone : nn.Module
        Maps images to ``B x backbone.feature_dim``.
    projector : nn.Module
        Maps backbone features to the representation ``z``.
    input_norm : nn.Module, optional
        Applied to the images first (e.g. :class:`fedspectral.data.augment.Normalize`),
        so that training and evaluation share one path.
    """

    def __init__(
        self, backbone: nn.Module, projector: nn.Module, input_norm: nn.Module | None = None
    ) -> None:
        super().__init__()
        if not isinstance(backbone, nn.Module) or not isinstance(projector, nn.Module):
            raise TypeError("backbone and projector must be torch.nn.Module instances")
        self.backbone = backbone
        self.projector = projector
        self.input_norm = input_norm if input_norm is not None else nn.Identity()

    @property
    def feature_dim(self) -> int:
        """Dimension of the backbone output ``h``."""
        return module_dim(self.backbone, "feature_dim")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone representation ``h = f(x)``."""
        return self.backbone(self.input_norm(x))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both ``(h, z)`` in one pass."""
        h = self.features(x)
        return h, self.projector(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Projector output ``z = g(f(x))``."""
        return self.projector(self.features(x))
