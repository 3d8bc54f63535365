r"""A run's privacy report: ε per accountant, per threat model and per unit, from its ledgers.

Every ε a run states is computed here, from the releases its ledgers hold
(:class:`~fedspectral.privacy.PrivacyLedger`), by the accountants of
:mod:`fedspectral.privacy.accounting`:

:func:`privacy_report`
    the results' ``privacy`` section (both engines): the sample-level ledger's ε by
    each accountant of :data:`~fedspectral.kinds.REPORTED` (the largest
    over the parties, and per party), per threat model when a release went through
    secure aggregation, the accountants left out at this δ (with the reason), the
    release budget's stops, and the client-level ledger's ε apart (never composed with
    the sample-level releases: another unit);
:func:`round_epsilon` and :func:`evaluation_epsilons`
    the ε a round record carries (every round; at evaluation rounds, per client);
:func:`release_epsilon` and :func:`epsilon_with`
    a node's limits: the ε of one release, and of a party's releases with one more.

ε of a party is that of the composition of its releases (in one unit, under one
threat model: the fallback, the conservative reading, unless asked otherwise); parties
whose releases have the same noise multipliers and counts (equal-size clients) are
computed once (``memo``).  An accountant that cannot cover a composition (PLD beyond its
range) gives ``None``, "not reported".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fedspectral.checks import check_choice
from fedspectral.kinds import ACCOUNTANTS, ANALYTIC, RDP, REPORTED, THREAT_MODEL_ACCOUNTANTS
from fedspectral.privacy.accounting import (
    THREATS,
    PrivacyLedger,
    Release,
    _check_delta,
    accountants_at,
    epsilon_of_releases,
)

__all__ = [
    "epsilon_with",
    "evaluation_epsilons",
    "largest",
    "party_epsilons",
    "privacy_report",
    "release_epsilon",
    "round_epsilon",
]


def party_epsilons(
    ledger: PrivacyLedger,
    delta: float,
    accountant: str = RDP,
    memo: dict | None = None,
    threat: str = "fallback",
) -> dict[str, float | None]:
    """ε of every party of ``ledger`` by ``accountant`` under ``threat`` (the fallback by
    default: the conservative reading of releases made through secure aggregation;
    identical for releases seen in the clear), ``None`` where the accountant cannot
    cover the party's releases; parties with the same releases (same noise multipliers,
    counts and sampler total variations) are computed once, kept in ``memo`` across calls.
    ``delta`` and ``accountant`` are checked first: ``None`` says that the accountant's
    range does not reach a valid ``delta``, never that ``delta`` is invalid."""
    delta = _check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    by_party: dict[str, list[Release]] = {}
    for r in ledger.view(threat).releases:
        by_party.setdefault(r.party, []).append(r)
    memo = {} if memo is None else memo
    out: dict[str, float | None] = {}
    for party, rels in by_party.items():
        key = (
            accountant,
            delta,
            tuple(sorted((r.noise_multiplier, r.count, r.sampler_tv) for r in rels)),
        )
        if key not in memo:
            try:
                memo[key] = float(epsilon_of_releases(rels, delta, accountant))
            except ValueError:  # beyond this accountant's range (PLD): not reported
                memo[key] = None
        out[party] = memo[key]
    return out


def largest(values: Iterable[float | None]) -> float | None:
    """The largest of ``values`` that are reported (``None`` when none is)."""
    xs = [v for v in values if v is not None]
    return max(xs) if xs else None


def round_epsilon(ledger: PrivacyLedger, delta: float, memo: dict | None = None) -> float | None:
    """A round record's ``epsilon_rdp``: the largest RDP ε over the parties so far (0
    before any release)."""
    eps = party_epsilons(ledger, delta, RDP, memo)
    return largest(eps.values()) if eps else 0.0


def evaluation_epsilons(
    ledger: PrivacyLedger, delta: float, memo: dict | None = None
) -> dict[str, Any]:
    """What an evaluation round's record adds (nothing before any release):
    ``epsilon_<second accountant>`` (PLD, the largest over the clients) and
    ``epsilon_clients`` (each client's ε by each accountant of
    :data:`~fedspectral.kinds.THREAT_MODEL_ACCOUNTANTS`)."""
    if not len(ledger):
        return {}
    per = {a: party_epsilons(ledger, delta, a, memo) for a in THREAT_MODEL_ACCOUNTANTS}
    first, *rest = THREAT_MODEL_ACCOUNTANTS
    out: dict[str, Any] = {f"epsilon_{a}": largest(per[a].values()) for a in rest}
    out["epsilon_clients"] = {c: {a: per[a][c] for a in per} for c in per[first]}
    return out


def _per_accountant(
    ledger: PrivacyLedger, delta: float, accountants: Sequence[str], memo: dict, threat: str
) -> dict[str, Any]:
    """``epsilon_<a>`` (largest over the parties) and ``per_party`` for ``accountants``."""
    per = {a: party_epsilons(ledger, delta, a, memo, threat) for a in accountants}
    return {
        **{f"epsilon_{a}": largest(e.values()) for a, e in per.items()},
        "per_party": {c: {f"epsilon_{a}": per[a].get(c) for a in per} for c in per[accountants[0]]},
    }


def _sample_level(
    ledger: PrivacyLedger, delta: float, method_info: Mapping[str, Any]
) -> dict[str, Any]:
    """The sample-level ledger's ε (with releases): per accountant, party, threat model."""
    memo: dict = {}
    out: dict[str, Any] = {"parties": len(ledger.view("fallback").parties)}
    out.update(_per_accountant(ledger, delta, REPORTED, memo, "fallback"))
    out.update(method_info)
    if any(r.threat == "secagg" for r in ledger.releases):
        # secure aggregation: the per-client epsilon under both threat models
        out["threat_models"] = {
            t: _per_accountant(ledger, delta, THREAT_MODEL_ACCOUNTANTS, memo, t) for t in THREATS
        }
        out["aborted_sums"] = ledger.aborted
    return out


def _budget(budget: Sequence[Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The release budget (target ε, its accountant) and the clients it stopped."""
    out: dict[str, Any] = {"target_epsilon": budget[0], "target_accountant": budget[2]}
    stops = [
        (r["round"], c)
        for r in records
        for ph in r["phases"].values()
        for c in ph.get("budget_stopped", [])
    ]
    out["budget_stops"] = len(stops)
    if stops:
        out["budget_stopped_clients"] = sorted({c for _, c in stops})
    return out


def _client_level(client_ledger: PrivacyLedger, delta: float) -> dict[str, Any]:
    """The client-level ledger's part: its own unit, never composed with the samples'."""
    memo: dict = {}
    per = {a: party_epsilons(client_ledger, delta, a, memo) for a in THREAT_MODEL_ACCOUNTANTS}
    return {
        "unit": "client",
        "delta": delta,
        "releases": client_ledger.count(),
        "ledger": client_ledger.to_dict(),
        **{f"epsilon_{a}": largest(e.values()) for a, e in per.items()},
    }


class PrivacyReport(dict[str, Any]):
    """The ``privacy`` section of a run's results: a plain ``dict`` (written to JSON as it
    is, every key as documented in :func:`privacy_report`) whose ``repr`` is one line
    saying what it holds -- "no DP" where every ε would be infinite -- instead of the
    ledger's thousands of characters."""

    def summary(self) -> str:
        """One line: the ε of each accountant at δ and the releases, or "no DP"."""
        n = int(self.get("releases", 0) or 0)
        eps = {
            k.removeprefix("epsilon_"): v
            for k, v in self.items()
            if k.startswith("epsilon_") and isinstance(v, int | float)
        }
        if n == 0:
            text = "nothing released"
        elif not eps or all(math.isinf(v) for v in eps.values()):
            text = f"no DP: {n} release(s) without noise (epsilon = inf)"
        else:
            parts = ", ".join(f"{v:.4g} ({a})" for a, v in eps.items())
            text = f"epsilon {parts} at delta={self.get('delta'):g} over {n} release(s)"
        client = self.get("client_level")
        if isinstance(client, Mapping):
            ce = client.get("epsilon_rdp")
            text += f"; client level: {client.get('releases')} release(s), epsilon " + (
                "inf (no DP)" if ce is None or math.isinf(ce) else f"{ce:.4g} (rdp)"
            )
        return text

    def __repr__(self) -> str:
        return f"PrivacyReport({self.summary()}; keys: {', '.join(self)})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython/Jupyter
        p.text(repr(self))


def privacy_report(
    ledger: PrivacyLedger,
    client_ledger: PrivacyLedger,
    delta: float,
    *,
    method_info: Mapping[str, Any] | None = None,
    released_objects: Any = None,
    budget: Sequence[Any] | None = None,
    records: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
) -> PrivacyReport:
    """The results' ``privacy`` section of a run (a :class:`PrivacyReport`: a ``dict``
    with a one-line ``repr``).

    Parameters
    ----------
    ledger, client_ledger : PrivacyLedger
        The run's sample-level and client-level ledgers.
    delta : float
        δ at which every ε is reported.
    method_info : mapping, optional
        The method's own entries (its ``privacy_info``), shown beside the ε when the
        ledger holds releases.
    released_objects : optional
        What the run released, and to whom
        (:func:`fedspectral.fed.manifest.released_objects`).
    budget : tuple, optional
        The release budget, ``(target ε, ..., accountant)`` (the method's
        ``release_budget()``).
    records : sequence of dict
        The round records, where the budget's stops are counted.
    warnings : sequence of str
        Notes on the run's privacy (the server state's ``privacy_warnings``).

    Returns
    -------
    dict
        ``delta``, ``releases``, ``ledger``; with releases ``parties``, the
        ``epsilon_<accountant>`` of each accountant of ``REPORTED``, ``per_party``,
        the method's entries, and after a secure sum ``threat_models`` (``secagg``,
        ``fallback``) and ``aborted_sums``; ``not_reported`` (accountants undefined at
        ``delta``, with the reason), ``unit``, ``released_objects``, the budget's
        ``target_epsilon``, ``target_accountant``, ``budget_stops`` (and
        ``budget_stopped_clients``), ``warnings``, and ``client_level`` when the
        client-level ledger holds releases.
    """
    out: dict[str, Any] = {"delta": delta, "releases": ledger.count(), "ledger": ledger.to_dict()}
    if len(ledger):
        out.update(_sample_level(ledger, delta, method_info or {}))
    skipped = accountants_at(delta)[1]
    if len(ledger) and skipped:
        out["not_reported"] = skipped  # PLD below delta = 1e-15, with the reason
    out["unit"] = "sample"
    out["released_objects"] = released_objects
    if budget is not None:
        out.update(_budget(budget, records))
    if warnings:
        out["warnings"] = list(warnings)
    if len(client_ledger):
        out["client_level"] = _client_level(client_ledger, delta)
    return PrivacyReport(out)


# -- a node's limits ------------------------------------------------------------------------
def release_epsilon(release: Release, delta: float) -> float:
    """ε at ``delta`` of one release: the exact (analytic) ε of a single Gaussian release,
    RDP for a self-composed one (``count > 1``; its single release is checked first)."""
    one = epsilon_of_releases([replace(release, count=1)], delta, ANALYTIC)
    return epsilon_of_releases([release], delta, RDP) if release.count > 1 else one


def epsilon_with(releases: Iterable[Release], release: Release, delta: float) -> float:
    """RDP ε at ``delta`` of ``release``'s party, in its unit: its ``releases`` of that
    unit composed with ``release``."""
    rel = [r for r in releases if r.party == release.party and r.unit == release.unit]
    return epsilon_of_releases([*rel, release], delta, RDP)
