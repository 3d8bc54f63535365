"""What a run's saved state must hold, checked before it is used or written.

A checkpoint's digest proves that the file is the one written, not that what was
written is consistent: a state built by hand (or by a bug) with a valid digest could
hold empty round records or a client the configuration does not have, and fail with a
``KeyError`` later -- after the checkpoint has been rewritten from it.
:func:`check_run_state` is called by the in-process runner on a loaded state (before
any data is loaded) and :func:`check_records` on the new state before each checkpoint
is written, so a checkpoint file only ever receives a state that passes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["check_records", "check_run_state"]

#: keys of a round record that later steps (results, ``rounds.csv``) read, and their kinds
_RECORD_NUMBERS = ("bytes_up_total", "bytes_down_total", "seconds_round")


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_record(rec: Any, rnd: int, ids: Collection[str] | None) -> None:
    if not isinstance(rec, Mapping):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"the record of round {rnd} is a {type(rec).__name__}, not a mapping"
        )
    if rec.get("round") != rnd:
        raise ValueError(f"the record of round {rnd} says round {rec.get('round')!r}")
    sampled = rec.get("sampled")
    if not isinstance(sampled, list) or not all(isinstance(c, str) for c in sampled):
        raise ValueError(f"the record of round {rnd} has no list of sampled client ids")
    if ids is not None:
        unknown = sorted(set(sampled) - set(ids))
        if unknown:
            raise ValueError(
                f"the record of round {rnd} names client(s) {unknown[:3]} that "
                f"this config does not have"
            )
    phases = rec.get("phases")
    if not isinstance(phases, Mapping) or not all(
        isinstance(ph, Mapping)
        and isinstance(ph.get("metrics"), Mapping)
        and _number(ph.get("seconds"))
        and isinstance(ph.get("failures"), Mapping | list)
        for ph in phases.values()
    ):
        raise ValueError(
            f"the record of round {rnd} has no valid phases (each with metrics, "
            f"seconds and failures)"
        )
    missing = [k for k in _RECORD_NUMBERS if not _number(rec.get(k))]
    if missing:
        raise ValueError(f"the record of round {rnd} lacks the number(s) {missing}")


def check_records(records: Any, rounds_done: int, ids: Collection[str] | None = None) -> None:
    """``records`` is a list of ``rounds_done`` round records, record ``i`` of round
    ``i + 1``, each with the keys the results and ``rounds.csv`` read, naming only
    clients of ``ids`` (when given); else ``ValueError`` saying what is wrong."""
    if not isinstance(records, list):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"its round records are a {type(records).__name__}, not a list"
        )
    if len(records) != rounds_done:
        raise ValueError(f"it holds {len(records)} round records for round {rounds_done}")
    for i, rec in enumerate(records):
        _check_record(rec, i + 1, ids)


def check_run_state(state: Mapping[str, Any], rounds: int, ids: Collection[str]) -> None:
    """A loaded run state (``round``, ``records``, ``clients``, ``server``) fits a config of
    ``rounds`` rounds whose clients are ``ids``; else ``ValueError`` saying what is wrong."""
    rnd = state.get("round")
    if isinstance(rnd, bool) or not isinstance(rnd, int) or not 0 <= rnd <= rounds:
        raise ValueError(f"round {rnd!r} is outside 0..{rounds} (method.rounds={rounds})")
    check_records(state.get("records"), rnd, ids)
    clients = state.get("clients")
    if not isinstance(clients, Mapping) or set(clients) != set(ids):
        have = sorted(clients) if isinstance(clients, Mapping) else type(clients).__name__
        raise ValueError(
            f"its client states are for {have!s:.120} but this config has the "
            f"clients {sorted(ids)!s:.120}"
        )
    if not all(isinstance(s, Mapping) for s in clients.values()):
        raise ValueError("a client state is not a mapping")
    server = state.get("server")
    if not isinstance(server, Mapping) or not isinstance(server.get("weights"), Mapping):
        raise ValueError("it holds no server state with weights")  # noqa: TRY004
    elapsed = state.get("elapsed")
    if not _number(elapsed) or elapsed < 0:
        raise ValueError(f"its elapsed time {elapsed!r} is not a number >= 0")
