"""The accountants' names: the one enumeration every module spells them from.

A module of the bottom layer that imports nothing: :mod:`fedspectral.config`, below
:mod:`fedspectral.privacy`, names its default and checks ``dp.accountant`` from it, as
the privacy core, the runners and the preflight do.

``RDP``
    Rényi-DP accountant (dp-accounting's ``RdpAccountant``).
``PLD``
    Privacy-loss-distribution accountant (numerically tight).
``CLOSED_FORM``
    The RDP bound optimised in closed form (the FedSC seed's Proposition).
``ANALYTIC``
    Exact ε of a single Gaussian release (Balle & Wang 2018).

:data:`REPORTED` are the accountants a run's privacy section reports (and those a
configuration may calibrate to: ``dp.accountant``); :data:`THREAT_MODEL_ACCOUNTANTS`
those it reports per threat model and at the client level.  How each computes ε:
:mod:`fedspectral.privacy.accounting`.
"""

from __future__ import annotations

__all__ = [
    "ACCOUNTANTS",
    "ANALYTIC",
    "CLOSED_FORM",
    "INVERTIBLE",
    "PLD",
    "RDP",
    "REPORTED",
    "THREAT_MODEL_ACCOUNTANTS",
]

RDP = "rdp"
PLD = "pld"
CLOSED_FORM = "closed_form"
ANALYTIC = "analytic"
#: every accountant of :func:`fedspectral.privacy.accounting.epsilon_of_releases`
ACCOUNTANTS = (RDP, PLD, CLOSED_FORM, ANALYTIC)
#: the accountants of a run's report (each with ``epsilon_<name>``), in report order
REPORTED = (RDP, PLD, CLOSED_FORM)
#: the accountants :func:`~fedspectral.privacy.calibration.calibrate_noise_multiplier` inverts
INVERTIBLE = (RDP, PLD)
#: the accountants of the report's per-threat-model and client-level parts
THREAT_MODEL_ACCOUNTANTS = (RDP, PLD)
