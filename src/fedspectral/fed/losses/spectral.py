r"""Spectral contrastive losses: the SC loss, FedSC's local loss, and their norm clipping.

Notation (the FedSC paper, Jing et al., *FedSC: Provable Federated Self-supervised
Learning with Spectral Contrastive Objective over Non-i.i.d. Data*, ICML 2024):
a batch of :math:`B` samples, :math:`m` augmented views of it, representations
:math:`Z_v \in \mathbb{R}^{B\times d}` (rows :math:`z`), each row norm-clipped to
:math:`\sqrt{\mu}` (``NormClip`` in the paper's Algorithm 2).

Batch correlation matrices (paper Sec. 4.3, "Local Training"), for :math:`m = 2V` views
paired as :math:`(v, v+V)`:

.. math::

    \hat R^+ = \frac{1}{2BV}\sum_{v=1}^{V}\big(Z_v^\top Z_{v+V} + Z_{v+V}^\top Z_v\big),
    \qquad
    \hat R = \frac{1}{2BV}\sum_{v=1}^{2V} Z_v^\top Z_v .

(The seed writes :math:`Z` as :math:`d\times B`; here rows are samples, hence the
transposes.)  With ``pairing="all"`` the positive correlation is instead averaged over
all :math:`\binom{m}{2}` unordered view pairs, which is another unbiased estimate of
:math:`R^+ = \mathsf{E}[z(x)z(x^+)^\top]` and allows an odd :math:`m`; for :math:`m = 2`
both pairings coincide.

SC objective (paper Eq. 2, half of HaoChen et al. 2021's):
:math:`\mathcal{L} = -\operatorname{Tr}\hat R^+ + \tfrac12\|\hat R\|_F^2`.

FedSC local objective of client :math:`j` (paper Eq. 6, "local"):
:math:`\mathcal{L}_j = -\operatorname{Tr}\hat R^+_j + \tfrac12\alpha\|\hat R_j\|_F^2
+ (1-\alpha)\operatorname{Tr}(\hat R_j\bar R_{-j})`, with :math:`\bar R_{-j}` a constant
(no gradient flows into it).  With :math:`\alpha = q_j` and
:math:`\bar R_{-j} = R_{-j}(\theta)` the weighted local gradients sum to the global
gradient (paper Eq. 7); ``tests/fed/test_losses.py`` checks it by autograd.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from fedspectral.checks import check_choice, check_real
from fedspectral.fed.losses._tensors import check_2d, check_alike, check_same_shape, finite_loss

PAIRINGS = ("paper", "all")

__all__ = [
    "PAIRINGS",
    "FedSCLocalLoss",
    "SpectralContrastiveLoss",
    "clip_norm",
    "correlation",
    "fedsc_local_loss",
    "positive_correlation",
    "sc_correlations",
    "spectral_contrastive_loss",
]


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------
def _check_views(views: Sequence[Tensor], pairing: str) -> None:
    check_choice("pairing", pairing, PAIRINGS)
    if isinstance(views, Tensor) or not isinstance(views, Sequence):
        raise TypeError(f"views must be a list of (B, d) tensors, got {type(views).__name__}")
    if len(views) < 2:
        raise ValueError(f"need at least 2 views, got {len(views)}")
    if pairing == "paper" and len(views) % 2:
        raise ValueError(
            f"pairing='paper' pairs view v with view v+V and needs an even number of views, "
            f"got {len(views)}; use pairing='all'"
        )
    for i, z in enumerate(views):
        check_2d(f"views[{i}]", z)
        if z.shape != views[0].shape:
            raise ValueError(
                f"all views must have the same shape, views[0] is {tuple(views[0].shape)} "
                f"and views[{i}] is {tuple(z.shape)}"
            )
    check_alike([f"views[{i}]" for i in range(len(views))], list(views))


# ---------------------------------------------------------------------------
# functional building blocks
# ---------------------------------------------------------------------------
def clip_norm(z: Tensor, mu: float | None) -> Tensor:
    r"""Row-wise norm clipping to :math:`\sqrt{\mu}` (the paper's ``NormClip``).

    :math:`\check z = z\cdot\min\!\big(1, \sqrt{\mu}/\|z\|_2\big)`; rows already inside
    the ball are returned unchanged, the others are rescaled onto its surface.
    Differentiable (almost everywhere).  Each row is divided by its largest magnitude
    before squaring, so finite rows whose squared norm overflows (``1e30`` in float32)
    are clipped too, not zeroed; rows with NaN/inf stay non-finite (the losses report
    them).  Clipping is part of the method's definition
    (it bounds :math:`\|zz^\top\|_F \le \mu`, hence the sensitivity of DP-CalR), so it
    is silent.

    Parameters
    ----------
    z : Tensor, shape (B, d)
    mu : float or None
        Squared radius; ``None`` disables clipping.

    Returns
    -------
    Tensor, shape (B, d)
    """
    check_2d("z", z)
    if mu is not None:
        check_real("mu", mu, low=0.0, low_open=True)
    if mu is None:
        return z
    tiny = torch.finfo(z.dtype).tiny
    # ||z|| = a * ||z / a|| with a = max |z_i| (a constant for autograd: the function is
    # homogeneous, so the gradient is unchanged); ||z / a|| lies in [1, sqrt(d)]
    a = z.detach().abs().amax(dim=1, keepdim=True).clamp_min(tiny)
    u = z / a
    r = torch.linalg.vector_norm(u, dim=1, keepdim=True)
    root = math.sqrt(mu)
    inside = a * r <= root  # a * r = ||z|| (inf when it overflows: clipped)
    # clipped rows as (z / a) * (sqrt(mu) / r): both factors normal floats, so no precision
    # is lost to a subnormal scale factor (sqrt(mu) / ||z|| is one for rows of 1e38 in float32)
    return torch.where(inside, z, u * (root / r.clamp_min(tiny)))


def correlation(z: Tensor) -> Tensor:
    r"""Empirical correlation :math:`\hat R = \frac1B Z^\top Z = \frac1B\sum_i z_i z_i^\top`.

    Parameters
    ----------
    z : Tensor, shape (B, d)

    Returns
    -------
    Tensor, shape (d, d)
    """
    check_2d("z", z)
    return z.T @ z / z.shape[0]


def positive_correlation(z1: Tensor, z2: Tensor) -> Tensor:
    r"""Symmetrised cross-correlation of paired views,
    :math:`\hat R^+ = \frac{1}{2B}(Z_1^\top Z_2 + Z_2^\top Z_1)`.

    Parameters
    ----------
    z1, z2 : Tensor, shape (B, d)
        Row :math:`i` of both is a view of the same sample.

    Returns
    -------
    Tensor, shape (d, d), symmetric
    """
    check_2d("z1", z1)
    check_2d("z2", z2)
    check_same_shape(("z1", "z2"), z1, z2)
    check_alike(["z1", "z2"], [z1, z2])
    c = z1.T @ z2
    return (c + c.T) / (2 * z1.shape[0])


def sc_correlations(
    views: Sequence[Tensor], mu: float | None = None, pairing: str = "paper"
) -> tuple[Tensor, Tensor]:
    r"""Batch estimates :math:`(\hat R^+, \hat R)` from ``m`` views (after clipping).

    Parameters
    ----------
    views : list of m Tensors, each shape (B, d)
        ``views[v][i]`` is the representation of view ``v`` of sample ``i``.
    mu : float or None
        Clip each row to norm :math:`\sqrt{\mu}` first (``None``: no clipping).
    pairing : {"paper", "all"}
        ``"paper"``: pairs :math:`(v, v+m/2)` as the paper's Eq. (8), m even;
        ``"all"``: average over all unordered pairs :math:`v<w`.

    Returns
    -------
    R_pos, R : Tensor, shape (d, d) each
        :math:`\hat R^+` (symmetrised, averaged over pairs) and :math:`\hat R` (the mean of
        :math:`zz^\top` over all :math:`mB` rows).
    """
    _check_views(views, pairing)
    if mu is not None:
        check_real("mu", mu, low=0.0, low_open=True)
    zs = [clip_norm(z, mu) for z in views]
    m = len(zs)
    if pairing == "paper":
        half = m // 2
        pairs = [(v, v + half) for v in range(half)]
    else:
        pairs = [(v, w) for v in range(m) for w in range(v + 1, m)]
    r_pos = functools.reduce(operator.add, (positive_correlation(zs[v], zs[w]) for v, w in pairs))
    r_pos = r_pos / len(pairs)
    stacked = torch.cat(zs, dim=0)
    r_all = correlation(stacked)
    return r_pos, r_all


def spectral_contrastive_loss(
    views: Sequence[Tensor], mu: float | None = None, pairing: str = "paper"
) -> Tensor:
    r""":math:`-\operatorname{Tr}\hat R^+ + \tfrac12\|\hat R\|_F^2` (paper Eq. 2), scalar.

    See :func:`sc_correlations` for the shapes and the pairing of views.
    """
    r_pos, r_all = sc_correlations(views, mu, pairing)
    loss = -torch.trace(r_pos) + 0.5 * (r_all * r_all).sum()
    return finite_loss(loss, {f"views[{i}]": z for i, z in enumerate(views)})


def _as_constant(r_bar: Tensor | np.ndarray, like: Tensor, name: str = "r_bar") -> Tensor:
    if isinstance(r_bar, np.ndarray):
        r_bar = torch.from_numpy(r_bar)
    if not isinstance(r_bar, Tensor):
        raise TypeError(f"{name} must be a (d, d) Tensor or ndarray, got {type(r_bar).__name__}")
    d = like.shape[1]
    if r_bar.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}), got {tuple(r_bar.shape)}")
    if r_bar.dtype.is_complex or r_bar.dtype == torch.bool:
        raise TypeError(f"{name} must be a real tensor, got dtype {r_bar.dtype}")
    return r_bar.detach().to(dtype=like.dtype, device=like.device)


def fedsc_local_loss(
    views: Sequence[Tensor],
    r_bar: Tensor | np.ndarray | None,
    alpha: float,
    mu: float | None = None,
    pairing: str = "paper",
    r_own: Tensor | np.ndarray | None = None,
) -> Tensor:
    r"""FedSC's local objective of one client (paper Eq. 6), scalar.

    .. math::

        \mathcal{L}_j = -\operatorname{Tr}\hat R^+_j + \tfrac12\alpha\|\hat R_j\|_F^2
        + (1-\alpha)\operatorname{Tr}(\hat R_j\bar R_{-j}),

    :math:`\bar R_{-j}` detached (stop-gradient).  The third term has no ½ on purpose:
    :math:`\bar R_{-j}` is constant, and :math:`\nabla\tfrac12\|R\|^2` of the global
    objective puts the cross term :math:`\operatorname{Tr}(R_jR_{-j})` in each client's
    gradient once with weight 1 (seed, after Eq. 6).  ``alpha = 1`` gives the plain SC
    loss (FedAvg+SC) and then ``r_bar`` may be ``None``.

    Parameters
    ----------
    views : list of m Tensors, each shape (B, d)
    r_bar : Tensor or ndarray, shape (d, d), or None
        :math:`\bar R_{-j}`, the (stale, possibly noisy) correlation of the other clients.
        Only its symmetric part matters, as :math:`\hat R_j` is symmetric.
    alpha : float in [0, 1]
        Weight of the intra-client contrast term (:math:`q_j` in the paper's Eq. 6; the
        seed's experiments decay it 1 -> 0.2 over rounds).
    mu, pairing
        As in :func:`sc_correlations`.
    r_own : Tensor or ndarray, shape (d, d), or None
        The client's own shared :math:`\tilde R_j` (at the round's start).  Given, the
        cross term's :math:`\bar R_{-j}` follows the client's own change of correlation
        during its local steps, :math:`\bar R_{-j} + (\hat R_j - \tilde R_j)` (FedSC
        option ``cross_term: tracked``): the loss gains
        :math:`\tfrac12(1-\alpha)\|\hat R_j - \tilde R_j\|_F^2`, a proximal term in
        correlation space whose gradient vanishes at :math:`\hat R_j = \tilde R_j`
        (Eq. 7's alignment at the round's start is kept).  Ignored when ``alpha = 1``.
    """
    alpha = check_real("alpha", alpha, low=0.0, high=1.0)
    _check_views(views, pairing)
    if r_bar is None and alpha < 1.0:
        raise ValueError(f"r_bar is required when alpha < 1, got r_bar=None with alpha={alpha}")
    rb = _as_constant(r_bar, views[0]) if r_bar is not None and alpha < 1.0 else None
    r_pos, r_all = sc_correlations(views, mu, pairing)
    loss = -torch.trace(r_pos) + 0.5 * alpha * (r_all * r_all).sum()
    inputs = {f"views[{i}]": z for i, z in enumerate(views)}
    if rb is not None:
        loss = loss + (1.0 - alpha) * (r_all * rb).sum()
        inputs["r_bar"] = rb
        if r_own is not None:  # the cross term's R_-j tracks the client's own change
            ro = _as_constant(r_own, views[0], "r_own")
            loss = loss + 0.5 * (1.0 - alpha) * ((r_all - ro) ** 2).sum()
            inputs["r_own"] = ro
    return finite_loss(loss, inputs)


# ---------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------
class SpectralContrastiveLoss(nn.Module):
    r"""Spectral contrastive loss with norm clipping (paper Eq. 2).

    .. math::

        \mathcal{L} = -\operatorname{Tr}\hat R^+ + \tfrac12\|\hat R\|_F^2,

    :math:`\hat R^+` the symmetrised cross-correlation averaged over view pairs and
    :math:`\hat R` the mean of :math:`\check z\check z^\top` over *all* :math:`mB` clipped
    rows (see the module docstring).  It equals half of HaoChen et al.'s
    :math:`-2\mathsf{E}[z^\top z^+] + \mathsf{E}[(z^\top z^-)^2]` up to the
    :math:`i = i'` terms that a batch estimate of :math:`\|\mathsf{E}R\|_F^2` includes.

    Parameters
    ----------
    mu : float or None
        Clip rows to norm :math:`\sqrt{\mu}` (``None``: no clipping).
    pairing : {"paper", "all"}
        Pairs :math:`(v, v+m/2)` as in the seed, or all pairs.

    Shapes
    ------
    forward(views): views is a list of m >= 2 tensors of shape (B, d); returns a scalar.
    """

    def __init__(self, mu: float | None = 1.0, pairing: str = "paper") -> None:
        super().__init__()
        if mu is not None:
            check_real("mu", mu, low=0.0, low_open=True)
        check_choice("pairing", pairing, PAIRINGS)
        self.mu = mu
        self.pairing = pairing

    def forward(self, views: Sequence[Tensor]) -> Tensor:
        return spectral_contrastive_loss(views, self.mu, self.pairing)

    def extra_repr(self) -> str:
        return f"mu={self.mu}, pairing={self.pairing!r}"


class FedSCLocalLoss(nn.Module):
    r"""FedSC's local loss of client :math:`j` (paper Eq. 6).

    .. math::

        \mathcal{L}_j = -\operatorname{Tr}\hat R^+_j + \tfrac12\alpha\|\hat R_j\|_F^2
        + (1-\alpha)\operatorname{Tr}(\hat R_j\bar R_{-j}),

    with :math:`\bar R_{-j}` passed at call time and detached.  ``alpha`` is a plain
    attribute, validated on assignment, so a method can set it each round (the paper's
    linear decay 1 -> 0.2; :math:`\alpha=q_j` gives exact gradient alignment, Eq. 7).

    Parameters
    ----------
    mu : float or None
        Clip rows to norm :math:`\sqrt{\mu}`.
    alpha : float in [0, 1]
    pairing : {"paper", "all"}

    Shapes
    ------
    forward(views, r_bar): views is a list of m tensors (B, d); r_bar is (d, d) or None
    (allowed only when alpha == 1); returns a scalar.
    """

    def __init__(self, mu: float | None = 1.0, alpha: float = 1.0, pairing: str = "paper") -> None:
        super().__init__()
        if mu is not None:
            check_real("mu", mu, low=0.0, low_open=True)
        check_choice("pairing", pairing, PAIRINGS)
        self.mu = mu
        self.pairing = pairing
        self.alpha = alpha

    @property
    def alpha(self) -> float:
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._alpha = check_real("alpha", value, low=0.0, high=1.0)

    def forward(
        self,
        views: Sequence[Tensor],
        r_bar: Tensor | np.ndarray | None = None,
        r_own: Tensor | np.ndarray | None = None,
    ) -> Tensor:
        return fedsc_local_loss(views, r_bar, self.alpha, self.mu, self.pairing, r_own)

    def extra_repr(self) -> str:
        return f"mu={self.mu}, alpha={self.alpha}, pairing={self.pairing!r}"
