r"""Residual backbones for 32 x 32 images.

``resnet20``
    The CIFAR ResNet-20 of He et al. (2016, Sec. 4.2): a 3x3 stem with 16
    channels, three stages of three basic blocks (16, 32, 64 channels, stride 2
    at stages 2 and 3), parameter-free "option A" shortcuts (subsample + zero
    channel padding), global average pooling; 0.27 M parameters, 64-d output.
    The FedSC paper's backbone for SVHN and CIFAR-10.
``FixupResNet20``
    The same topology without any normalisation layer, initialised by Fixup
    (Zhang, Dauphin & Ma, ICLR 2019) and widened (``width=8``: 128/256/512
    channels, 512-d output, about 17 M parameters), the backbone of the official
    FedSC code. Fixup: scalar biases before each conv and activation, a scalar
    multiplier after the last conv of every residual branch, that last conv
    initialised to zero (so every residual branch outputs 0 at initialisation)
    and the first conv of every branch He-initialised then scaled by
    :math:`L^{-1/(2m-2)}` with :math:`L` the number of branches and :math:`m = 2`
    layers per branch, i.e. :math:`L^{-1/2}`.
``resnet18_cifar``, ``resnet50_cifar``
    torchvision's ResNet-18/50 adapted to 32 x 32: the 7x7 stride-2 stem becomes a
    3x3 stride-1 conv and the max-pool is removed; the classifier is dropped
    (outputs 512-d / 2048-d).

All backbones map ``B x C x H x W`` to ``B x feature_dim`` and expose
``feature_dim``. ``norm`` is explained in :mod:`fedspectral.models.norm`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fedspectral.checks import check_int
from fedspectral.models.norm import check_norm, make_norm


def _check_pos_int(name: str, v: object) -> int:
    return check_int(name, v, low=1)


def _shortcut_a(x: torch.Tensor, stride: int, cout: int) -> torch.Tensor:
    """Option-A shortcut: spatial subsampling and zero-padding of the channels."""
    if stride != 1:
        x = x[:, :, ::stride, ::stride]
    extra = cout - x.shape[1]
    if extra:
        x = F.pad(x, (0, 0, 0, 0, extra // 2, extra - extra // 2))
    return x


class BasicBlockA(nn.Module):
    """``relu(norm(conv(relu(norm(conv(x))))) + shortcut_A(x))``."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str) -> None:
        super().__init__()
        bias = norm == "none"
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=bias)
        self.bn1 = make_norm(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=bias)
        self.bn2 = make_norm(norm, cout)
        self.stride, self.cout = stride, cout

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.residual(x) + _shortcut_a(x, self.stride, self.cout))


class ResNet20(nn.Module):
    """CIFAR ResNet-(6n+2) with ``n = num_blocks`` (20 for n = 3); see module docstring.

    Parameters
    ----------
    in_channels : int
    norm : {"batch", "batch_running", "group", "none"}
    width : int
        Channel multiplier (stages have 16, 32, 64 times ``width`` channels).
    num_blocks : int
        Blocks per stage.
    """

    def __init__(
        self, in_channels: int = 3, norm: str = "batch", width: int = 1, num_blocks: int = 3
    ) -> None:
        super().__init__()
        in_channels = _check_pos_int("in_channels", in_channels)
        width = _check_pos_int("width", width)
        num_blocks = _check_pos_int("num_blocks", num_blocks)
        check_norm(norm)
        chans = [16 * width, 32 * width, 64 * width]
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, chans[0], 3, 1, 1, bias=norm == "none"),
            make_norm(norm, chans[0]),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        cin = chans[0]
        for s, cout in enumerate(chans):
            for b in range(num_blocks):
                stride = 2 if (s > 0 and b == 0) else 1
                blocks.append(BasicBlockA(cin, cout, stride, norm))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = chans[-1]
        self.in_channels, self.norm = in_channels, norm
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.blocks(self.stem(x)))


def resnet20(in_channels: int = 3, norm: str = "batch", width: int = 1) -> ResNet20:
    """CIFAR ResNet-20 (He et al. 2016), 64-d features at ``width=1``."""
    return ResNet20(in_channels=in_channels, norm=norm, width=width, num_blocks=3)


class _Bias(nn.Module):
    """A learnable scalar added to the input (Fixup)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


class FixupBlock(nn.Module):
    r"""Fixup basic block.

    ``out = relu(scale * conv2(relu(conv1(x + a1) + b1) + a2) + b2 + shortcut_A(x + a1))``
    with scalar biases ``a1, b1, a2, b2`` (0 at init), scalar ``scale`` (1 at init)
    and ``conv2`` zero at init.
    """

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bias1a, self.bias1b = _Bias(), _Bias()
        self.bias2a, self.bias2b = _Bias(), _Bias()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.scale = nn.Parameter(torch.ones(1))
        self.stride, self.cout = stride, cout

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch (zero at initialisation)."""
        out = F.relu(self.bias1b(self.conv1(self.bias1a(x))))
        return self.bias2b(self.conv2(self.bias2a(out)) * self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.residual(x) + _shortcut_a(self.bias1a(x), self.stride, self.cout))


class FixupResNet20(nn.Module):
    """Normalisation-free, widened ResNet-20 with Fixup initialisation.

    Parameters
    ----------
    in_channels : int
    width : int
        Channel multiplier; 8 (the official FedSC code) gives a 512-d output.
    num_blocks : int
        Blocks per stage (3 for ResNet-20).
    """

    def __init__(self, in_channels: int = 3, width: int = 8, num_blocks: int = 3) -> None:
        super().__init__()
        in_channels = _check_pos_int("in_channels", in_channels)
        width = _check_pos_int("width", width)
        num_blocks = _check_pos_int("num_blocks", num_blocks)
        chans = [16 * width, 32 * width, 64 * width]
        self.conv1 = nn.Conv2d(in_channels, chans[0], 3, 1, 1, bias=False)
        self.bias1 = _Bias()
        blocks: list[FixupBlock] = []
        cin = chans[0]
        for s, cout in enumerate(chans):
            for b in range(num_blocks):
                blocks.append(FixupBlock(cin, cout, 2 if (s > 0 and b == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = chans[-1]
        self.in_channels, self.norm = in_channels, "none"
        self.num_branches = len(blocks)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        factor = self.num_branches ** (-0.5)  # L^(-1/(2m-2)), m = 2
        for blk in blocks:
            w = blk.conv1.weight
            std = math.sqrt(2.0 / (w.shape[0] * w.shape[2] * w.shape[3])) * factor
            nn.init.normal_(w, 0.0, std)
            nn.init.zeros_(blk.conv2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.blocks(F.relu(self.bias1(self.conv1(x)))))


class TorchvisionResNetCIFAR(nn.Module):
    """A torchvision ResNet with a 3x3 stride-1 stem, no max-pool and no classifier."""

    def __init__(self, arch: str, in_channels: int = 3, norm: str = "batch") -> None:
        super().__init__()
        from torchvision.models import resnet18, resnet50

        builders = {"resnet18": resnet18, "resnet50": resnet50}
        if arch not in builders:
            raise ValueError(f"unknown arch {arch!r}; valid: {', '.join(builders)}")
        in_channels = _check_pos_int("in_channels", in_channels)
        check_norm(norm)
        net = builders[arch](weights=None, norm_layer=lambda c: make_norm(norm, c))
        net.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        net.maxpool = nn.Identity()
        self.feature_dim = net.fc.in_features
        net.fc = nn.Identity()
        self.net = net
        self.in_channels, self.norm = in_channels, norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def resnet18_cifar(in_channels: int = 3, norm: str = "batch") -> TorchvisionResNetCIFAR:
    """ResNet-18 for 32 x 32 images, 512-d features."""
    return TorchvisionResNetCIFAR("resnet18", in_channels, norm)


def resnet50_cifar(in_channels: int = 3, norm: str = "batch") -> TorchvisionResNetCIFAR:
    """ResNet-50 for 32 x 32 images, 2048-d features."""
    return TorchvisionResNetCIFAR("resnet50", in_channels, norm)
