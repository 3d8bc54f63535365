r"""SimCLR-style augmentation of whole batches of image tensors.

The augmentation kernel :math:`\mathcal{A}(\cdot\,|\,\bar x)` of the FedSC paper
(the FedSC paper, Sec. 6: "RandomResizedCrop, ColorJitter, RandomHorizontalFlip and
RandomGrayscale as in standard SSL frameworks"; official code: crop scale
(0.2, 1), jitter (0.4, 0.4, 0.4, 0.1) with p = 0.8, grayscale p = 0.2). Each
sample of a batch gets its own random parameters, but every step is one
vectorised tensor operation over the batch (no per-image Python loop):

1. **Random resized crop + horizontal flip** — torchvision's
   ``RandomResizedCrop`` sampling rule (area fraction :math:`s \sim U(\text{scale})`,
   log aspect ratio :math:`\sim U(\log\frac34, \log\frac43)`, integer box, up to
   10 tries then a centre crop), drawn for all samples at once; the crop, the
   resize to ``size x size`` (bilinear, ``align_corners=False``, no
   anti-aliasing — crops are never larger than the image, so at ``size`` equal
   to the image size this only ever upsamples) and the flip are one batched
   ``grid_sample`` (its grid built separably, equal to ``affine_grid``'s); it
   equals torchvision's ``resized_crop(..., antialias=False)`` (+ ``hflip``) per
   sample up to rounding. With a box of the full image and no flip it is the identity.
2. **Colour jitter** with probability ``jitter_p``, per sample: brightness
   :math:`x\,b`, contrast :math:`c\,x + (1-c)\,\overline{\mathrm{gray}(x)}`,
   saturation :math:`s\,x + (1-s)\,\mathrm{gray}(x)`, hue shift of H in HSV by
   :math:`h`, each clamped to [0, 1], factors
   :math:`b, c, s \sim U[\max(0, 1-\beta), 1+\beta]`, :math:`h \sim U[-\eta, \eta]`
   (``torchvision.transforms.ColorJitter`` semantics), applied **in a random
   order drawn per sample** (as torchvision draws one per image).
3. **Grayscale** with probability ``gray_p``: :math:`0.2989R + 0.587G + 0.114B`
   copied to the three channels.

One-channel data (Fashion-MNIST, digits): crop + flip, and with ``color=True``
brightness and contrast jitter (random order, probability ``jitter_p``);
saturation, hue and grayscale have no meaning there and are skipped.
``color=False`` gives crop + flip only, for any number of channels.

Randomness comes only from the ``torch.Generator`` passed in (a CPU generator;
parameters are drawn on the CPU and moved to the batch's device), so a seeded
generator reproduces the views exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedspectral.checks import check_bool, check_int, check_real
from fedspectral.data.datasets import dataset_info

_GRAY = (0.2989, 0.587, 0.114)  # torchvision's tensor weights (PIL: 0.299)
_BRIGHTNESS, _CONTRAST, _SATURATION, _HUE = range(4)


@dataclass
class AugmentParams:
    """Per-sample random parameters of one :class:`SimCLRAugment` call (batch ``B``).

    ``box`` is ``B x 4`` float ``(top, left, height, width)`` in input pixels;
    ``flip`` bool ``B``; ``jitter`` bool ``B`` (colour jitter applied);
    ``factors`` ``B x 4`` (brightness, contrast, saturation, hue);
    ``order`` ``B x 4`` long, a permutation of the four jitter operations;
    ``gray`` bool ``B``.
    """

    box: torch.Tensor
    flip: torch.Tensor
    jitter: torch.Tensor
    factors: torch.Tensor
    order: torch.Tensor
    gray: torch.Tensor

    @classmethod
    def identity(cls, batch: int, height: int, width: int) -> AugmentParams:
        """Parameters under which :meth:`SimCLRAugment.apply` returns its input
        (when ``size`` equals the input size)."""
        box = torch.tensor([0.0, 0.0, float(height), float(width)]).repeat(batch, 1)
        false = torch.zeros(batch, dtype=torch.bool)
        factors = torch.tensor([1.0, 1.0, 1.0, 0.0]).repeat(batch, 1)
        order = torch.arange(4).repeat(batch, 1)
        return cls(box, false, false.clone(), factors, order, false.clone())


def _check_range(name: str, value: Sequence[float], lo: float, hi: float) -> tuple[float, float]:
    if len(value) != 2 or not lo <= value[0] <= value[1] <= hi:
        raise ValueError(f"{name} must be (a, b) with {lo} <= a <= b <= {hi}, got {value!r}")
    return float(value[0]), float(value[1])


def _check_prob(name: str, p: float) -> float:
    return check_real(name, p, low=0.0, high=1.0)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """Luma ``n x 1 x H x W`` of RGB ``n x 3 x H x W`` (ITU-R 601-2, as torchvision)."""
    return (_GRAY[0] * x[:, 0] + _GRAY[1] * x[:, 1] + _GRAY[2] * x[:, 2]).unsqueeze(1)


def _blend(x: torch.Tensor, other: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return (f * x + (1.0 - f) * other).clamp_(0.0, 1.0)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """Batched RGB -> HSV, all channels in [0, 1] (``n x 3 x H x W``)."""
    r, g, b = x.unbind(1)
    maxc, _ = x.max(dim=1)
    minc, _ = x.min(dim=1)
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    crd = torch.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / crd, (maxc - g) / crd, (maxc - b) / crd
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    is_b = ~is_r & ~is_g
    h = is_r * (bc - gc) + is_g * (2.0 + rc - bc) + is_b * (4.0 + gc - rc)
    h = torch.fmod(h / 6.0 + 1.0, 1.0)
    return torch.stack((h, s, maxc), dim=1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """Batched HSV -> RGB, inverse of :func:`rgb_to_hsv`."""
    h, s, v = x.unbind(1)
    h6 = h * 6.0
    i = torch.floor(h6)
    f = h6 - i
    i = i.to(torch.int64) % 6
    p = (v * (1.0 - s)).clamp_(0.0, 1.0)
    q = (v * (1.0 - s * f)).clamp_(0.0, 1.0)
    t = (v * (1.0 - s * (1.0 - f))).clamp_(0.0, 1.0)
    # sextant i -> (R, G, B) taken from (v, q, p, t)
    cand = torch.stack((v, q, p, t), dim=1)  # n x 4 x H x W
    table = torch.tensor(
        [[0, 3, 2], [1, 0, 2], [2, 0, 3], [2, 1, 0], [3, 2, 0], [0, 2, 1]], device=x.device
    )
    sel = table[i].permute(0, 3, 1, 2)  # n x 3 x H x W
    return torch.gather(cand, 1, sel)


def _crop_grid(
    box: torch.Tensor, flip: torch.Tensor, height: int, width: int, size: int
) -> torch.Tensor:
    """The ``grid_sample`` grid (``n x size x size x 2``) of each sample's crop box and flip.

    It is ``F.affine_grid`` (``align_corners=False``) of the axis-aligned affine map
    ``x -> (w/W * sign) x + (2 left + w)/W - 1``, ``y -> (h/H) y + (2 top + h)/H - 1``,
    clamped to the crop's outer pixel centres, so that border pixels replicate the
    crop's own edge, exactly as resizing the cropped image does. The map has no shear,
    so the grid is separable: each coordinate is computed and clamped on a length-``size``
    vector per sample and only then broadcast. The values are bit-equal to
    ``affine_grid`` followed by the clamp on the CPU (pinned by tests/data/test_augment.py),
    at a tenth of the time: ``affine_grid``'s batched matrix product with an inner
    dimension of 3 and the clamp over the whole grid were 70 % of an augmentation call.
    """
    n = box.shape[0]
    top, left, h, w = (t.view(n, 1) for t in box.unbind(1))
    sign = 1.0 - 2.0 * flip.view(n, 1)
    # affine_grid's base coordinates with align_corners=False: linspace(-1, 1) * (k-1) / k
    base = torch.linspace(-1.0, 1.0, size, device=box.device, dtype=box.dtype) * (size - 1) / size
    gx = base * (w / width * sign) + ((2.0 * left + w) / width - 1.0)
    gy = base * (h / height) + ((2.0 * top + h) / height - 1.0)
    gx = torch.maximum(
        torch.minimum(gx, (2.0 * (left + w) - 1.0) / width - 1.0), (2.0 * left + 1.0) / width - 1.0
    )
    gy = torch.maximum(
        torch.minimum(gy, (2.0 * (top + h) - 1.0) / height - 1.0), (2.0 * top + 1.0) / height - 1.0
    )
    return torch.stack(
        (gx.view(n, 1, size).expand(n, size, size), gy.view(n, size, 1).expand(n, size, size)),
        dim=-1,
    )


def _apply_op(op: int, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """One colour-jitter operation on ``n x C x H x W`` with per-sample factor ``f`` (n)."""
    f4 = f.view(-1, 1, 1, 1)
    if op == _BRIGHTNESS:
        return (x * f4).clamp_(0.0, 1.0)
    gray = _gray(x) if x.shape[1] == 3 else x
    if op == _CONTRAST:
        return _blend(x, gray.mean(dim=(1, 2, 3), keepdim=True), f4)
    if op == _SATURATION:
        return _blend(x, gray, f4)
    hsv = rgb_to_hsv(x)
    h = torch.remainder(hsv[:, 0] + f.view(-1, 1, 1), 1.0)
    return hsv_to_rgb(torch.stack((h, hsv[:, 1], hsv[:, 2]), dim=1))


class SimCLRAugment:
    """Batched SimCLR augmentation with independent random parameters per sample.

    Parameters
    ----------
    size : int
        Output height and width.
    color : bool
        Apply colour jitter (and grayscale, for 3-channel input).
    crop_scale : (float, float)
        Range of the crop's area fraction, within (0, 1].
    crop_ratio : (float, float)
        Range of the crop's aspect ratio (w/h), sampled log-uniformly.
    jitter : (float, float, float, float)
        Strengths (brightness, contrast, saturation, hue); hue in [0, 0.5].
    jitter_p, gray_p, flip_p : float
        Probabilities of colour jitter, grayscale and horizontal flip.

    Examples
    --------
    >>> aug = SimCLRAugment(28)
    >>> g = torch.Generator().manual_seed(0)
    >>> aug(torch.rand(4, 1, 28, 28), g).shape
    torch.Size([4, 1, 28, 28])
    >>> aug.views(torch.rand(4, 1, 28, 28), 2, g).shape
    torch.Size([2, 4, 1, 28, 28])
    """

    def __init__(
        self,
        size: int,
        color: bool = True,
        crop_scale: tuple[float, float] = (0.2, 1.0),
        jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1),
        jitter_p: float = 0.8,
        gray_p: float = 0.2,
        flip_p: float = 0.5,
        crop_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    ) -> None:
        size = check_int("size", size, low=1)
        color = check_bool("color", color)
        if len(crop_scale) != 2 or not 0.0 < crop_scale[0] <= crop_scale[1] <= 1.0:
            raise ValueError(f"crop_scale must be (a, b) with 0 < a <= b <= 1, got {crop_scale!r}")
        _check_range("crop_ratio", crop_ratio, 1e-6, math.inf)
        if len(jitter) != 4 or any(j < 0 for j in jitter) or jitter[3] > 0.5:
            raise ValueError(f"jitter must be 4 strengths >= 0 (hue <= 0.5), got {jitter!r}")
        self.size = size
        self.color = color
        self.crop_scale = (float(crop_scale[0]), float(crop_scale[1]))
        self.crop_ratio = (float(crop_ratio[0]), float(crop_ratio[1]))
        self.jitter = tuple(float(j) for j in jitter)
        self.jitter_p = _check_prob("jitter_p", jitter_p)
        self.gray_p = _check_prob("gray_p", gray_p)
        self.flip_p = _check_prob("flip_p", flip_p)

    def __repr__(self) -> str:
        return (
            f"SimCLRAugment(size={self.size}, color={self.color}, crop_scale={self.crop_scale}, "
            f"jitter={self.jitter}, jitter_p={self.jitter_p}, gray_p={self.gray_p}, "
            f"flip_p={self.flip_p}, crop_ratio={self.crop_ratio})"
        )

    # ----------------------------------------------------------- parameters
    def sample_params(
        self, batch: int, height: int, width: int, generator: torch.Generator | None = None
    ) -> AugmentParams:
        """Draw the random parameters of ``batch`` samples of ``height x width`` images."""
        g = generator
        tries = 10
        area = float(height * width)
        scale = self.crop_scale[0] + (self.crop_scale[1] - self.crop_scale[0]) * torch.rand(
            batch, tries, generator=g, dtype=torch.float64
        )
        lr0, lr1 = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        ratio = torch.exp(
            lr0 + (lr1 - lr0) * torch.rand(batch, tries, generator=g, dtype=torch.float64)
        )
        w = torch.round(torch.sqrt(area * scale * ratio))
        h = torch.round(torch.sqrt(area * scale / ratio))
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = torch.argmax(ok.to(torch.int8), dim=1, keepdim=True)
        any_ok = ok.any(dim=1)
        w = torch.gather(w, 1, first).squeeze(1)
        h = torch.gather(h, 1, first).squeeze(1)
        # fallback (torchvision): centre crop of the whole image, ratio clamped
        in_ratio = width / height
        if in_ratio < self.crop_ratio[0]:
            fw, fh = float(width), float(round(width / self.crop_ratio[0]))
        elif in_ratio > self.crop_ratio[1]:
            fw, fh = float(round(height * self.crop_ratio[1])), float(height)
        else:
            fw, fh = float(width), float(height)
        w = torch.where(any_ok, w, torch.full_like(w, fw))
        h = torch.where(any_ok, h, torch.full_like(h, fh))
        u = torch.rand(batch, 2, generator=g, dtype=torch.float64)
        top = torch.floor(u[:, 0] * (height - h + 1))
        left = torch.floor(u[:, 1] * (width - w + 1))
        top = torch.where(any_ok, top, torch.round((height - h) / 2))
        left = torch.where(any_ok, left, torch.round((width - w) / 2))
        box = torch.stack((top, left, h, w), dim=1).float()
        flip = torch.rand(batch, generator=g) < self.flip_p

        jitter = torch.rand(batch, generator=g) < self.jitter_p
        lo_hi = []
        for k, strength in enumerate(self.jitter):
            if k == _HUE:
                lo_hi.append((-strength, strength))
            else:
                lo_hi.append((max(0.0, 1.0 - strength), 1.0 + strength))
        lo = torch.tensor([a for a, _ in lo_hi])
        hi = torch.tensor([b for _, b in lo_hi])
        factors = lo + (hi - lo) * torch.rand(batch, 4, generator=g)
        order = torch.argsort(torch.rand(batch, 4, generator=g), dim=1)
        gray = torch.rand(batch, generator=g) < self.gray_p
        if not self.color:
            jitter = torch.zeros_like(jitter)
            gray = torch.zeros_like(gray)
        return AugmentParams(box, flip, jitter, factors, order, gray)

    # ------------------------------------------------------------ applying
    def apply(self, batch: torch.Tensor, params: AugmentParams) -> torch.Tensor:
        """Augment ``batch`` (``B x C x H x W``, values in [0, 1]) with given parameters."""
        if batch.ndim != 4:
            raise ValueError(f"batch must be B x C x H x W, got shape {tuple(batch.shape)}")
        _, c, height, width = batch.shape
        dev, dt = batch.device, batch.dtype
        grid = _crop_grid(params.box.to(dev, dt), params.flip.to(dev, dt), height, width, self.size)
        out = F.grid_sample(
            batch, grid, mode="bilinear", padding_mode="border", align_corners=False
        )

        if self.color:
            ops = (
                [_BRIGHTNESS, _CONTRAST] if c != 3 else [_BRIGHTNESS, _CONTRAST, _SATURATION, _HUE]
            )
            ops = [op for op in ops if self.jitter[op] > 0]
            jit = params.jitter.to(dev)
            if ops and bool(jit.any()):
                order = params.order.to(dev)
                factors = params.factors.to(dev, dt)
                # stage k applies, to each jittered sample, the op in position k of
                # its own permutation (ops of zero strength are skipped)
                for k in range(4):
                    for op in ops:
                        idx = torch.nonzero(jit & (order[:, k] == op)).squeeze(1)
                        if idx.numel():
                            out[idx] = _apply_op(op, out[idx], factors[idx, op])
            if c == 3:
                gidx = torch.nonzero(params.gray.to(dev)).squeeze(1)
                if gidx.numel():
                    out[gidx] = _gray(out[gidx]).expand(-1, 3, -1, -1)
        return out

    def __call__(
        self, batch: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """One random view of every image of ``batch`` (``B x C x H x W`` in [0, 1])."""
        if not isinstance(batch, torch.Tensor) or batch.ndim != 4:
            raise ValueError(
                f"batch must be a B x C x H x W tensor, got {getattr(batch, 'shape', batch)!r}"
            )
        n, _, height, width = batch.shape
        return self.apply(batch, self.sample_params(n, height, width, generator))

    def views(
        self, batch: torch.Tensor, n_views: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``n_views`` independent views: tensor ``n_views x B x C x size x size``.

        All views are produced by one batched call on the repeated batch.
        """
        n_views = check_int("n_views", n_views, low=1)
        if not isinstance(batch, torch.Tensor) or batch.ndim != 4:
            raise ValueError(
                f"batch must be a B x C x H x W tensor, got {getattr(batch, 'shape', batch)!r}"
            )
        n, c = batch.shape[:2]
        out = self(batch.repeat(n_views, 1, 1, 1), generator)
        return out.view(n_views, n, c, self.size, self.size)


class Normalize(nn.Module):
    r"""Per-channel standardisation :math:`(x - m_c)/s_c`.

    The constants are non-persistent buffers: they follow ``.to(device)`` but are
    not in the ``state_dict`` (so federated averaging never touches them).
    """

    mean: torch.Tensor  # buffers, shape (1, C, 1, 1)
    std: torch.Tensor

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std) or len(mean) == 0:
            raise ValueError(f"mean and std must have the same length >= 1, got {mean}, {std}")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be > 0, got {std!r}")
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    @classmethod
    def for_dataset(cls, name: str) -> Normalize:
        """The training-set statistics of a dataset in :data:`fedspectral.data.DATASETS`."""
        info = dataset_info(name)
        return cls(info.mean, info.std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] != self.mean.shape[1]:
            raise ValueError(
                f"input has {x.shape[-3]} channels, Normalize has {self.mean.shape[1]}"
            )
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"
