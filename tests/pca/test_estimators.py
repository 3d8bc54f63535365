"""LocalDPPCA / LocalDPSparsePCA: exactness without noise, privacy report, rate, contract."""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import TruncatedSVD
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedspectral.linalg import subspace_distance
from fedspectral.pca import (
    LocalDPPCA,
    LocalDPSparsePCA,
    auto_lambda,
    davis_kahan_bound,
    ldp_noise_scale,
    sample,
    spiked_covariance,
)
from fedspectral.pca.fps import fps_admm
from fedspectral.privacy import BudgetAccountant


def ball_rows(n, p, seed, scale=None):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((p, p)) * np.linspace(1.0, 0.1, p)  # anisotropic
    X = rng.standard_normal((n, p)) @ A
    X /= np.linalg.norm(X, axis=1, keepdims=True).max()
    return X


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("k", [1, 3])
def test_infinite_epsilon_is_exact_uncentred_pca(k):
    X = ball_rows(500, 8, 0)
    est = LocalDPPCA(k, np.inf, 1e-5, random_state=0).fit(X)
    w, U = np.linalg.eigh(X.T @ X / X.shape[0])
    V = U[:, ::-1][:, :k]
    assert est.components_.shape == (k, 8)
    assert subspace_distance(est.components_.T, V) < 1e-10
    np.testing.assert_allclose(est.explained_variance_, w[::-1][:k], rtol=1e-10)
    np.testing.assert_allclose(est.covariance_, X.T @ X / 500, rtol=1e-12)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(k), atol=1e-12)
    # scikit-learn's uncentred reference: TruncatedSVD's right singular vectors
    svd = TruncatedSVD(k, algorithm="arpack", random_state=0).fit(X)
    assert subspace_distance(est.components_.T, svd.components_.T) < 1e-8
    assert est.noise_scale_ == 0.0
    assert all(est.privacy_[f"epsilon_{a}"] == math.inf for a in ("analytic", "pld", "rdp"))


def test_transform_is_uncentred_projection():
    X = ball_rows(200, 5, 1)
    est = LocalDPPCA(2, 1.0, 1e-5, random_state=3)
    Z = est.fit_transform(X)
    np.testing.assert_allclose(Z, X @ est.components_.T, rtol=1e-14)
    np.testing.assert_allclose(est.transform(X[:7] + 1.0), (X[:7] + 1.0) @ est.components_.T)
    assert list(est.get_feature_names_out()) == ["localdppca0", "localdppca1"]


@pytest.mark.parametrize("mode", ["aggregate", "per_user"])
def test_reproducible_and_noisy(mode):
    X = ball_rows(300, 6, 2)
    a = LocalDPPCA(2, 1.0, 1e-5, noise_mode=mode, random_state=7).fit(X)
    b = LocalDPPCA(2, 1.0, 1e-5, noise_mode=mode, random_state=7).fit(X)
    c = LocalDPPCA(2, 1.0, 1e-5, noise_mode=mode, random_state=8).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert not np.allclose(a.covariance_, c.covariance_)
    # the noise has the calibrated size: entries of n(S_hat - X^T X/n) have sd sigma*sqrt(n)
    E = (a.covariance_ - X.T @ X / 300)[np.triu_indices(6)] * 300 / math.sqrt(300)
    assert E.std() == pytest.approx(a.noise_scale_, rel=0.4)  # 21 entries: loose


# --------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_privacy_report_from_ledger(eps):
    X = ball_rows(100, 4, 3)
    est = LocalDPPCA(1, eps, 1e-6, random_state=0).fit(X)
    pr = est.privacy_
    assert pr["epsilon"] == eps and pr["delta"] == 1e-6 and pr["calibration"] == "analytic"
    assert pr["sigma"] == est.noise_scale_ == ldp_noise_scale(eps, 1e-6).sigma
    assert pr["sensitivity"] == pr["true_sensitivity"] == math.sqrt(2)
    assert pr["epsilon_analytic"] == pytest.approx(eps, rel=1e-6)
    assert pr["epsilon_pld"] == pytest.approx(eps, rel=1e-3)
    assert pr["epsilon_rdp"] >= pr["epsilon_pld"]
    assert len(est.ledger_) == 1 and est.ledger_.parties == ["user"]
    assert pr["n_users"] == 100


def test_paper_calibration_reports_the_true_epsilon():
    X = ball_rows(100, 4, 3)
    est = LocalDPPCA(1, 2.0, 1e-5, calibration="paper", random_state=0).fit(X)
    pr = est.privacy_
    assert pr["sigma"] ** 2 == pytest.approx(2 * math.log(1.25 / 1e-5) / 4.0)
    assert pr["sensitivity"] == 1.0 and pr["true_sensitivity"] == math.sqrt(2)
    want = dp_accounting.get_epsilon_gaussian(pr["sigma"] / math.sqrt(2), 1e-5)
    assert pr["epsilon_analytic"] == pytest.approx(want, rel=1e-9)
    assert pr["epsilon_analytic"] > 2.0
    with pytest.raises(ValueError, match="2.0"):
        LocalDPPCA(1, 2.0, 1e-5, calibration="classic").fit(X)


# --------------------------------------------------------------------------- rate
def test_error_falls_as_one_over_sqrt_n():
    # Spiked model p=4, k=1, spike 100 (eigen-gap ~ 1/(5p)), eps=4: for n in
    # [2e4, 1.28e6] the error is in the perturbative regime, where
    # ||V_hat V_hat^T - V V^T||_F ~ sqrt(kp sigma^2 / n) / gap.  Fit the log-log slope
    # of the mean error over 12 noise draws per n: -1/2 within 0.1.
    S, V = spiked_covariance(4, 1, 100.0, rng=20)
    X = sample(S, 1_280_000, rng=21)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    ns = [20_000, 80_000, 320_000, 1_280_000]
    ev = np.linalg.eigvalsh(S)
    sigma = ldp_noise_scale(4.0, 1e-5).sigma
    means = []
    for n in ns:
        errs = [
            subspace_distance(LocalDPPCA(1, 4.0, 1e-5, random_state=r).fit(X[:n]).components_.T, V)
            for r in range(12)
        ]
        means.append(np.mean(errs))
        assert means[-1] <= math.sqrt(davis_kahan_bound(n, 4, 1, sigma, ev))
    slope = np.polyfit(np.log(ns), np.log(means), 1)[0]
    assert slope == pytest.approx(-0.5, abs=0.1)


# --------------------------------------------------------------------------- contract
@parametrize_with_checks(
    [
        LocalDPPCA(1, 1.0, 1e-5, random_state=0),
        LocalDPSparsePCA(1, 1.0, 1e-5, random_state=0),
        # a shared budget (unlimited: the suite fits many times)
        LocalDPPCA(1, 1.0, 1e-5, random_state=0, accountant=BudgetAccountant(np.inf, 1e-5, "rdp")),
    ]
)
# the suite's data have rows of norm > 1: clipped, with the estimator's warning
@pytest.mark.filterwarnings("ignore:clipped .* to L2 norm 1:UserWarning")
def test_scikit_learn_estimator_checks(estimator, check):
    """Every check of scikit-learn's estimator suite (none is marked as an expected
    failure; ``check_array_api_input`` skips itself unless SCIPY_ARRAY_API is set)."""
    check(estimator)


def test_sparse_n_iter_is_the_admm_iteration_count():
    X = ball_rows(200, 5, 3)
    est = LocalDPSparsePCA(2, 2.0, 1e-5, random_state=0).fit(X)
    assert est.fps_.converged and est.n_iter_ == est.fps_.iterations
    assert 1 <= est.n_iter_ < est.max_iter
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        capped = LocalDPSparsePCA(2, 2.0, 1e-5, max_iter=3, random_state=0).fit(X)
    assert capped.n_iter_ == 3
    assert not hasattr(LocalDPSparsePCA(2, 2.0, 1e-5), "n_iter_")


def test_sparse_anderson_selects_the_fps_solver():
    """``anderson`` reaches fps_admm, in fit and in the error interval's refits: 0 is the
    plain ADMM (the R package's), the default the accelerated one; same noisy matrix
    (same seed), so the fits differ only by the solver."""
    X = ball_rows(300, 12, 5)
    plain = LocalDPSparsePCA(2, 2.0, 1e-5, anderson=0, random_state=3).fit(X)
    accel = LocalDPSparsePCA(2, 2.0, 1e-5, random_state=3).fit(X)
    np.testing.assert_array_equal(plain.covariance_, accel.covariance_)
    for est, m in ((plain, 0), (accel, 5)):
        ref = fps_admm(est.covariance_, 2, est.lam_, anderson=m)
        np.testing.assert_array_equal(est.fps_.X, ref.X)
        assert est.n_iter_ == ref.iterations
    assert plain.n_iter_ != accel.n_iter_  # the two solvers do differ here
    assert accel.get_params()["anderson"] == 5 and clone(plain).anderson == 0
    with pytest.raises(TypeError, match="anderson must be an integer, got 2.5"):
        LocalDPSparsePCA(2, 2.0, 1e-5, anderson=2.5).fit(X)


def test_sklearn_contract():
    est = LocalDPPCA(2, 1.0, 1e-5, noise_mode="per_user", random_state=4)
    params = est.get_params()
    assert params == {
        "n_components": 2,
        "epsilon": 1.0,
        "delta": 1e-5,
        "calibration": "analytic",
        "noise_mode": "per_user",
        "norm_policy": "clip",
        "random_state": 4,
        "vectorisation": "auto",
        "accountant": None,
    }
    c = clone(est)
    assert c.get_params() == params and c is not est
    with pytest.raises(NotFittedError):
        est.transform(np.zeros((2, 3)))
    assert not hasattr(est, "components_") and not hasattr(est, "privacy_")
    est.set_params(n_components=1)
    X = ball_rows(50, 3, 5)
    assert est.fit(X) is est
    assert est.n_components_ == 1 and est.n_features_in_ == 3 and est.n_samples_ == 50
    with pytest.raises(ValueError, match="3 features"):
        est.transform(np.zeros((2, 4)))
    # parameters are stored unchanged (validation happens in fit)
    bad = LocalDPPCA(-1, "x", 7.0, calibration="nope")
    assert bad.n_components == -1 and bad.calibration == "nope"
    sp = LocalDPSparsePCA(2, 1.0, 1e-5)
    assert clone(sp).get_params()["lam"] == "auto"


@pytest.mark.parametrize(
    "kwargs, X, bad",
    [
        ({"n_components": 0}, None, "0"),
        ({"n_components": -2}, None, "-2"),
        ({"n_components": 7}, None, "7"),  # k > p = 6
        ({"epsilon": 0.0}, None, "0.0"),
        ({"epsilon": -1.0}, None, "-1.0"),
        ({"delta": 0.0}, None, "0.0"),
        ({"delta": 1.0}, None, "1.0"),
        ({"calibration": "laplace"}, None, "laplace"),
        ({"noise_mode": "fast"}, None, "fast"),
        ({"norm_policy": "drop"}, None, "drop"),
        ({}, np.full((5, 6), np.nan), "NaN"),
        ({}, np.vstack([np.zeros((4, 6)), [np.inf] * 6]), "infinite"),
        ({}, np.zeros(6), "2D"),
        ({}, np.zeros((2, 3, 6)), "dim 3"),
        ({}, np.zeros((0, 6)), "0 sample"),
    ],
)
def test_bad_input_raises_before_any_work(kwargs, X, bad):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    params = {"n_components": 2, "epsilon": 1.0, "delta": 1e-5, "random_state": rng}
    params.update(kwargs)
    est = LocalDPPCA(**params)
    with pytest.raises(ValueError, match=bad):
        est.fit(ball_rows(20, 6, 0) if X is None else X)
    assert rng.bit_generator.state == state  # no noise drawn
    assert not hasattr(est, "ledger_")


def test_norm_policy_in_estimator():
    X = ball_rows(30, 3, 1)
    X[0] *= 10
    with pytest.warns(UserWarning, match="clipped 1"):
        LocalDPPCA(1, 1.0, 1e-5, random_state=0).fit(X)
    with pytest.raises(ValueError, match="norm"):
        LocalDPPCA(1, 1.0, 1e-5, norm_policy="raise").fit(X)


# --------------------------------------------------------------------------- sparse
def sparse_rows(n, p, support, seed):
    rng = np.random.default_rng(seed)
    v = np.zeros(p)
    v[support] = rng.choice([-1.0, 1.0], len(support)) / math.sqrt(len(support))
    X = 0.5 * rng.standard_normal((n, 1)) * v + 0.05 * rng.standard_normal((n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, v


def test_sparse_without_penalty_or_noise_equals_dense():
    X = ball_rows(400, 7, 6)
    sp = LocalDPSparsePCA(2, np.inf, 1e-5, lam=0.0, tol=1e-6, random_state=0).fit(X)
    de = LocalDPPCA(2, np.inf, 1e-5, random_state=0).fit(X)
    assert subspace_distance(sp.components_.T, de.components_.T) < 1e-3
    assert sp.lam_ == 0.0 and sp.fps_.converged


def test_sparse_recovers_support_and_uses_auto_lambda():
    p, n, support = 20, 200_000, [2, 7, 11]
    X, v = sparse_rows(n, p, support, 7)
    est = LocalDPSparsePCA(1, 2.0, 1e-5, random_state=1).fit(X)
    assert est.lam_ == pytest.approx(auto_lambda(est.noise_scale_, n, p))
    assert est.lam_ == pytest.approx(0.5 * est.noise_scale_ * math.sqrt(math.log(p) / n))
    assert est.fps_.converged
    u = est.components_[0]
    off = np.setdiff1d(np.arange(p), support)
    assert set(np.argsort(-np.abs(u))[:3]) == set(support)
    # off-support mass: at most half of what dense Algorithm 1 leaves on the same noise
    # (measured over seeds 0-4: sparse 0.001-0.05, dense 0.09-0.14)
    de = LocalDPPCA(1, 2.0, 1e-5, random_state=1).fit(X)
    assert np.linalg.norm(u[off]) < 0.5 * np.linalg.norm(de.components_[0][off])
    assert subspace_distance(u, v) < 0.1
    # a penalty above the noise maximum (c = 2) zeroes every off-support row exactly
    big = LocalDPSparsePCA(1, 2.0, 1e-5, lam=4 * est.lam_, random_state=1).fit(X)
    assert set(np.flatnonzero(np.abs(big.components_[0]) > 1e-12)) == set(support)
    np.testing.assert_allclose(est.explained_variance_, u @ est.covariance_ @ u, rtol=1e-12)
    # the same privatised matrix through fps_admm directly gives the same solution
    ref = fps_admm(est.covariance_, 1, est.lam_)
    np.testing.assert_allclose(est.fps_.X, ref.X, atol=1e-12)
    assert subspace_distance(de.components_[0], v) > subspace_distance(u, v)


@pytest.mark.parametrize(
    "kwargs, bad",
    [
        ({"lam": -1.0}, "-1.0"),
        ({"lam": "big"}, "'big'"),
        ({"lam": np.nan}, "nan"),
        ({"tol": 0.0}, "0.0"),
        ({"max_iter": 0}, "0"),
        ({"epsilon": 0.0}, "0.0"),
        ({"anderson": -1}, "anderson.*-1"),
    ],
)
def test_sparse_bad_input_values(kwargs, bad):
    params = {"n_components": 1, "epsilon": 1.0, "delta": 1e-5}
    params.update(kwargs)
    with pytest.raises(ValueError, match=bad):
        LocalDPSparsePCA(**params).fit(ball_rows(10, 4, 0))


@pytest.mark.parametrize("cls", [LocalDPPCA, LocalDPSparsePCA])
@pytest.mark.parametrize(
    "kwargs, bad",
    [
        ({"n_components": 2.5}, "n_components must be an integer, got 2.5"),
        ({"n_components": True}, "n_components must be an integer, got bool True"),
        ({"epsilon": True}, "epsilon must be a real number, got bool True"),
        ({"delta": "1e-5"}, "delta must be a real number, got '1e-5'"),
        ({"random_state": True}, "random_state must be None, an int seed.*got bool True"),
        ({"random_state": np.bool_(False)}, "random_state must be None.*got bool False"),
    ],
)
def test_wrong_kinds_are_type_errors_before_any_work(cls, kwargs, bad):
    params = {"n_components": 1, "epsilon": 1.0, "delta": 1e-5}
    params.update(kwargs)
    est = cls(**params)
    with pytest.raises(TypeError, match=bad):
        est.fit(ball_rows(10, 4, 0))
    assert not hasattr(est, "ledger_")


def test_numpy_scalars_are_accepted_like_python_numbers():
    X = ball_rows(40, 4, 3)
    a = LocalDPSparsePCA(
        np.int64(2),
        np.float32(2.0),
        np.float64(1e-5),
        lam=np.float32(0.01),
        tol=np.float32(1e-3),
        max_iter=np.int32(300),
        random_state=np.int64(5),
    )
    b = LocalDPSparsePCA(
        2,
        float(np.float32(2.0)),
        1e-5,
        lam=float(np.float32(0.01)),
        tol=float(np.float32(1e-3)),
        max_iter=300,
        random_state=5,
    )
    np.testing.assert_array_equal(a.fit(X).components_, b.fit(X).components_)
    assert type(a.lam_) is float


def test_auto_lambda_formula():
    assert auto_lambda(2.0, 100, 50, c=1.5) == pytest.approx(
        1.5 * 2.0 * math.sqrt(math.log(50) / 100)
    )
    assert auto_lambda(0.0, 100, 50) == 0.0
    with pytest.raises(ValueError, match="-1"):
        auto_lambda(-1.0, 100, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auto_lambda(1.0, 10, 1) == 0.0
