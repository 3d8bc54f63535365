"""Backbones: shapes, feature_dim, parameter counts, Fixup initialisation, norms."""

import math

import pytest
import torch
from torch import nn

from fedspectral.models import (
    BACKBONES,
    FixupResNet20,
    SmallCNN,
    build_backbone,
    resnet20,
)
from fedspectral.models.norm import group_count
from fedspectral.models.resnet import _shortcut_a


def _nparams(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize(
    ("name", "channels", "size", "dim"),
    [
        ("small_cnn", 1, 28, 128),
        ("small_cnn", 1, 8, 128),  # digits
        ("resnet20", 3, 32, 64),
        ("fixup_resnet20", 3, 32, 512),
        ("resnet18", 3, 32, 512),
        ("resnet50", 3, 32, 2048),
    ],
)
def test_shapes_and_feature_dim(name: str, channels: int, size: int, dim: int) -> None:
    torch.manual_seed(0)
    net = build_backbone(name, channels)
    assert net.feature_dim == dim
    with torch.no_grad():
        out = net(torch.rand(2, channels, size, size))
    assert out.shape == (2, dim) and torch.isfinite(out).all()


def test_parameter_counts() -> None:
    # He et al.'s ResNet-20 has 0.27 M parameters: 269,722 with its 10-way classifier
    # (64 * 10 + 10 = 650), i.e. 269,072 without it.
    assert _nparams(resnet20(norm="batch")) == 269_722 - 650
    # same conv weights with GroupNorm (same affine parameter count)
    assert _nparams(resnet20(norm="group")) == 269_072
    # widened x 8 without norm layers: convs scale by 64; Fixup adds 5 scalars per block + 1
    convs = 269_072 - 2 * (16 * 7 + 32 * 6 + 64 * 6)  # minus BN affine parameters
    fix = FixupResNet20(width=8)
    assert _nparams(fix) == 64 * convs - 64 * 16 * 3 * 9 + 8 * 16 * 3 * 9 + 9 * 5 + 1
    assert 17e6 < _nparams(fix) < 17.2e6
    # torchvision ResNet-18/50 minus the classifier and with a 3x3 stem: 11.17 M / 23.50 M
    assert abs(_nparams(build_backbone("resnet18", 3, norm="batch")) - 11.17e6) < 0.01e6
    assert abs(_nparams(build_backbone("resnet50", 3, norm="batch")) - 23.50e6) < 0.01e6
    assert 90_000 < _nparams(SmallCNN()) < 100_000


def test_fixup_residual_branches_start_at_zero() -> None:
    torch.manual_seed(0)
    net = FixupResNet20(width=2)
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)) for m in net.modules())
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        h = torch.relu(net.bias1(net.conv1(x)))
        expected = h
        for blk in net.blocks:
            assert torch.count_nonzero(blk.residual(h)) == 0
            out = blk(h)
            # the block is its (identity or option-A) shortcut; h >= 0 so relu is inert
            assert torch.equal(out, _shortcut_a(h, blk.stride, blk.cout))
            if blk.stride == 1 and blk.conv1.in_channels == blk.cout:
                assert torch.equal(out, h)
            h = out
            expected = _shortcut_a(expected, blk.stride, blk.cout)
        assert torch.allclose(net(x), expected.mean(dim=(2, 3)))
    # first conv of each branch: He std scaled by L^(-1/2), L = 9 (statistical, 5 %)
    assert net.num_branches == 9
    w = net.blocks[4].conv1.weight
    he = math.sqrt(2.0 / (w.shape[0] * 9))
    assert abs(w.std().item() / (he / 3.0) - 1.0) < 0.05
    # gradients reach the zero-initialised convs
    net(x).sum().backward()
    assert all(blk.conv2.weight.grad.abs().sum() > 0 for blk in net.blocks)


@pytest.mark.parametrize("name", ["small_cnn", "resnet20"])
def test_batch_norm_uses_batch_statistics_in_eval(name: str) -> None:
    torch.manual_seed(0)
    net = build_backbone(name, 3, norm="batch")
    x = torch.rand(8, 3, 32, 32)
    train_out = net.train()(x)
    eval_out = net.eval()(x)
    assert torch.allclose(train_out, eval_out, atol=1e-6)
    assert not any("running" in k for k in net.state_dict())
    # a batch of different data changes the normalisation (outputs depend on the batch)
    both = net(torch.cat([x, 5 * torch.rand(8, 3, 32, 32)]))[:8]
    assert not torch.allclose(both, eval_out, atol=1e-3)
    # standard BatchNorm on request: running buffers, eval differs from train
    std_bn = build_backbone(name, 3, norm="batch_running")
    assert any("running_mean" in k for k in std_bn.state_dict())
    std_bn.train()(x)
    assert not torch.allclose(std_bn(x), std_bn.eval()(x), atol=1e-4)


def test_group_norm_is_per_sample() -> None:
    torch.manual_seed(0)
    net = build_backbone("small_cnn", 1)  # default norm="group"
    assert any(isinstance(m, nn.GroupNorm) for m in net.modules())
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(net(x)[:2], net(x[:2]), atol=1e-6)
    assert [group_count(c) for c in (16, 32, 64, 128, 256, 2048, 6)] == [4, 8, 16, 32, 32, 32, 1]


def test_build_backbone_errors() -> None:
    with pytest.raises(ValueError, match="unknown backbone 'vgg'.*small_cnn"):
        build_backbone("vgg", 3)
    with pytest.raises(ValueError, match="normalisation-free.*'batch'"):
        build_backbone("fixup_resnet20", 3, norm="batch")
    with pytest.raises(ValueError, match="unknown norm 'layer'"):
        build_backbone("resnet20", 3, norm="layer")
    with pytest.raises(ValueError, match="width must be >= 1, got 0"):
        build_backbone("small_cnn", 1, width=0)
    assert set(BACKBONES) == {"small_cnn", "resnet20", "fixup_resnet20", "resnet18", "resnet50"}
