"""Distributed private PCA (fedspectral.pca.distributed, DistributedDPPCA).

References independent of the code under test: the closed-form noise law of the sum of
the holders' shares (checked against the empirical covariance of the noise over fixed
seeds), dp-accounting called directly for every ε, the sensitivities by brute force, and
the secure sum of fedspectral.fed.secagg (in process) for the release itself.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedspectral.fed import secagg
from fedspectral.fed.secagg_primitives import dequantise, quantise
from fedspectral.fed.secagg_server import secure_sum
from fedspectral.linalg import pack_symmetric, subspace_distance
from fedspectral.pca import (
    DistributedDPPCA,
    LocalDPPCA,
    distributed_from_moment,
    holder_message,
    holder_noise,
    simulate_holder_sums,
    spiked_covariance,
)
from fedspectral.pca import sample as sample_rows
from fedspectral.pca.distributed import SENSITIVITIES, party_of
from fedspectral.privacy import distributed_gaussian, gaussian_sigma

EPS, DELTA = 1.0, 1e-5


def unit_rows(n, p, seed):
    X = np.random.default_rng(seed).standard_normal((n, p))
    return X / (1.5 * np.linalg.norm(X, axis=1, keepdims=True))  # norms 2/3


def dp_epsilon(sigma, sensitivity, delta=DELTA):
    """ε of one Gaussian release, by dp-accounting's PLD accountant called directly."""
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(sigma / sensitivity))
    return acc.get_epsilon(delta)


# --------------------------------------------------------------------------- calibration
@pytest.mark.parametrize("m_min, colluders", [(1, 0), (4, 0), (10, 0), (5, 1), (5, 4)])
def test_shares_sum_to_the_central_mechanism(m_min, colluders):
    d = distributed_gaussian(EPS, DELTA, math.sqrt(2), m_min, colluders=colluders)
    central = float(dp_accounting.get_sigma_gaussian(EPS, DELTA)) * math.sqrt(2)
    assert d.sigma == pytest.approx(central, rel=1e-12)
    assert d.share_sigma**2 * (m_min - colluders) == pytest.approx(central**2, rel=1e-12)
    # at exactly m_min contributors the analyst faces the central σ; more only helps
    assert d.secagg_sigma(m_min) == pytest.approx(central, rel=1e-12)
    assert d.secagg_sigma(m_min + 3) > central
    if m_min > 1:
        with pytest.raises(ValueError, match="must abort"):
            d.secagg_sigma(m_min - 1)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"min_contributors": 0}, ValueError, "min_contributors must be >= 1, got 0"),
        ({"min_contributors": 3, "colluders": 3}, ValueError, "colluders=3 must be < "),
        ({"min_contributors": 3, "colluders": -1}, ValueError, "colluders must be >= 0"),
        ({"min_contributors": 2.0}, TypeError, "min_contributors must be an integer"),
        ({"min_contributors": 2, "method": "laplace"}, ValueError, "laplace"),
    ],
)
def test_distributed_gaussian_refuses_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        distributed_gaussian(EPS, DELTA, 1.0, **kwargs)


def test_sensitivities_by_brute_force():
    """add/remove: ‖svec(xxᵀ)‖ = ‖x‖² ≤ 1; replace-one: ≤ √2, attained at orthogonal
    unit vectors; never exceeded over random pairs on the unit ball (both packings)."""
    assert {"replace_one": math.sqrt(2), "add_remove": 1.0} == SENSITIVITIES
    rng = np.random.default_rng(0)
    p = 6
    X = rng.standard_normal((4000, p))
    X *= rng.uniform(0.2, 1.0, (4000, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    X[:2] = np.eye(p)[:2]
    for vec in ("isometric", "upper"):
        a = np.array([pack_symmetric(np.outer(x, x), vec) for x in X])
        assert np.linalg.norm(a, axis=1).max() <= 1.0 + 1e-12
        diff = np.linalg.norm(a[:2000] - a[2000:], axis=1)
        assert diff.max() <= math.sqrt(2) + 1e-12
        assert np.linalg.norm(a[0] - a[1]) == pytest.approx(math.sqrt(2), rel=1e-12)
    # isometric: every orthogonal unit pair attains √2 (not only e1, e2)
    Q = np.linalg.qr(rng.standard_normal((p, p)))[0]
    aq = [pack_symmetric(np.outer(Q[:, i], Q[:, i])) for i in range(2)]
    assert np.linalg.norm(aq[0] - aq[1]) == pytest.approx(math.sqrt(2), rel=1e-12)


# --------------------------------------------------------------------------- noise law
@pytest.mark.parametrize("mode", ["aggregate", "per_holder"])
def test_noise_of_the_sum_has_the_closed_form_law(mode):
    """Empirical covariance of the noise in the summed packed messages (m = 4 holders,
    m_min = 3, p = 3, 2500 fixed seeds) against the closed form m·σ_s²·I: relative
    error of the variances < 10 % (sd of one estimate 2.8 %), correlations < 0.08 (sd
    0.02)."""
    X = unit_rows(40, 3, 1)
    groups = np.repeat(np.arange(4), 10)
    noise = holder_noise(EPS, DELTA, 3)
    signal = pack_symmetric(X.T @ X)
    draws = np.array(
        [
            simulate_holder_sums(X, groups, noise, np.random.default_rng(s), noise_mode=mode)[1]
            - signal
            for s in range(2500)
        ]
    )
    cov = np.cov(draws.T)
    want = 4 * noise.share_sigma**2
    assert np.abs(np.diag(cov) / want - 1).max() < 0.10
    corr = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert np.abs(corr - np.eye(6)).max() < 0.08
    assert np.abs(draws.mean(axis=0)).max() < 4 * math.sqrt(want / 2500)


def test_estimator_covariance_is_the_unpacked_sum_over_n_and_error_bars_use_its_law():
    X = unit_rows(60, 4, 2)
    groups = np.repeat(["a", "b", "c"], 20)
    est = DistributedDPPCA(2, EPS, DELTA, noise_mode="per_holder", random_state=3)
    est.fit(X, groups=groups)
    noise = holder_noise(EPS, DELTA, 3)
    _, total = simulate_holder_sums(
        X, groups, noise, np.random.default_rng(3), noise_mode="per_holder"
    )
    S = total / 60
    iu = np.triu_indices(4, 1)
    want = np.zeros((4, 4))
    want[np.triu_indices(4)] = S
    want[iu] /= math.sqrt(2)
    want = want + np.triu(want, 1).T
    np.testing.assert_allclose(est.covariance_, want, rtol=0, atol=1e-14)
    assert est.holders_ == est.contributors_ == ["a", "b", "c"]
    est.error_interval(n_boot=10, random_state=0)
    assert est.bootstrap_["noise_sd_diagonal"] == pytest.approx(
        noise.share_sigma * math.sqrt(3) / 60, rel=1e-12
    )


# --------------------------------------------------------------------------- accounting
def test_privacy_report_under_both_threat_models_matches_dp_accounting():
    X = unit_rows(200, 5, 4)
    groups = np.arange(200) % 5
    est = DistributedDPPCA(2, EPS, DELTA, min_contributors=4, random_state=0).fit(X, groups=groups)
    pr = est.privacy_
    central = float(dp_accounting.get_sigma_gaussian(EPS, DELTA)) * math.sqrt(2)
    share = central / 2.0  # sqrt(m_min) = 2
    assert pr["sigma_share"] == pytest.approx(share, rel=1e-12)
    assert pr["secagg"]["sigma"] == pytest.approx(share * math.sqrt(5), rel=1e-12)
    assert pr["fallback"]["sigma"] == pytest.approx(share, rel=1e-12)
    for threat in ("secagg", "fallback"):
        want = dp_epsilon(pr[threat]["sigma"], math.sqrt(2))
        assert pr[threat]["epsilon_pld"] == pytest.approx(want, rel=1e-3)
        assert pr[threat]["epsilon_analytic"] == pytest.approx(want, rel=1e-3)
        assert pr[threat]["epsilon_rdp"] >= pr[threat]["epsilon_analytic"]
    # five contributors with shares sized for four: better than the target; broken: worse
    assert pr["secagg"]["epsilon_analytic"] < EPS < pr["fallback"]["epsilon_analytic"]
    parties = est.ledger_.parties
    assert parties == [party_of(str(h)) for h in range(5)]
    assert {r.threat for r in est.ledger_.releases} == {"secagg", "fallback"}
    # at exactly m_min contributors the secure-aggregation reading is the target ε
    exact = DistributedDPPCA(2, EPS, DELTA, random_state=0).fit(X, groups=groups).privacy_
    assert exact["secagg"]["epsilon_analytic"] == pytest.approx(EPS, abs=1e-6)


def test_add_remove_has_sensitivity_one_and_colluders_are_discounted():
    X = unit_rows(90, 4, 5)
    groups = np.arange(90) % 3
    pr = (
        DistributedDPPCA(1, EPS, DELTA, neighbouring="add_remove", colluders=1, random_state=0)
        .fit(X, groups=groups)
        .privacy_
    )
    central = gaussian_sigma(EPS, DELTA, 1.0)
    assert pr["sensitivity"] == 1.0 and pr["sigma"] == pytest.approx(central)
    assert pr["sigma_share"] == pytest.approx(central / math.sqrt(2))
    assert pr["secagg"]["sigma"] == pytest.approx(central)  # 3 shares, one colluder's removed
    assert pr["sigma_sum"] == pytest.approx(central * math.sqrt(1.5))
    assert pr["secagg"]["epsilon_analytic"] == pytest.approx(EPS, abs=1e-6)
    assert pr["fallback"]["epsilon_pld"] == pytest.approx(
        dp_epsilon(central / math.sqrt(2), 1.0), rel=1e-3
    )
    assert {
        r.neighbouring
        for r in DistributedDPPCA(1, EPS, DELTA, neighbouring="add_remove")
        .fit(X, groups=groups)
        .ledger_.releases
    } == {"add_remove"}


def test_per_holder_central_without_secure_aggregation():
    X = unit_rows(120, 4, 6)
    groups = np.arange(120) % 4
    est = DistributedDPPCA(2, EPS, DELTA, secure_aggregation=False, random_state=0)
    pr = est.fit(X, groups=groups).privacy_
    central = gaussian_sigma(EPS, DELTA, math.sqrt(2))
    assert pr["sigma_share"] == pytest.approx(central) and not pr["secure_aggregation"]
    assert pr["sigma_sum"] == pytest.approx(2 * central)  # sqrt(4) holders' full noises
    assert {r.threat for r in est.ledger_.releases} == {"any"}
    for threat in ("secagg", "fallback"):
        assert pr[threat]["epsilon_analytic"] == pytest.approx(EPS, abs=1e-6)


# --------------------------------------------------------------------------- secure sum
def _secagg_sum(drop=None, bound_rows=30):
    def run(messages):
        holders = tuple(messages)
        share = holder_noise(EPS, DELTA, 3).share_sigma
        params = secagg.SecAggParams(holders, threshold=3, length=len(messages[holders[0]]))
        bound = bound_rows + 12 * share
        scale = params.scale_for(bound)
        q = {h: quantise(m, scale, bound, params.bits) for h, m in messages.items()}
        total, contributors = secure_sum(q, params, drop_before=drop)
        run.messages = messages
        return dequantise(total, scale, params.bits), contributors

    return run


def test_release_through_the_four_stage_secure_sum_with_a_dropped_holder():
    X = unit_rows(100, 4, 7)
    groups = np.repeat(["h0", "h1", "h2", "h3"], 25)
    sec = _secagg_sum(drop={"h3": 2})  # h3 goes silent before sending its masked input
    est = DistributedDPPCA(2, EPS, DELTA, min_contributors=3, random_state=1, secure_sum=sec)
    est.fit(X, groups=groups)
    assert est.contributors_ == ["h0", "h1", "h2"] and est.n_samples_ == 75
    survivors = sum(sec.messages[h] for h in ("h0", "h1", "h2"))
    cov = np.zeros((4, 4))
    cov[np.triu_indices(4)] = survivors / 75
    off = np.triu_indices(4, 1)
    cov[off] /= math.sqrt(2)
    cov = cov + np.triu(cov, 1).T
    # exact up to the fixed-point quantisation of the secure sum (scale >= 2^50 here)
    np.testing.assert_allclose(est.covariance_, cov, rtol=0, atol=1e-12)
    pr = est.privacy_
    assert pr["contributors"] == 3 and pr["secagg"]["epsilon_analytic"] == pytest.approx(
        EPS, abs=1e-6
    )
    assert party_of("h3") not in est.ledger_.parties  # its users released nothing


def test_too_few_contributors_abort_the_fit():
    X = unit_rows(100, 4, 8)
    groups = np.repeat(["h0", "h1", "h2", "h3"], 25)
    with pytest.raises(secagg.SecAggAborted):
        DistributedDPPCA(
            2,
            EPS,
            DELTA,
            min_contributors=3,
            random_state=1,
            secure_sum=_secagg_sum(drop={"h2": 2, "h3": 2}),
        ).fit(X, groups=groups)

    def cheat(messages):  # a sum function that drops a holder below min_contributors
        hs = list(messages)[:2]
        return sum(messages[h] for h in hs), hs

    est = DistributedDPPCA(2, EPS, DELTA, min_contributors=3, random_state=1, secure_sum=cheat)
    with pytest.raises(ValueError, match="fewer than min_contributors=3"):
        est.fit(X, groups=groups)
    assert not hasattr(est, "ledger_")


# --------------------------------------------------------------------------- utility
def test_distributed_beats_local_by_orders_of_magnitude_at_the_same_epsilon():
    """p = 10, k = 2, n = 20 000 users over 10 holders, ε = 1: the local model is at the
    random level, the distributed one resolves the subspace (same rows, 5 seeds)."""
    rng = np.random.default_rng(9)
    Sigma, V = spiked_covariance(10, 2, 3.0, rng)
    X = sample_rows(Sigma, 20_000, rng)
    groups = np.arange(20_000) % 10
    loc = [
        subspace_distance(LocalDPPCA(2, EPS, DELTA, random_state=s).fit(X).components_.T, V)
        for s in range(5)
    ]
    dist = [
        subspace_distance(
            DistributedDPPCA(2, EPS, DELTA, random_state=s).fit(X, groups=groups).components_.T, V
        )
        for s in range(5)
    ]
    assert min(loc) > 1.0 and max(dist) < 0.1


def test_distributed_from_moment_has_the_estimators_law():
    S = np.diag([3.0, 2.0, 1.0]) / 10
    noise = holder_noise(EPS, DELTA, 10)
    draws = np.array(
        [distributed_from_moment(S, 1000, 1, noise, 10, s)[1] - S for s in range(1500)]
    )
    sd = noise.share_sigma * math.sqrt(10) / 1000
    assert np.std(draws[:, 0, 0]) == pytest.approx(sd, rel=0.08)  # sd of the estimate 1.8 %
    assert np.std(draws[:, 0, 1]) == pytest.approx(sd / math.sqrt(2), rel=0.08)


def test_holder_message_secure_source_and_seeded_agree_on_the_signal():
    X = unit_rows(30, 3, 10)
    noise = holder_noise(math.inf, DELTA, 2)
    exact = pack_symmetric(X.T @ X)
    np.testing.assert_array_equal(holder_message(X, noise, 0), exact)
    noisy = holder_noise(EPS, DELTA, 2)
    m = holder_message(X, noisy)  # the secure source: OS entropy, OpenDP's mechanism
    assert m.shape == exact.shape and not np.allclose(m, exact)


# --------------------------------------------------------------------------- contract
@parametrize_with_checks([DistributedDPPCA(1, 1.0, 1e-5, random_state=0, one_holder=True)])
@pytest.mark.filterwarnings("ignore:clipped .* to L2 norm 1:UserWarning")
def test_scikit_learn_estimator_checks(estimator, check):
    """scikit-learn's whole suite (no expected failures); with ``one_holder=True`` all rows
    are with one holder, the central Gaussian mechanism, and ``fit`` takes no groups."""
    check(estimator)


@pytest.mark.parametrize(
    "kwargs, groups, err, match",
    [
        ({"min_contributors": 4}, np.arange(30) % 3, ValueError, "min_contributors=4 exceeds"),
        ({"colluders": 3}, np.arange(30) % 3, ValueError, "colluders=3 must be <"),
        ({"neighbouring": "zero_out"}, None, ValueError, "zero_out"),
        ({"noise_mode": "per_user"}, None, ValueError, "per_user"),
        ({"calibration": "paper"}, None, ValueError, "paper"),
        ({"secure_aggregation": 1}, None, TypeError, "secure_aggregation must be True or False"),
        ({"secure_sum": "secagg"}, None, TypeError, "secure_sum must be None or a callable"),
        ({}, np.arange(29), ValueError, "one holder label per row"),
        ({}, np.full(30, np.nan), ValueError, "NaN"),
        (
            {"n_components": 5},
            np.arange(30) % 3,
            ValueError,
            "n_components must be <= n_features = 4",
        ),
    ],
)
def test_bad_input_is_refused_before_any_noise(kwargs, groups, err, match):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    est = DistributedDPPCA(
        **({"n_components": 2, "epsilon": EPS, "delta": DELTA, "random_state": rng} | kwargs)
    )
    with pytest.raises(err, match=match):
        est.fit(unit_rows(30, 4, 0), groups=groups)
    assert rng.bit_generator.state == state and not hasattr(est, "ledger_")


def test_pca_bench_figure1_task_has_the_three_models_on_the_same_data():
    """The Figure 1 analogue of ``pca-bench``: local, per-holder central and distributed
    on the same data, rows (DistributedDPPCA) and a Wishart draw (the noise law)."""
    from fedspectral.experiments.pca_bench import BenchConfig, tasks

    cfg = BenchConfig.quick_config(opendp_repeats=0, holders=4)
    for n in (3000, 10**6):
        rows = tasks._fig1_task(cfg, "k", 20, 2, (1.0,), n, 0, 0)
        err = {r["method"]: r["error"] for r in rows}
        assert {"ldp_isometric", "per_holder_central", "distributed"} <= set(err)
        if n == 10**6:  # measured: 0.016, 0.021 and 1.49 (random level 1.90)
            assert err["distributed"] < err["per_holder_central"] < 0.1
            assert err["ldp_isometric"] > 1.0


def test_groups_route_through_a_pipeline_with_metadata_routing():
    """``groups`` is scikit-learn's sample-aligned group label: with metadata routing on,
    a Pipeline passes it to ``fit``; without routing the labels never arrive, and the fit
    is refused (never one silent holder)."""
    import sklearn
    from sklearn.pipeline import Pipeline

    X, g = unit_rows(90, 4, 11), np.arange(90) % 3
    with sklearn.config_context(enable_metadata_routing=True):
        est = DistributedDPPCA(2, EPS, DELTA, random_state=0).set_fit_request(groups=True)
        pipe = Pipeline([("pca", est)]).fit(X, groups=g)
    assert pipe[0].holders_ == ["0", "1", "2"] and pipe[0].privacy_["holders"] == 3
    # as an intermediate step the Pipeline calls fit_transform with the routed groups
    from sklearn.preprocessing import FunctionTransformer

    with sklearn.config_context(enable_metadata_routing=True):
        est = DistributedDPPCA(2, EPS, DELTA, random_state=0).set_fit_request(groups=True)
        two = Pipeline([("pca", est), ("id", FunctionTransformer())]).fit(X, groups=g)
    assert two[0].contributors_ == ["0", "1", "2"]
    np.testing.assert_array_equal(two.transform(X), X @ two[0].components_.T)
    with pytest.raises(ValueError, match="groups is required"):
        Pipeline([("pca", DistributedDPPCA(2, EPS, DELTA, random_state=0))]).fit(X)
