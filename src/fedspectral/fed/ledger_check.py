"""A saved run's ledger checked against what the rest of its state says was released.

A checkpoint's digest proves that a file is the one some writer wrote, not that this run
wrote it: a state edited by hand, its digest recomputed, reads as valid.  The ε a resumed
run reports comes from the ledger it reads back, so a ledger that forgot round 1's
releases reported the ε of rounds 2-3 only, and a noise scale edited upward an ε too
small.  :func:`check_ledger` (called on every loaded run state, before any data is
loaded: :func:`fedspectral.fed.simulation.load_run_state`) refuses, naming what is
wrong, a ledger that disagrees with

* **the round records**: in every round ``r`` done, every participant of a phase that
  the method plans a release for (``Method.releases(phase, n)``: the config's
  calibration) has a release of round ``r`` in the ledger, and a phase that says how
  many releases it sent (``releases_sent``) sent exactly those;
* **the config's calibration**: no release of a planned mechanism claims more noise than
  the config calibrates for that client -- its effective noise multiplier
  :math:`\\sigma/(\\Delta\\sqrt{c})` (``count`` :math:`c` Gaussian releases compose to one
  of that multiplier) is at most the planned one; a release with *less* noise (a node
  that reported a smaller σ: a larger ε) is kept, it is not optimistic;
* **the ε the records reported**: the ledger's ε after the last round done
  (:func:`~fedspectral.privacy.report.round_epsilon`) is not below that round's
  ``epsilon_rdp``;
* **the secure sums' history**: the releases under the secure-aggregation model are
  those the server state's completed sums give (``Method.secure_model_releases``).

Once the data are loaded, :func:`check_client_sizes` checks that the state's client sizes
(on which the calibration above depends) are those of the data.  What none of this can
catch is a whole history forged consistently (records, ledger, model and sums together):
the checkpoint is integrity-checked, not signed, and whoever can write a run's folder can
write its results too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedspectral.fed.protocol import Method
    from fedspectral.fed.run_state import RunState
    from fedspectral.privacy import Release

__all__ = ["check_client_sizes", "check_ledger"]

#: relative tolerance of the comparisons (the same arithmetic gives the same numbers;
#: this only absorbs a float's last bits)
RTOL = 1e-9


def _effective_z(sigma: float, sensitivity: float, count: int) -> float:
    return sigma / sensitivity / math.sqrt(count)


def check_ledger(st: RunState, method: Method, delta: float) -> None:
    """``st``'s sample-level ledger agrees with its records, with ``method``'s planned
    releases (the config's calibration) and with the ε its records reported (module
    docstring); else ``ValueError`` saying which release, of whom, in which round."""
    sizes = st.server.client_sizes
    by_round: dict[tuple[str, int], list[Release]] = {}
    for r in st.ledger.view("fallback").releases:
        if r.step is not None:
            by_round.setdefault((r.party, int(r.step)), []).append(r)
    memo: dict[tuple[str, int], bool] = {}
    for rec in st.records:
        for name, ph in rec.phases.items():
            planned = [c for c in ph.participants if _planned(method, name, c, sizes, memo)]
            if ph.releases_sent and ph.releases_sent != len(planned):
                raise ValueError(
                    f"round {rec.round}, phase {name!r}: its record says "
                    f"{ph.releases_sent} releases were sent, but {len(planned)} of its "
                    f"participants were planned one"
                )
            for cid in planned:
                if not by_round.get((cid, rec.round)):
                    raise ValueError(
                        f"the ledger has no release of {cid} in round {rec.round}, though "
                        f"the round's record has {cid} asked in phase {name!r}, whose "
                        f"requests release: releases sent were removed (the epsilon "
                        f"reported would leave them out)"
                    )
    _check_calibration(st, method, sizes)
    _check_secure_releases(st, method)
    _check_reported_epsilon(st, delta)


def _planned(method: Method, phase: str, cid: str, sizes: Mapping[str, int], memo: dict) -> bool:
    """Whether ``method`` plans a release of client ``cid`` when it answers ``phase`` (a
    client of no known size: refused if the phase releases at any size)."""
    key = (phase, int(sizes.get(cid, 1)))
    if key not in memo:
        memo[key] = bool(method.releases(phase, key[1]))
    if memo[key] and cid not in sizes:
        raise ValueError(
            f"the server state has no size for client {cid}, whose phase {phase!r} releases"
        )
    return memo[key]


def _check_calibration(st: RunState, method: Method, sizes: Mapping[str, int]) -> None:
    """No release of a planned mechanism has more noise than the config calibrates."""
    plan: dict[tuple[str, str, str], Any] = {}
    for cid, n in sizes.items():
        for phase in method.phases:
            for rel in method.releases(phase, int(n)):
                plan.setdefault((cid, rel.mechanism, rel.threat), rel)
    for r in st.ledger.releases:
        want = plan.get((r.party, r.mechanism, r.threat))
        if want is None or want.sensitivity <= 0:
            continue
        have = _effective_z(r.sigma, r.sensitivity, r.count)
        ref = _effective_z(want.sigma, want.sensitivity, want.count)
        if have > ref * (1 + RTOL):
            raise ValueError(
                f"the ledger's release {r.mechanism!r} of {r.party} in round {r.step} has "
                f"sigma={r.sigma!r} (sensitivity {r.sensitivity!r}, count {r.count}), but "
                f"this config calibrates sigma={want.sigma!r} (sensitivity "
                f"{want.sensitivity!r}, count {want.count}) for it: its noise multiplier "
                f"{have:.6g} is above the config's {ref:.6g}, and the epsilon reported "
                f"would be too small"
            )


def _check_secure_releases(st: RunState, method: Method) -> None:
    """The secure-model releases are those of the state's completed sums."""

    got = sorted(
        (r.party, r.step, r.mechanism, r.sigma, r.sensitivity)
        for r in st.ledger.releases
        if r.threat == "secagg"
    )
    want = []
    for phase in method.phases:
        for party, step, rel in method.secure_model_releases(phase, st.server):
            want.append((party, step, rel.mechanism, rel.sigma, rel.sensitivity))
    want.sort()
    same = len(got) == len(want) and all(
        g[:3] == w[:3]
        and math.isclose(g[3], w[3], rel_tol=RTOL, abs_tol=0.0)
        and math.isclose(g[4], w[4], rel_tol=RTOL, abs_tol=0.0)
        for g, w in zip(got, want, strict=True)
    )
    if not same:
        raise ValueError(
            f"the ledger's {len(got)} releases under the secure-aggregation model are not "
            f"the {len(want)} that the server state's completed sums give"
        )


def _check_reported_epsilon(st: RunState, delta: float) -> None:
    """The ledger's ε after the last round done is not below what that round reported."""
    from fedspectral.privacy.report import round_epsilon  # lazy: pulls in dp-accounting and SciPy

    if not st.records:
        return
    said = st.records[-1].values.get("epsilon_rdp")
    if not isinstance(said, int | float) or isinstance(said, bool) or not math.isfinite(said):
        return
    now = round_epsilon(st.ledger, delta)
    if now is not None and now < said * (1 - RTOL):
        raise ValueError(
            f"the ledger's epsilon after round {st.round} is {now:.6g} (RDP), below the "
            f"{said:.6g} that round's record reported: releases were removed from the "
            f"ledger or their noise raised"
        )


def check_client_sizes(st: RunState, sizes: Mapping[str, int]) -> None:
    """The state's client sizes are ``sizes`` (those of the data); else ``ValueError``:
    the calibration checked by :func:`check_ledger` depends on them."""
    have = {str(c): int(n) for c, n in st.server.client_sizes.items()}
    want = {str(c): int(n) for c, n in sizes.items()}
    if have != want:
        diff = sorted(c for c in set(have) | set(want) if have.get(c) != want.get(c))
        c = diff[0]
        raise ValueError(
            f"its server state gives client {c} {have.get(c)} samples, but the data give "
            f"it {want.get(c)}: the state is not this run's"
        )
