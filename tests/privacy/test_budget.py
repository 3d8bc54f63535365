"""BudgetAccountant: one (epsilon, delta) budget shared by several fits over the same users.

Composition is checked against dp-accounting called directly, refusal happens before the
data are read, clones share the budget, and a cross-validation is charged per user exactly
the fits whose training folds held that user."""

from __future__ import annotations

import copy
import math

import dp_accounting
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from fedspectral.pca import LocalDPPCA, LocalDPSparsePCA
from fedspectral.pca.local import SENSITIVITY, ldp_noise_scale, ldp_release
from fedspectral.privacy import BudgetAccountant, BudgetExceededError

DELTA = 1e-5


def _rows(n=120, p=4, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, p))
    return X / (1.5 * np.linalg.norm(X, axis=1, keepdims=True))


def _z(eps, delta):
    return ldp_noise_scale(eps, delta, "analytic").sigma / SENSITIVITY


def _pld(zs, delta):
    """dp-accounting directly: PLD of Gaussian events of unit sensitivity."""
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    for z in zs:
        acc.compose(dp_accounting.GaussianDpEvent(z))
    return acc.get_epsilon(delta)


class Unreadable:
    """Stands for the users' data; any attempt to read it fails the test."""

    def __array__(self, *a, **k):
        raise AssertionError("the data were read")

    def __len__(self):
        raise AssertionError("the data were read")

    shape = property(lambda self: (_ for _ in ()).throw(AssertionError("the data were read")))


def test_composition_is_dp_accountings_and_below_basic_composition():
    acc = BudgetAccountant(epsilon=10.0, delta=DELTA)
    X = _rows()
    eps_fits = [1.0, 0.5, 2.0]
    for e in eps_fits:
        LocalDPPCA(2, e, DELTA / 10, accountant=acc, random_state=0).fit(X)
    zs = [_z(e, DELTA / 10) for e in eps_fits]
    assert acc.spent() == pytest.approx(_pld(zs, DELTA), rel=2e-3)
    # basic composition of the three fits' (eps_i, delta_i) guarantees: sum eps at sum delta;
    # composing the releases themselves at that delta is never worse
    assert acc.spent() < sum(eps_fits)
    assert len(acc) == 3 and acc.ledger.count() == 3


def test_one_fit_spends_its_exact_epsilon():
    acc = BudgetAccountant(epsilon=1.0, delta=DELTA)
    LocalDPPCA(2, 1.0, DELTA, accountant=acc, random_state=0).fit(_rows())
    # analytic Gaussian: the estimator's sigma delivers exactly (1.0, DELTA)
    assert acc.spent() == pytest.approx(1.0, abs=2e-3)
    assert acc.remaining() == pytest.approx(0.0, abs=2e-3)


def test_fit_beyond_the_budget_is_refused_before_reading_data():
    acc = BudgetAccountant(epsilon=1.3, delta=DELTA)  # one fit: 1.0; two: 1.47
    est = LocalDPPCA(2, 1.0, DELTA, accountant=acc, random_state=0).fit(_rows())
    spent = acc.spent()
    for refused in (
        LocalDPPCA(2, 1.0, DELTA, accountant=acc),
        LocalDPSparsePCA(2, 1.0, DELTA, accountant=acc),
        LocalDPPCA(2, np.inf, DELTA, accountant=acc),
    ):  # no noise: infinite eps
        with pytest.raises(BudgetExceededError, match="budget exceeded.*before touching"):
            refused.fit(Unreadable())
        assert not hasattr(refused, "components_")
    assert len(acc) == 1 and acc.spent() == spent  # nothing charged for refused fits
    # a cheaper fit still fits in what is left
    LocalDPPCA(2, 0.3, DELTA, accountant=acc, random_state=1).fit(_rows())
    assert len(acc) == 2 and spent < acc.spent() <= 1.3
    assert est.components_.shape == (2, 4)


def test_clones_share_one_budget_and_parameters_are_stored_unchanged():
    acc = BudgetAccountant(epsilon=5.0, delta=DELTA)
    est = LocalDPPCA(2, 1.0, DELTA, accountant=acc)
    assert est.get_params()["accountant"] is acc
    assert clone(est).accountant is acc and copy.deepcopy(acc) is acc
    clone(est).fit(_rows())
    assert len(acc) == 1


@pytest.mark.parametrize("with_ids", [False, True])
def test_cross_validation_is_charged_what_it_really_spends(with_ids):
    """GridSearchCV, 2 candidates x 3 folds + the refit on all users.  With user ids each
    user is charged the 2 x 2 fits whose training folds held them, plus the refit: 5
    releases (not 7); without ids every fit is charged to every user: 7."""
    X = _rows(90)
    acc = BudgetAccountant(epsilon=50.0, delta=DELTA, accountant="rdp")
    search = GridSearchCV(
        LocalDPPCA(1, 1.0, DELTA, accountant=acc, random_state=0),
        {"n_components": [1, 2]},
        cv=KFold(3),
        scoring=lambda est, Xv, y=None: float(np.sum(est.transform(Xv) ** 2)),
    )
    params = {"user_ids": np.arange(90)} if with_ids else {}
    search.fit(X, **params)
    assert len(acc) == 7
    per_user = 5 if with_ids else 7
    ref = BudgetAccountant(epsilon=np.inf, delta=DELTA, accountant="rdp")
    for _ in range(per_user):
        ref.spend([ldp_release(ldp_noise_scale(1.0, DELTA, "analytic").sigma)])
    assert acc.spent() == pytest.approx(ref.spent(), rel=1e-12)
    zs = [_z(1.0, DELTA)] * per_user
    assert acc.spent() == pytest.approx(_pld(zs, DELTA), rel=0.15)  # RDP: a looser bound


def test_per_user_charges_follow_the_ids():
    acc = BudgetAccountant(epsilon=1.6, delta=DELTA)  # two fits at 1.0: 1.47; three: 1.83
    X = _rows(60)
    one = LocalDPPCA(2, 1.0, DELTA, accountant=acc, random_state=0)
    one.fit(X[:30], user_ids=range(30))
    one.fit(X[30:], user_ids=range(30, 60))  # disjoint users: parallel composition
    assert acc.spent() == pytest.approx(1.0, abs=2e-3)
    one.fit(X[:30], user_ids=[f"u{i}" for i in range(30)])  # other ids: other users
    assert acc.spent() == pytest.approx(1.0, abs=2e-3)
    one.fit(X[:30], user_ids=np.arange(30))  # numpy ids are the same users as ints
    assert acc.spent() == pytest.approx(_pld([_z(1.0, DELTA)] * 2, DELTA), rel=2e-3)
    with pytest.raises(BudgetExceededError):
        one.fit(X[:30], user_ids=range(30))  # a third release for users 0..29
    one.fit(X[30:], user_ids=range(30, 60))  # users 30..59 have room for a second


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="epsilon"):
        BudgetAccountant(0.0, DELTA)
    with pytest.raises(ValueError, match="delta"):
        BudgetAccountant(1.0, 1.0)
    with pytest.raises(ValueError, match="accountant"):
        BudgetAccountant(1.0, DELTA, accountant="closed_form")
    with pytest.raises(TypeError, match="accountant must be a fedspectral.privacy"):
        LocalDPPCA(2, 1.0, DELTA, accountant=1.0).fit(_rows())
    acc = BudgetAccountant(10.0, DELTA)
    est = LocalDPPCA(2, 1.0, DELTA, accountant=acc)
    with pytest.raises(ValueError, match="distinct"):
        est.fit(_rows(3), user_ids=[1, 1, 2])
    with pytest.raises(ValueError, match="3 entries for 120 rows"):
        est.fit(_rows(), user_ids=[1, 2, 3])
    with pytest.raises(TypeError, match="string"):
        acc.check([ldp_release(1.0)], parties="abc")
    assert len(acc) == 0
    assert math.isinf(BudgetAccountant(np.inf, DELTA).remaining())


def test_a_pickled_copy_refuses_to_charge():
    """A joblib worker process would get a pickled copy: its spends would be lost, so it
    refuses (fail closed) instead of granting a second budget."""
    import pickle

    acc = BudgetAccountant(5.0, DELTA)
    LocalDPPCA(2, 1.0, DELTA, accountant=acc, random_state=0).fit(_rows())
    twin = pickle.loads(pickle.dumps(acc))
    assert twin.spent() == acc.spent() and len(twin) == 1  # readable
    with pytest.raises(RuntimeError, match="copy made by pickling"):
        LocalDPPCA(2, 1.0, DELTA, accountant=twin).fit(_rows())
    assert len(acc) == 1


def test_model_selection_on_messages_collected_once_costs_one_release():
    """The recipe of docs/pca.md section 10: the users' messages are the release; 5-fold
    cross-validation of the sparse penalty on them is post-processing.  It spends one
    release (epsilon 2.0 exactly) and picks the lambda with the lowest true subspace
    error on this seed (the numbers docs/pca.md quotes)."""
    from sklearn.model_selection import KFold

    from fedspectral.linalg import subspace_distance, top_k_eigvecs
    from fedspectral.pca import CovarianceAggregator, row_sparse_covariance, sample
    from fedspectral.pca.fps import fps_admm
    from fedspectral.pca.local import perturb_batch

    Sigma, V0 = row_sparse_covariance(p=20, k=2, s=4, lam=9.0, rng=0)
    X = sample(Sigma / (3 * np.trace(Sigma)), 20000, rng=1)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    eps, delta = 2.0, 1e-5
    acc = BudgetAccountant(epsilon=2.0, delta=1e-5)

    acc.spend([ldp_release(ldp_noise_scale(eps, delta, "analytic").sigma)])
    msgs = perturb_batch(X, eps, delta, rng=0)
    p, k = X.shape[1], 2
    lams = [0.0, 0.001, 0.003, 0.01, 0.03]
    score = dict.fromkeys(lams, 0.0)
    for train, test in KFold(5, shuffle=True, random_state=0).split(msgs):
        S_tr = CovarianceAggregator(p).add_batch(msgs[train]).covariance()
        S_te = CovarianceAggregator(p).add_batch(msgs[test]).covariance()
        for lam in lams:
            V = top_k_eigvecs(fps_admm(S_tr, k, lam).X, k)[1]
            score[lam] += np.trace(V.T @ S_te @ V) / 5
    best = max(score, key=score.get)

    assert len(acc) == 1 and acc.spent() == pytest.approx(2.0, abs=2e-3)
    S = CovarianceAggregator(p).add_batch(msgs).covariance()
    err = {lam: subspace_distance(top_k_eigvecs(fps_admm(S, k, lam).X, k)[1], V0) for lam in lams}
    assert best == 0.01 == min(err, key=err.get)
    assert err[0.01] == pytest.approx(0.93, abs=0.01) and err[0.0] == pytest.approx(1.48, abs=0.01)
