"""What a round leaves behind, as frozen dataclasses serialised to plain JSON in one place.

:func:`~fedspectral.fed.protocol.run_round` returns a :class:`RoundRecord` holding one
:class:`PhaseRecord` per phase that ran; the runner adds what it measures after the
phases (``epsilon_rdp``, the evaluation, ``seconds_round``) with
:meth:`RoundRecord.with_values`.  A method plans, and a client's reply reports, each
privatised release as a :class:`PhaseRelease` (the ``release.*`` keys of its ``config``).

Each class has ``to_dict`` / ``from_dict`` (``config`` / ``from_config`` for the
release): the dict is what ``results.json``, ``rounds.csv``, a checkpoint and a callback
log see, with the key names and order runs have always written, and ``from_dict`` is the
check of a loaded one -- a malformed record is a ``ValueError`` saying which round and
what is wrong, before anything uses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from fedspectral.checks import check_real
from fedspectral.kinds import PHASE_KINDS, PhaseKind, Relation
from fedspectral.privacy.mechanism import Gaussian
from fedspectral.privacy.validate import check_count

if TYPE_CHECKING:
    from fedspectral.privacy.accounting import Release

__all__ = ["RELEASE_KEYS", "PhaseRecord", "PhaseRelease", "RoundRecord", "Scalar"]

Scalar = int | float | str | bool

#: reply-config keys through which a client reports a privatised release
RELEASE_KEYS = (
    "release.sigma",
    "release.sensitivity",
    "release.mechanism",
    "release.neighbouring",
    "release.count",
    "release.threat",
)


def _number(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _bad_value(key: str, x: Any) -> str | None:
    """Why ``x``, the value of ``key`` in a record, is not one a run writes (``None``: it
    is): numbers are finite -- an ``epsilon*`` may be ``+inf`` (releases without noise)
    -- never NaN; otherwise ``None``, a bool, a string, or a mapping or list of such
    (a nested value takes its top key's name).  A NaN read from a checkpoint would reach
    ``results.json`` as if measured."""
    if x is None or isinstance(x, bool | str):
        return None
    if isinstance(x, int | float):
        if math.isfinite(x) or (x == math.inf and key.startswith("epsilon")):
            return None
        return f"{key}={x!r} (not a finite number)"
    if isinstance(x, Mapping):
        return next((w for v in x.values() if (w := _bad_value(key, v))), None)
    if isinstance(x, list | tuple):
        return next((w for v in x if (w := _bad_value(key, v))), None)
    return f"{key} of type {type(x).__name__}"


def _bad_values(values: Mapping[str, Any]) -> str | None:
    return next((w for k, v in values.items() if (w := _bad_value(str(k), v))), None)


def _str_list(x: Any) -> TypeGuard[list[str] | tuple[str, ...]]:
    return isinstance(x, list | tuple) and all(isinstance(c, str) for c in x)


def _counts(x: Any) -> bool:
    return isinstance(x, Mapping) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in x.items()
    )


# ------------------------------------------------------------------------------ release
@dataclass(frozen=True)
class PhaseRelease:
    """One release a client makes when it answers a phase: as its method plans it
    (``Method.releases(phase, n)``) and as its reply reports it (the ``release.*`` keys of
    the reply's ``config``): a Gaussian mechanism of standard deviation ``sigma`` on a
    quantity of L2 ``sensitivity`` under the ``neighbouring`` relation.

    ``mechanism`` names the release in the ledger; ``count``: how many such releases;
    ``threat``: the threat model the entry holds under (``"any"``, or ``"secagg"`` /
    ``"fallback"``: :mod:`fedspectral.privacy.accounting`); ``values``: how many noised
    values one release draws (``None``: not recorded; not part of the reply's report).
    :meth:`config` / :meth:`from_config` are the reply-config report, :meth:`entry` the
    ledger's :class:`~fedspectral.privacy.accounting.Release` of one party.
    """

    mechanism: str
    sigma: float
    sensitivity: float
    neighbouring: str = Relation.ZERO_OUT.value
    count: int = 1
    threat: str = "any"
    values: int | None = None

    def config(self) -> dict[str, Scalar]:
        """The ``release.*`` entries of a payload's config (:data:`RELEASE_KEYS`;
        ``release.threat`` only when not ``"any"``)."""
        out: dict[str, Scalar] = {
            "release.sigma": float(self.sigma),
            "release.sensitivity": float(self.sensitivity),
            "release.mechanism": str(self.mechanism),
            "release.neighbouring": str(self.neighbouring),
            "release.count": int(self.count),
        }
        if self.threat != "any":
            out["release.threat"] = str(self.threat)
        return out

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> PhaseRelease | None:
        """The release a payload's ``config`` reports (``None`` without
        ``release.sigma``); absent optional keys take the defaults above
        (``release.mechanism``: ``"gaussian"``)."""
        if "release.sigma" not in cfg:
            return None

        def text(key: str, default: str) -> str:  # a name, never a number made text
            v = cfg.get(key, default)
            if not isinstance(v, str):
                raise TypeError(f"{key} must be text, got {type(v).__name__}")
            return v

        def real(key: str) -> float:  # a bool, text or NaN is no noise scale
            return check_real(key, cfg[key], low=0.0, allow_inf=True)

        return cls(
            mechanism=text("release.mechanism", "gaussian"),
            sigma=real("release.sigma"),
            sensitivity=real("release.sensitivity"),
            neighbouring=text("release.neighbouring", Relation.ZERO_OUT.value),
            count=check_count("release.count", cfg.get("release.count", 1), low=1),
            threat=text("release.threat", "any"),
        )

    @classmethod
    def of(
        cls,
        mechanism: Gaussian,
        name: str,
        *,
        count: int = 1,
        threat: str = "any",
        values: int | None = None,
    ) -> PhaseRelease:
        """The release of the mechanism object ``mechanism`` (its σ, sensitivity and
        relation), named ``name`` in the ledger."""
        return cls(
            str(name),
            float(mechanism.sigma),
            float(mechanism.sensitivity),
            mechanism.neighbouring,
            int(count),
            threat,
            values,
        )

    @property
    def gaussian(self) -> Gaussian:
        """The release's mechanism object (:class:`~fedspectral.privacy.mechanism.Gaussian`):
        a handler draws its noise from it (``gaussian.add``), the ledger's entry is its
        :meth:`entry`."""
        return Gaussian(float(self.sigma), float(self.sensitivity), self.neighbouring)

    def entry(self, party: str, step: int, noise: str | None = None) -> Release:
        """The ledger's :class:`~fedspectral.privacy.accounting.Release` of ``party`` in
        round ``step`` (``noise``: the noise mechanism that draws it), from the mechanism
        object."""
        return self.gaussian.entry(
            party,
            self.mechanism,
            int(step),
            count=self.count,
            threat=self.threat,
            noise=noise,
            values=self.values,
        )


# ------------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class PhaseRecord:
    """One phase of a round.

    Attributes
    ----------
    kind : PhaseKind
        What the phase was (``train``, ``query``, ``secure_sum``).
    participants : tuple of str
        The clients asked, in the method's order.
    failures : mapping
        ``{cid: why}`` of the participants whose reply (or contribution) is missing.
    bytes_down, bytes_up : mapping
        ``{cid: bytes}`` sent to each participant and received from each that answered.
    seconds, seconds_clients : float
        The phase's wall time (transport and aggregation) and the transport's part.
    metrics : mapping
        The method's aggregation metrics.
    contributors : tuple of str or None
        A secure sum's contributors (``None``: not a secure sum that ran).
    aborted : bool
        Whether that secure sum was aborted (meaningful with ``contributors``).
    releases_sent : int
        Releases recorded at send time (0: none, not written).
    budget_stopped : tuple of str
        Participants left out because their release would pass the budget (written only
        when some were).
    """

    kind: PhaseKind
    participants: tuple[str, ...]
    failures: Mapping[str, str]
    bytes_down: Mapping[str, int]
    bytes_up: Mapping[str, int]
    seconds: float
    seconds_clients: float
    metrics: Mapping[str, float]
    contributors: tuple[str, ...] | None = None
    aborted: bool = False
    releases_sent: int = 0
    budget_stopped: tuple[str, ...] = ()

    def answered(self) -> list[str]:
        """The clients whose replies the phase aggregated: a secure sum's contributors,
        else the participants that did not fail."""
        if self.contributors is not None:
            return list(self.contributors)
        return [c for c in self.participants if c not in self.failures]

    def to_dict(self) -> dict[str, Any]:
        """The phase as ``results.json`` holds it (key order as always written)."""
        out: dict[str, Any] = {"kind": self.kind.value, "participants": list(self.participants)}
        if self.contributors is not None:
            out["contributors"] = list(self.contributors)
            out["aborted"] = bool(self.aborted)
        stopped_first = not self.participants and bool(self.budget_stopped)
        if stopped_first:  # every participant stopped: the phase ran no exchange
            out["budget_stopped"] = list(self.budget_stopped)
        out.update(
            failures=dict(self.failures),
            bytes_down=dict(self.bytes_down),
            bytes_up=dict(self.bytes_up),
            seconds=self.seconds,
            seconds_clients=self.seconds_clients,
            metrics=dict(self.metrics),
        )
        if self.releases_sent:
            out["releases_sent"] = self.releases_sent
        if self.budget_stopped and not stopped_first:
            out["budget_stopped"] = list(self.budget_stopped)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "a phase") -> PhaseRecord:
        """The phase of :meth:`to_dict`, checked (``ValueError`` naming ``where``)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} is a {type(d).__name__}, not a mapping")  # noqa: TRY004
        kind = d.get("kind")
        if kind not in PHASE_KINDS:
            raise ValueError(f"{where} has the kind {kind!r}, not one of {list(PhaseKind)}")
        bad = [
            k
            for k, ok in (
                ("participants", _str_list(d.get("participants"))),
                ("failures", isinstance(d.get("failures"), Mapping)),
                ("bytes_down", _counts(d.get("bytes_down"))),
                ("bytes_up", _counts(d.get("bytes_up"))),
                ("seconds", _number(d.get("seconds"))),
                ("seconds_clients", _number(d.get("seconds_clients"))),
                ("metrics", isinstance(d.get("metrics"), Mapping)),
                ("contributors", "contributors" not in d or _str_list(d["contributors"])),
                ("budget_stopped", _str_list(d.get("budget_stopped", []))),
                ("releases_sent", isinstance(d.get("releases_sent", 0), int)),
            )
            if not ok
        ]
        if bad:
            raise ValueError(f"{where} has no valid {', '.join(bad)}")
        why = _bad_values(d["metrics"])
        if why:
            raise ValueError(f"{where} has the metric {why}")
        contributors = d.get("contributors")
        return cls(
            kind=PhaseKind(kind),
            participants=tuple(d["participants"]),
            failures={str(c): str(v) for c, v in d["failures"].items()},
            bytes_down=dict(d["bytes_down"]),
            bytes_up=dict(d["bytes_up"]),
            seconds=d["seconds"],
            seconds_clients=d["seconds_clients"],
            metrics=dict(d["metrics"]),
            contributors=None if contributors is None else tuple(contributors),
            aborted=bool(d.get("aborted", False)),
            releases_sent=int(d.get("releases_sent", 0)),
            budget_stopped=tuple(d.get("budget_stopped", ())),
        )


# ------------------------------------------------------------------------------- rounds
_ROUND_KEYS = (
    "round",
    "sampled",
    "phases",
    "bytes_down",
    "bytes_up",
    "bytes_down_total",
    "bytes_up_total",
)


@dataclass(frozen=True)
class RoundRecord:
    """One round: its sampled clients, its phases, the bytes per client, and what the
    runner measured after the phases.

    Attributes
    ----------
    round : int
        The round (from 1).
    sampled : tuple of str
        The clients sampled for it.
    phases : mapping
        ``{phase: PhaseRecord}`` of the phases that ran, in the method's order.
    bytes_down, bytes_up : mapping
        ``{cid: bytes}`` summed over the phases.
    values : mapping
        What the runner added after the phases, in the order added: ``epsilon_rdp`` every
        round; at an evaluation round the KNN accuracies, the method's metrics,
        ``seconds_eval``, ``epsilon_pld`` and ``epsilon_clients``; ``seconds_round`` last.
        JSON-able values (numbers, ``None``, nested mappings).
    """

    round: int
    sampled: tuple[str, ...]
    phases: Mapping[str, PhaseRecord]
    bytes_down: Mapping[str, int]
    bytes_up: Mapping[str, int]
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bytes_down_total(self) -> int:
        return int(sum(self.bytes_down.values()))

    @property
    def bytes_up_total(self) -> int:
        return int(sum(self.bytes_up.values()))

    @property
    def seconds_round(self) -> float:
        """The round's wall time (0.0 before the runner measured it)."""
        return float(self.values.get("seconds_round", 0.0))

    def metric(self, phase: str, key: str) -> float | None:
        """Metric ``key`` of ``phase`` (``None`` when that phase did not run or has none)."""
        ph = self.phases.get(phase)
        return None if ph is None else ph.metrics.get(key)

    def train_loss(self) -> float | None:
        """The round's mean training loss: the ``train_loss`` metric of its first phase of
        kind train that has one (``None``: no such phase ran), whatever the phase's name."""
        for ph in self.phases.values():
            if ph.kind == PhaseKind.TRAIN and "train_loss" in ph.metrics:
                return ph.metrics["train_loss"]
        return None

    def with_values(self, **values: Any) -> RoundRecord:
        """This record with ``values`` added (after those it holds)."""
        return replace(self, values={**self.values, **values})

    def to_dict(self) -> dict[str, Any]:
        """The round as ``results.json`` and a checkpoint hold it (key order as always
        written)."""
        out: dict[str, Any] = {
            "round": self.round,
            "sampled": list(self.sampled),
            "phases": {name: ph.to_dict() for name, ph in self.phases.items()},
            "bytes_down": dict(self.bytes_down),
            "bytes_up": dict(self.bytes_up),
            "bytes_down_total": self.bytes_down_total,
            "bytes_up_total": self.bytes_up_total,
        }
        out.update(self.values)
        return out

    @classmethod
    def from_dict(
        cls, d: Any, rnd: int | None = None, ids: Sequence[str] | None = None
    ) -> RoundRecord:
        """The round of :meth:`to_dict`, checked: of round ``rnd`` (when given), naming
        only clients of ``ids`` (when given), with valid phases, byte counts whose totals
        agree, and ``seconds_round``; else ``ValueError`` saying what is wrong."""
        where = f"the record of round {rnd if rnd is not None else '?'}"
        if not isinstance(d, Mapping):
            raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
                f"{where} is a {type(d).__name__}, not a mapping"
            )
        if rnd is not None and d.get("round") != rnd:
            raise ValueError(f"{where} says round {d.get('round')!r}")
        sampled = d.get("sampled")
        if not _str_list(sampled):
            raise ValueError(f"{where} has no list of sampled client ids")
        if ids is not None:
            unknown = sorted(set(sampled) - set(ids))
            if unknown:
                raise ValueError(
                    f"{where} names client(s) {unknown[:3]} that this config does not have"
                )
        phases = d.get("phases")
        if not isinstance(phases, Mapping):
            raise ValueError(f"{where} has no valid phases")  # noqa: TRY004
        parsed = {
            str(n): PhaseRecord.from_dict(ph, f"phase {n!r} of {where}") for n, ph in phases.items()
        }
        for key in ("bytes_down", "bytes_up"):
            if not _counts(d.get(key)) or d.get(f"{key}_total") != sum(d[key].values()):
                raise ValueError(f"{where} has no valid {key} (per client, and their total)")
        if not _number(d.get("seconds_round")):
            raise ValueError(f"{where} lacks the number seconds_round")
        values = {k: v for k, v in d.items() if k not in _ROUND_KEYS}
        why = _bad_values(values)
        if why:
            raise ValueError(f"{where} has the value {why}")
        return cls(
            round=int(d["round"]),
            sampled=tuple(sampled),
            phases=parsed,
            bytes_down=dict(d["bytes_down"]),
            bytes_up=dict(d["bytes_up"]),
            values=values,
        )
