"""The server's state between rounds: typed framework fields and the method's own values.

:class:`ServerState` is what :func:`~fedspectral.fed.protocol.run_round` and a method's
server hooks read and update in place, and what a checkpoint stores
(:meth:`ServerState.to_dict`, in the layout of earlier versions: one ``info`` mapping of
the framework's keys followed by the method's).  Import it from
:mod:`fedspectral.fed.protocol` or from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ServerState"]

#: the framework's keys of a checkpoint's ``info`` (every other key is the method's)
_FRAMEWORK_INFO = ("clients", "client_sizes", "q", "round", "sampled", "privacy_warnings")


@dataclass
class ServerState:
    """Everything the server carries from one round to the next.

    A checkpoint keeps the layout of earlier versions (``weights``, ``arrays`` and one
    ``info`` mapping of the framework's keys followed by the method's), so checkpoints
    written before these fields existed load unchanged (:meth:`from_dict`).

    Parameters
    ----------
    weights : dict[str, numpy.ndarray]
        The global model :math:`\\theta^t` (``state_dict`` order and names).
    arrays : dict[str, numpy.ndarray]
        Method-owned arrays (FedSC: every client's last :math:`\\tilde R_j` and
        the global :math:`\\tilde R`).
    clients : list of str
        The federation's client ids, in order.
    client_sizes : dict[str, int]
        ``{cid: |D_j|}``.
    q : dict[str, float]
        ``{cid: q_j}``, :math:`q_j = |D_j| / \\sum_k |D_k|`.
    round : int
        The current round (0 before round 1), set by
        :func:`~fedspectral.fed.protocol.run_round` before the first phase.
    sampled : list of str
        The clients sampled for the current round (set with ``round``).
    privacy_warnings : list of str
        Notes the method makes about its releases, reported in the results' ``privacy``.
    method_state : dict[str, Any]
        The method's own small JSON-able values (FedSC: who has shared, :math:`Q`, ...):
        the method's namespace, which the framework neither reads nor writes.
    """

    weights: dict[str, np.ndarray]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    clients: list[str] = field(default_factory=list)
    client_sizes: dict[str, int] = field(default_factory=dict)
    q: dict[str, float] = field(default_factory=dict)
    round: int = 0
    sampled: list[str] = field(default_factory=list)
    privacy_warnings: list[str] = field(default_factory=list)
    method_state: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain containers of numpy arrays and scalars (for ``torch.save``)."""
        info: dict[str, Any] = {
            "clients": list(self.clients),
            "client_sizes": dict(self.client_sizes),
            "q": dict(self.q),
        }
        if self.round:  # absent before round 1, as always
            info.update(round=int(self.round), sampled=list(self.sampled))
        if self.privacy_warnings:
            info["privacy_warnings"] = list(self.privacy_warnings)
        info.update(_deepcopy_plain(self.method_state))
        return {
            "weights": {k: np.array(v, copy=True) for k, v in self.weights.items()},
            "arrays": {k: np.array(v, copy=True) for k, v in self.arrays.items()},
            "info": info,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServerState:
        """The state of :meth:`to_dict` (or of a checkpoint written by an earlier version:
        the same layout)."""
        info = _deepcopy_plain(d["info"])
        return cls(
            weights={k: np.array(v, copy=True) for k, v in d["weights"].items()},
            arrays={k: np.array(v, copy=True) for k, v in d["arrays"].items()},
            clients=[str(c) for c in info.get("clients", [])],
            client_sizes={str(c): int(n) for c, n in info.get("client_sizes", {}).items()},
            q={str(c): float(v) for c, v in info.get("q", {}).items()},
            round=int(info.get("round", 0)),
            sampled=[str(c) for c in info.get("sampled", [])],
            privacy_warnings=[str(w) for w in info.get("privacy_warnings", [])],
            method_state={k: v for k, v in info.items() if k not in _FRAMEWORK_INFO},
        )


def _deepcopy_plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _deepcopy_plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(_deepcopy_plain(v) for v in x)
    if isinstance(x, np.ndarray):
        return x.copy()
    return x
