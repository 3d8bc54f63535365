"""Calibration and accounting over their whole domain (defect 5 and the bad-input review).

The grid: every calibration accountant at eps in [0.1, 16] x delta in [1e-8, 1e-1]; the
calibrated noise must achieve its epsilon by dp-accounting run directly (its default
settings), and 0.1 % less noise must not.
"""

import itertools
import math

import dp_accounting
import numpy as np
import pytest
import torch

from fedspectral.fed.correlation import calibrate_correlation_sigma, correlation_sensitivity
from fedspectral.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    gaussian_sigma,
    symmetric_gaussian,
)
from fedspectral.privacy.calibration import closed_form_noise_multiplier

EPS = (0.1, 0.5, 2.0, 6.0, 16.0)
DELTAS = (1e-8, 1e-5, 1e-3, 1e-1)


def reference(z, count, delta, kind):
    acc = dp_accounting.pld.PLDAccountant() if kind == "pld" else dp_accounting.rdp.RdpAccountant()
    ev = dp_accounting.GaussianDpEvent(z)
    acc.compose(ev if count == 1 else dp_accounting.SelfComposedDpEvent(ev, count))
    return acc.get_epsilon(delta)


def test_calibration_grid_rdp():
    for eps, delta in itertools.product(EPS, DELTAS):
        z = calibrate_noise_multiplier(eps, delta, 10, "rdp")
        got = reference(z, 10, delta, "rdp")
        assert eps * (1 - 2e-3) <= got <= eps * (1 + 1e-6), (eps, delta, z, got)
        assert reference(z * 0.999, 10, delta, "rdp") > eps


def test_calibration_grid_pld():
    # one release (the reviewed crash): the PLD accountant is an upper bound on the exact
    # epsilon, which dp-accounting gives in closed form; the ledger's PLD holds the target
    for eps, delta in itertools.product(EPS, DELTAS):
        z = calibrate_noise_multiplier(eps, delta, 1, "pld")
        exact = float(dp_accounting.get_epsilon_gaussian(z, delta))
        assert eps * (1 - 2e-3) <= exact <= eps * (1 + 1e-6), (eps, delta, z, exact)
        assert float(dp_accounting.get_epsilon_gaussian(z * 0.999, delta)) > exact
        if delta == 1e-5:  # the ledger's finer grid (slower): one row of the grid
            assert ledger_eps(z, 1, delta, "pld") <= eps * (1 + 1e-5), (eps, delta)


def test_calibration_grid_closed_form_and_analytic():
    for eps, delta in itertools.product(EPS, DELTAS):
        z = closed_form_noise_multiplier(eps, delta, 7)
        rho = 7 / (2 * z * z)
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) == pytest.approx(eps, rel=1e-9)
        s = calibrate_correlation_sigma(eps, delta, 7, 4.0, 100, "closed_form")
        assert s == pytest.approx(z * correlation_sensitivity(4.0, 100), rel=1e-12)
        sigma = gaussian_sigma(eps, delta, 2.0)
        assert float(dp_accounting.get_epsilon_gaussian(sigma / 2.0, delta)) == pytest.approx(
            eps, rel=1e-6
        )


def test_the_reviewed_crashes_now_calibrate():
    # PLD at 0.5 and 1 (delta 1e-2) raised "did not bracket"
    for eps in (0.5, 1.0):
        z = calibrate_noise_multiplier(eps, 1e-2, 1, "pld")
        assert reference(z, 1, 1e-2, "pld") <= eps * (1 + 1e-6)
    # RDP at tiny epsilon (count 10) and at 1e4; PLD at 20
    for eps in (1e-4, 3e-3):
        z = calibrate_noise_multiplier(eps, 1e-5, 10, "rdp")
        assert ledger_eps(z, 10, 1e-5, "rdp") <= eps * (1 + 1e-6)
    z = calibrate_noise_multiplier(1e4, 1e-5, 1, "rdp")
    assert z > 0 and ledger_eps(z, 1, 1e-5, "rdp") <= 1e4
    z = calibrate_noise_multiplier(20.0, 1e-5, 1, "pld")
    assert ledger_eps(z, 1, 1e-5, "pld") <= 20.0 * (1 + 1e-6)


def ledger_eps(z, count, delta, kind):
    led = PrivacyLedger()
    led.record_noise_multiplier("u", "g", z, count=count)
    return led.epsilon(delta, accountant=kind)


def test_pld_many_releases_is_bounded_or_refused():
    # 100 releases at eps 100: bounded grid, a few seconds, no MemoryError
    z = calibrate_noise_multiplier(100.0, 1e-5, 100, "pld")
    assert ledger_eps(z, 100, 1e-5, "pld") <= 100.0 * (1 + 1e-6)
    # sigma <= 0.01 asked 76 GiB: now a clear refusal naming the way out
    led = PrivacyLedger()
    led.record("u", "g", sigma=0.01, sensitivity=1.0)
    with pytest.raises(ValueError, match="accountant='rdp'"):
        led.epsilon(1e-5, accountant="pld")
    assert math.isfinite(led.epsilon(1e-5, accountant="rdp"))
    assert led.report(1e-5)["epsilon_pld"] is None  # the report says why, without crashing
    assert "PLD" in led.report(1e-5)["errors"]["pld"]


def test_out_of_domain_is_a_clear_error():
    with pytest.raises(ValueError, match="1e-20"):
        calibrate_noise_multiplier(1e-20, 1e-5, 10)
    with pytest.raises(ValueError, match="epsilon=1e\\+200"):
        gaussian_sigma(1e200, 1e-5)
    with pytest.raises(ValueError, match="sensitivity=1e\\+308"):
        gaussian_sigma(0.5, 1e-5, 1e308, "classic")
    led = PrivacyLedger()
    led.record("u", "g", sigma=1.0, sensitivity=1.0, count=10)
    with pytest.raises(ValueError, match="delta >= 1e-15"):
        led.epsilon(1e-16, accountant="pld")  # it returned inf
    assert math.isfinite(led.epsilon(1e-16, accountant="rdp"))
    with pytest.raises(ValueError, match="size|noise entries"):
        symmetric_gaussian(10**6, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n \\(the client's number of samples\\)"):
        correlation_sensitivity(4.0, 10**400)
    with pytest.raises(ValueError, match="epsilon must be finite"):
        gaussian_sigma(10**400, 1e-5)  # an integer beyond the float range


def test_huge_noise_is_accounted_without_overflow():
    led = PrivacyLedger()
    led.record("u", "g", sigma=1e200, sensitivity=1.0)
    for kind in ("rdp", "pld", "closed_form", "analytic"):
        eps = led.epsilon(1e-5, accountant=kind)
        assert 0 <= eps < 1e-3, kind


@pytest.mark.parametrize(
    "call",
    [
        lambda: calibrate_noise_multiplier(True, 1e-5, True),
        lambda: calibrate_noise_multiplier(1.0, 1e-5, True),
        lambda: PrivacyLedger().record("u", "g", sigma=True, sensitivity=1.0),
        lambda: gaussian_sigma(1.0, 1e-5, sensitivity=True),
        lambda: gaussian_sigma(1.0, 1e-5, sensitivity="1"),
    ],
)
def test_booleans_and_strings_are_not_numbers(call):
    with pytest.raises(TypeError, match="True|'1'"):
        call()


def test_accountant_name_and_ledger_file_are_checked():
    with pytest.raises(ValueError, match="'foo'"):
        PrivacyLedger().epsilon(1e-5, accountant="foo")  # returned 0.0
    data = {"releases": [{"party": "u", "mechanism": "g", "sigma": -1.0, "sensitivity": 1.0}]}
    with pytest.raises(ValueError, match="-1.0"):
        PrivacyLedger.from_dict(data)
    with pytest.raises(ValueError, match="malformed"):
        PrivacyLedger.from_dict({"releases": [{"party": "u"}]})


def test_numpy_scalars_are_accepted_everywhere():
    assert gaussian_sigma(np.float32(1.0), np.float64(1e-5), np.float32(2.0)) == pytest.approx(
        gaussian_sigma(1.0, 1e-5, 2.0), rel=1e-6
    )
    led = PrivacyLedger()
    led.record("u", "g", sigma=np.float32(1.0), sensitivity=np.float64(1.0), count=np.int64(2))
    assert led.count() == 2
    # a float32 delta is the float it holds (not refused as out of (0, 1))
    assert PrivacyLedger().epsilon(np.float32(1e-5)) == 0.0
    for acc in ("rdp", "pld", "closed_form"):
        assert led.epsilon(np.float32(1e-5), accountant=acc) == led.epsilon(
            float(np.float32(1e-5)), accountant=acc
        )
    assert led.report(np.float32(1e-5))["delta"] == float(np.float32(1e-5))
    assert calibrate_noise_multiplier(np.float32(1.0), 1e-5, np.int64(3)) > 0
    symmetric_gaussian(np.int64(3), np.float32(1.0), np.random.default_rng(0))


def test_dp_correlation_input_checks():
    from fedspectral.fed.correlation import dp_correlation

    x = torch.randn(6, 3, dtype=torch.float64)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="augment must return one row per input row"):
        dp_correlation(lambda z: z, x, lambda b, g: b[:-1], 2, 4.0, 0.0, None, rng)
    # float64 images with a float32 encoder: cast to the encoder's dtype, not a RuntimeError
    enc = torch.nn.Linear(3, 4)
    r = dp_correlation(enc, x, None, 1, 4.0, 0.0, None, rng)
    ref = dp_correlation(enc, x.float(), None, 1, 4.0, 0.0, None, rng)
    np.testing.assert_array_equal(r, ref)
