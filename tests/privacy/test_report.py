"""The run's privacy report (``fedspectral.privacy.report``) against dp-accounting run
directly on the same Gaussian events, and against the closed form written out here.

The ledgers are built by hand (no training): three clients with DP-CalR-like releases
(two of them identical, so the report's memo is exercised), one client whose releases
went through secure aggregation (recorded once per threat model), and a client-level
ledger of client-level DP.  Each ε of the report is recomputed from the raw noise
multipliers with dp-accounting's own accountants; the client-level ε is shown to be
that ledger's alone (a report that composed the units would be larger)."""

from __future__ import annotations

import math

import dp_accounting
import pytest

from fedspectral.kinds import ACCOUNTANTS, REPORTED, THREAT_MODEL_ACCOUNTANTS
from fedspectral.privacy import PrivacyLedger
from fedspectral.privacy.composition import PLD_MIN_DELTA, RDP_ORDERS
from fedspectral.privacy.report import (
    epsilon_with,
    evaluation_epsilons,
    privacy_report,
    release_epsilon,
    round_epsilon,
)

DELTA = 1e-5


def _rdp(zs: list[tuple[float, int]], delta: float = DELTA) -> float:
    acc = dp_accounting.rdp.RdpAccountant(orders=list(RDP_ORDERS))
    for z, n in zs:
        acc.compose(dp_accounting.GaussianDpEvent(z), n)
    return acc.get_epsilon(delta)


def _pld(zs: list[tuple[float, int]], delta: float = DELTA) -> float:
    # the finest grid the report uses (it widens it for large compositions: pessimistic)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    for z, n in zs:
        acc.compose(dp_accounting.GaussianDpEvent(z), n)
    return acc.get_epsilon(delta)


def _closed(zs: list[tuple[float, int]], delta: float = DELTA) -> float:
    rho = sum(n / (2 * z * z) for z, n in zs)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


#: party -> its releases as (noise multiplier, count): sigma / sensitivity with sensitivity 0.5
SAMPLE = {"c0": [(1.1, 3)], "c1": [(1.1, 3)], "c2": [(0.8, 2), (1.6, 1)]}
SECURE_SECAGG, SECURE_FALLBACK = 4.0, 1.3  # c3: one release, read under each threat model


def _ledgers() -> tuple[PrivacyLedger, PrivacyLedger]:
    led = PrivacyLedger(unit="sample")
    for party, rels in SAMPLE.items():
        for step, (z, n) in enumerate(rels, start=1):
            led.record(party, "fedsc/dp-calr", z * 0.5, 0.5, n, "zero_out", step)
    led.record("c3", "fedsc/dp-calr", SECURE_SECAGG, 1.0, 1, "zero_out", 1, threat="secagg")
    led.record("c3", "fedsc/dp-calr", SECURE_FALLBACK, 1.0, 1, "zero_out", 1, threat="fallback")
    led.record_aborted(2, "fedsc/dp-calr", ["c3"], "fewer than min_contributors")
    cl = PrivacyLedger(unit="client")
    for rnd in (1, 2):
        for party in ("c0", "c1"):
            cl.record_noise_multiplier(
                party, "flower/client-dp-fixed-clipping", 2.0, 1, "add_remove", rnd, unit="client"
            )
    return led, cl


def test_report_agrees_with_dp_accounting_per_accountant_party_and_threat_model() -> None:
    led, cl = _ledgers()
    rep = privacy_report(led, cl, DELTA, method_info={"sigma": {"c0": 0.55}})
    fallback = {**SAMPLE, "c3": [(SECURE_FALLBACK, 1)]}
    secagg = {**SAMPLE, "c3": [(SECURE_SECAGG, 1)]}
    assert rep["parties"] == 4 and rep["releases"] == led.count()
    assert rep["sigma"] == {"c0": 0.55}  # the method's entries, beside the ε
    reference = {"rdp": _rdp, "pld": _pld, "closed_form": _closed}
    assert set(reference) == set(REPORTED)
    for a, f in reference.items():
        per = {p: f(zs) for p, zs in fallback.items()}
        got = {p: rep["per_party"][p][f"epsilon_{a}"] for p in fallback}
        # PLD on the report's coarser (pessimistic) grid: an upper bound, within 1 %
        tol = {"rdp": 1e-9, "pld": 1e-2, "closed_form": 1e-12}[a]
        for p, want in per.items():
            assert got[p] == pytest.approx(want, rel=tol), (a, p)
            if a == "pld":
                assert got[p] >= want * (1 - 1e-6), p
        assert rep[f"epsilon_{a}"] == max(got.values())
    # per threat model: c3's secure release counts once, under its own model
    for threat, zs_of in (("secagg", secagg), ("fallback", fallback)):
        part = rep["threat_models"][threat]
        assert set(part) == {*(f"epsilon_{a}" for a in THREAT_MODEL_ACCOUNTANTS), "per_party"}
        assert part["per_party"]["c3"]["epsilon_rdp"] == pytest.approx(_rdp(zs_of["c3"]), rel=1e-9)
        assert part["epsilon_rdp"] == pytest.approx(max(_rdp(z) for z in zs_of.values()), rel=1e-9)
    assert (
        rep["threat_models"]["secagg"]["per_party"]["c3"]["epsilon_rdp"]
        < (rep["threat_models"]["fallback"]["per_party"]["c3"]["epsilon_rdp"])
    )
    assert rep["aborted_sums"] == led.aborted and len(rep["aborted_sums"]) == 1
    # client level: that ledger alone, at the same delta (never composed with the samples)
    lvl = rep["client_level"]
    assert lvl["unit"] == "client" and lvl["releases"] == 4 and lvl["ledger"] == cl.to_dict()
    assert lvl["epsilon_rdp"] == pytest.approx(_rdp([(2.0, 2)]), rel=1e-9)
    assert lvl["epsilon_pld"] == pytest.approx(_pld([(2.0, 2)]), rel=1e-2)
    composed = _rdp([(2.0, 2), *SAMPLE["c0"]])  # what a report mixing the units would say
    assert lvl["epsilon_rdp"] < composed
    assert "not_reported" not in rep and rep["unit"] == "sample"


def test_round_records_and_budget_and_accountants_left_out() -> None:
    led, cl = _ledgers()
    empty = PrivacyLedger(unit="sample")
    assert round_epsilon(empty, DELTA) == 0.0 and evaluation_epsilons(empty, DELTA) == {}
    memo: dict = {}
    assert round_epsilon(led, DELTA, memo) == pytest.approx(
        max(_rdp(zs) for zs in {**SAMPLE, "c3": [(SECURE_FALLBACK, 1)]}.values()), rel=1e-9
    )
    ev = evaluation_epsilons(led, DELTA, memo)
    assert set(ev) == {"epsilon_pld", "epsilon_clients"}
    assert ev["epsilon_clients"]["c2"]["rdp"] == pytest.approx(_rdp(SAMPLE["c2"]), rel=1e-9)
    # the release budget's stops are counted from the round records
    records = [
        {"round": 1, "phases": {"share": {"budget_stopped": []}}},
        {"round": 2, "phases": {"share": {"budget_stopped": ["c2", "c0"]}}},
        {"round": 3, "phases": {"share": {"budget_stopped": ["c2"]}}},
    ]
    rep = privacy_report(led, cl, DELTA, budget=(4.0, 1e-5, "rdp"), records=records)
    assert rep["target_epsilon"] == 4.0 and rep["target_accountant"] == "rdp"
    assert rep["budget_stops"] == 3 and rep["budget_stopped_clients"] == ["c0", "c2"]
    # below PLD's smallest delta: PLD is left out with the reason, the others reported
    tiny = privacy_report(led, PrivacyLedger(unit="client"), PLD_MIN_DELTA / 10)
    assert "pld" in tiny["not_reported"] and tiny["epsilon_rdp"] > 0
    assert "client_level" not in tiny


def test_node_limits_release_epsilon_and_total() -> None:
    led, _ = _ledgers()
    one = led.releases[0]  # c0: z = 1.1, three releases
    assert set(ACCOUNTANTS) >= {"analytic", *REPORTED}
    assert release_epsilon(one, DELTA) == pytest.approx(_rdp([(1.1, 3)]), rel=1e-9)
    single = led.record("c9", "m", 2.2, 2.0, 1)
    exact = dp_accounting.get_epsilon_gaussian(1.1, DELTA)
    assert release_epsilon(single, DELTA) == pytest.approx(exact, rel=1e-9)
    # a party's total with one more release: that party's releases of that unit only
    assert epsilon_with(led.releases, one, DELTA) == pytest.approx(_rdp([(1.1, 6)]), rel=1e-9)
