"""Property-based tests (hypothesis) of the privacy entry points and DP-CalR.

Properties: finite valid input gives a finite result obeying the documented contract
(calibrated noise achieving its epsilon, symmetric noise, ledger epsilon finite and
monotone); invalid input raises ValueError or TypeError; nothing else is ever raised.
Bounded ``max_examples``, derandomised (the same examples on every run); each test
prints how many examples it ran (``pytest -s``) and records it in ``EXAMPLES``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedspectral.fed.correlation import correlation_sensitivity, dp_correlation
from fedspectral.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    gaussian_sigma,
    symmetric_gaussian,
)

EXAMPLES: dict[str, int] = {}
SETTINGS = settings(
    derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

#: anything a caller might pass where a number is expected
junk = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    st.just(np.float32(0.5)),
    st.just(np.int64(3)),
    st.just(np.bool_(True)),
    st.just([1.0]),
)
eps_valid = st.floats(1e-3, 1e3)
delta_valid = st.floats(1e-12, 0.5)


def _count(name: str) -> None:
    EXAMPLES[name] = EXAMPLES.get(name, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    for k, v in sorted(EXAMPLES.items()):
        print(f"hypothesis examples run: {k} = {v}")


@settings(SETTINGS, max_examples=60)
@given(
    eps=st.one_of(eps_valid, junk),
    delta=st.one_of(delta_valid, junk),
    sens=st.one_of(st.floats(1e-6, 1e6), junk),
    method=st.sampled_from(["analytic", "classic", "bogus"]),
)
def test_gaussian_sigma(eps, delta, sens, method):
    _count("gaussian_sigma")
    try:
        sigma = gaussian_sigma(eps, delta, sens, method, force=True)
    except (ValueError, TypeError):
        return
    assert math.isfinite(sigma) and sigma >= 0
    if method == "analytic" and sigma > 0:
        import dp_accounting

        got = float(dp_accounting.get_epsilon_gaussian(sigma / float(sens), float(delta)))
        assert got <= float(eps) * (1 + 1e-6) + 1e-9


@settings(SETTINGS, max_examples=40)
@given(
    p=st.one_of(st.integers(-2, 12), junk),
    sigma=st.one_of(st.floats(0, 1e6), junk),
    size=st.one_of(st.none(), st.integers(-1, 3)),
)
def test_symmetric_gaussian(p, sigma, size):
    _count("symmetric_gaussian")
    try:
        z = symmetric_gaussian(p, sigma, np.random.default_rng(0), size=size)
    except (ValueError, TypeError):
        return
    assert np.isfinite(z).all()
    np.testing.assert_array_equal(z, np.swapaxes(z, -1, -2))


releases = st.lists(
    st.tuples(st.floats(1e-3, 1e12), st.floats(1e-6, 1e3), st.integers(1, 50)),
    min_size=1,
    max_size=4,
)


@settings(SETTINGS, max_examples=40)
@given(rels=releases, delta=delta_valid, accountant=st.sampled_from(["rdp", "closed_form"]))
def test_ledger_finite_and_monotone(rels, delta, accountant):
    _count("PrivacyLedger")
    led = PrivacyLedger()
    for sigma, sens, count in rels:
        try:
            led.record("u", "g", sigma, sens, count)
        except ValueError:  # sigma/sensitivity overflow only
            assert not math.isfinite(sigma / sens)
            return
    eps = led.epsilon(delta, accountant=accountant)
    assert math.isfinite(eps) and eps >= 0
    # one more release never lowers epsilon
    led.record("u", "g", rels[0][0], rels[0][1], 1)
    assert led.epsilon(delta, accountant=accountant) >= eps * (1 - 1e-9)
    assert PrivacyLedger.from_dict(led.to_dict()).releases == led.releases


@settings(SETTINGS, max_examples=40)
@given(sigma=junk, sens=junk, count=junk)
def test_ledger_bad_input(sigma, sens, count):
    _count("PrivacyLedger(bad)")
    try:
        PrivacyLedger().record("u", "g", sigma, sens, count)
    except (ValueError, TypeError):
        return
    assert math.isfinite(float(sigma)) and float(sens) > 0 and int(count) >= 1


@settings(SETTINGS, max_examples=25)
@given(
    eps=st.one_of(st.floats(0.05, 50), junk),
    delta=st.one_of(delta_valid, junk),
    count=st.one_of(st.integers(1, 200), junk),
)
def test_calibrate_noise_multiplier(eps, delta, count):
    _count("calibrate_noise_multiplier")
    try:
        z = calibrate_noise_multiplier(eps, delta, count, "rdp")
    except (ValueError, TypeError):
        return
    assert math.isfinite(z) and z > 0
    led = PrivacyLedger()
    led.record_noise_multiplier("u", "g", z, count=int(count))
    assert led.epsilon(float(delta), accountant="rdp") <= float(eps) * (1 + 1e-6)


@settings(SETTINGS, max_examples=25)
@given(
    n=st.integers(1, 12),
    d=st.integers(1, 5),
    views=st.integers(1, 3),
    mu=st.one_of(st.floats(1e-3, 1e3), junk),
    sigma=st.one_of(st.floats(0, 10), junk),
    scale=st.floats(1e-3, 1e150),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_dp_correlation(n, d, views, mu, sigma, scale, dtype):
    _count("dp_correlation")
    g = torch.Generator().manual_seed(n * 31 + d)
    x = (torch.randn(n, d, generator=g, dtype=torch.float64) * scale).to(dtype)
    if not torch.isfinite(x).all():
        return
    try:
        r = dp_correlation(lambda z: z, x, None, views, mu, sigma, None, np.random.default_rng(0))
    except (ValueError, TypeError):
        return
    assert r.shape == (d, d) and np.isfinite(r).all()
    np.testing.assert_array_equal(r, r.T)
    if float(sigma) == 0:  # noiseless: trace at most mu (each row clipped to sqrt(mu))
        assert np.trace(r) <= float(mu) * (1 + 1e-6)
        assert correlation_sensitivity(float(mu), n) == pytest.approx(float(mu) / n)
