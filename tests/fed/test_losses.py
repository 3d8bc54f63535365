"""Losses of fedspectral.fed.losses: direct formulas, clipping, and the seed's Eq. 7."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedspectral.fed.losses import (
    BYOLLoss,
    FedSCLocalLoss,
    NTXentLoss,
    SpectralContrastiveLoss,
    byol_loss,
    clip_norm,
    correlation,
    fedsc_local_loss,
    nt_xent,
    positive_correlation,
    sc_correlations,
    spectral_contrastive_loss,
)

DT = torch.float64


# ---------------------------------------------------------------------------
# direct formulas on hand-made tensors
# ---------------------------------------------------------------------------
def test_correlations_by_hand():
    z1 = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=DT)
    z2 = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=DT)
    # R = (1/B) sum_i z_i z_i^T
    assert torch.equal(correlation(z1), torch.tensor([[0.5, 0.0], [0.0, 2.0]], dtype=DT))
    # z1^T z2 = [[1,1],[0,2]]  -> symmetrised / (2B) = [[1, .5], [.5, 2]] / 2
    expect = torch.tensor([[0.5, 0.25], [0.25, 1.0]], dtype=DT)
    assert torch.equal(positive_correlation(z1, z2), expect)
    # SC loss with two views: -Tr R+ + 1/2 ||R||_F^2, R over the 4 rows
    r_all = (z1.T @ z1 + z2.T @ z2) / 4  # [[2,1],[1,6]]/4
    assert torch.equal(r_all, torch.tensor([[0.5, 0.25], [0.25, 1.5]], dtype=DT))
    expect_loss = -(0.5 + 1.0) + 0.5 * (0.25 + 2 * 0.0625 + 2.25)
    got = spectral_contrastive_loss([z1, z2], mu=None)
    assert got.item() == pytest.approx(expect_loss, abs=1e-15)
    assert SpectralContrastiveLoss(mu=None)([z1, z2]).item() == pytest.approx(
        expect_loss, abs=1e-15
    )


def _loop_sc(views: list[np.ndarray], pairs: list[tuple[int, int]]) -> float:
    """Independent loop implementation in HaoChen's pairwise form."""
    m, (b, _) = len(views), views[0].shape
    pos = 0.0
    for v, w in pairs:
        for i in range(b):
            pos += float(views[v][i] @ views[w][i])
    pos /= b * len(pairs)
    rows = np.concatenate(views, axis=0)
    neg = 0.0
    for a in range(m * b):
        for c in range(m * b):
            neg += float(rows[a] @ rows[c]) ** 2
    neg /= (m * b) ** 2
    return -pos + 0.5 * neg


@pytest.mark.parametrize("pairing", ["paper", "all"])
def test_sc_loss_matches_pairwise_loop(pairing):
    g = np.random.default_rng(0)
    views = [g.normal(size=(5, 3)) for _ in range(4)]
    pairs = (
        [(0, 2), (1, 3)]
        if pairing == "paper"
        else [(v, w) for v in range(4) for w in range(v + 1, 4)]
    )
    got = spectral_contrastive_loss([torch.from_numpy(v) for v in views], None, pairing)
    assert got.item() == pytest.approx(_loop_sc(views, pairs), rel=1e-12)


def test_sc_loss_clips_before_correlating():
    g = torch.Generator().manual_seed(1)
    views = [3 * torch.randn(6, 4, generator=g, dtype=DT) for _ in range(2)]
    mu = 0.5
    clipped = [clip_norm(v, mu) for v in views]
    assert torch.allclose(
        spectral_contrastive_loss(views, mu),
        spectral_contrastive_loss(clipped, None),
        rtol=0,
        atol=1e-14,
    )
    r_pos, r_all = sc_correlations(views, mu)
    assert torch.trace(r_all) <= mu + 1e-12  # mean of ||z||^2 <= mu
    assert torch.allclose(r_pos, r_pos.T) and torch.allclose(r_all, r_all.T)


def test_clip_norm_bound_and_identity_inside():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(50, 7, generator=g, dtype=DT) * torch.linspace(0.01, 3, 50, dtype=DT)[:, None]
    mu = 2.0
    out = clip_norm(z, mu)
    n_in, n_out = torch.linalg.norm(z, dim=1), torch.linalg.norm(out, dim=1)
    assert torch.all(n_out <= math.sqrt(mu) * (1 + 1e-12))
    inside = n_in <= math.sqrt(mu)
    assert 0 < inside.sum() < 50  # both cases exercised
    assert torch.equal(out[inside], z[inside])
    # clipped rows keep their direction and land on the sphere
    assert torch.allclose(n_out[~inside], torch.full_like(n_out[~inside], math.sqrt(mu)))
    cos = torch.nn.functional.cosine_similarity(out[~inside], z[~inside], dim=1)
    assert torch.allclose(cos, torch.ones_like(cos))
    # differentiable, finite gradient also at a zero row
    zz = torch.cat([z[:3], torch.zeros(1, 7, dtype=DT)]).requires_grad_(True)
    clip_norm(zz, mu).sum().backward()
    assert torch.isfinite(zz.grad).all()
    assert clip_norm(z, None) is z


def test_fedsc_local_loss_formula_and_stop_gradient():
    g = torch.Generator().manual_seed(3)
    views = [torch.randn(8, 3, generator=g, dtype=DT).requires_grad_(True) for _ in range(2)]
    r_bar = torch.randn(3, 3, generator=g, dtype=DT)
    r_bar = (r_bar + r_bar.T).requires_grad_(True)
    alpha, mu = 0.3, 1.5
    r_pos, r_all = sc_correlations(views, mu)
    expect = (
        -torch.trace(r_pos)
        + 0.5 * alpha * torch.sum(r_all**2)
        + (1 - alpha) * torch.trace(r_all @ r_bar)
    )
    loss_fn = FedSCLocalLoss(mu=mu, alpha=alpha)
    got = loss_fn(views, r_bar)
    assert got.item() == pytest.approx(expect.item(), rel=1e-13)
    got.backward()
    assert r_bar.grad is None  # constant: no gradient flows into R_bar
    assert views[0].grad is not None
    # alpha = 1 is the plain SC loss, r_bar not needed
    loss_fn.alpha = 1.0
    assert loss_fn(views).item() == pytest.approx(
        spectral_contrastive_loss(views, mu).item(), rel=1e-14
    )
    # numpy r_bar accepted
    loss_fn.alpha = alpha
    assert loss_fn(views, r_bar.detach().numpy()).item() == pytest.approx(expect.item(), rel=1e-13)


def test_tracked_cross_term_is_a_correlation_proximal_term():
    """``r_own`` (FedSC ``cross_term: tracked``): R_-j followed by the client's own change,
    R_-j + (R_j - R_own) in the cross term's gradient; as a loss the plain one plus
    (1 - alpha)/2 ||R_j - R_own||^2, whose gradient vanishes at R_j = R_own (so the
    round's first step is the plain one, Eq. 7 kept)."""
    g = torch.Generator().manual_seed(5)
    views = [torch.randn(8, 3, generator=g, dtype=DT).requires_grad_(True) for _ in range(2)]
    r_bar = torch.randn(3, 3, generator=g, dtype=DT)
    r_bar = r_bar + r_bar.T
    alpha, mu = 0.3, None
    _, r_all = sc_correlations(views, mu)
    plain = FedSCLocalLoss(mu=mu, alpha=alpha)
    own = torch.randn(3, 3, generator=g, dtype=DT)
    own = own + own.T
    got = plain(views, r_bar, own)
    expect = plain(views, r_bar) + 0.5 * (1 - alpha) * torch.sum((r_all - own) ** 2)
    assert got.item() == pytest.approx(expect.item(), rel=1e-13)
    # at R_own = R_j the gradient is the plain one, exactly
    at = r_all.detach()
    ga = torch.autograd.grad(plain(views, r_bar, at), views)
    gb = torch.autograd.grad(plain(views, r_bar), views)
    for a, b in zip(ga, gb, strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-14)
    # elsewhere it is not (the term acts)
    ga = torch.autograd.grad(plain(views, r_bar, own), views)
    assert not torch.allclose(ga[0], gb[0], atol=1e-6)
    with pytest.raises(ValueError, match=r"r_own must have shape \(3, 3\)"):
        plain(views, r_bar, torch.zeros(2, 2, dtype=DT))


# ---------------------------------------------------------------------------
# gradient alignment, seed Eq. 7
# ---------------------------------------------------------------------------
def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4)).to(DT)


def _client_views(sizes, m, seed=0):
    """Deterministic 'views': fixed perturbations of each client's samples."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for j, n in enumerate(sizes):
        base = torch.randn(n, 6, generator=g, dtype=DT) + j  # non-iid: shifted per client
        out.append([base + 0.3 * torch.randn(n, 6, generator=g, dtype=DT) for _ in range(m)])
    return out


def _grad(net: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    gs = torch.autograd.grad(loss, list(net.parameters()))
    return torch.cat([x.reshape(-1) for x in gs])


def _aligned_gap(alpha_of, third_factor=1.0, pairing="paper", mu=1.0, own_in_rbar=False):
    """Relative gap between sum_j q_j grad L_j and grad L(pooled)."""
    sizes = [5, 8, 11]
    m = 4
    cv = _client_views(sizes, m)
    net = _mlp()
    q = [n / sum(sizes) for n in sizes]
    pooled = [torch.cat([cv[j][v] for j in range(len(sizes))]) for v in range(m)]
    g_global = _grad(net, spectral_contrastive_loss([net(x) for x in pooled], mu, pairing))
    with torch.no_grad():
        r_j = [sc_correlations([net(x) for x in cv[j]], mu, pairing)[1] for j in range(3)]
    total = torch.zeros_like(g_global)
    for j in range(3):
        if own_in_rbar:
            r_minus = sum(q[k] * r_j[k] for k in range(3))
        else:
            r_minus = sum(q[k] * r_j[k] for k in range(3) if k != j) / (1 - q[j])
        views = [net(x) for x in cv[j]]
        alpha = alpha_of(q[j])
        if third_factor == 1.0:
            loss = fedsc_local_loss(views, r_minus, alpha, mu, pairing)
        else:  # a deliberately wrong variant (the 1/2 the seed removes on purpose)
            r_pos, r_all = sc_correlations(views, mu, pairing)
            loss = (
                -torch.trace(r_pos)
                + 0.5 * alpha * (r_all**2).sum()
                + third_factor * (1 - alpha) * (r_all * r_minus).sum()
            )
        total += q[j] * _grad(net, loss)
    return float(torch.linalg.norm(total - g_global) / torch.linalg.norm(g_global))


@pytest.mark.parametrize("pairing", ["paper", "all"])
@pytest.mark.parametrize("mu", [None, 1.0])
def test_gradient_alignment_eq7(pairing, mu):
    assert _aligned_gap(lambda qj: qj, pairing=pairing, mu=mu) < 1e-10


def test_clipping_active_in_alignment_test():
    # mu = 1.0 above must really clip some rows, else it tests nothing more than mu=None
    cv = _client_views([5, 8, 11], 4)
    net = _mlp()
    with torch.no_grad():
        norms = torch.cat([torch.linalg.norm(net(x), dim=1) for c in cv for x in c])
    assert (norms > 1.0).any() and (norms < 1.0).any()


def test_gradient_alignment_fails_for_wrong_variants():
    # FedAvg+SC (alpha = 1): local SC gradients do not average to the global one
    assert _aligned_gap(lambda qj: 1.0) > 1e-2
    # a constant alpha != q_j
    assert _aligned_gap(lambda qj: 0.5) > 1e-3
    # keeping the 1/2 on the cross term
    assert _aligned_gap(lambda qj: qj, third_factor=0.5) > 1e-3
    # R_bar including the client's own correlation
    assert _aligned_gap(lambda qj: qj, own_in_rbar=True) > 1e-3


# ---------------------------------------------------------------------------
# baselines' losses
# ---------------------------------------------------------------------------
def test_byol_loss_values():
    p = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=DT)
    z = torch.tensor([[3.0, 0.0], [0.0, -1.0], [1.0, -1.0]], dtype=DT)
    # 2 - 2cos: 0, 4, 2  -> mean 2
    assert byol_loss(p, z).item() == pytest.approx(2.0, abs=1e-15)
    z.requires_grad_(True)
    p.requires_grad_(True)
    BYOLLoss()(p, p, z, z).backward()
    assert z.grad is None and p.grad is not None  # target detached


def _loop_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float) -> float:
    u = np.concatenate([z1, z2])
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    n = len(u)
    b = n // 2
    total = 0.0
    for a in range(n):
        pos = (a + b) % n
        denom = sum(math.exp(u[a] @ u[c] / t) for c in range(n) if c != a)
        total += -math.log(math.exp(u[a] @ u[pos] / t) / denom)
    return total / n


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_nt_xent_matches_loop(t):
    g = np.random.default_rng(4)
    z1, z2 = g.normal(size=(6, 5)), g.normal(size=(6, 5))
    got = nt_xent(torch.from_numpy(z1), torch.from_numpy(z2), t).item()
    assert got == pytest.approx(_loop_nt_xent(z1, z2, t), rel=1e-12)
    assert NTXentLoss(t)(torch.from_numpy(z1), torch.from_numpy(z2)).item() == pytest.approx(got)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
def test_bad_inputs_rejected_with_value():
    z = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="1.5"):
        FedSCLocalLoss(mu=1.0, alpha=1.5)
    loss = FedSCLocalLoss(mu=1.0, alpha=0.5)
    with pytest.raises(ValueError, match="-0.1"):
        loss.alpha = -0.1
    with pytest.raises(ValueError, match="r_bar"):
        loss([z, z])
    with pytest.raises(ValueError, match="shape"):
        loss([z, z], torch.zeros(2, 2))
    with pytest.raises(ValueError, match="-1"):
        SpectralContrastiveLoss(mu=-1.0)
    with pytest.raises(ValueError, match="0"):
        clip_norm(z, 0.0)
    with pytest.raises(ValueError, match="3"):
        spectral_contrastive_loss([z, z, z], 1.0, "paper")
    assert torch.isfinite(spectral_contrastive_loss([z, z, z], 1.0, "all"))
    with pytest.raises(ValueError, match="pairing"):
        SpectralContrastiveLoss(pairing="odd")
    with pytest.raises(ValueError, match="shape"):
        spectral_contrastive_loss([z, torch.zeros(5, 3)])
    with pytest.raises(TypeError):
        spectral_contrastive_loss(torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match="temperature"):
        nt_xent(z, z, 0.0)


# ----------------------------------------------------------------------------- bad input
def test_reproducers_of_bad_input():
    from fedspectral.checks import NonFiniteError

    out = clip_norm(torch.tensor([[1e30, 1e30]]), 1.0)  # the squares overflow float32
    torch.testing.assert_close(out, torch.tensor([[0.5**0.5, 0.5**0.5]]))
    for dt in (torch.int64, torch.bool):
        with pytest.raises(TypeError, match=f"z must be a floating-point tensor, got dtype {dt}"):
            clip_norm(torch.ones(2, 2, dtype=dt), 1.0)
    with pytest.raises(ValueError, match=r"views\[0\] must have B >= 1 rows"):
        spectral_contrastive_loss([torch.empty(0, 4)] * 2)
    with pytest.raises(ValueError, match="z1 must have B >= 1 rows"):
        nt_xent(torch.empty(0, 4), torch.empty(0, 4))
    with pytest.raises(ValueError, match="p must have B >= 1 rows"):
        byol_loss(torch.empty(0, 4), torch.empty(0, 4))
    z = torch.ones(3, 2)
    with pytest.raises(TypeError, match=r"views\[0\] and views\[1\] must have the same dtype"):
        spectral_contrastive_loss([z, z.double()])
    with pytest.raises(TypeError, match="z1 and z2 must have the same dtype"):
        nt_xent(z, z.double())
    elsewhere = torch.ones(3, 2, device="meta")  # another device, no GPU needed
    with pytest.raises(
        ValueError,
        match=r"views\[0\] and views\[1\] must be on the same device, "
        r"got cpu and meta",
    ):
        spectral_contrastive_loss([z, elsewhere])
    with pytest.raises(ValueError, match="p and z must be on the same device"):
        byol_loss(z, elsewhere)
    with pytest.raises(NonFiniteError, match=r"views\[1\] contains NaN"):
        spectral_contrastive_loss([z, torch.full((3, 2), float("nan"))], mu=1.0)
    with pytest.raises(NonFiniteError, match=r"views\[0\] contains NaN"):
        spectral_contrastive_loss([torch.full((3, 2), float("inf")), z], mu=1.0)
    with pytest.raises(NonFiniteError, match="r_bar contains NaN"):
        fedsc_local_loss([z, z], torch.full((2, 2), float("nan")), 0.5, mu=1.0)
    with pytest.raises(NonFiniteError, match="overflows"):
        spectral_contrastive_loss([torch.full((3, 2), 1e30)] * 2)  # no clipping
    with pytest.raises(TypeError, match="mu must be a real number, got bool True"):
        spectral_contrastive_loss([z, z], mu=True)
