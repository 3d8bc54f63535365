"""A small convolutional encoder for 28 x 28 (and smaller) one-channel images."""

from __future__ import annotations

import torch
from torch import nn

from fedspectral.checks import check_int
from fedspectral.models.norm import check_norm, make_norm
from fedspectral.models.pool import MaxPool2x2


class SmallCNN(nn.Module):
    """Three 3x3 conv blocks and global average pooling.

    ``conv(in -> w) - norm - ReLU - maxpool2 - conv(w -> 2w) - norm - ReLU -
    maxpool2 - conv(2w -> 4w) - norm - ReLU - global average pool``; the output
    (``feature_dim = 4 * width``) is the representation :math:`h`.
    On 28 x 28 input the maps are 28 -> 14 -> 7; any input of at least 4 x 4 works
    (digits: 8 -> 4 -> 2). The pools are :class:`~fedspectral.models.pool.MaxPool2x2`
    (``nn.MaxPool2d(2)``'s values, faster without autograd).

    Parameters
    ----------
    in_channels : int
    norm : {"group", "batch", "batch_running", "none"}
        See :mod:`fedspectral.models.norm`.
    width : int
        Channels of the first block.
    """

    def __init__(self, in_channels: int = 1, norm: str = "group", width: int = 32) -> None:
        super().__init__()
        in_channels = check_int("in_channels", in_channels, low=1)
        width = check_int("width", width, low=1)
        check_norm(norm)
        w = width
        bias = norm == "none"

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, cout, 3, padding=1, bias=bias),
                make_norm(norm, cout),
                nn.ReLU(inplace=True),
            ]

        self.body = nn.Sequential(
            *block(in_channels, w),
            MaxPool2x2(),
            *block(w, 2 * w),
            MaxPool2x2(),
            *block(2 * w, 4 * w),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.in_channels = in_channels
        self.norm = norm
        self.feature_dim = 4 * w
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``B x C x H x W`` -> ``B x feature_dim``."""
        return self.body(x)
