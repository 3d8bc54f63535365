"""Locally private PCA: whole-state objects, finite projections, bounded sizes, tiny
gaps and targets (issue 24, round 2)."""

import copy
import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from fedspectral.pca import CovarianceAggregator, LocalDPPCA, perturb, perturb_batch
from fedspectral.pca.bounds import (
    davis_kahan_bound,
    theorem1_lower_bound,
    theorem2_upper_bound,
    theorem4_upper_bound,
)
from fedspectral.pca.estimators import MAX_N_BOOT
from fedspectral.pca.local import MAX_BATCH_ENTRIES
from fedspectral.pca.planner import MAX_SIM_ENTRIES, plan_eigenvalues, required_users

X = np.random.default_rng(0).normal(size=(60, 4)) / 4


# ------------------------------------------------------------------ CovarianceAggregator
def test_aggregator_compares_by_its_whole_state():
    a, b = CovarianceAggregator(3), CovarianceAggregator(3)
    assert a == b
    a.add(np.ones(6))
    assert a != b  # equal before: == ignored the sum and the count
    b.add(np.ones(6))
    assert a == b
    c = CovarianceAggregator(3).add(np.full(6, 2.0))
    c._count = 1  # same count, different sum
    assert a != c
    d = CovarianceAggregator(3).add_sum(np.ones(6), 2)  # same sum, different count
    assert a != d
    assert CovarianceAggregator(3, "upper") != CovarianceAggregator(3)
    assert a != "not an aggregator"


def test_aggregator_equality_is_exact_across_exponents():
    # the same represented sum held with exponent 0 and with a raised exponent
    big = np.array([1e308, 2.0**-1000, 3.0])
    a = CovarianceAggregator(2).add(big)
    b = CovarianceAggregator(2).add(big)
    b._sum, b._exp = np.ldexp(b._sum, -4), 4
    assert np.array_equal(np.ldexp(b._sum, 4), a._sum)  # exact: b holds a's value
    assert a == b and b == a
    b._sum = b._sum.copy()
    b._sum[2] = np.nextafter(b._sum[2], 10)  # one ulp away
    assert a != b


def test_aggregator_serialises_its_whole_state():
    a = CovarianceAggregator(2).add(np.array([1.0, 2.0, 3.0])).add(np.array([1e308] * 3))
    a.add(np.array([1e308] * 3))  # raises the exponent
    assert a._exp > 0
    d = dataclasses.asdict(a)  # dropped the sum and the count
    assert d["_count"] == 3 and d["_exp"] == a._exp and np.array_equal(d["_sum"], a._sum)
    back = CovarianceAggregator.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a and back.count == 3
    np.testing.assert_array_equal(back.covariance(), a.covariance())
    assert copy.deepcopy(a) == a
    for bad, match in [
        ({**a.to_dict(), "sum": [1.0]}, "'sum' must hold 3"),
        ({**a.to_dict(), "sum": "abc"}, "'sum'"),
        ({**a.to_dict(), "count": -1}, "count"),
        ({"p": 2}, "keys"),
    ]:
        with pytest.raises((TypeError, ValueError), match=match):
            CovarianceAggregator.from_dict(bad)


# ------------------------------------------------------------------ LocalDPPCA.transform
def test_transform_is_finite_where_the_projection_is_alone_and_in_a_batch():
    # data along (1, ..., 1): the top component has six entries near 0.41, so a row of
    # +-1.7e308 (three of each sign, in component-sign order) has a finite projection
    # whose partial sums exceed float64
    rng = np.random.default_rng(0)
    Y = (rng.normal(size=(200, 1)) * np.ones((1, 6)) + 0.05 * rng.normal(size=(200, 6))) / 6
    est = LocalDPPCA(2, np.inf, 1e-5).fit(Y)
    C = est.components_
    row = 1.7e308 * np.sign(C[0]) * np.array([1, 1, 1, -1, -1, -1])
    exact = [
        float(sum(Fraction(float(r)) * Fraction(float(c)) for r, c in zip(row, C[i], strict=True)))
        for i in range(2)
    ]
    assert all(math.isfinite(e) for e in exact)
    batch_in = np.vstack([Y[:3], row, Y[3:5]])
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite((batch_in @ C.T)[3]).all()  # the plain product: inf here
    alone = est.transform(row[None])
    batch = est.transform(batch_in)
    np.testing.assert_allclose(alone[0], exact, rtol=1e-12)
    np.testing.assert_array_equal(batch[3], alone[0])  # same result alone and in a batch
    # ordinary rows: the plain product, bit for bit
    np.testing.assert_array_equal(batch[[0, 1, 2, 4, 5]], np.vstack([Y[:3], Y[3:5]]) @ C.T)
    # a projection truly beyond float64 stays inf
    assert np.isinf(est.transform(np.sign(C[0])[None] * 1.7e308)[0, 0])


def test_fit_and_transform_refuse_strings_and_huge_objects():
    with pytest.raises(TypeError, match="got dtype <U.*strings"):
        LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X.astype(str))  # accepted before
    est = LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X)
    with pytest.raises(TypeError, match="strings"):
        est.transform(X.astype(str))
    with pytest.raises(TypeError, match="got dtype <U"):
        perturb(X[0].astype(str), 1.0, 1e-5, rng=0)  # perturb's refusal, for comparison
    huge = np.array([[10**400, 1, 2, 3]] * 5, dtype=object)
    with pytest.raises(ValueError, match="beyond float64's range"):  # OverflowError before
        LocalDPPCA(2, 1.0, 1e-5).fit(huge)
    # object arrays of ordinary numbers stay accepted, with the same result
    a = LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X.astype(object))
    np.testing.assert_array_equal(a.components_, est.components_)


def test_random_state_is_named_random_state():
    est = LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X)
    for bad, exc in ((True, TypeError), (-1, ValueError)):
        with pytest.raises(exc, match="^random_state"):
            est.error_interval(random_state=bad)  # said "rng"
        with pytest.raises(exc, match="^random_state"):
            required_users(
                5, 1, 1.0, 1e-5, target_error=0.1, eigengap=0.01, n_sim=50, random_state=bad
            )


# ------------------------------------------------------------------ bounded sizes
def test_error_interval_n_boot_is_bounded_before_work(monkeypatch):
    monkeypatch.delenv("FEDSPECTRAL_ALLOW_LARGE", raising=False)
    est = LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X)
    with pytest.raises(
        ValueError,
        match=f"n_boot must be <= {MAX_N_BOOT}.*allow_large=True "
        r"\(or set FEDSPECTRAL_ALLOW_LARGE=1\)",
    ):
        est.error_interval(n_boot=10**15)  # MemoryError of 7 PiB before
    assert not hasattr(est, "bootstrap_")
    # the override lifts the bound (the bound, not the memory: a modest n_boot runs)
    import fedspectral.pca.estimators as E

    monkeypatch.setattr(E, "MAX_N_BOOT", 10)
    with pytest.raises(ValueError, match="n_boot must be <= 10"):
        est.error_interval(n_boot=12, random_state=0)
    assert est.error_interval(n_boot=12, random_state=0, allow_large=True)
    monkeypatch.setenv("FEDSPECTRAL_ALLOW_LARGE", "1")
    assert est.error_interval(n_boot=12, random_state=0)


def test_perturb_batch_is_bounded_and_chunks_give_the_same_messages(monkeypatch):
    monkeypatch.delenv("FEDSPECTRAL_ALLOW_LARGE", raising=False)
    with pytest.raises(
        ValueError,
        match=r"shape \(2000, 3000\).*MAX_BATCH_ENTRIES = "
        f"{MAX_BATCH_ENTRIES}.*chunks of rows",
    ):
        perturb_batch(np.zeros((2000, 3000)), 1.0, 1e-5, rng=0)
    rows = np.random.default_rng(1).normal(size=(700, 30)) / 10
    whole = perturb_batch(rows, 1.0, 1e-5, rng=np.random.default_rng(5))
    g = np.random.default_rng(5)
    parts = np.vstack(
        [perturb_batch(rows[s : s + 123], 1.0, 1e-5, rng=g) for s in range(0, 700, 123)]
    )
    np.testing.assert_array_equal(whole, parts)
    # and row i is perturb of row i with the same stream position (the first row)
    np.testing.assert_array_equal(
        whole[0], perturb(rows[0], 1.0, 1e-5, rng=np.random.default_rng(5))
    )


def test_planner_sizes_are_bounded_before_work(monkeypatch):
    monkeypatch.delenv("FEDSPECTRAL_ALLOW_LARGE", raising=False)
    with pytest.raises(ValueError, match=r"n_sim \* p\^2 .* MAX_SIM_ENTRIES.*allow_large"):
        required_users(100_000, 1, 1.0, 1e-5, target_error=0.1, eigengap=1e-6, n_sim=50)
    with pytest.raises(ValueError, match="n_sim must be <= 100000"):
        required_users(5, 1, 1.0, 1e-5, target_error=0.1, eigengap=0.01, n_sim=10_000_000)
    assert 50 * 2317**2 <= MAX_SIM_ENTRIES < 50 * 2318**2  # the p bound the docs state
    # a confidence that n_sim repeats can never show was "unreachable"
    with pytest.raises(ValueError, match=r"confidence=0.999 .* n_sim >= 2995"):
        required_users(
            5, 1, 1.0, 1e-5, target_error=0.1, eigengap=0.01, n_sim=400, confidence=0.999
        )


# ------------------------------------------------------------------ tiny gaps and targets
def test_planner_with_tiny_gaps_and_targets_answers():
    # ZeroDivisionError before: a gap or target of 1e-200 cannot be met by 1e15 users
    for kw in (
        {"eigengap": 1e-200, "target_error": 0.1},
        {"eigengap": 0.01, "target_error": 1e-200},
    ):
        plan = required_users(5, 1, 1.0, 1e-5, n_sim=50, **kw)
        assert plan.status == "unreachable" and plan.n is None and plan.n_rate == math.inf
    plan = required_users(3, 1, 1.0, 1e-5, target_error=0.1, spectrum=[1e-300, 0, 0], n_sim=50)
    assert plan.status == "unreachable"
    # a gap that rounds to 0 is refused, naming it
    with pytest.raises(ValueError, match="eigen-gap"):
        plan_eigenvalues(3, 1, spectrum=[0.3, 0.3 - 1e-300, 0.1])


def test_spectrum_that_is_not_numbers_is_named():
    for bad in ("abc", ["a", "b", "c"]):
        with pytest.raises(TypeError, match="^spectrum must be numbers"):
            plan_eigenvalues(3, 1, spectrum=bad)
    with pytest.raises(ValueError, match="^spectrum holds a number beyond float64"):
        plan_eigenvalues(3, 1, spectrum=np.array([10**400, 0, 0], dtype=object))


def test_bounds_are_finite_where_their_value_is():
    ev = [2e-200, 1e-200, 1e-200]
    # (l1 / gap)(l_{k+1} / gap) = 2: the old form squared 1e-200 to 0 (ZeroDivisionError)
    assert theorem1_lower_bound(10, 3, 1, 1.0, ev) == pytest.approx(2 * 3 / 10, rel=1e-14)
    assert theorem4_upper_bound(10, 3, 1, 1, 1.0, ev) == pytest.approx(
        4 * math.log(3) / 10, rel=1e-14
    )
    assert theorem2_upper_bound(1, 3, 1, 1.0, ev) == math.inf  # 3e400: beyond float64
    # 3e-400 underflows to 0; eps**2 raised OverflowError before
    assert theorem2_upper_bound(1, 3, 1, 1e200, [2.0, 1.0, 1.0]) == 0.0
    assert davis_kahan_bound(10, 3, 1, 1e200, [2.0, 1.0, 1.0]) == 2.0  # capped, no overflow
    f = theorem2_upper_bound(1, 3, 1, 1.0, [2.0, 1.0, 1.0], delta=5e-324)
    assert f == pytest.approx(3 * (math.log(1.25) + 1074 * math.log(2)), rel=1e-14)
