"""Property-based tests (hypothesis) of the self-supervised losses and ``clip_norm``.

Finite valid views give a finite loss and clipped rows have norm <= sqrt(mu); NaN/inf in
a view or in r_bar, an empty batch, a non-float, mixed-dtype or mis-shaped input raise
ValueError/TypeError naming it; nothing else is ever raised.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedspectral.checks import NonFiniteError
from fedspectral.fed.losses import (
    byol_loss,
    clip_norm,
    fedsc_local_loss,
    nt_xent,
    spectral_contrastive_loss,
)

BAD = (ValueError, TypeError)
DTYPES = {"float32": (np.float32, torch.float32), "float64": (np.float64, torch.float64)}


def _elements(dtype: str, big: float | None = None):
    width = 32 if dtype == "float32" else 64
    top = np.finfo(np.float32 if width == 32 else np.float64).max
    lim = float(top if big is None else (np.float32(big) if width == 32 else big))
    return st.one_of(
        st.floats(-lim, lim, width=width, allow_nan=False),
        st.floats(-2, 2, width=width),
        st.just(0.0),
    )


@st.composite
def batches(draw, n_views=None, big=None, dtype=None):
    dtype = dtype or draw(st.sampled_from(sorted(DTYPES)))
    b, d = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    m = n_views or 2 * draw(st.integers(1, 2))
    np_t, torch_t = DTYPES[dtype]
    views = [
        torch.from_numpy(draw(hnp.arrays(np_t, (b, d), elements=_elements(dtype, big))))
        for _ in range(m)
    ]
    assert all(v.dtype == torch_t for v in views)
    return views


mus = st.floats(1e-3, 100.0)


@settings(max_examples=80)
@given(batches(n_views=1), mus)
def test_clip_norm_bounds_every_finite_row(views, mu):
    z = views[0]
    out = clip_norm(z, mu)
    assert out.dtype == z.dtype and out.shape == z.shape and torch.isfinite(out).all()
    zd, od = z.double(), out.double()
    a = zd.abs().amax(dim=1, keepdim=True).clamp_min(1e-300)
    norms = (a * torch.linalg.vector_norm(zd / a, dim=1, keepdim=True)).squeeze(1)
    onorm = torch.linalg.vector_norm(od, dim=1)
    rel = 1e-6 if z.dtype == torch.float32 else 1e-12
    assert (onorm <= math.sqrt(mu) * (1 + rel)).all()
    inside = norms <= math.sqrt(mu)
    assert torch.equal(out[inside], z[inside])  # rows in the ball are untouched
    clipped = ~inside & (norms > 0)
    torch.testing.assert_close(
        onorm[clipped], torch.full_like(onorm[clipped], math.sqrt(mu)), rtol=10 * rel, atol=0
    )
    # same direction: out = c z with c > 0
    cos = (od * zd).sum(1)[clipped]
    assert (cos > 0).all()


@settings(max_examples=80)
@given(batches(), mus, st.sampled_from(["paper", "all"]))
def test_sc_loss_is_finite_for_finite_views_with_clipping(views, mu, pairing):
    loss = spectral_contrastive_loss(views, mu=mu, pairing=pairing)
    assert torch.isfinite(loss)
    # the clipped rows bound it: |Tr R+| <= mu and ||R||_F <= mu
    assert -mu * (1 + 1e-5) <= float(loss) <= (mu + 0.5 * mu**2) * (1 + 1e-5)


@settings(max_examples=60)
@given(batches(), st.one_of(st.none(), mus), st.floats(0.0, 1.0), st.data())
def test_fedsc_loss_finite_or_named_overflow(views, mu, alpha, data):
    d = views[0].shape[1]
    rb = torch.from_numpy(data.draw(hnp.arrays(np.float64, (d, d), elements=st.floats(-1e3, 1e3))))
    try:
        loss = fedsc_local_loss(views, rb, alpha, mu=mu)
    except NonFiniteError as exc:  # only possible without clipping (finite inputs overflow)
        assert mu is None and "overflows" in str(exc)
        return
    assert torch.isfinite(loss)


@settings(max_examples=60)
@given(batches(n_views=2, big=1e18), st.floats(0.01, 10.0))
def test_baseline_losses_are_finite_for_finite_views(views, t):
    z1, z2 = views
    assert torch.isfinite(nt_xent(z1, z2, t))
    v = byol_loss(z1, z2)
    assert torch.isfinite(v) and -1e-5 <= float(v) <= 4 + 1e-5


@st.composite
def poisoned(draw):
    views = draw(batches(big=1e6))
    i = draw(st.integers(0, len(views) - 1))
    b, d = views[i].shape
    views[i][draw(st.integers(0, b - 1)), draw(st.integers(0, d - 1))] = draw(
        st.sampled_from([math.nan, math.inf, -math.inf])
    )
    return views, i


@settings(max_examples=50)
@given(poisoned(), st.one_of(st.none(), mus))
def test_non_finite_views_are_named(vi, mu):
    views, i = vi
    calls = [
        lambda: spectral_contrastive_loss(views, mu=mu),
        lambda: fedsc_local_loss(views, torch.zeros(views[0].shape[1]).diag(), 0.5, mu=mu),
    ]
    if i < 2:  # the two-view losses see views[0] and views[1] only
        calls += [lambda: nt_xent(views[0], views[1]), lambda: byol_loss(views[0], views[1])]
    for call in calls:
        try:
            call()
        except NonFiniteError as exc:
            assert "contains NaN or infinite values" in str(exc)
        else:
            raise AssertionError("a non-finite view gave a loss")


@settings(max_examples=40)
@given(batches(big=10.0), st.sampled_from([math.nan, math.inf]), mus)
def test_non_finite_r_bar_is_named(views, bad, mu):
    d = views[0].shape[1]
    rb = np.zeros((d, d))
    rb[0, 0] = bad
    try:
        fedsc_local_loss(views, rb, 0.3, mu=mu)
    except NonFiniteError as exc:
        assert str(exc).startswith("r_bar contains NaN or infinite values")
    else:
        raise AssertionError("a non-finite r_bar gave a loss")


junk_tensors = st.one_of(
    st.just(torch.empty(0, 3)),
    st.just(torch.empty(3, 0)),
    st.just(torch.ones(3, 2, 2)),
    st.just(torch.ones(3, 2, dtype=torch.int64)),
    st.just(torch.ones(3, 2, dtype=torch.bool)),
    st.just(torch.ones(3, 2, dtype=torch.complex64)),
    st.just(torch.ones(3, 2, dtype=torch.float64)),
    st.just(torch.ones(4, 2)),
    st.just(torch.ones(3, 3)),
    st.just(np.ones((3, 2))),
    st.none(),
    st.just([[1.0, 2.0]] * 3),
    st.just(torch.ones(3, 2)),
)
junk_numbers = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=2),
    st.floats(),
    st.integers(-3, 3),
    st.just(np.float32(0.5)),
)


@settings(max_examples=120)
@given(junk_tensors, junk_tensors, junk_numbers, junk_numbers)
def test_bad_inputs_raise_only_value_or_type_errors(a, b, mu, other):
    calls = (
        lambda: clip_norm(a, mu),
        lambda: spectral_contrastive_loss([a, b], mu=mu),
        lambda: fedsc_local_loss([a, b], b, other, mu=mu),
        lambda: nt_xent(a, b, other),
        lambda: byol_loss(a, b),
    )
    for call in calls:
        try:
            out = call()
        except BAD:
            continue
        assert torch.isfinite(out).all()  # a valid combination (e.g. two float32 (3, 2) views)
