r"""Privacy releases and secure sums in a round: what the round loop
(:func:`fedspectral.fed.protocol.run_round`) records in the ledger, and how it reduces a
phase whose replies the server may only see summed.

Secure sums
-----------
A phase of kind ``"secure_sum"`` (FedSC with ``secure_aggregation``) is one whose
replies the server must never see one by one, only their sum.  The round loop asks the
method for a :class:`SecureSumSpec` (which reply array is summed, its length and bound,
the fewest contributors), hands the payloads to ``transport.secure_sum(phase, rnd,
payloads, spec)`` and gets back ``(sum, contributors, failures)``; with fewer than
``spec.min_contributors`` contributors (or ``sum`` None) the sum is *aborted*: nothing
is released, the ledger notes it (:meth:`PrivacyLedger.record_aborted`), and the method
folds nothing in.  The method then receives the sum through
``Method.aggregate_secure`` (:func:`secure_phase`).  :func:`in_process_secure_sum` is
the in-process reduction (exact float64, or quantised to integers modulo :math:`2^k`,
or the five-stage exchange of :mod:`fedspectral.fed.secagg`); a transport without a
``secure_sum`` attribute refuses such a phase.

Privacy releases
----------------
A client that releases a privatised quantity says so in its reply's ``config``
with the keys of :data:`RELEASE_KEYS` (``release.sigma``,
``release.sensitivity``, ``release.mechanism``, ``release.neighbouring`` and
optionally ``release.count``; :func:`release_config`).  The round loop records each
such release in the run's :class:`~fedspectral.privacy.PrivacyLedger` with
``party = cid`` and ``step = rnd`` (:func:`record_release`) -- so accounting never
depends on the runner.

A release counts when it is computed and sent, whether or not its reply arrives.
The server cannot tell a reply lost after the release from a client that never
released, so a method that knows what its participants will release
(``Method.planned_release``) has each of them recorded *when the request is sent*; a
reply that reports less noise than planned replaces the planned entry
(:func:`reconcile_release`).  Before sending, the round loop also leaves out of the
phase every participant whose planned release would take it past the method's
requested budget (``Method.release_budget``, :func:`over_budget`): sharing stops
before a target ε is passed, and the round lists them under ``budget_stopped``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedspectral.checks import check_choice
from fedspectral.fed.records import RELEASE_KEYS, PhaseRecord, PhaseRelease, Scalar
from fedspectral.kinds import PhaseKind
from fedspectral.privacy import PrivacyLedger

if TYPE_CHECKING:
    from fedspectral.fed.protocol import Method, Payload, ServerState

#: how :func:`in_process_secure_sum` reduces the summands
SECURE_SUM_MODES = ("exact", "quantised", "secagg")

#: relative slack of the budget check: a release calibrated to spend exactly the rest of a
#: budget comes back from the ledger's accountant at the budget up to numerical error (the
#: calibration composes on its own, coarser PLD grid, ``PLD_CALIBRATION_INTERVAL``, and the
#: ledger recomputes ε from its records); only more than this is over budget
BUDGET_RTOL = 1e-6

__all__ = [
    "RELEASE_KEYS",
    "SECURE_SUM_MODES",
    "PhaseRelease",
    "SecureSumSpec",
    "in_process_secure_sum",
    "over_budget",
    "reconcile_release",
    "record_release",
    "release_config",
    "secure_phase",
]


def release_config(
    sigma: float,
    sensitivity: float,
    mechanism: str,
    neighbouring: str = "zero_out",
    count: int = 1,
    threat: str = "any",
) -> dict[str, Scalar]:
    """The reply-config entries reporting one privatised release (see module docstring;
    ``threat``: the threat model the entry holds under, :mod:`fedspectral.privacy.accounting`):
    :meth:`PhaseRelease.config`."""
    return PhaseRelease(
        str(mechanism), float(sigma), float(sensitivity), str(neighbouring), int(count), threat
    ).config()


@dataclass(frozen=True)
class SecureSumSpec:
    """What a ``secure_sum`` phase sums (module docstring).

    Parameters
    ----------
    key : str
        The array of each client's reply that is summed (a float vector).
    length : int
        Its number of entries.
    min_contributors : int
        The guaranteed minimum :math:`m_{min}`: fewer contributors abort the sum.
    bound : float
        Every entry of every summand has magnitude at most ``bound``; a client whose
        summand exceeds it refuses to send it (it fails), so that ``len(payloads)``
        summands quantised on ``bits`` bits can never wrap the modular sum.
    bits : int
        Width of the integers the sum is carried in when quantised (8..64).
    mechanism : str
        The release's name, for the ledger's note of an aborted sum.
    """

    key: str
    length: int
    min_contributors: int
    bound: float
    bits: int = 64
    mechanism: str = ""


def in_process_secure_sum(
    summands: Mapping[str, np.ndarray],
    spec: SecureSumSpec,
    roster: Sequence[str],
    mode: str = "exact",
    session: bytes = b"",
) -> tuple[np.ndarray | None, list[str], dict[str, str]]:
    """Reduce the summands of one secure sum in process: ``(sum, contributors, failures)``.

    ``summands``: ``{cid: float vector}`` of the clients that answered (``roster``: every
    addressed client).  ``mode``: ``"exact"`` (float64 sum), ``"quantised"`` (each summand
    rounded to ``round(s x)`` modulo :math:`2^{bits}` with ``s`` from
    :func:`fedspectral.fed.secagg_primitives.quantisation_scale` for ``len(roster)``
    clients, summed, mapped back), ``"secagg"`` (quantised, then the five stages of
    :mod:`fedspectral.fed.secagg` with threshold ``spec.min_contributors``; a missing
    client is a dropout).  A summand out of ``spec.bound`` is refused (a failure).  The sum
    is ``None`` when fewer than ``spec.min_contributors`` remain."""
    from fedspectral.fed import secagg  # lazy: pulls in cryptography

    # lazy: pulls in cryptography
    from fedspectral.fed.secagg_primitives import (
        QuantisationOverflow,
        dequantise,
        quantisation_scale,
        quantise,
    )
    from fedspectral.fed.secagg_server import secure_sum  # lazy: pulls in cryptography

    check_choice("secure sum mode", mode, SECURE_SUM_MODES)
    failures: dict[str, str] = {}
    ok: dict[str, np.ndarray] = {}
    scale = 1.0 if mode == "exact" else quantisation_scale(spec.bound, len(roster), spec.bits)
    for cid in roster:
        if cid not in summands:
            continue
        x = np.asarray(summands[cid], dtype=np.float64)
        if x.shape != (spec.length,):
            failures[cid] = f"ValueError: summand of shape {x.shape}, expected ({spec.length},)"
            continue
        try:  # the bound is checked in every mode: a client never sends an out-of-range value
            q = quantise(x, scale, spec.bound, spec.bits)
        except QuantisationOverflow as exc:
            failures[cid] = f"QuantisationOverflow: {exc}"
            continue
        ok[cid] = x if mode == "exact" else q
    if len(ok) < spec.min_contributors:
        return None, list(ok), failures
    if mode == "exact":
        total = np.zeros(spec.length, dtype=np.float64)
        for x in ok.values():
            total += x
        return total, list(ok), failures
    if mode == "quantised":
        acc = np.zeros(spec.length, dtype=np.uint64)
        for q in ok.values():
            acc = acc + q
        return dequantise(acc, scale, spec.bits), list(ok), failures
    params = secagg.SecAggParams(
        tuple(roster), spec.min_contributors, spec.length, spec.bits, session
    )
    try:
        acc, contributors = secure_sum(ok, params)
    except secagg.SecAggAborted as exc:
        return None, [], {**failures, "*": f"SecAggAborted: {exc}"}
    return dequantise(acc, scale, spec.bits), list(contributors), failures


def secure_phase(
    method: Method,
    state: ServerState,
    rnd: int,
    phase: str,
    cids: Sequence[str],
    payloads: Mapping[str, Payload],
    transport: Any,
    ledger: Any,
    t0: float,
    t1: float,
) -> PhaseRecord:
    """One ``secure_sum`` phase: the transport's sum, the abort rule, the method's fold and
    the secure-model ledger entries (module docstring)."""
    spec = method.secure_sum_spec(phase, rnd, state, cids)
    reduce = getattr(transport, "secure_sum", None)
    if reduce is None:
        raise TypeError(
            f"phase {phase!r} of {method.name} is a secure sum, and this transport "
            f"({type(transport).__name__}) has no secure_sum: it cannot carry it"
        )
    total, contributors, failures = reduce(phase, rnd, dict(payloads), spec)
    t2 = time.perf_counter()
    got = set(contributors)
    contributors = [c for c in cids if c in got]
    failures = {str(c): str(v) for c, v in failures.items()}
    for c in cids:
        if c not in got and c not in failures:
            failures[c] = "no contribution"
    aborted = total is None or len(contributors) < spec.min_contributors
    if aborted:
        reason = (
            f"{len(contributors)} contributors, fewer than min_contributors={spec.min_contributors}"
        )
        if ledger is not None:
            ledger.record_aborted(int(rnd), spec.mechanism or method.name, list(cids), reason)
        total, contributors = None, []
    else:
        total = np.asarray(total, dtype=np.float64)
        if total.shape != (spec.length,) or not np.isfinite(total).all():
            raise ValueError(
                f"the secure sum of phase {phase!r} returned "
                f"{total.shape} values (finite: {bool(np.isfinite(total).all())}),"
                f" expected {spec.length} finite numbers"
            )
    metrics = method.aggregate_secure(phase, rnd, state, total, contributors)
    if not aborted and ledger is not None:
        entries = method.secure_model_releases(phase, state)
        mechs = {rel.mechanism for _, _, rel in entries}
        ledger.remove(lambda r: r.threat == "secagg" and r.mechanism in mechs)
        for party, step, rel in entries:
            record_release(ledger, party, rel, step)
    t3 = time.perf_counter()
    return PhaseRecord(
        kind=PhaseKind.SECURE_SUM,
        participants=tuple(cids),
        contributors=tuple(contributors),
        aborted=bool(aborted),
        failures=failures,
        bytes_down={c: payloads[c].nbytes() for c in cids},
        # what travels up: one integer vector of spec.bits per contributor
        bytes_up={c: int(spec.length * math.ceil(spec.bits / 8)) for c in contributors},
        seconds=t3 - t0,
        seconds_clients=t2 - t1,
        metrics={k: float(v) for k, v in metrics.items()},
    )


def record_release(
    ledger: Any, cid: str, release: PhaseRelease | Mapping[str, Any] | None, rnd: int
) -> Any:
    """Record ``release`` (a reply's or a planned one; the ``release.*`` keys of a config
    are parsed here, the one place besides :class:`~fedspectral.fed.protocol.Payload`)
    as ``cid``'s in round ``rnd``; returns the ledger entry (``None``: no release)."""
    rel = (
        release
        if isinstance(release, PhaseRelease) or release is None
        else (PhaseRelease.from_config(release))
    )
    if rel is None:
        return None
    if not math.isfinite(rel.sigma) or not math.isfinite(rel.sensitivity):
        raise ValueError(
            f"client {cid!r} reported a release with sigma={rel.sigma!r}, "
            f"sensitivity={rel.sensitivity!r}"
        )
    return ledger.record(
        cid,
        rel.mechanism,
        sigma=rel.sigma,
        sensitivity=rel.sensitivity,
        count=rel.count,
        neighbouring=rel.neighbouring,
        step=int(rnd),
        threat=rel.threat,
    )


def reconcile_release(
    ledger: Any, cid: str, entry: Any, release: PhaseRelease | Mapping[str, Any], rnd: int
) -> None:
    """A reply reports the release recorded at send time as ``entry``: keep the entry
    unless the reply reports less noise (a smaller noise multiplier) or more releases."""
    tmp = PrivacyLedger(unit=None)
    rep = record_release(tmp, cid, release, rnd)
    if rep.noise_multiplier < entry.noise_multiplier or rep.count > entry.count:
        ledger.replace(entry, rep)


def over_budget(method: Method, ledger: Any, planned: Mapping[str, Any]) -> list[str]:
    """Participants whose planned release would take them past ``method.release_budget()``."""
    budget = method.release_budget()
    if budget is None or ledger is None:
        return []

    eps, delta, accountant = budget
    out = []
    for cid, rel in planned.items():
        if rel is None:
            continue
        trial = PrivacyLedger(unit=None)
        for r in ledger.releases:
            if r.party == cid:
                trial.add(r)
        record_release(trial, cid, rel, 0)
        if trial.epsilon(delta, cid, accountant) > eps * (1 + BUDGET_RTOL):
            out.append(cid)
    return out
