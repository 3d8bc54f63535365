"""Batched SimCLR augmentation: per-sample equality with torchvision's functional
ops, identity parameters, determinism, per-sample randomness, probabilities."""

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from fedspectral.data.augment import (
    AugmentParams,
    Normalize,
    SimCLRAugment,
    hsv_to_rgb,
    rgb_to_hsv,
)

REF_OPS = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)


def _reference(x: torch.Tensor, p: AugmentParams, size: int, color: bool) -> torch.Tensor:
    """The same parameters applied image by image with torchvision's functional ops."""
    out = []
    c = x.shape[1]
    ops = (0, 1, 2, 3) if c == 3 else (0, 1)
    for i in range(len(x)):
        t, left, h, w = (int(v) for v in p.box[i])
        y = TF.resized_crop(x[i], t, left, h, w, [size, size], antialias=False)
        if p.flip[i]:
            y = TF.horizontal_flip(y)
        if color and p.jitter[i]:
            for op in p.order[i].tolist():
                if op in ops:
                    y = REF_OPS[op](y, float(p.factors[i, op]))
        if color and c == 3 and p.gray[i]:
            y = TF.rgb_to_grayscale(y, num_output_channels=3)
        out.append(y)
    return torch.stack(out)


@pytest.mark.parametrize(("channels", "size", "out_size"), [(3, 16, 16), (1, 12, 12), (3, 10, 14)])
@pytest.mark.parametrize("color", [True, False])
def test_matches_torchvision_per_sample(channels, size, out_size, color) -> None:
    torch.manual_seed(0)
    x = torch.rand(48, channels, size, size)
    aug = SimCLRAugment(out_size, color=color)
    p = aug.sample_params(48, size, size, torch.Generator().manual_seed(5))
    got = aug.apply(x, p)
    ref = _reference(x, p, out_size, color)
    assert got.shape == (48, channels, out_size, out_size)
    # float32 rounding only (operations are evaluated in another order)
    assert (got - ref).abs().max() < 1e-5
    assert got.min() >= 0 and got.max() <= 1
    if color and channels == 3:  # the test exercised every branch
        assert p.jitter.any() and (~p.jitter).any() and p.gray.any() and p.flip.any()


def test_identity_params_reproduce_input() -> None:
    for c in (1, 3):
        x = torch.rand(5, c, 9, 9)
        y = SimCLRAugment(9).apply(x, AugmentParams.identity(5, 9, 9))
        assert (y - x).abs().max() < 1e-6


def test_flip_only_is_exact_mirror() -> None:
    x = torch.rand(3, 3, 8, 8)
    p = AugmentParams.identity(3, 8, 8)
    p.flip[:] = True
    y = SimCLRAugment(8).apply(x, p)
    assert (y - x.flip(-1)).abs().max() < 1e-6


def test_seeded_determinism_and_per_sample_randomness() -> None:
    aug = SimCLRAugment(16)
    x = torch.rand(1, 3, 16, 16).expand(32, -1, -1, -1).contiguous()  # 32 copies of one image
    a = aug(x, torch.Generator().manual_seed(1))
    b = aug(x, torch.Generator().manual_seed(1))
    c = aug(x, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # identical inputs, different outputs: parameters are drawn per sample
    flat = a.flatten(1)
    assert torch.cdist(flat, flat).fill_diagonal_(1.0).min() > 0
    p = aug.sample_params(32, 16, 16, torch.Generator().manual_seed(1))
    assert len({tuple(r) for r in p.box.tolist()}) > 16  # crops differ between samples


def test_grayscale_channels_equal() -> None:
    x = torch.rand(6, 3, 8, 8)
    aug = SimCLRAugment(8, gray_p=1.0)
    y = aug(x, torch.Generator().manual_seed(0))
    assert torch.equal(y[:, 0], y[:, 1]) and torch.equal(y[:, 1], y[:, 2])
    z = SimCLRAugment(8, gray_p=0.0, jitter_p=0.0)(x, torch.Generator().manual_seed(0))
    assert not torch.equal(z[:, 0], z[:, 1])


def test_probabilities_and_crop_area() -> None:
    """Bernoulli rates within 5 binomial sd (n = 20000) and crop areas in the scale range."""
    aug = SimCLRAugment(32)
    n = 20000
    p = aug.sample_params(n, 32, 32, torch.Generator().manual_seed(0))
    for flag, rate in ((p.flip, 0.5), (p.jitter, 0.8), (p.gray, 0.2)):
        sd = (rate * (1 - rate) / n) ** 0.5
        assert abs(flag.float().mean().item() - rate) < 5 * sd
    area = p.box[:, 2] * p.box[:, 3] / (32 * 32)
    assert area.min() >= 0.2 - 0.03 and area.max() <= 1.0  # integer rounding of the box
    top, left, h, w = p.box.unbind(1)
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + h <= 32).all() and (left + w <= 32).all()
    f = p.factors
    assert f[:, :3].min() >= 0.6 and f[:, :3].max() <= 1.4
    assert f[:, 3].abs().max() <= 0.1
    # each of the 24 orders appears, roughly uniformly
    codes = (p.order * torch.tensor([64, 16, 4, 1])).sum(1)
    counts = torch.bincount(codes, minlength=256)
    assert (counts > 0).sum() == 24 and counts.max() < 2 * n / 24


def test_views() -> None:
    aug = SimCLRAugment(12)
    x = torch.rand(7, 1, 28, 28)
    v = aug.views(x, 3, torch.Generator().manual_seed(0))
    assert v.shape == (3, 7, 1, 12, 12)
    assert not torch.equal(v[0], v[1])
    v2 = aug.views(x, 3, torch.Generator().manual_seed(0))
    assert torch.equal(v, v2)


def test_hsv_roundtrip() -> None:
    x = torch.rand(4, 3, 16, 16)
    x[0, :, 0, 0] = 0.5  # grey pixel: hue undefined, saturation 0
    assert (hsv_to_rgb(rgb_to_hsv(x)) - x).abs().max() < 1e-5


def test_validation() -> None:
    with pytest.raises(ValueError, match="crop_scale"):
        SimCLRAugment(8, crop_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="jitter_p"):
        SimCLRAugment(8, jitter_p=1.5)
    with pytest.raises(ValueError, match="size"):
        SimCLRAugment(0)
    with pytest.raises(ValueError, match="jitter"):
        SimCLRAugment(8, jitter=(0.4, 0.4, 0.4, 0.6))
    with pytest.raises(ValueError, match="n_views"):
        SimCLRAugment(8).views(torch.rand(2, 1, 8, 8), 0)
    with pytest.raises(ValueError, match="B x C x H x W"):
        SimCLRAugment(8)(torch.rand(1, 8, 8))


def test_normalize() -> None:
    norm = Normalize.for_dataset("cifar10")
    x = torch.rand(2, 3, 4, 4)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    assert torch.allclose(norm(x), (x - mean) / std)
    assert norm.state_dict() == {}
    with pytest.raises(ValueError, match="1 channels"):
        norm(torch.rand(2, 1, 4, 4))
    with pytest.raises(ValueError, match="std must be > 0"):
        Normalize([0.5], [0.0])


def _affine_grid_reference(
    p: AugmentParams, n: int, height: int, width: int, size: int
) -> torch.Tensor:
    """The crop grid as F.affine_grid of the 2 x 3 map, then clamped to the crop's outer
    pixel centres (the construction the separable grid replaces)."""
    top, left, h, w = p.box.unbind(1)
    sign = 1.0 - 2.0 * p.flip.float()
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = w / width * sign
    theta[:, 0, 2] = (2.0 * left + w) / width - 1.0
    theta[:, 1, 1] = h / height
    theta[:, 1, 2] = (2.0 * top + h) / height - 1.0
    grid = torch.nn.functional.affine_grid(theta, [n, 1, size, size], align_corners=False)
    lo = torch.stack(((2.0 * left + 1.0) / width, (2.0 * top + 1.0) / height), 1) - 1.0
    hi = torch.stack(((2.0 * (left + w) - 1.0) / width, (2.0 * (top + h) - 1.0) / height), 1) - 1.0
    return torch.maximum(torch.minimum(grid, hi.view(n, 1, 1, 2)), lo.view(n, 1, 1, 2))


@pytest.mark.parametrize(
    ("height", "width", "size"), [(28, 28, 28), (8, 8, 8), (32, 32, 32), (28, 28, 24), (20, 30, 28)]
)
def test_separable_crop_grid_is_bit_equal_to_affine_grid(height, width, size) -> None:
    """Bit equality (not a tolerance), so that views, and every run built on them, are
    unchanged by the faster grid; 8 draws of 500 samples, crop scale down to 0.08."""
    from fedspectral.data.augment import _crop_grid

    aug = SimCLRAugment(size, crop_scale=(0.08, 1.0))
    g = torch.Generator().manual_seed(height * width + size)
    for _ in range(8):
        p = aug.sample_params(500, height, width, g)
        got = _crop_grid(p.box, p.flip.float(), height, width, size)
        assert torch.equal(got, _affine_grid_reference(p, 500, height, width, size))
