"""PrivacyLedger and calibrate_noise_multiplier against dp-accounting run directly."""

import math

import dp_accounting
import pytest

from fedspectral.privacy import PrivacyLedger, calibrate_noise_multiplier
from fedspectral.privacy.composition import gaussian_event, pld_interval

ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def direct(z: float, count: int, delta: float, kind: str, interval: float = 1e-4) -> float:
    acc = (
        dp_accounting.pld.PLDAccountant(ADD_REMOVE, value_discretization_interval=interval)
        if kind == "pld"
        else dp_accounting.rdp.RdpAccountant(neighboring_relation=ADD_REMOVE)
    )
    ev = dp_accounting.GaussianDpEvent(z)
    acc.compose(ev if count == 1 else dp_accounting.SelfComposedDpEvent(ev, count))
    return acc.get_epsilon(delta)


def closed_form(z: float, count: int, delta: float) -> float:
    rho = count / (2 * z * z)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_gaussian_event_is_dp_accountings_event():
    assert gaussian_event(2.0) == dp_accounting.GaussianDpEvent(2.0)
    assert gaussian_event(2.0, 10) == dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(2.0), 10
    )
    acc = dp_accounting.pld.PLDAccountant(ADD_REMOVE, value_discretization_interval=1e-4)
    assert acc.compose(gaussian_event(2.0, 10)).get_epsilon(1e-5) == pytest.approx(7.511, abs=1e-3)


def test_reference_example_z2_t10():
    # z=2, T=10, delta=1e-5 -> PLD 7.511, RDP 8.079, the seed's closed form 8.837
    led = PrivacyLedger()
    led.record("c", "gauss", sigma=2.0, sensitivity=1.0, count=10)
    assert led.epsilon(1e-5, accountant="pld") == pytest.approx(7.511, abs=1e-3)
    assert led.epsilon(1e-5, accountant="rdp") == pytest.approx(8.079, abs=1e-3)
    assert led.epsilon(1e-5, accountant="closed_form") == pytest.approx(8.837, abs=1e-3)


@pytest.mark.parametrize(
    "sigma, sens, count", [(2.0, 1.0, 10), (3.0, math.sqrt(2), 1), (0.8, 0.5, 3)]
)
@pytest.mark.parametrize("kind", ["pld", "rdp"])
def test_ledger_equals_dp_accounting_direct(sigma, sens, count, kind):
    delta = 1e-5
    led = PrivacyLedger()
    led.record("u", "gauss", sigma=sigma, sensitivity=sens, count=count)
    z = sigma / sens
    # PLD: the ledger's bounded grid (pld_interval) is dp-accounting's to 1e-12, and its
    # pessimistic estimate is within 1e-6 of dp-accounting's default grid
    interval = pld_interval({z: count}, delta) if kind == "pld" else 1e-4
    assert led.epsilon(delta, accountant=kind) == pytest.approx(
        direct(z, count, delta, kind, interval), rel=1e-12
    )
    assert led.epsilon(delta, accountant=kind) == pytest.approx(
        direct(z, count, delta, kind), rel=1e-6
    )


def test_ledger_replace_one_is_not_doubled():
    # the ledger runs ADD_OR_REMOVE with z = sigma/Delta; PLD under REPLACE_ONE would
    # double the sensitivity a second time (dp-accounting's PLD accountant doubles it
    # itself under REPLACE_ONE; its RDP accountant does not)
    led = PrivacyLedger()
    led.record("u", "gauss", sigma=3.0, sensitivity=math.sqrt(2), neighbouring="replace_one")
    eps = led.epsilon(1e-5, accountant="pld")
    assert eps == pytest.approx(direct(3.0 / math.sqrt(2), 1, 1e-5, "pld"), rel=1e-12)
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(3.0 / math.sqrt(2)))
    assert acc.get_epsilon(1e-5) > 1.5 * eps


@pytest.mark.parametrize("sigma, sens", [(1.0, 1.0), (5.27, math.sqrt(2)), (0.6, 1.0)])
@pytest.mark.parametrize("delta", [1e-5, 1e-2])
def test_ledger_analytic_matches_get_epsilon_gaussian(sigma, sens, delta):
    led = PrivacyLedger()
    led.record("u", "gauss", sigma=sigma, sensitivity=sens)
    assert led.epsilon(delta, accountant="analytic") == pytest.approx(
        dp_accounting.get_epsilon_gaussian(sigma / sens, delta), rel=1e-12
    )
    # single release: PLD is numerically tight, i.e. equal to the exact value
    assert led.epsilon(delta, accountant="pld") == pytest.approx(
        led.epsilon(delta, accountant="analytic"), rel=1e-3
    )


@pytest.mark.parametrize("z, count", [(1.0, 1), (2.0, 10), (5.0, 50), (0.7, 4)])
def test_closed_form_ge_rdp_ge_pld(z, count):
    led = PrivacyLedger()
    led.record("u", "g", sigma=z, sensitivity=1.0, count=count)
    cf = led.epsilon(1e-5, accountant="closed_form")
    rdp = led.epsilon(1e-5, accountant="rdp")
    pld = led.epsilon(1e-5, accountant="pld")
    assert cf == pytest.approx(closed_form(z, count, 1e-5), rel=1e-14)
    assert cf >= rdp >= pld


def test_mixed_releases_compose_and_parties_take_max():
    led = PrivacyLedger()
    led.record("a", "g", sigma=2.0, sensitivity=1.0, count=3)
    led.record("a", "g", sigma=4.0, sensitivity=2.0, count=2)  # same z=2: grouped
    led.record("a", "g", sigma=1.5, sensitivity=1.0)
    led.record("b", "g", sigma=10.0, sensitivity=1.0)
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=ADD_REMOVE)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), 5))
    acc.compose(dp_accounting.GaussianDpEvent(1.5))
    ea = led.epsilon(1e-5, "a", "rdp")
    assert ea == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    eb = led.epsilon(1e-5, "b", "rdp")
    assert eb < ea
    assert led.epsilon(1e-5, accountant="rdp") == ea
    assert led.count() == 7 and led.count("a") == 6
    rep = led.report(1e-5, per_party=True)
    assert rep["epsilon_rdp"] == ea and rep["per_party"]["b"]["epsilon_rdp"] == eb


def test_no_noise_is_infinite_and_empty_is_zero():
    led = PrivacyLedger()
    assert led.epsilon(1e-5) == 0.0
    led.record("u", "g", sigma=0.0, sensitivity=1.0)
    for kind in ("rdp", "pld", "closed_form", "analytic"):
        assert led.epsilon(1e-5, accountant=kind) == math.inf


def test_to_dict_roundtrip():
    led = PrivacyLedger()
    led.record("u", "g", sigma=2.0, sensitivity=1.0, count=10, step=3)
    led2 = PrivacyLedger.from_dict(led.to_dict())
    assert led2.releases == led.releases
    assert led2.epsilon(1e-5, accountant="rdp") == led.epsilon(1e-5, accountant="rdp")


@pytest.mark.parametrize("kind", ["rdp", "pld"])
@pytest.mark.parametrize("eps, count", [(1.0, 1), (3.0, 20)])
def test_calibrate_noise_multiplier_roundtrip(kind, eps, count):
    delta = 1e-5
    z = calibrate_noise_multiplier(eps, delta, count, kind)
    led = PrivacyLedger()
    led.record_noise_multiplier("u", "g", z, count=count)
    got = led.epsilon(delta, accountant=kind)
    assert got <= eps * (1 + 1e-6)
    assert got == pytest.approx(eps, rel=2e-3)
    # slightly less noise breaks the target: z is (nearly) the smallest
    assert direct(z * 0.99, count, delta, kind) > eps


def test_calibrate_infinite_epsilon():
    assert calibrate_noise_multiplier(math.inf, 1e-5, 3) == 0.0


@pytest.mark.parametrize(
    "args, bad",
    [
        ((0.0, 1e-5, 1), "0.0"),
        ((-2.0, 1e-5, 1), "-2.0"),
        ((1.0, 0.0, 1), "0.0"),
        ((1.0, 1.5, 1), "1.5"),
        ((1.0, 1e-5, 0), "0"),
        ((1.0, 1e-5, 1, "exact"), "exact"),
    ],
)
def test_calibrate_bad_input(args, bad):
    with pytest.raises(ValueError, match=bad):
        calibrate_noise_multiplier(*args)


def test_ledger_bad_input():
    led = PrivacyLedger()
    with pytest.raises(ValueError, match="-1.0"):
        led.record("u", "g", sigma=-1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="0.0"):
        led.record("u", "g", sigma=1.0, sensitivity=0.0)
    with pytest.raises(ValueError, match="0"):
        led.record("u", "g", sigma=1.0, sensitivity=1.0, count=0)
    with pytest.raises(ValueError, match="neighbor"):
        led.record("u", "g", sigma=1.0, sensitivity=1.0, neighbouring="neighbor")
    led.record("u", "g", sigma=1.0, sensitivity=1.0, count=2)
    with pytest.raises(ValueError, match="2 releases"):
        led.epsilon(1e-5, accountant="analytic")
    with pytest.raises(ValueError, match="moments"):
        led.epsilon(1e-5, accountant="moments")
    with pytest.raises(ValueError, match="'v'"):
        led.epsilon(1e-5, party="v")
    with pytest.raises(ValueError, match="1.0"):
        led.epsilon(1.0)


def test_add_copies_a_release_of_another_ledger_exactly():
    src = PrivacyLedger(unit=None)
    a = src.record("c1", "dp_calr", 2.0, 0.5, 3, "zero_out", 4, "client", "secagg")
    b = src.record("c2", "dp_calr", 1.0, 1.0)
    copy = PrivacyLedger(unit=None)
    assert [copy.add(r) for r in src.releases] == [a, b]
    assert copy.to_dict() == src.to_dict()
    sample_only = PrivacyLedger(unit="sample")
    with pytest.raises(ValueError, match="client-level"):
        sample_only.add(a)  # the checks of record() hold for a copied release too
