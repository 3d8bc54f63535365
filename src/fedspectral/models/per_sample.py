r"""Per-sample networks by construction: an allow-list of layers that treat each sample alone.

DP-CalR's sensitivity (and every sample-level release of a representation) needs
:math:`z(x;\theta)` to be a function of :math:`x` alone.  A run-time probe cannot prove
that: with :math:`N` rows a batch-normalised value is at most :math:`\sqrt{N-1}` in
magnitude, so ``BatchNorm(beta = -2.8) -> ReLU`` is identically zero on every probe
batch of 8 rows and data-dependent on a 500-row pass.  So a node decides from the
modules, not from behaviour: :func:`check_per_sample` admits a network only if *every*
module in it is, by exact type, one of :data:`PER_SAMPLE_LAYERS` -- convolutions,
linear maps, per-sample normalisations (GroupNorm, LayerNorm, none), pointwise
activations, pooling within a sample, and this package's own containers, whose
``forward`` only composes such layers.  Batch statistics anywhere, in any mode
(BatchNorm with or without running statistics: a server chooses the buffers too), are
refused.  Exact types: a subclass may override ``forward``.
"""

from __future__ import annotations

from torch import nn

from fedspectral.data.augment import Normalize
from fedspectral.models.heads import Predictor, Projector, SSLNet
from fedspectral.models.pool import MaxPool2x2
from fedspectral.models.resnet import (
    BasicBlockA,
    FixupBlock,
    FixupResNet20,
    ResNet20,
    TorchvisionResNetCIFAR,
    _Bias,
)
from fedspectral.models.small_cnn import SmallCNN

__all__ = ["PER_SAMPLE_LAYERS", "check_per_sample", "per_sample_violations"]


def _package_layers() -> tuple[type, ...]:
    # torchvision's residual containers only compose their children (each checked too)
    from torchvision.models import resnet as tv

    return (
        Normalize,
        Predictor,
        Projector,
        SSLNet,
        MaxPool2x2,
        BasicBlockA,
        FixupBlock,
        FixupResNet20,
        ResNet20,
        TorchvisionResNetCIFAR,
        _Bias,
        SmallCNN,
        tv.ResNet,
        tv.BasicBlock,
        tv.Bottleneck,
    )


#: torch layers whose output for a sample depends on that sample alone
_TORCH_LAYERS: tuple[type, ...] = (
    nn.Sequential,
    nn.ModuleList,
    nn.Identity,
    nn.Flatten,
    nn.Unflatten,
    nn.Linear,
    nn.Bilinear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Softplus,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
)


def _allowed() -> frozenset[type]:
    return frozenset(_TORCH_LAYERS + _package_layers())


#: the torch layer types :func:`check_per_sample` admits (exact types; this package's
#: own containers and torchvision's residual blocks are added when it runs)
PER_SAMPLE_LAYERS: frozenset[type] = frozenset(_TORCH_LAYERS)


def per_sample_violations(net: nn.Module) -> list[tuple[str, str]]:
    """``[(module path, type name)]`` of the modules of ``net`` outside the allow-list
    (batch-statistics layers first)."""
    allowed = _allowed()
    named = list(net.named_modules())
    batch = [
        (n or "<root>", type(m).__name__)
        for n, m in named
        if isinstance(m, nn.modules.batchnorm._NormBase)
    ]
    other = [
        (n or "<root>", type(m).__name__)
        for n, m in named
        if type(m) not in allowed and not isinstance(m, nn.modules.batchnorm._NormBase)
    ]
    return batch + other


def check_per_sample(net: nn.Module, what: str = "the encoder") -> None:
    """Refuse (``ValueError``) a network any module of which is not a per-sample layer."""
    if not isinstance(net, nn.Module):
        raise TypeError(f"{what} must be a torch.nn.Module, got {type(net).__name__}")
    bad = per_sample_violations(net)
    if bad:
        shown = ", ".join(f"{p} ({t})" for p, t in bad[:3])
        raise ValueError(
            f"{what} is not per-sample by construction: {shown}"
            f"{' and more' if len(bad) > 3 else ''} not on the allow-list of per-sample "
            "layers (batch statistics are refused in any mode; use group or no "
            "normalisation) -- a sample-level DP release needs z(x) to depend on x alone"
        )
