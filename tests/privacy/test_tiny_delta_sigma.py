"""Tiny δ and σ, and the ledger's bad input (issue 24, round 2).

δ = 5e-324 is 2**-1074 exactly, so ln(1/δ) = 1074 ln 2: the closed forms have an exact
reference.  The accountants run directly (dp-accounting, default settings) are the
reference for the calibrations.
"""

import math

import dp_accounting
import pytest

from fedspectral.fed.correlation import calibrate_correlation_sigma, correlation_sensitivity
from fedspectral.privacy import PrivacyLedger, calibrate_noise_multiplier, gaussian_sigma
from fedspectral.privacy.accounting import accountants_at, epsilon_of_releases
from fedspectral.privacy.calibration import closed_form_noise_multiplier
from fedspectral.privacy.composition import PLD_MIN_DELTA, RDP_ORDERS, Z_MIN

TINY = 5e-324
LN_INV_TINY = 1074 * math.log(2.0)


def one(z, count=1):
    led = PrivacyLedger()
    led.record_noise_multiplier("u", "g", z, count=count)
    return led


def test_smallest_delta_is_exact_in_the_closed_forms():
    assert TINY == 2.0**-1074
    # closed-form accountant: rho + 2 sqrt(rho ln 1/δ); it returned inf
    eps = one(2.0, count=3).epsilon(TINY, accountant="closed_form")
    rho = 3 / (2 * 4.0)
    assert eps == pytest.approx(rho + 2 * math.sqrt(rho * LN_INV_TINY), rel=1e-14)
    # its inverse (ZeroDivisionError before)
    z = closed_form_noise_multiplier(1.0, TINY, 10)
    rho = 10 / (2 * z * z)
    assert rho + 2 * math.sqrt(rho * LN_INV_TINY) == pytest.approx(1.0, rel=1e-12)
    # classic Gaussian: sqrt(2 ln(1.25/δ))/ε (the message blamed sensitivity 1.0)
    assert gaussian_sigma(0.5, TINY, 1.0, "classic") == pytest.approx(
        math.sqrt(2 * (math.log(1.25) + LN_INV_TINY)) / 0.5, rel=1e-14
    )
    # analytic Gaussian, against dp-accounting's own inverse
    s = gaussian_sigma(1.0, TINY)
    assert float(dp_accounting.get_epsilon_gaussian(s, TINY)) == pytest.approx(1.0, rel=1e-6)


def test_calibrations_work_down_to_the_smallest_delta():
    # reference: dp-accounting's RDP accountant with the ledger's orders (its default
    # orders stop at 256, short of the optimum at this delta)
    z = calibrate_noise_multiplier(1.0, TINY, 10)  # ZeroDivisionError before
    acc = dp_accounting.rdp.RdpAccountant(orders=RDP_ORDERS)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), 10))
    ref = acc.get_epsilon(TINY)
    assert ref <= 1.0 * (1 + 1e-6)
    slightly_less = dp_accounting.rdp.RdpAccountant(orders=RDP_ORDERS)
    slightly_less.compose(
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.99 * z), 10)
    )
    assert slightly_less.get_epsilon(TINY) > 1.0
    for acc_name in ("rdp", "closed_form"):
        s = calibrate_correlation_sigma(1.0, TINY, 10, 4.0, 100, acc_name)
        zz = s / correlation_sensitivity(4.0, 100)
        assert one(zz, 10).epsilon(TINY, accountant=acc_name) <= 1.0 * (1 + 1e-6)
    # the rdp and analytic accountants themselves at δ = 5e-324
    assert math.isfinite(one(1.0).epsilon(TINY, accountant="rdp"))
    assert one(1.0).epsilon(TINY, accountant="analytic") == pytest.approx(
        float(dp_accounting.get_epsilon_gaussian(1.0, TINY)), rel=1e-12
    )


def test_tiny_noise_is_refused_naming_the_smallest_multiplier_that_works():
    # dp-accounting's analytic epsilon at z = 5e-324 is 0: the unguarded ledger reported 0
    assert float(dp_accounting.get_epsilon_gaussian(TINY, 1e-5)) == 0.0
    for acc in ("rdp", "pld", "closed_form", "analytic"):
        with pytest.raises(ValueError, match=r"5e-324 is below 1e-150 \(Z_MIN\)") as err:
            one(TINY).epsilon(1e-5, accountant=acc)
        assert "accountant='rdp'" not in str(err.value)  # no advice that cannot be followed
    # at Z_MIN itself every accountant that covers it gives a finite, huge epsilon
    for acc in ("rdp", "closed_form", "analytic"):
        assert 1e299 < one(Z_MIN).epsilon(1e-5, accountant=acc) < math.inf, acc
    # zero noise stays infinite epsilon (no noise, no privacy), as documented
    assert one(0.0).epsilon(1e-5) == math.inf


def test_pld_is_reported_only_where_it_is_defined():
    assert accountants_at(1e-5) == (("rdp", "pld", "closed_form"), {})
    kept, skipped = accountants_at(1e-20)
    assert kept == ("rdp", "closed_form") and "resolves delta >= 1e-15" in skipped["pld"]
    assert accountants_at(PLD_MIN_DELTA)[1] == {}
    with pytest.raises(ValueError, match="delta >= 1e-15"):
        one(1.0).epsilon(1e-20, accountant="pld")  # asked for by name: still refused


def test_ledger_refuses_self_merge_and_non_string_parties():
    led = one(1.0)
    with pytest.raises(ValueError, match="into itself"):
        led.merge(led)  # it doubled every release
    assert len(led) == 1
    for party in (None, 3, b"u"):
        with pytest.raises(TypeError, match="party must be a string"):
            PrivacyLedger().record(party, "m", 1.0, 1.0)  # stored 'None'
    with pytest.raises(TypeError, match="mechanism must be a string"):
        PrivacyLedger().record("u", None, 1.0, 1.0)
    with pytest.raises(TypeError, match="parties must be a list of strings"):
        PrivacyLedger().record_aborted(1, "m", [None], "r")


def test_releases_given_as_dicts_name_the_missing_key():
    with pytest.raises(
        ValueError,
        match="release 0 is malformed: it lacks the keys 'party', 'mechanism', 'sensitivity'",
    ):
        epsilon_of_releases([{"sigma": 1}], 1e-5)  # AttributeError before
    rel = {"party": "u", "mechanism": "g", "sigma": 2.0, "sensitivity": 1.0}
    assert epsilon_of_releases([rel], 1e-5) == one(2.0).epsilon(1e-5)
    with pytest.raises(TypeError, match="release 0 must be a Release"):
        epsilon_of_releases([5], 1e-5)
    with pytest.raises(TypeError, match="releases must be a list"):
        epsilon_of_releases("abc", 1e-5)


@pytest.mark.parametrize(
    "data, exc, match",
    [
        ({"unit": 5}, ValueError, "ledger key 'unit'"),
        ({"releases": 5}, TypeError, "ledger key 'releases' must be a list"),
        ({"aborted": {}}, TypeError, "ledger key 'aborted' must be a list"),
        ({"releases": [5]}, TypeError, "ledger release 0 is malformed"),
        (
            {"releases": [{"party": "u", "mechanism": "g", "sigma": 1.0}]},
            ValueError,
            "ledger release 0 is malformed: it lacks the key 'sensitivity'",
        ),
        (
            {
                "releases": [
                    {"party": "u", "mechanism": "g", "sigma": 1.0, "sensitivity": 1.0, "colour": 1}
                ]
            },
            ValueError,
            "unknown key 'colour'",
        ),
        (
            {"releases": [{"party": None, "mechanism": "g", "sigma": 1.0, "sensitivity": 1.0}]},
            TypeError,
            "ledger release 0: party must be a string",
        ),
        (
            {
                "unit": "sample",
                "releases": [
                    {
                        "party": "u",
                        "mechanism": "g",
                        "sigma": 1.0,
                        "sensitivity": 1.0,
                        "unit": "client",
                    }
                ],
            },
            ValueError,
            "client-level release in a sample-level ledger",
        ),
        (
            {"aborted": [{"step": 1, "mechanism": "m", "parties": "ab", "reason": "r"}]},
            ValueError,
            "ledger aborted entry 0",
        ),
        ({"extra": 1}, ValueError, "unknown keys"),
    ],
)
def test_ledger_from_dict_names_the_key(data, exc, match):
    with pytest.raises(exc, match=match):
        PrivacyLedger.from_dict(data)


def test_ledger_round_trip_is_unchanged():
    led = one(1.5, count=4)
    led.record("v", "h", sigma=2.0, sensitivity=0.5, unit="sample", threat="any")
    back = PrivacyLedger.from_dict(led.to_dict())
    assert back.to_dict() == led.to_dict() and back.releases == led.releases


def test_a_run_with_delta_below_1e_15_passes_the_preflight():
    # PLD was always checked, so no config with delta < 1e-15 was accepted
    from fedspectral.config import from_dict
    from fedspectral.experiments.preflight import check_privacy

    for delta in (1e-20, TINY):
        cfg = from_dict(
            {
                "name": "t",
                "data": {"dataset": "digits"},
                "method": {"name": "fedsc"},
                "dp": {"enabled": True, "epsilon": 6.0, "delta": delta},
            }
        )
        check_privacy(cfg)  # raised "the PLD accountant resolves delta >= 1e-15"
    with pytest.raises(ValueError, match="delta >= 1e-15"):
        one(1.0).epsilon(1e-20, accountant="pld")  # the accountant the preflight now skips
