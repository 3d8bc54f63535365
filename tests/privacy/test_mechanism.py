"""A release's mechanism as one object (privacy/mechanism.py): its noise, its event and its
ledger entry from the same numbers, and a ledger that composes any law dp-accounting
knows -- checked against dp-accounting composing the events directly and against the
closed forms of one release."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from fedspectral.privacy import PrivacyLedger, add_gaussian, gaussian_sigma
from fedspectral.privacy.accounting import epsilon_of_releases
from fedspectral.privacy.composition import RDP_ORDERS
from fedspectral.privacy.mechanism import Gaussian, Laplace, law_event, mechanism_of


def test_a_calibrated_gaussian_is_the_privacy_modules_sigma_and_spends_its_epsilon() -> None:
    g = Gaussian.calibrated(2.0, 1e-5, 0.25, "replace_one")
    assert g.sigma == gaussian_sigma(2.0, 1e-5, 0.25) and g.neighbouring == "replace_one"
    assert g.event() == dp_accounting.GaussianDpEvent(g.sigma / 0.25)
    rel = g.entry("client-0", "fedsc/dp-calr", 3)
    assert (rel.sigma, rel.sensitivity, rel.neighbouring, rel.step) == (
        g.sigma,
        0.25,
        "replace_one",
        3,
    )
    # the analytic Gaussian mechanism at its own calibration: exactly the epsilon asked
    assert epsilon_of_releases([rel], 1e-5, "analytic") == pytest.approx(2.0, rel=1e-6)
    assert mechanism_of(rel) == g


def test_the_gaussian_draws_what_add_gaussian_draws() -> None:
    g = Gaussian(0.7, 1.0)
    x = np.arange(6.0)
    assert np.array_equal(
        g.add(x, np.random.default_rng(5)), add_gaussian(x, 0.7, np.random.default_rng(5))
    )


def test_a_laplace_release_is_composed_by_the_ledger_like_dp_accounting_does() -> None:
    """One party: a Laplace release (b/Δ = 2) and three Gaussian ones (z = 4). The ledger's
    RDP ε equals dp-accounting's RdpAccountant (the same orders) composing the two events
    itself; the PLD ε of the Laplace release alone is its pure ε Δ/b = 0.5."""
    lap = Laplace(1.0, 0.5)
    gau = Gaussian(2.0, 0.5)
    led = PrivacyLedger()
    led.add(lap.entry("u", "toy/laplace", 1))
    led.add(gau.entry("u", "toy/gauss", 2, count=3))
    acc = dp_accounting.rdp.RdpAccountant(orders=RDP_ORDERS)
    acc.compose(dp_accounting.LaplaceDpEvent(2.0))
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 3))
    assert led.epsilon(1e-5, accountant="rdp") == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    alone = PrivacyLedger()
    alone.add(lap.entry("u", "toy/laplace"))
    assert alone.epsilon(1e-5, accountant="pld") == pytest.approx(0.5, abs=2e-3)
    assert law_event("laplace", 2.0, 3) == dp_accounting.SelfComposedDpEvent(
        dp_accounting.LaplaceDpEvent(2.0), 3
    )


@pytest.mark.parametrize("accountant", ["closed_form", "analytic"])
def test_gaussian_only_accountants_refuse_another_law_by_name(accountant) -> None:
    rel = Laplace(1.0, 1.0).entry("u", "toy/laplace")
    with pytest.raises(ValueError, match=f"{accountant}.*laplace"):
        epsilon_of_releases([rel], 1e-5, accountant)


def test_the_law_survives_the_ledgers_file_and_gaussian_files_are_unchanged() -> None:
    led = PrivacyLedger()
    led.add(Gaussian(1.0, 1.0).entry("a", "g"))
    assert "law" not in led.to_dict()["releases"][0]  # the files written before: the same
    led.add(Laplace(3.0, 1.0).entry("a", "l"))
    back = PrivacyLedger.from_dict(led.to_dict())
    assert [r.law for r in back.releases] == ["gaussian", "laplace"]
    assert back.epsilon(1e-5) == led.epsilon(1e-5)
    with pytest.raises(ValueError, match="law"):
        PrivacyLedger.from_dict(
            {"unit": "sample", "releases": [{**led.to_dict()["releases"][1], "law": "cauchy"}]}
        )


def test_laplace_noise_has_its_law_and_refuses_the_secure_source() -> None:
    """Seed 0, 200 000 draws of b = 1.5: standard deviation b sqrt(2) within 1 %, mean
    absolute deviation b within 1 %; the secure source (Gaussian only) is refused."""
    lap = Laplace(1.5, 1.0)
    noise = lap.add(np.zeros(200_000), np.random.default_rng(0))
    assert noise.std() == pytest.approx(1.5 * math.sqrt(2), rel=0.01)
    assert np.abs(noise).mean() == pytest.approx(1.5, rel=0.01)
    with pytest.raises(TypeError, match="Gaussian noise only"):
        lap.add(np.zeros(3), "secure")


@pytest.mark.parametrize(
    "args, name",
    [
        ((True, 1.0), "scale"),
        ((1.0, "2"), "sensitivity"),
        ((1.0, 0.0), "sensitivity"),
        ((-1.0, 1.0), "scale"),
        ((1.0, 1.0, "neighbour"), "neighbouring"),
    ],
)
def test_a_mechanism_refuses_what_it_cannot_mean(args, name) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        Gaussian(*args)


def test_a_views_epsilon_is_of_its_own_threat_model() -> None:
    """``view("secagg").epsilon(δ)`` once returned 0: epsilon's default threat model (the
    fallback) filtered the view's secure-aggregation entries out again. A view's ε is its
    own model's by default, equal to the whole ledger's ε under that model, and a view
    asked for the other model is refused (its ε would leave out releases)."""
    led = PrivacyLedger()
    led.record("c", "fedsc/dp-calr", sigma=2.0, sensitivity=1.0, threat="secagg")
    led.record("c", "fedsc/dp-calr", sigma=0.5, sensitivity=1.0, threat="fallback")
    view = led.view("secagg")
    assert view.epsilon(1e-5) == led.epsilon(1e-5, threat="secagg") > 0
    with pytest.raises(ValueError, match="view of the 'secagg'"):
        view.epsilon(1e-5, threat="fallback")
