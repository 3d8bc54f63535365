"""Issue 48 (finding 5): every public function of ``privacy/`` refuses what it cannot mean.

Hypothesis (derandomised, few examples: the file runs in seconds) puts a bool, text,
bytes, a complex number, NaN or ±inf in each numeric argument: the answer is a
``TypeError``/``ValueError`` naming the argument, never a result and never another
exception (``OverflowError``, ``MemoryError``, OpenDP's).  Counts refuse floats (no
``int(2.5)``); the secure sampler refuses values beyond its grid (no silent clip).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fedspectral.privacy.discrete_gaussian as dg
from fedspectral.privacy import (
    BudgetAccountant,
    OpenDPNoise,
    Release,
    SecureNoise,
    add_gaussian,
    add_symmetric_gaussian,
    calibrate_noise_multiplier,
    composition,
    distributed_gaussian,
    gaussian_sigma,
    mechanism,
    symmetric_gaussian,
)
from fedspectral.privacy import accounting as acc
from fedspectral.privacy import calibration as cal
from fedspectral.privacy import client_level as cl

FAST = settings(derandomize=True, max_examples=12, deadline=None, database=None)

#: never a real number
NOT_REAL = st.one_of(
    st.booleans(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.complex_numbers(allow_nan=False, allow_infinity=False).filter(lambda z: z.imag != 0),
    st.just(None),
)
#: a real but not a finite one
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf, np.float32("nan")])
#: never a count: reals with a fraction, huge integers, negatives
NOT_COUNT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(max_value=-1),
    st.integers(min_value=2**64, max_value=10**400),
    NOT_REAL,
)


def _refused(f, *args, **kw) -> Exception:
    with pytest.raises((TypeError, ValueError)) as err:
        f(*args, **kw)
    return err.value


ONE = np.ones(3)
# (name, call with the bad value in one real argument); each must be refused
REALS = {
    "gaussian_sigma.epsilon": lambda v: gaussian_sigma(v, 1e-5),
    "gaussian_sigma.delta": lambda v: gaussian_sigma(1.0, v),
    "gaussian_sigma.sensitivity": lambda v: gaussian_sigma(1.0, 1e-5, v),
    "SecureNoise.sigma": lambda v: SecureNoise().add_gaussian(ONE, v),
    "OpenDPNoise.sigma": lambda v: OpenDPNoise().add_gaussian(ONE, v),
    "add_gaussian.sigma": lambda v: add_gaussian(ONE, v, "secure"),
    "symmetric_gaussian.sigma": lambda v: symmetric_gaussian(2, v, np.random.default_rng(0)),
    "grid.sigma": lambda v: dg.grid(v),
    "noise_scale.sigma": lambda v: dg.noise_scale(v),
    "release.sigma": lambda v: dg.release(ONE, v, dg.os_bits()),
    "grid_sensitivity.sensitivity": lambda v: dg.grid_sensitivity(v, 1.0, 3),
    "extra_delta.epsilon": lambda v: (
        dg.extra_delta(3, v) if not math.isinf(_f(v)) else _meaningful()
    ),
    "sampled_epsilon.delta": lambda v: dg.sampled_epsilon(lambda d: 1.0, v, 0.0),
    "sampled_epsilon.tv": lambda v: dg.sampled_epsilon(lambda d: 1.0, 1e-5, v),
    "sample.scale2": lambda v: dg.sample(v, 3, dg.os_bits()),
    "Release.sigma": lambda v: Release("a", "m", v, 1.0),
    "Release.sensitivity": lambda v: Release("a", "m", 1.0, v),
    "gaussian_event.z": lambda v: (
        composition.gaussian_event(v) if not _pos_inf(v) else _meaningful()
    ),
    "law_event.z": lambda v: (
        composition.law_event("laplace", v) if not _pos_inf(v) else _meaningful()
    ),
    "Gaussian.scale": lambda v: mechanism.Gaussian(v, 1.0),
    "Gaussian.sensitivity": lambda v: mechanism.Gaussian(1.0, v),
    "Laplace.scale": lambda v: mechanism.Laplace(v, 1.0),
    "epsilon_of_releases.delta": lambda v: acc.epsilon_of_releases(
        [Release("a", "m", 1.0, 1.0)], v
    ),
    "accountants_at.delta": lambda v: acc.accountants_at(v),
    "aggregate_epsilon.z": lambda v: cl.aggregate_epsilon([v], 1e-5),
    "mean_sigma.noise_multiplier": lambda v: cl.mean_sigma(v, 1.0, 2),
    "share_sigma.clipping_norm": lambda v: cl.share_sigma(1.0, v, 2),
    "summed_noise_multiplier": lambda v: cl.summed_noise_multiplier(v, 2),
    "closed_form.epsilon": lambda v: cal.closed_form_noise_multiplier(v, 1e-5, 1),
    "calibrate.epsilon": lambda v: (
        calibrate_noise_multiplier(v, 1e-5, 1) if not _pos_inf(v) else _meaningful()
    ),
    "distributed_gaussian.sensitivity": lambda v: distributed_gaussian(1.0, 1e-5, v, 2),
    "BudgetAccountant.delta": lambda v: BudgetAccountant(1.0, v),
}
COUNTS = {
    "grid_sensitivity.d": lambda v: dg.grid_sensitivity(1.0, 1.0, v),
    "extra_delta.d": lambda v: dg.extra_delta(v, 1.0),
    "sample.size": lambda v: dg.sample(1.0, v, dg.os_bits()),
    "Release.count": lambda v: Release("a", "m", 1.0, 1.0, v),
    "Release.values": lambda v: (
        Release("a", "m", 1.0, 1.0, values=v) if v is not None else _meaningful()
    ),
    "gaussian_event.count": lambda v: composition.gaussian_event(1.0, v),
    "law_event.count": lambda v: composition.law_event("laplace", 1.0, v),
    "Gaussian.entry.count": lambda v: mechanism.Gaussian(1.0, 1.0).entry("a", "m", count=v),
    "calibrate.count": lambda v: calibrate_noise_multiplier(1.0, 1e-5, v),
    "distributed_gaussian.min_contributors": lambda v: distributed_gaussian(1.0, 1e-5, 1.0, v),
    "mean_sigma.contributors": lambda v: cl.mean_sigma(1.0, 1.0, v),
}
VALUES = {
    "SecureNoise.values": lambda v: SecureNoise().add_gaussian(v, 1.0),
    "add_gaussian.values": lambda v: add_gaussian(v, 1.0, "secure"),
    "release.values": lambda v: dg.release(v, 1.0, dg.os_bits()),
    "add_symmetric_gaussian.matrix": lambda v: add_symmetric_gaussian(
        np.resize(v, (2, 2)), 1.0, "secure"
    ),
}


def _meaningful():
    """Stands in for a value the function documents as meaningful (+inf as epsilon: no
    noise; ``values=None``: not recorded): not a refusal to test."""
    raise ValueError("a documented value")


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return 0.0


def _pos_inf(v) -> bool:
    # +inf is a meaningful epsilon / noise multiplier (no privacy / no release)
    return not isinstance(v, (bool, str, bytes)) and _f(v) == math.inf


@pytest.mark.parametrize("name", sorted(REALS))
@FAST
@given(bad=st.one_of(NOT_REAL, NOT_FINITE))
def test_a_real_argument_refuses_what_is_not_a_finite_real(name, bad) -> None:
    f = REALS[name]
    if isinstance(bad, float) and bad == math.inf and name in _INF_OK:
        return
    _refused(f, bad)


#: the arguments that document +inf as meaningful (no noise)
_INF_OK = {"gaussian_sigma.epsilon", "extra_delta.epsilon", "gaussian_event.z", "law_event.z"}


@pytest.mark.parametrize("name", sorted(COUNTS))
@FAST
@given(bad=NOT_COUNT)
def test_a_count_refuses_floats_negatives_and_huge_integers(name, bad) -> None:
    _refused(COUNTS[name], bad)


@pytest.mark.parametrize("name", sorted(VALUES))
@FAST
@given(
    bad=st.one_of(
        st.lists(st.booleans(), min_size=1, max_size=4).map(np.array),
        st.lists(st.complex_numbers(), min_size=1, max_size=4).map(np.array),
        st.lists(st.text(max_size=3), min_size=1, max_size=4).map(np.array),
        st.lists(NOT_FINITE, min_size=1, max_size=4).map(np.array),
        st.floats(min_value=1e9, max_value=1e300).map(lambda x: np.array([x, -x])),
    )
)
def test_values_to_privatise_are_real_finite_and_on_the_grid(name, bad) -> None:
    err = _refused(VALUES[name], bad)
    assert str(float(bad.flat[0])) not in str(err) if bad.dtype.kind == "f" else True


@FAST
@given(x=st.floats(min_value=-1e6, max_value=1e6), sigma=st.floats(min_value=1e-3, max_value=1e3))
def test_good_values_are_released_on_the_grid(x, sigma) -> None:
    y = SecureNoise().add_gaussian(np.array([x, 0.0]), sigma)
    g = dg.grid(sigma)
    assert np.isfinite(y).all() and np.array_equal(y / g, np.round(y / g))


def test_the_sampler_refuses_1e10_instead_of_clipping_it(monkeypatch) -> None:
    """The secure source released 1e10 as 1.34e8 (2**61 grid steps of sigma = 1): refused
    now; the weakened sampler (its range check removed) clips silently."""
    ok = dg.release(np.array([1.0e8]), 1.0, dg.os_bits())
    assert abs(ok[0] - 1e8) < 100
    with pytest.raises(ValueError, match="beyond the grid's range"):
        SecureNoise().add_gaussian(np.array([1e10]), 1.0)
    monkeypatch.setattr(dg, "real_values", lambda name, v: np.zeros(1) + np.minimum(v, 1e8))
    assert SecureNoise().add_gaussian(np.array([1e10]), 1.0)[0] < 1.4e8  # the old clip


def test_a_negative_total_variation_cannot_make_epsilon_optimistic(monkeypatch) -> None:
    """sampled_epsilon with tv < 0 read epsilon at a delta above the one asked: a smaller
    epsilon than the true one.  Refused; the weakened function (no check) is optimistic."""

    def eps_at(d: float) -> float:
        return math.log(1 / d)

    true = dg.sampled_epsilon(eps_at, 1e-5, 0.0)
    with pytest.raises(ValueError, match="tv must be >= 0"):
        dg.sampled_epsilon(eps_at, 1e-5, -1e-6)
    monkeypatch.setattr(dg, "check_real", lambda name, v, **kw: float(v))
    assert dg.sampled_epsilon(eps_at, 1e-5, -1e-6) < true


def test_bool_and_text_are_no_sigma_and_no_int_truncation() -> None:
    for bad in (True, "2.0", 2 + 1j):
        err = _refused(SecureNoise().add_gaussian, ONE, bad)
        assert "sigma" in str(err)
    err = _refused(dg.sample, 1.0, 2.5, dg.os_bits())
    assert "size" in str(err)
