"""Algorithm 1 client/server/simulation (fedspectral.pca.local) and linalg helpers."""

import functools
import itertools
import math
import warnings

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from fedspectral.linalg import (
    pack_upper,
    subspace_distance,
    top_k_eigvecs,
    unpack_symmetric,
    unpack_upper,
)
from fedspectral.pca.local import (
    SENSITIVITY,
    CovarianceAggregator,
    clip_rows,
    ldp_from_moment,
    ldp_noise_scale,
    perturb,
    perturb_batch,
    second_moment_sum,
    simulate_messages_sum,
)
from fedspectral.pca.rows import _checked_second_moment_sum, _gram_block_rows
from fedspectral.privacy import PrivacyLedger, symmetric_gaussian


def unit_rows(n, p, seed, radius=0.9):
    X = np.random.default_rng(seed).standard_normal((n, p))
    X *= radius / np.linalg.norm(X, axis=1, keepdims=True).max()
    return X


# --------------------------------------------------------------------------- linalg
def test_pack_unpack_roundtrip_and_order():
    S = np.arange(16.0).reshape(4, 4)
    S = S + S.T
    u = pack_upper(S)
    assert u.shape == (10,)
    np.testing.assert_array_equal(u[:4], S[0])  # row-major: (0,0),(0,1),(0,2),(0,3),(1,1)...
    assert u[4] == S[1, 1]
    np.testing.assert_array_equal(unpack_upper(u, 4), S)
    np.testing.assert_array_equal(unpack_upper(u), S)
    stack = np.stack([S, 2 * S])
    np.testing.assert_array_equal(unpack_upper(pack_upper(stack)), stack)
    with pytest.raises(ValueError, match="11"):
        unpack_upper(np.zeros(11))
    with pytest.raises(ValueError, match="p=5"):
        unpack_upper(np.zeros(10), 5)
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        pack_upper(np.zeros((3, 4)))


def test_subspace_distance_matches_definition():
    rng = np.random.default_rng(0)
    for k, j in [(1, 1), (3, 3), (2, 5)]:
        V = np.linalg.qr(rng.standard_normal((12, k)))[0]
        W = np.linalg.qr(rng.standard_normal((12, j)))[0]
        want = np.linalg.norm(V @ V.T - W @ W.T)
        assert subspace_distance(V, W) == pytest.approx(want, rel=1e-12)
        assert subspace_distance(V, V @ np.linalg.qr(rng.standard_normal((k, k)))[0]) < 1e-12
    # non-orthonormal input falls back to the definition
    A, B = rng.standard_normal((6, 2)), rng.standard_normal((6, 2))
    assert subspace_distance(A, B) == pytest.approx(np.linalg.norm(A @ A.T - B @ B.T))
    # e1 vs e2: sqrt(2); maximal distance for k-dim orthogonal subspaces: sqrt(2k)
    E = np.eye(6)
    assert subspace_distance(E[:, :1], E[:, 1:2]) == pytest.approx(math.sqrt(2))
    assert subspace_distance(E[:, :3], E[:, 3:]) == pytest.approx(math.sqrt(6))
    with pytest.raises(ValueError, match=r"\(5, 2\)"):
        subspace_distance(np.zeros((5, 2)), np.zeros((6, 2)))


def test_top_k_eigvecs_matches_numpy():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((9, 9))
    S = A @ A.T
    w, V = top_k_eigvecs(S, 3)
    ew, eV = np.linalg.eigh(S)
    np.testing.assert_allclose(w, ew[::-1][:3], rtol=1e-12)
    assert subspace_distance(V, eV[:, ::-1][:, :3]) < 1e-10
    np.testing.assert_allclose(S @ V, V * w, atol=1e-10)
    for bad in (0, 10, -1):
        with pytest.raises(ValueError, match=repr(bad)):
            top_k_eigvecs(S, bad)
    with pytest.raises(TypeError, match="k must be an integer, got 2.0"):
        top_k_eigvecs(S, 2.0)


# --------------------------------------------------------------------------- calibration
@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_analytic_calibration_is_exact_at_sqrt2(eps, delta):
    sc = ldp_noise_scale(eps, delta, "analytic")
    assert sc.sensitivity == SENSITIVITY == math.sqrt(2)
    assert dp_accounting.get_epsilon_gaussian(sc.sigma / SENSITIVITY, delta) == pytest.approx(
        eps, rel=1e-6
    )


def test_classic_and_paper_calibrations():
    d = 1e-4
    sc = ldp_noise_scale(0.5, d, "classic")
    assert sc.sigma == pytest.approx(math.sqrt(2) * math.sqrt(2 * math.log(1.25 / d)) / 0.5)
    with pytest.raises(ValueError, match="1.0"):
        ldp_noise_scale(1.0, d, "classic")
    for eps in (0.5, 1.0, 4.0):  # the seed's sigma_1^2 = 2 ln(1.25/delta)/eps^2, any eps
        sp = ldp_noise_scale(eps, d, "paper")
        assert sp.sigma**2 == pytest.approx(2 * math.log(1.25 / d) / eps**2, rel=1e-14)
        assert sp.sensitivity == 1.0
    # the paper's sigma is sqrt(2) too small for the classic bound with the true sensitivity
    assert ldp_noise_scale(0.5, d, "classic").sigma / ldp_noise_scale(
        0.5, d, "paper"
    ).sigma == pytest.approx(math.sqrt(2))
    assert ldp_noise_scale(math.inf, d).sigma == 0.0


@pytest.mark.parametrize(
    "eps, delta, cal, bad",
    [
        (0.0, 1e-5, "analytic", "0.0"),
        (-1, 1e-5, "analytic", "-1"),
        (float("nan"), 1e-5, "analytic", "nan"),
        (1.0, 0.0, "analytic", "0.0"),
        (1.0, 1.0, "analytic", "1.0"),
        (1.0, 2, "analytic", "2"),
        (1.0, 1e-5, "exact", "exact"),
    ],
)
def test_noise_scale_bad_input(eps, delta, cal, bad):
    with pytest.raises(ValueError, match=bad):
        ldp_noise_scale(eps, delta, cal)


@pytest.mark.parametrize(
    "eps, delta", [(True, 1e-5), (1.0, np.bool_(True)), ("1", 1e-5), (None, 1e-5)]
)
def test_noise_scale_refuses_non_numbers(eps, delta):
    with pytest.raises(TypeError, match="must be a real number"):
        ldp_noise_scale(eps, delta)


# --------------------------------------------------------------------------- sensitivity
def test_sensitivity_is_sqrt2_attained_at_e1_e2():
    p = 7
    e1, e2 = np.eye(p)[0], np.eye(p)[1]
    # the seed's plain upper triangle (the isometric packing: tests/privacy/test_vectorisation.py)
    a = perturb(e1, math.inf, 1e-5, vectorisation="upper")
    b = perturb(e2, math.inf, 1e-5, vectorisation="upper")
    assert np.linalg.norm(a - b) == pytest.approx(math.sqrt(2), rel=1e-15)
    # random pairs in the unit ball never exceed sqrt(2) (proof in the module docstring)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4000, p))
    X /= np.maximum(1, np.linalg.norm(X, axis=1, keepdims=True))
    X[:2000] *= rng.uniform(size=(2000, 1))
    P = perturb_batch(X, math.inf, 1e-5, vectorisation="upper")
    d = np.linalg.norm(P[:2000] - P[2000:], axis=1)
    assert d.max() <= math.sqrt(2) + 1e-12
    # and the identity ||vech(xx^T)||^2 = (||x||^4 + sum x_i^4)/2 used in the proof
    np.testing.assert_allclose(
        np.sum(P**2, 1), (np.sum(X**2, 1) ** 2 + np.sum(X**4, 1)) / 2, rtol=1e-12
    )


def test_perturb_message_is_vech_plus_noise():
    p = 6
    x = unit_rows(1, p, 0)[0]
    m = perturb(x, 1.0, 1e-5, rng=np.random.default_rng(5), vectorisation="upper")
    assert m.shape == (p * (p + 1) // 2,)
    sigma = ldp_noise_scale(1.0, 1e-5).sigma
    z = np.random.default_rng(5).standard_normal(p * (p + 1) // 2)
    np.testing.assert_allclose(m, pack_upper(np.outer(x, x)) + sigma * z, rtol=1e-12)
    # unpacked message is symmetric x x^T + Z
    M = unpack_upper(m)
    np.testing.assert_array_equal(M, M.T)


def test_clip_and_raise_policies():
    x = np.array([3.0, 4.0, 0.0])
    with pytest.warns(UserWarning, match="clipped 1"):
        m = perturb(x, math.inf, 1e-5, vectorisation="upper")
    np.testing.assert_allclose(m, pack_upper(np.outer(x / 5, x / 5)))
    with pytest.raises(ValueError, match="norm 5"):
        perturb(x, math.inf, 1e-5, norm_policy="raise")
    # rows at norm 1 up to rounding are accepted silently
    y = np.ones(10) / math.sqrt(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        perturb(y * (1 + 1e-12), 1.0, 1e-5, rng=0)
    # huge finite rows (squares overflow) are clipped, not treated as non-finite
    X = np.array([[1e200, 1e200], [0.1, 0.2]])
    with pytest.warns(UserWarning):
        f = clip_rows(X)
    np.testing.assert_allclose(np.linalg.norm(X * f[:, None], axis=1), [1.0, math.hypot(0.1, 0.2)])


@pytest.mark.parametrize(
    "x, bad",
    [
        (np.array([np.nan, 0.1]), "NaN"),
        (np.array([np.inf, 0.1]), "NaN or infinite"),
        (np.zeros((2, 2)), r"\(2, 2\)"),
        (np.zeros(0), r"\(1, 0\)"),
    ],
)
def test_perturb_bad_input(x, bad):
    with pytest.raises(ValueError, match=bad):
        perturb(x, 1.0, 1e-5, rng=0)


def test_wrong_kinds_of_array_are_type_errors_naming_them():
    import scipy.sparse

    with pytest.raises(TypeError, match="x must be a real numeric array, got dtype <U1"):
        perturb(np.array(["a"]), 1.0, 1e-5, rng=0)
    with pytest.raises(
        TypeError,
        match=r"X must be a dense array, got a scipy.sparse "
        r"csr_matrix of shape \(3, 3\); pass X.toarray\(\)",
    ):
        perturb_batch(scipy.sparse.eye(3, format="csr"), 1.0, 1e-5, rng=0)
    with pytest.raises(TypeError, match="scipy.sparse"):
        CovarianceAggregator(2).add(scipy.sparse.csr_matrix(np.ones((1, 3))))
    with pytest.raises(TypeError, match="rng must be None, an int seed.*got bool True"):
        perturb(np.array([0.1]), 1.0, 1e-5, rng=True)


def test_nan_after_an_overflowing_row_is_found_before_any_noise():
    X = np.array([[1e200, 0.0], [np.nan, 0.0]])
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=r"NaN or infinite values \(first in row 1\)"):
        perturb_batch(X, 1.0, 1e-5, rng)
    assert rng.bit_generator.state == state
    with pytest.raises(ValueError, match="row 1"):
        simulate_messages_sum(X, 1.0, 1e-5, rng)


def test_overflowing_finite_rows_are_clipped_not_zeroed():
    # ||x||^2 = 6 * 1.7e308^2 overflows and so does ||x|| itself: still clipped to norm 1
    with pytest.warns(UserWarning, match=r"largest norm 4.16413e\+308"):
        m = perturb(np.full(6, 1.7e308), np.inf, 1e-5, 0, vectorisation="upper")
    np.testing.assert_allclose(m, np.full(21, 1 / 6), rtol=1e-13)
    # a finite 1e200 row is reported with its norm, not "inf"
    with pytest.raises(ValueError, match=r"norm 1e\+200\)"):
        perturb(np.array([1e200, 0.0]), 1.0, 1e-5, norm_policy="raise")
    with pytest.warns(UserWarning, match=r"largest norm 1.41421e\+200"):
        perturb_batch(np.array([[1e200, 1e200], [3.0, 4.0]]), np.inf, 1e-5, 0)


def test_aggregator_survives_messages_near_the_float_limit():
    # the plain upper-triangle packing: the aggregated entries are the messages' own
    agg = functools.partial(CovarianceAggregator, vectorisation="upper")

    a = agg(1)
    a.add([1e308]).add([1e308])
    assert a.covariance()[0, 0] == pytest.approx(1e308, rel=1e-15)
    b = agg(2).add_batch(np.full((3, 3), 1.7e308)).add([-1e308, 0.0, 4.0])
    np.testing.assert_allclose(
        b.covariance(),
        [[0.75 * 1.7e308 - 0.25e308, 1.275e308], [1.275e308, 1.275e308 + 1.0]],
        rtol=1e-14,
    )
    c = agg(2).add([1.0, 2.0, 3.0])
    c.merge(agg(2).add_batch(np.full((2, 3), 1.7e308)))
    assert np.isfinite(c.covariance()).all() and c.count == 3
    # small values keep full precision while the exponent stays 0
    d = agg(2).add([1e-300, 2e-300, 3e-300])
    np.testing.assert_array_equal(d.covariance(), [[1e-300, 2e-300], [2e-300, 3e-300]])


def test_aggregator_refuses_self_merge_and_huge_p():
    a = CovarianceAggregator(2).add([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="into itself"):
        a.merge(a)
    assert a.count == 1
    with pytest.raises(ValueError, match=r"p must be <= 16384 .*got 1000000"):
        CovarianceAggregator(10**6)
    with pytest.raises(TypeError, match="p must be an integer, got bool True"):
        CovarianceAggregator(True)


def test_perturb_bad_options():
    x = np.array([0.1, 0.2])
    with pytest.raises(ValueError, match="'drop'"):
        perturb(x, 1.0, 1e-5, norm_policy="drop")
    with pytest.raises(ValueError, match="'fast'"):
        simulate_messages_sum(x[None], 1.0, 1e-5, noise_mode="fast")
    with pytest.raises(TypeError, match="RandomState"):
        perturb(x, 1.0, 1e-5, rng=np.random.RandomState(0))


# --------------------------------------------------------------------------- simulation
def test_per_user_mode_is_the_sum_of_the_device_messages():
    X = unit_rows(1000, 5, 1)
    msgs = perturb_batch(X, 0.7, 1e-5, rng=np.random.default_rng(9))
    for chunk in (1, 77, 1000, None):
        total, n = simulate_messages_sum(
            X, 0.7, 1e-5, rng=np.random.default_rng(9), noise_mode="per_user", chunk_rows=chunk
        )
        assert n == 1000
        np.testing.assert_allclose(total, msgs.sum(0), rtol=0, atol=1e-9)
    # without noise: exactly the packed X^T X
    total, _ = simulate_messages_sum(
        X, math.inf, 1e-5, noise_mode="per_user", vectorisation="upper"
    )
    np.testing.assert_allclose(total, pack_upper(X.T @ X), rtol=1e-13)


def test_per_user_and_aggregate_modes_have_the_same_distribution():
    # 3000 repetitions of S_hat for n=50 users, p=3; each entry of S_hat - X^T X/n is
    # N(0, sigma^2/n) in both modes.  Two-sample KS on a diagonal and an off-diagonal
    # entry (fixed seeds, p-value > 1e-3), and both variances within 8 % of sigma^2/n
    # (relative sd of a 3000-sample variance: 2.6 %, so 3 sd).
    n, p, reps, eps = 50, 3, 3000, 1.0
    X = unit_rows(n, p, 2)
    base = pack_upper(X.T @ X)
    sigma = ldp_noise_scale(eps, 1e-5).sigma
    out = {}
    for mode, seed in (("per_user", 10), ("aggregate", 11)):
        rng = np.random.default_rng(seed)
        out[mode] = np.array(
            [
                (simulate_messages_sum(X, eps, 1e-5, rng=rng, noise_mode=mode)[0] - base) / n
                for _ in range(reps)
            ]
        )
    for j in (0, 1):  # (0,0) diagonal and (0,1) off-diagonal
        a, b = out["per_user"][:, j], out["aggregate"][:, j]
        assert stats.ks_2samp(a, b).pvalue > 1e-3
        for v in (a, b):
            assert v.var() == pytest.approx(sigma**2 / n, rel=0.08)
            assert abs(v.mean()) < 4 * sigma / n / math.sqrt(reps) * math.sqrt(n)


def test_simulation_records_one_release_for_all_users():
    X = unit_rows(300, 4, 3)
    led = PrivacyLedger()
    simulate_messages_sum(X, 2.0, 1e-5, rng=0, ledger=led)
    assert len(led) == 1 and led.parties == ["user"]
    rel = led.releases[0]
    assert rel.sensitivity == math.sqrt(2) and "n_users=300" in rel.mechanism
    assert led.epsilon(1e-5, accountant="analytic") == pytest.approx(2.0, rel=1e-6)
    # the paper's calibration is recorded with the true sensitivity: eps > nominal
    led2 = PrivacyLedger()
    simulate_messages_sum(X, 4.0, 1e-5, rng=0, calibration="paper", ledger=led2)
    sp = ldp_noise_scale(4.0, 1e-5, "paper").sigma
    got = led2.epsilon(1e-5, accountant="analytic")
    assert got == pytest.approx(dp_accounting.get_epsilon_gaussian(sp / math.sqrt(2), 1e-5))
    assert got > 4.0 * 1.3


def test_simulation_bad_input_before_any_work():
    led = PrivacyLedger()
    X = unit_rows(10, 3, 0)
    X[4, 1] = np.nan
    with pytest.raises(ValueError, match="row 4"):
        simulate_messages_sum(X, 1.0, 1e-5, ledger=led)
    assert len(led) == 0  # nothing recorded
    for bad, match in (
        (np.zeros(3), "2-D"),
        (np.zeros((0, 3)), r"\(0, 3\)"),
        (np.zeros((2, 2, 2)), "2-D"),
    ):
        with pytest.raises(ValueError, match=match):
            simulate_messages_sum(bad, 1.0, 1e-5)
    with pytest.raises(ValueError, match="chunk_rows"):
        simulate_messages_sum(unit_rows(3, 2, 0), 1.0, 1e-5, chunk_rows=0)


# --------------------------------------------------------------------------- aggregator
def test_aggregator_merge_associative_order_independent_equals_batch():
    p = 6
    X = unit_rows(900, p, 4)
    msgs = perturb_batch(X, 1.0, 1e-5, rng=np.random.default_rng(1))
    batch = CovarianceAggregator(p).add_batch(msgs)
    parts = [CovarianceAggregator(p) for _ in range(3)]
    for i, m in enumerate(msgs):
        parts[i % 3].add(m)
    results = []
    for order in itertools.permutations(range(3)):
        a, b, c = (parts[i] for i in order)
        left = CovarianceAggregator(p).merge(a).merge(b).merge(c)  # (a+b)+c
        bc = CovarianceAggregator(p).merge(b).merge(c)
        right = CovarianceAggregator(p).merge(a).merge(bc)  # a+(b+c)
        results += [left, right]
    for r in results:
        assert r.count == 900
        np.testing.assert_allclose(r.covariance(), batch.covariance(), rtol=1e-12, atol=1e-14)
    S = batch.covariance()
    np.testing.assert_array_equal(S, S.T)
    np.testing.assert_allclose(S, unpack_symmetric(msgs.mean(0)), rtol=1e-12)
    # add_sum of a simulated block gives the same as adding its messages
    agg = CovarianceAggregator(p).add_sum(msgs.sum(0), 900)
    np.testing.assert_allclose(agg.covariance(), S, rtol=1e-12)
    # memory: one packed vector whatever n
    assert batch.total.shape == (p * (p + 1) // 2,)


def test_aggregator_bad_input():
    agg = CovarianceAggregator(4)
    with pytest.raises(ValueError, match="count = 0"):
        agg.covariance()
    with pytest.raises(ValueError, match=r"\(15,\)"):
        agg.add(np.zeros(15))
    with pytest.raises(ValueError, match=r"\(2, 15\)"):
        agg.add_batch(np.zeros((2, 15)))
    with pytest.raises(ValueError, match="empty"):
        agg.add_batch(np.zeros((0, 10)))
    with pytest.raises(ValueError, match="NaN"):
        agg.add(np.full(10, np.nan))
    with pytest.raises(ValueError, match="p=4 and p=5"):
        agg.merge(CovarianceAggregator(5))
    with pytest.raises(ValueError, match="0"):
        CovarianceAggregator(0)
    with pytest.raises(ValueError, match="-3"):
        agg.add_sum(np.zeros(10), -3)
    assert agg.count == 0


# ----------------------------------------------------------------------------- from a moment
def test_ldp_from_moment_noise_level():
    """Aggregate-mode LDP from a moment: S_hat - S has entries N(0, sigma1^2 / n) (upper
    packing); isometric: the same diagonal, off-diagonal entries N(0, sigma1^2 / 2n)."""
    S = np.zeros((30, 30))
    n = 1000
    _, S_hat = ldp_from_moment(S, n, 2, 1.0, 1e-4, np.random.default_rng(1), vectorisation="upper")
    sd = ldp_noise_scale(1.0, 1e-4).sigma / math.sqrt(n)
    iu = np.triu_indices(30)
    ratio = S_hat[iu].std() / sd  # 465 iid entries: sd of the ratio about 3.3%
    assert 0.9 < ratio < 1.1
    np.testing.assert_array_equal(S_hat, S_hat.T)
    _, S_iso = ldp_from_moment(
        S, n, 2, 1.0, 1e-4, np.random.default_rng(1), vectorisation="isometric"
    )
    np.testing.assert_array_equal(np.diag(S_iso), np.diag(S_hat))  # same draws
    off = np.triu_indices(30, 1)
    np.testing.assert_allclose(S_iso[off] * math.sqrt(2), S_hat[off], rtol=1e-14)


@pytest.mark.parametrize(
    "calibration,vec", [("analytic", "auto"), ("paper", "auto"), ("analytic", "upper")]
)
def test_ldp_from_moment_is_the_moment_plus_the_users_noise_sum(calibration, vec):
    rng = np.random.default_rng(3)
    X = unit_rows(200, 6, 4)
    S = X.T @ X / 200
    led = PrivacyLedger()
    V, S_hat = ldp_from_moment(
        S,
        200,
        2,
        0.7,
        1e-5,
        np.random.default_rng(9),
        calibration=calibration,
        vectorisation=vec,
        ledger=led,
    )
    sigma = ldp_noise_scale(0.7, 1e-5, calibration).sigma
    packing = "upper" if calibration == "paper" or vec == "upper" else "isometric"
    E = symmetric_gaussian(
        6, sigma * math.sqrt(200), np.random.default_rng(9), vectorisation=packing
    )
    np.testing.assert_array_equal(S_hat, S + E / 200)  # the same draws, bit for bit
    np.testing.assert_array_equal(V, top_k_eigvecs(S_hat, 2)[1])
    (rel,) = led.releases
    assert rel.sigma == sigma and rel.sensitivity == SENSITIVITY and rel.party == "user"
    assert "n_users=200" in rel.mechanism
    # epsilon = inf: no noise, the exact top-k eigenspace of S
    V_inf, S_inf = ldp_from_moment(S, 200, 2, math.inf, 1e-5, rng)
    np.testing.assert_array_equal(S_inf, S)
    assert subspace_distance(V_inf, top_k_eigvecs(S, 2)[1]) < 1e-12


@pytest.mark.parametrize(
    "args,kwargs,err,match",
    [
        ((np.zeros((3, 4)), 10, 1, 1.0, 1e-5), {}, ValueError, "square"),
        ((np.zeros((3, 3)), 0, 1, 1.0, 1e-5), {}, ValueError, "n must be >= 1"),
        ((np.zeros((3, 3)), 10, 4, 1.0, 1e-5), {}, ValueError, "k must be <= 3"),
        ((np.zeros((3, 3)), True, 1, 1.0, 1e-5), {}, TypeError, "n must be an integer"),
        ((np.zeros((3, 3)), 10, 1, -1.0, 1e-5), {}, ValueError, "epsilon"),
        ((np.zeros((3, 3)), 10, 1, 1.0, 1e-5), {"ledger": {}}, TypeError, "PrivacyLedger"),
    ],
)
def test_ldp_from_moment_bad_input(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        ldp_from_moment(*args, **kwargs)


# ----------------------------------------------------------------------------- one pass
def _blocked_rows(p, n_blocks, seed, over=()):
    """Rows inside the unit ball across ``n_blocks`` Gram blocks (plus a partial one);
    rows ``over`` are pushed above norm 1."""
    n = n_blocks * _gram_block_rows(p) + 37
    X = unit_rows(n, p, seed)
    for i, r in over:
        X[i] *= r / np.linalg.norm(X[i])
    return X


@pytest.mark.parametrize("over", [(), ((5, 3.0), (20_000, 1.5), (40_000, 7.0))])
def test_one_pass_second_moment_is_the_two_pass_one_bit_for_bit(over):
    # checks and Gram in one pass over X: the same factors, blocks and sums as clip_rows
    # followed by second_moment_sum, so the same matrix bit for bit (and the same warning)
    p = 8
    X = _blocked_rows(p, 3, 11, over)
    with warnings.catch_warnings(record=True) as w_two:
        warnings.simplefilter("always")
        f = clip_rows(X)
    with warnings.catch_warnings(record=True) as w_one:
        warnings.simplefilter("always")
        C = _checked_second_moment_sum(X, "clip", "X", stacklevel=2)
    ref = second_moment_sum(X, np.ones(X.shape[0]) if f is None else f)
    assert np.array_equal(C, ref)
    assert [str(w.message) for w in w_one] == [str(w.message) for w in w_two]
    assert len(w_one) == (1 if over else 0)
    if over:
        assert "clipped 3 of" in str(w_one[0].message)
        assert "largest norm 7)" in str(w_one[0].message)


def test_one_pass_second_moment_within_the_rounding_bound_of_one_gram():
    # only the order of the sum differs from one X.T @ X: within 2 gamma_n |X|^T |X|
    p = 8
    X = _blocked_rows(p, 3, 12)
    n = X.shape[0]
    C = _checked_second_moment_sum(X, "raise", "X", stacklevel=2)
    u = np.finfo(float).eps / 2
    gamma = n * u / (1 - n * u)
    A = np.abs(X)
    assert np.all(np.abs(C - X.T @ X) <= 2 * gamma * (A.T @ A))
    # and the simulation's noise-free sum is that matrix
    total, _ = simulate_messages_sum(X, math.inf, 1e-5, 0, vectorisation="upper")
    np.testing.assert_array_equal(total, pack_upper(C))


@pytest.mark.parametrize("policy", ["clip", "raise"])
def test_one_pass_finds_a_nan_in_a_late_block_before_the_rows_above_one(policy):
    # a row above 1 in the first block, a NaN in the last: the NaN is the error (as the
    # two-pass check reports it), whatever the policy, and no noise is drawn
    p = 8
    X = _blocked_rows(p, 2, 13, over=((3, 2.0),))
    X[-1, 0] = np.nan
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            ValueError, match=rf"NaN or infinite values \(first in row {len(X) - 1}\)"
        ):
            simulate_messages_sum(X, 1.0, 1e-5, rng, norm_policy=policy)
    assert rng.bit_generator.state == state


def test_one_pass_raise_policy_counts_every_row_above_one():
    X = _blocked_rows(8, 2, 14, over=((30_000, 2.0), (3, 1.5)))
    with pytest.raises(
        ValueError, match=r"2 row\(s\) of X have L2 norm > 1 \(first: row 3, norm 1.5\)"
    ):
        simulate_messages_sum(X, 1.0, 1e-5, 0, norm_policy="raise")


def test_one_pass_overflowing_row_in_a_late_block_is_clipped_as_before():
    p = 8
    X = _blocked_rows(p, 2, 15)
    X[-2] = 1e200
    with pytest.warns(UserWarning, match=r"clipped 1 of .* \(largest norm 2.82843e\+200\)"):
        C = _checked_second_moment_sum(X, "clip", "X", stacklevel=2)
    with pytest.warns(UserWarning):
        f = clip_rows(X)
    np.testing.assert_array_equal(C, second_moment_sum(X, f))


def test_clip_warning_points_at_the_callers_line():
    X = np.array([[3.0, 4.0], [0.1, 0.2]])
    with pytest.warns(UserWarning, match="clipped 1 of 2") as rec:
        simulate_messages_sum(X, 1.0, 1e-5, 0)
    assert rec[0].filename == __file__
