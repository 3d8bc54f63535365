"""Property-based tests (hypothesis) of the locally private PCA entry points.

Properties: finite valid input gives a finite result obeying the documented contract
(clipped norms <= 1, Fantope trace k and eigenvalues in [0, 1], orthonormal components,
the aggregate is the mean of the messages); invalid input raises ValueError/TypeError;
nothing else is ever raised.  Derandomised (tests/conftest.py profile), bounded examples.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedspectral.linalg import unpack_upper
from fedspectral.pca import LocalDPPCA, LocalDPSparsePCA
from fedspectral.pca.fps import fantope_projection, fps_admm
from fedspectral.pca.local import CovarianceAggregator, perturb, perturb_batch

BAD = (ValueError, TypeError)

# finite floats over the whole float64 range, with the awkward ones often drawn
finite = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-300, 5e-324, 1e16, 1e200, 1.7e308, -1.7e308]),
    st.floats(-2.0, 2.0),
)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def matrices(draw, max_n=12, max_p=5, elements=finite, min_n=1):
    n = draw(st.integers(min_n, max_n))
    p = draw(st.integers(1, max_p))
    return draw(hnp.arrays(np.float64, (n, p), elements=elements))


@st.composite
def with_non_finite(draw, max_n=8, max_p=4):
    X = draw(matrices(max_n, max_p))
    i = draw(st.integers(0, X.shape[0] - 1))
    j = draw(st.integers(0, X.shape[1] - 1))
    X[i, j] = draw(non_finite)
    return X


epsilons = st.one_of(st.floats(0.05, 50.0), st.just(math.inf))
deltas = st.floats(1e-12, 0.5)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.floats(), max_size=2),
    st.just(np.bool_(True)),
    st.just(np.float32(0.5)),
    st.just(np.int64(2)),
)


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


# ----------------------------------------------------------------------------- perturb
@settings(max_examples=100)
@given(matrices(), st.floats(0.05, 50.0), deltas, st.integers(0, 2**32))
def test_perturb_batch_is_finite_for_finite_rows(X, eps, delta, seed):
    msgs = _quiet(perturb_batch, X, eps, delta, seed)
    p = X.shape[1]
    assert msgs.shape == (X.shape[0], p * (p + 1) // 2)
    assert np.isfinite(msgs).all()


@settings(max_examples=100)
@given(matrices())
def test_without_noise_the_message_is_the_clipped_outer_product(X):
    msgs = _quiet(perturb_batch, X, math.inf, 1e-5, 0)
    S = unpack_upper(msgs, X.shape[1])
    sq = np.einsum("nii->n", S)  # ||clipped x||^2
    assert (sq <= 1 + 1e-9).all()
    m = np.abs(X).max(axis=1)
    with np.errstate(over="ignore"):  # norms beyond float64 are inf: clipped rows anyway
        norms = m * np.linalg.norm(X / np.where(m > 0, m, 1.0)[:, None], axis=1)
    clipped = norms > 1 + 1e-9
    np.testing.assert_allclose(sq[clipped], 1.0, rtol=1e-12)
    inside = ~clipped & (norms > 1e-150)  # rows in the ball are sent as they are
    np.testing.assert_allclose(sq[inside], norms[inside] ** 2, rtol=1e-12)
    for i in range(X.shape[0]):  # rank one, along x
        w = np.linalg.eigvalsh(S[i])
        assert w[:-1].max(initial=0.0) <= 1e-12 * max(1.0, w[-1])


@settings(max_examples=60)
@given(with_non_finite())
def test_non_finite_rows_are_refused_before_any_noise(X):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    try:
        _quiet(perturb_batch, X, 1.0, 1e-5, rng)
    except ValueError as exc:
        assert "NaN or infinite" in str(exc)
    else:
        raise AssertionError("a non-finite row was accepted")
    assert rng.bit_generator.state == state


@settings(max_examples=100)
@given(junk, junk, st.sampled_from([0, "x", None, True]))
def test_perturb_bad_parameters_raise_only_value_or_type_errors(eps, delta, rng):
    try:
        out = _quiet(perturb, np.array([0.3, 0.4]), eps, delta, rng)
    except BAD:
        return
    assert np.isfinite(out).all()  # a valid combination (e.g. eps=2, delta=0.5)


# ----------------------------------------------------------------------------- aggregator
@st.composite
def message_blocks(draw):
    p = draw(st.integers(1, 4))
    m = p * (p + 1) // 2
    blocks = draw(
        st.lists(
            hnp.arrays(np.float64, (draw(st.integers(1, 4)), m), elements=finite),
            min_size=1,
            max_size=4,
        )
    )
    return p, blocks


def _exact_mean(blocks):
    """Mean of all rows by exact rational arithmetic (reference, no rounding)."""
    from fractions import Fraction

    rows = [r for b in blocks for r in b]
    return np.array(
        [
            float(sum(Fraction(float(r[j])) for r in rows) / len(rows))
            for j in range(rows[0].shape[0])
        ]
    )


@settings(max_examples=80)
@given(message_blocks())
def test_aggregator_mean_is_finite_and_right_whatever_the_grouping(pb):
    p, blocks = pb
    one = CovarianceAggregator(p, vectorisation="upper")
    for b in blocks:
        one.add_batch(b)
    parts = []
    for b in blocks:  # the same messages one by one, in separate aggregators, merged
        a = CovarianceAggregator(p, vectorisation="upper")
        for row in b:
            a.add(row)
        parts.append(a)
    merged = parts[0]
    for a in parts[1:]:
        merged.merge(a)
    ref = _exact_mean(blocks)
    scale = max(1.0, float(max(np.abs(b).max() for b in blocks)))
    for agg in (one, merged):
        assert agg.count == sum(len(b) for b in blocks)
        cov = agg.covariance()
        assert np.isfinite(cov).all()
        got = cov[np.triu_indices(p)]
        assert np.abs(got - ref).max() <= 1e-12 * scale


# ----------------------------------------------------------------------------- Fantope
@st.composite
def symmetric(draw, max_p=6, elements=finite):
    p = draw(st.integers(1, max_p))
    A = draw(hnp.arrays(np.float64, (p, p), elements=elements))
    return 0.5 * A + 0.5 * A.T


@settings(max_examples=150)
@given(symmetric(), st.data())
def test_fantope_projection_is_in_the_fantope_for_any_finite_input(A, data):
    k = data.draw(st.integers(1, A.shape[0]))
    X = fantope_projection(A, k)
    assert np.isfinite(X).all()
    np.testing.assert_allclose(X, X.T, atol=1e-12)
    w = np.linalg.eigvalsh(X)
    assert abs(w.sum() - k) <= 1e-9 * k
    assert w.min() >= -1e-10 and w.max() <= 1 + 1e-10


@settings(max_examples=40)
@given(symmetric(max_p=5), st.data())
def test_fps_admm_is_finite_and_feasible_when_converged(S, data):
    k = data.draw(st.integers(1, S.shape[0]))
    lam = data.draw(st.one_of(st.just(0.0), st.floats(0.0, 10.0)))
    res = _quiet(fps_admm, S, k, lam, max_iter=60)
    assert np.isfinite(res.X).all() and res.iterations <= 60
    np.testing.assert_allclose(res.X, res.X.T, atol=1e-9)
    if res.converged and lam == 0.0:  # Z = X up to the tolerance: near the Fantope
        assert abs(np.trace(res.X) - k) <= 1e-2 * max(1, k)


@settings(max_examples=60)
@given(junk, junk)
def test_fantope_and_fps_bad_parameters(k, lam):
    A = np.diag([2.0, 1.0, 0.0])
    for call in (lambda: fantope_projection(A, k), lambda: fps_admm(A, 1, lam, max_iter=5)):
        try:
            out = _quiet(call)
        except BAD:
            continue
        X = out if isinstance(out, np.ndarray) else out.X
        assert np.isfinite(X).all()


# ----------------------------------------------------------------------------- estimators
@settings(max_examples=40)
@given(matrices(max_n=15, max_p=4), st.data())
def test_estimators_give_orthonormal_components_for_finite_data(X, data):
    p = X.shape[1]
    k = data.draw(st.integers(1, p))
    eps = data.draw(epsilons)
    sparse = data.draw(st.booleans())
    cls = LocalDPSparsePCA if sparse else LocalDPPCA
    kw = {"max_iter": 40} if sparse else {}
    est = _quiet(cls(k, eps, 1e-5, random_state=data.draw(st.integers(0, 2**16)), **kw).fit, X)
    V = est.components_
    assert V.shape == (k, p) and np.isfinite(V).all()
    np.testing.assert_allclose(V @ V.T, np.eye(k), atol=1e-8)
    assert np.isfinite(est.covariance_).all() and np.isfinite(est.explained_variance_).all()


@settings(max_examples=60)
@given(
    st.sampled_from(
        [
            "n_components",
            "epsilon",
            "delta",
            "random_state",
            "calibration",
            "noise_mode",
            "norm_policy",
        ]
    ),
    junk,
)
def test_estimator_bad_parameters_raise_before_any_work(name, value):
    params = {"n_components": 1, "epsilon": 1.0, "delta": 1e-5, "random_state": 0}
    params[name] = value
    est = LocalDPPCA(**params)
    try:
        _quiet(est.fit, np.full((5, 2), 0.1))
    except BAD:
        assert not hasattr(est, "ledger_")
        return
    assert np.isfinite(est.components_).all()


@settings(max_examples=30)
@given(with_non_finite(max_n=6, max_p=3))
def test_estimators_refuse_non_finite_data(X):
    for cls in (LocalDPPCA, LocalDPSparsePCA):
        est = cls(1, 1.0, 1e-5, random_state=0)
        try:
            _quiet(est.fit, X)
        except ValueError:
            assert not hasattr(est, "ledger_")
        else:
            raise AssertionError("non-finite data accepted")
