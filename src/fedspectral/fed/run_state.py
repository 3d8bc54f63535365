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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from fedspectral.fed.protocol import ServerState
from fedspectral.fed.records import RoundRecord
from fedspectral.privacy import PrivacyLedger

if TYPE_CHECKING:
    from fedspectral.fed.protocol import ServerState
    from fedspectral.privacy import PrivacyLedger

__all__ = ["RunState", "check_records", "check_run_state"]


def _number(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_records(
    records: Any, rounds_done: int, ids: Collection[str] | None = None
) -> list[RoundRecord]:
    """``records`` (plain dicts) as ``rounds_done`` round records, record ``i`` of round
    ``i + 1``, each checked by :meth:`RoundRecord.from_dict` (naming only clients of
    ``ids``, when given); else ``ValueError`` saying what is wrong."""
    if not isinstance(records, list):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"its round records are a {type(records).__name__}, not a list"
        )
    if len(records) != rounds_done:
        raise ValueError(f"it holds {len(records)} round records for round {rounds_done}")
    known = None if ids is None else list(ids)
    return [RoundRecord.from_dict(rec, i + 1, known) for i, rec in enumerate(records)]


def check_run_state(
    state: Mapping[str, Any], rounds: int, ids: Collection[str]
) -> list[RoundRecord]:
    """A loaded run state (``round``, ``records``, ``clients``, ``server``) fits a config of
    ``rounds`` rounds whose clients are ``ids``: its round records; else ``ValueError``
    saying what is wrong."""
    rnd = state.get("round")
    if isinstance(rnd, bool) or not isinstance(rnd, int) or not 0 <= rnd <= rounds:
        raise ValueError(f"round {rnd!r} is outside 0..{rounds} (method.rounds={rounds})")
    records = check_records(state.get("records"), rnd, ids)
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
    initial = state.get("initial")
    if initial is not None and (
        not isinstance(initial, Mapping) or not all(_number(v) for v in initial.values())
    ):
        raise ValueError(  # a NaN here would reach results.json as if measured
            f"its initial evaluation {initial!r:.120} is not a mapping of finite numbers"
        )
    return records


@dataclass
class RunState:
    """The state of a run after round :attr:`round` (0: before round 1).

    Attributes
    ----------
    round : int
        The last round done.
    server : ServerState
        The server's state (global weights, method arrays, info).
    clients : dict
        Client id -> that client's state (arrays kept between rounds; in process the
        runner keeps them, on Flower each node keeps its own and these stay empty).
    ledger : PrivacyLedger
        The sample-level releases so far (never composed with ``client_ledger``).
    client_ledger : PrivacyLedger
        The client-level releases so far.
    records : list of RoundRecord
        One record per round done, round ``i + 1`` at ``i``.
    elapsed : float
        Seconds spent in the rounds done.
    initial : dict, optional
        The evaluation of the initial weights (``eval.initial``), once done.
    """

    round: int
    server: ServerState
    clients: dict[str, dict[str, np.ndarray]]
    ledger: PrivacyLedger
    client_ledger: PrivacyLedger
    records: list[RoundRecord] = field(default_factory=list)
    elapsed: float = 0.0
    initial: dict[str, float] | None = None

    @classmethod
    def fresh(cls, server: ServerState, client_ids: Collection[str]) -> RunState:
        """Round 0: ``server`` as the method initialised it, empty client states and ledgers."""
        return cls(
            round=0,
            server=server,
            clients={c: {} for c in client_ids},
            ledger=PrivacyLedger(unit="sample"),
            client_ledger=PrivacyLedger(unit="client"),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain containers of arrays, numbers and strings (what a checkpoint stores),
        after :func:`check_records` (so no file receives an inconsistent state)."""
        out: dict[str, Any] = {
            "round": self.round,
            "server": self.server.to_dict(),
            "clients": {
                c: {k: np.array(v, copy=True) for k, v in s.items()}
                for c, s in self.clients.items()
            },
            "ledger": self.ledger.to_dict(),
            "client_ledger": self.client_ledger.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "elapsed": self.elapsed,
        }
        if self.initial is not None:
            out["initial"] = self.initial
        check_records(out["records"], out["round"], out["clients"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], rounds: int, ids: Collection[str]) -> RunState:
        """The state of :meth:`to_dict`, checked (:func:`check_run_state`) to fit a config
        of ``rounds`` rounds whose clients are ``ids``; a ``ValueError`` (or the
        ``KeyError``/``TypeError`` of a malformed part) says what is wrong.  A state
        written before client-level ledgers existed reads with an empty one."""
        records = check_run_state(data, rounds, ids)
        initial = data.get("initial")
        return cls(
            round=data["round"],
            server=ServerState.from_dict(data["server"]),
            clients={c: dict(s) for c, s in data["clients"].items()},
            ledger=PrivacyLedger.from_dict(data["ledger"]),
            client_ledger=PrivacyLedger.from_dict(data.get("client_ledger", {"unit": "client"})),
            records=records,
            elapsed=float(data["elapsed"]),
            initial=None if initial is None else {str(k): float(v) for k, v in initial.items()},
        )
