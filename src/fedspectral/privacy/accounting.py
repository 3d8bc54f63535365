r"""Privacy accounting: every release recorded as a dp-accounting event.

A :class:`PrivacyLedger` holds the Gaussian releases made by each *party* (a
user, a client, a Flower node).  Each release is stored with the noise standard
deviation :math:`\sigma` and the L2 sensitivity :math:`\Delta` under the stated
neighbouring relation, so its noise multiplier is :math:`z=\sigma/\Delta`.  The
ε of a party is computed by an accountant of ``dp_accounting``:

``"rdp"``
    Rényi-DP accountant (``dp_accounting.rdp.RdpAccountant``).
``"pld"``
    Privacy-loss-distribution accountant (numerically tight).
``"closed_form"``
    The RDP bound optimised in closed form, :math:`\rho + 2\sqrt{\rho\ln(1/\delta)}`
    with :math:`\rho=\sum_i T_i/(2z_i^2)`.  For :math:`T` releases of one noise
    multiplier this is :math:`T/(2z^2)+\sqrt{2T\ln(1/\delta)}/z`, the FedSC seed's
    Proposition (with :math:`z=\sigma|D_j|/\mu`, as in its proof).
``"analytic"``
    Exact ε of a single Gaussian release (Balle & Wang 2018); only for a party
    with exactly one release.

Sensitivities are computed by the caller for its own neighbouring relation and
every event is then a unit-sensitivity Gaussian; the accountants are therefore
always run with ``ADD_OR_REMOVE_ONE`` (under ``REPLACE_ONE`` the PLD accountant
would double the sensitivity a second time).  The relation is recorded with each
release, in the words the docs use:

``"zero_out"``
    One record replaced by a null record that contributes nothing, the dataset
    size unchanged (DP-CalR's default, the FedSC seed's analysis:
    :math:`\Delta = \mu/|D_j|`).
``"replace_one"``
    One record replaced by any other (LDP-PCA: any two users' inputs; DP-CalR's
    option, :math:`\Delta = \sqrt2\,\mu/|D_j|`).
``"add_remove"``
    One record (a sample, or a whole client for client-level DP) added or removed.

Units.  Every release protects either one *sample* of a party or a whole
*client* (client-level DP on model updates).  Their ε are different guarantees:
the ledger refuses to compose releases of different units for one party, and a
run keeps one ledger per unit (:attr:`PrivacyLedger.unit`).

Threat models.  A release made through secure aggregation (FedSC with
``secure_aggregation``) has two guarantees: one while secure aggregation holds (the
server sees only sums, the noise of the other contributors protects each summand) and a
weaker fallback if it is broken (each summand is seen with its own noise alone).  The
caller records each such release twice, once per model (``threat="secagg"`` and
``threat="fallback"``); releases seen in the clear have ``threat="any"`` and count in
both.  :meth:`PrivacyLedger.epsilon` and :meth:`PrivacyLedger.view` select a model (the
fallback by default: the conservative answer), and the two entries of one release are
never composed with each other.  A secure sum that was aborted (too few contributors:
nothing released) is noted with :meth:`PrivacyLedger.record_aborted`.

Noise laws.  A release is Gaussian unless its ``law`` says otherwise
(:data:`~fedspectral.privacy.mechanism.LAWS`; ``sigma`` is then the law's noise scale, e.g.
Laplace's b).  Every release enters the accountants as the dp-accounting event of its law
(:func:`~fedspectral.privacy.mechanism.law_event`), so the RDP and PLD accountants compose
any mix of laws with no code per law; the closed form and the analytic accountant are
Gaussian results and refuse another law by name.  A release is made by a mechanism object
(:mod:`fedspectral.privacy.mechanism`), whose ``entry`` is the ledger's record.

Sampled noise.  A release drawn by the secure source with its number of values recorded
(:attr:`Release.sampler_tv`) is within a total variation of its exact law;
:func:`epsilon_of_releases` charges their sum to δ (:func:`.discrete_gaussian.sampled_epsilon`).

Numerical domain (constants of :mod:`fedspectral.privacy.composition`, where the events
are composed).  RDP uses dp-accounting's orders extended up to :math:`2^{26}` (needed
below ε ≈ 0.05); a noise multiplier above ``Z_CAP`` (1e8) is accounted as ``Z_CAP`` (ε
is decreasing in z, so this is an upper bound and avoids overflow).  PLD uses a
value-discretisation interval of at least 1e-4, widened so that its grid holds about
``PLD_GRID`` points (pessimistic estimate, so still an upper bound on ε; calibration
searches on a 1e-3 grid); beyond an RDP estimate of ``PLD_MAX_EPSILON`` (1e3) it refuses
with a ``ValueError``.  PLD is defined for δ >= ``PLD_MIN_DELTA`` (1e-15) only
(dp-accounting truncates each Gaussian's privacy loss at a tail mass of about e^-50 and
counts it as δ, so smaller δ would read as ε = inf); :func:`accountants_at` says which
accountants a report can run at a δ.  Every other accountant, and the calibrations,
work down to the smallest float δ (``5e-324``).  A noise multiplier below ``Z_MIN``
(1e-150: ε beyond about 5e299, no privacy at all) is refused with a ``ValueError``
naming it; an accountant that returns a non-finite ε for finite noise raises a
``ValueError`` rather than reporting inf.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import dp_accounting

from fedspectral.checks import check_choice, check_int, check_real, describe
from fedspectral.kinds import (
    ACCOUNTANTS,
    ANALYTIC,
    CLOSED_FORM,
    PLD,
    RDP,
    RELATIONS,
    REPORTED,
)
from fedspectral.privacy.composition import (
    LAWS,
    PLD_MIN_DELTA,
    Z_CAP,
    Groups,
    check_z_min,
    epsilon_of_groups,
    law_event,
)

# the names this module had before the composition moved out, still importable from here
from fedspectral.privacy.composition import RDP_ORDERS as RDP_ORDERS  # noqa: I001
from fedspectral.privacy.composition import Z_MIN as Z_MIN
from fedspectral.privacy.composition import gaussian_event as gaussian_event
from fedspectral.privacy.composition import pld_interval as pld_interval
from fedspectral.privacy.discrete_gaussian import MECHANISM as GRID
from fedspectral.privacy.discrete_gaussian import TV_PER_VALUE, sampled_epsilon
from fedspectral.privacy.validate import check_release_numbers, check_release_text

NEIGHBOURING = RELATIONS
UNITS = ("sample", "client")
#: threat-model tags of a release (module docstring); epsilon() selects one of THREATS
THREAT_TAGS = ("any", "secagg", "fallback")
THREATS = ("secagg", "fallback")


def accountants_at(
    delta: float, accountants: tuple[str, ...] = REPORTED
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The ``accountants`` defined at ``delta`` and, for each one left out, why: PLD
    below ``PLD_MIN_DELTA`` (the others are defined on all of (0, 1)).  Reports use it so
    that a small δ leaves out PLD with a reason instead of refusing the run."""
    delta = _check_delta(delta)
    for a in accountants:
        check_choice("accountant", a, ACCOUNTANTS)
    skipped = {}
    if PLD in accountants and delta < PLD_MIN_DELTA:
        skipped[PLD] = (
            f"not reported: the PLD accountant resolves delta >= "
            f"{PLD_MIN_DELTA:g} and delta={delta!r}"
        )
    return tuple(a for a in accountants if a not in skipped), skipped


@dataclass(frozen=True)
class Release:
    """One (possibly self-composed) release by one party: ``count`` draws of noise of scale
    ``sigma`` of ``law`` (default Gaussian: σ) on a quantity of ``sensitivity`` under
    ``neighbouring``; ``noise``: the noise mechanism that drew it, if recorded
    (:func:`fedspectral.privacy.noise.noise_mechanism`); ``values``: how many noised values
    one release drew, if recorded (with the secure source's mechanism they enter ε through
    :attr:`sampler_tv`).  Built by a mechanism object's ``entry``
    (:mod:`fedspectral.privacy.mechanism`) or :meth:`PrivacyLedger.record`."""

    party: str
    mechanism: str
    sigma: float
    sensitivity: float
    count: int = 1
    neighbouring: str = "replace_one"
    step: int | None = None
    unit: str = "sample"
    threat: str = "any"
    noise: str | None = None
    values: int | None = None
    law: str = "gaussian"

    def __post_init__(self) -> None:  # checked however it is built (the one place)
        check_release_numbers(self)
        check_release_text(self, NEIGHBOURING, UNITS, THREAT_TAGS)
        check_choice("law", self.law, LAWS)

    @property
    def event(self) -> dp_accounting.DpEvent:
        """Its dp-accounting event, of unit sensitivity (noise multiplier z), self-composed
        ``count`` times: what the accountants compose (no noise: a non-private event)."""
        if self.noise_multiplier == 0:
            return dp_accounting.NonPrivateDpEvent()
        return law_event(self.law, min(self.noise_multiplier, Z_CAP), self.count)

    @property
    def noise_multiplier(self) -> float:
        """:math:`z = \\sigma / \\Delta` (0 means no noise: infinite ε)."""
        return self.sigma / self.sensitivity

    @property
    def sampler_tv(self) -> float:
        """Total variation of the noise as sampled from its exact law: ``count * values *``
        :data:`~fedspectral.privacy.discrete_gaussian.TV_PER_VALUE` for the secure
        source's mechanism with ``values`` recorded, else 0
        (:mod:`fedspectral.privacy.discrete_gaussian`, "In the ledger")."""
        return (
            self.count * self.values * TV_PER_VALUE if self.noise == GRID and self.values else 0.0
        )


def _check_delta(delta: object) -> float:
    return check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


def _groups(releases: list[Release]) -> Groups:
    # group equal laws and noise multipliers into one self-composed event (faster, same
    # result); Gaussian ones keyed by z alone, as the calibrations key them
    groups: OrderedDict[Any, int] = OrderedDict()
    for r in releases:
        key = r.noise_multiplier if r.law == "gaussian" else (r.law, r.noise_multiplier)
        groups[key] = groups.get(key, 0) + r.count
    return groups


def _as_releases(releases: object) -> list[Release]:
    """``releases`` as a list of :class:`Release` (dicts as :meth:`PrivacyLedger.to_dict`
    writes them are checked as :meth:`PrivacyLedger.record` does); errors name the entry
    and the missing key."""
    if isinstance(releases, (str, bytes, dict)) or not hasattr(releases, "__iter__"):
        raise TypeError(f"releases must be a list of Release objects, got {describe(releases)}")
    out = []
    for i, r in enumerate(releases):
        if isinstance(r, Release):
            out.append(r)
        elif isinstance(r, dict):
            out.append(_release_from_dict(r, f"release {i}"))
        else:
            raise TypeError(
                f"release {i} must be a Release (or a dict of its fields), got {describe(r)}"
            )
    return out


def _release_from_dict(r: dict, where: str) -> Release:
    required = ("party", "mechanism", "sigma", "sensitivity")
    missing = [k for k in required if k not in r]
    if missing:
        raise ValueError(
            f"{where} is malformed: it lacks the key{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))} (a release needs "
            f"{', '.join(required)}): {describe(r)}"
        )
    unknown = sorted(map(str, set(r) - {f.name for f in fields(Release)}))
    if unknown:
        raise ValueError(
            f"{where} is malformed: it has the unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}: {describe(r)}"
        )
    try:
        return PrivacyLedger(unit=None).record(**r)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def epsilon_of_releases(releases: list[Release], delta: float, accountant: str = RDP) -> float:
    """ε(δ) of the composition of ``releases`` (all made by one party, in one unit).

    ``releases`` holds :class:`Release` objects (or dicts of their fields, checked as
    :meth:`PrivacyLedger.record` checks them: a missing key is named)."""
    delta = _check_delta(delta)
    check_choice("accountant", accountant, ACCOUNTANTS)
    releases = _as_releases(releases)
    if not releases:
        return 0.0
    units = sorted({r.unit for r in releases})
    if len(units) > 1:
        raise ValueError(
            f"releases of different units {units} do not compose (sample-level "
            f"and client-level guarantees are different); account them apart"
        )
    threats = {r.threat for r in releases} - {"any"}
    if len(threats) > 1:
        raise ValueError(
            "releases recorded for different threat models "
            f"{sorted(threats)} do not compose (they are two readings of the "
            f"same releases); select one with PrivacyLedger.view"
        )
    if any(r.noise_multiplier == 0 for r in releases):
        return math.inf
    check_z_min(r.noise_multiplier for r in releases)
    tv = math.fsum(r.sampler_tv for r in releases)
    if tv:  # the sampler's total variation enters delta (discrete_gaussian.sampled_epsilon)
        ideal = [replace(r, values=None) for r in releases]
        return sampled_epsilon(lambda d: epsilon_of_releases(ideal, d, accountant), delta, tv)
    laws = sorted({r.law for r in releases} - {"gaussian"})
    if laws and accountant in (CLOSED_FORM, ANALYTIC):
        raise ValueError(
            f"the {accountant} accountant composes Gaussian releases only; these include "
            f"{', '.join(laws)} releases: use accountant='rdp' or 'pld'"
        )
    if accountant == CLOSED_FORM:
        # T / (2 z^2) as T / 2 / z / z, ln(1/δ) as -ln δ: finite down to z = Z_MIN, δ = 5e-324
        rho = math.fsum(
            r.count / 2.0 / min(r.noise_multiplier, Z_CAP) / min(r.noise_multiplier, Z_CAP)
            for r in releases
        )
        eps = rho + 2.0 * math.sqrt(rho) * math.sqrt(-math.log(delta))
        if not math.isfinite(eps):
            raise ValueError(
                f"the closed-form epsilon overflows (rho = {rho:.4g}, delta={delta!r})"
            )
        return eps
    if accountant == ANALYTIC:
        if len(releases) != 1 or releases[0].count != 1:
            raise ValueError(
                f"the analytic accountant covers one release only, got "
                f"{sum(r.count for r in releases)} releases"
            )
        eps = float(
            dp_accounting.get_epsilon_gaussian(min(releases[0].noise_multiplier, Z_CAP), delta)
        )
        if not math.isfinite(eps):
            raise ValueError(
                f"the analytic accountant gave epsilon={eps} for noise multiplier "
                f"{releases[0].noise_multiplier!r}; use accountant='rdp'"
            )
        return eps
    return epsilon_of_groups(_groups(releases), delta, accountant)


class PrivacyLedger:
    """Record of every privatised release, per party, with ε computed by accountants.

    Parties hold disjoint data, so the guarantee of the whole system is the
    worst party's (parallel composition): :meth:`epsilon` with ``party=None``
    returns the maximum over parties.

    Parameters
    ----------
    unit : {"sample", "client", None}
        What one release protects.  A ledger with a unit refuses releases of the
        other unit (a run keeps one ledger per unit); ``None`` accepts both but
        never composes them for one party.

    Examples
    --------
    >>> led = PrivacyLedger()
    >>> _ = led.record("client-0", "fedsc/dp-calr", sigma=2.0, sensitivity=1.0, count=10)
    >>> round(led.epsilon(1e-5, accountant="pld"), 2)
    7.51
    """

    def __init__(self, unit: str | None = "sample") -> None:
        if unit is not None:
            check_choice("unit", unit, UNITS)
        self.unit = unit
        self._releases: list[Release] = []
        self._aborted: list[dict[str, Any]] = []
        #: the threat model of a :meth:`view` (``None``: the whole ledger)
        self._threat: str | None = None

    # -- recording ---------------------------------------------------------
    def record(
        self,
        party: str,
        mechanism: str,
        sigma: float,
        sensitivity: float,
        count: int = 1,
        neighbouring: str = "replace_one",
        step: int | None = None,
        unit: str | None = None,
        threat: str = "any",
        noise: str | None = None,
        values: int | None = None,
        law: str = "gaussian",
    ) -> Release:
        """Record ``count`` releases of noise scale ``sigma`` (of ``law``, default Gaussian)
        and sensitivity ``sensitivity``.

        ``unit`` defaults to the ledger's own (``"sample"`` for a ledger without one);
        ``threat`` is the threat model the entry holds under (module docstring);
        ``noise`` the noise mechanism that draws it and ``values`` how many values one
        release draws (:class:`Release`).
        """
        unit = unit if unit is not None else (self.unit or "sample")
        # every field checked where a Release is built (check_release_numbers,
        # check_release_text): here only what the ledger adds, its unit
        rel = Release(
            party,
            mechanism,
            sigma,
            sensitivity,
            count,
            neighbouring,
            step,
            unit,
            threat,
            noise,
            values,
            law,
        )
        if self.unit is not None and rel.unit != self.unit:
            raise ValueError(
                f"this ledger holds {self.unit}-level releases, got a {rel.unit}-level "
                f"one ({rel.mechanism!r}); keep one ledger per unit"
            )
        self._releases.append(rel)
        return rel

    def add(self, release: Release) -> Release:
        """Record ``release`` as it is (one recorded in another ledger, or a mechanism's
        ``entry``), through :meth:`record`'s checks: party, mechanism, noise scale, count,
        relation, step, unit, threat model, noise mechanism, values and law kept."""
        return self.record(**{f.name: getattr(release, f.name) for f in fields(Release)})

    def record_noise_multiplier(
        self,
        party: str,
        mechanism: str,
        noise_multiplier: float,
        count: int = 1,
        neighbouring: str = "add_remove",
        step: int | None = None,
        unit: str | None = None,
    ) -> Release:
        """Record releases given directly by their noise multiplier (sensitivity 1)."""
        z = check_real("noise_multiplier", noise_multiplier, low=0.0)
        return self.record(party, mechanism, z, 1.0, count, neighbouring, step, unit)

    def replace(self, old: Release, new: Release) -> None:
        """Replace the recorded release ``old`` (the same object) by ``new``."""
        for i, r in enumerate(self._releases):
            if r is old:
                self._releases[i] = new
                return
        raise ValueError(f"release {old!r} is not in this ledger")

    def remove(self, predicate: Any) -> int:
        """Remove every release for which ``predicate(release)`` is true; their number."""
        keep = [r for r in self._releases if not predicate(r)]
        n = len(self._releases) - len(keep)
        self._releases = keep
        return n

    def record_aborted(self, step: int, mechanism: str, parties: list[str], reason: str) -> None:
        """Note a secure sum aborted at ``step``: its ``parties`` released nothing under
        the secure-aggregation model (the fallback entries sent before stay)."""
        if not isinstance(parties, (list, tuple)) or not all(isinstance(p, str) for p in parties):
            raise TypeError(f"parties must be a list of strings, got {describe(parties)}")
        self._aborted.append(
            {
                "step": check_int("step", step),
                "mechanism": str(mechanism),
                "parties": [str(p) for p in parties],
                "reason": str(reason),
            }
        )

    @property
    def aborted(self) -> list[dict[str, Any]]:
        """The aborted secure sums (:meth:`record_aborted`)."""
        return [dict(a) for a in self._aborted]

    def view(self, threat: str = "fallback") -> PrivacyLedger:
        """A ledger of the releases that hold under ``threat`` (``"secagg"`` or
        ``"fallback"``): those tagged with it and those seen in the clear."""
        check_choice("threat", threat, THREATS)
        out = PrivacyLedger(unit=self.unit)
        out._releases = [r for r in self._releases if r.threat in ("any", threat)]
        out._aborted = [dict(a) for a in self._aborted]
        out._threat = threat
        return out

    def merge(self, other: PrivacyLedger) -> None:
        """Append all releases of ``other`` (refused when their units differ)."""
        if not isinstance(other, PrivacyLedger):
            raise TypeError(f"other must be a PrivacyLedger, got {type(other).__name__}")
        if other is self:
            raise ValueError(
                "cannot merge a ledger into itself: every release would count "
                "twice (merge the ledgers of other parties or runs)"
            )
        if self.unit is not None:
            bad = [r for r in other._releases if r.unit != self.unit]
            if bad:
                raise ValueError(
                    f"cannot merge {bad[0].unit}-level releases into a {self.unit}-level ledger"
                )
        self._releases.extend(other._releases)
        self._aborted.extend(dict(a) for a in other._aborted)

    # -- queries -----------------------------------------------------------
    @property
    def releases(self) -> list[Release]:
        return list(self._releases)

    @property
    def parties(self) -> list[str]:
        return list(OrderedDict.fromkeys(r.party for r in self._releases))

    def count(self, party: str | None = None) -> int:
        return sum(r.count for r in self._releases if party is None or r.party == party)

    def epsilon(
        self,
        delta: float,
        party: str | None = None,
        accountant: str = RDP,
        unit: str | None = None,
        threat: str | None = None,
    ) -> float:
        """ε(δ) of ``party`` (or the maximum over all parties when ``party`` is None).

        ``unit`` restricts to the releases of that unit; a party with releases of
        both units and ``unit=None`` raises ``ValueError`` (nothing is composed
        across units).  ``threat`` selects the threat model (module docstring;
        releases seen in the clear count in both); default: a :meth:`view`'s own, else
        the fallback.  A view asked for the other threat model raises ``ValueError``
        (its releases of that model were left out: its ε would be too small).
        """
        delta = _check_delta(delta)
        check_choice("accountant", accountant, ACCOUNTANTS)
        if threat is None:
            threat = self._threat or "fallback"
        check_choice("threat", threat, THREATS)
        if self._threat is not None and threat != self._threat:
            raise ValueError(
                f"this ledger is a view of the {self._threat!r} threat model; its epsilon "
                f"under {threat!r} leaves out releases: ask the whole ledger"
            )
        if unit is not None:
            check_choice("unit", unit, UNITS)
        rels = [
            r
            for r in self._releases
            if (unit is None or r.unit == unit) and r.threat in ("any", threat)
        ]
        if party is not None:
            if party not in self.parties:
                raise ValueError(f"unknown party {party!r}; known: {self.parties[:10]}")
            return epsilon_of_releases([r for r in rels if r.party == party], delta, accountant)
        if not rels:
            return 0.0
        parties = list(OrderedDict.fromkeys(r.party for r in rels))
        return max(
            epsilon_of_releases([r for r in rels if r.party == p], delta, accountant)
            for p in parties
        )

    def report(
        self,
        delta: float,
        accountants: tuple[str, ...] = REPORTED,
        per_party: bool = False,
    ) -> dict[str, Any]:
        """ε by each accountant (max over parties, and per party if asked).

        An accountant that cannot cover the releases (PLD beyond its range, analytic
        with several releases) gives ``None`` and its reason under
        ``errors[accountant]``.
        """
        delta = _check_delta(delta)
        for a in accountants:
            check_choice("accountant", a, ACCOUNTANTS)
        out: dict[str, Any] = {
            "delta": delta,
            "releases": self.count(),
            "parties": len(self.parties),
            "unit": self.unit,
        }
        errors: dict[str, str] = {}

        def safe(a: str, party: str | None = None) -> float | None:
            try:
                return self.epsilon(delta, party, a)
            except ValueError as exc:
                errors[a] = str(exc)
                return None

        for a in accountants:
            out[f"epsilon_{a}"] = safe(a)
        if per_party:
            out["per_party"] = {
                p: {f"epsilon_{a}": safe(a, p) for a in accountants} for p in self.parties
            }
        if errors:
            out["errors"] = errors
        return out

    # -- persistence -------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        rels = [  # unrecorded noise and values, and the default law: omitted
            {
                k: v
                for k, v in asdict(r).items()
                if (v is not None or k not in ("noise", "values"))
                and not (k == "law" and v == "gaussian")
            }
            for r in self._releases
        ]
        out: dict[str, Any] = {"unit": self.unit, "releases": rels}  # unrecorded noise: omitted
        if self._aborted:
            out["aborted"] = [dict(a) for a in self._aborted]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        """The ledger of :meth:`to_dict`; every release is checked as :meth:`record` does.
        Errors name the key (``unit``, ``releases``, ``aborted``) or the entry at fault."""
        if not isinstance(data, dict):
            raise TypeError(f"ledger data must be a dict, got {type(data).__name__}")
        unknown = sorted(map(str, set(data) - {"unit", "releases", "aborted"}))
        if unknown:
            raise ValueError(
                f"ledger data has unknown keys {unknown} (expected unit, releases, aborted)"
            )
        unit = data.get("unit", "sample")
        if unit is not None and (not isinstance(unit, str) or unit not in UNITS):
            raise ValueError(
                f"ledger key 'unit' must be one of {UNITS} or None, got {describe(unit)}"
            )
        led = cls(unit=unit)
        for key in ("releases", "aborted"):
            if not isinstance(data.get(key, []), list):
                raise TypeError(f"ledger key {key!r} must be a list, got {describe(data[key])}")
        for i, r in enumerate(data.get("releases", [])):
            if not isinstance(r, dict):
                raise TypeError(f"ledger release {i} is malformed (not a dict): {describe(r)}")
            rel = _release_from_dict(r, f"ledger release {i}")
            if led.unit is not None and rel.unit != led.unit:
                raise ValueError(
                    f"ledger release {i}: a {rel.unit}-level release in a {led.unit}-level ledger"
                )
            led._releases.append(rel)
        for i, a in enumerate(data.get("aborted", [])):
            if not isinstance(a, dict) or set(a) != {"step", "mechanism", "parties", "reason"}:
                raise ValueError(
                    f"ledger aborted entry {i} is malformed (keys step, "
                    f"mechanism, parties, reason): {describe(a)}"
                )
            try:
                led.record_aborted(a["step"], a["mechanism"], a["parties"], a["reason"])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"ledger aborted entry {i}: {exc}") from exc
        return led

    def __len__(self) -> int:
        return len(self._releases)

    def __repr__(self) -> str:
        return (
            f"PrivacyLedger(unit={self.unit!r}, parties={len(self.parties)}, "
            f"releases={self.count()})"
        )
