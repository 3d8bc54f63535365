r"""What every method with one ``train`` phase and a weight average shares.

FedAvg+SC, FedSC (:class:`~fedspectral.fed.methods.sc.SCMethod`) and the
baselines (:class:`~fedspectral.fed.methods._baseline.BaselineMethod`) run the same
server side: the learning rate of round :math:`t` from one schedule
(:func:`scheduled_lr`), sent to the clients in the train payload, and an aggregation
that averages the weights the clients return,

.. math::

    \theta^t = \sum_{j\in\mathcal J^t} w_j\,\theta^t_j, \qquad
    w_j = \frac{|D_j|}{\sum_{k\in\mathcal J^t}|D_k|}\ \text{(or } 1/|\mathcal J^t|\text{)},

entry by entry (:func:`~fedspectral.fed.weights.mean_arrays`), over the entries the
clients sent (the others keep their value), and reports the round's client count,
size-weighted mean training loss and learning rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from fedspectral.fed.protocol import Method, Payload, ServerState
from fedspectral.fed.weights import mean_arrays

__all__ = ["LR_SCHEDULES", "AveragingMethod", "scheduled_lr"]

LR_SCHEDULES = ("cosine", "constant")


def scheduled_lr(
    base: float, rnd: int, rounds: int, schedule: str = "cosine", min_lr: float = 0.0
) -> float:
    r"""Learning rate of round ``rnd`` (1-based) under ``schedule``, constant within
    the round: :math:`\eta_t = \eta_{min} + \tfrac12(\eta-\eta_{min})(1+\cos(\pi (t-1)/T))`
    for ``"cosine"``, :math:`\eta` for ``"constant"``."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
    if schedule == "constant":
        return float(base)
    return float(min_lr + 0.5 * (base - min_lr) * (1.0 + math.cos(math.pi * (rnd - 1) / rounds)))


class AveragingMethod(Method):
    """One ``train`` phase whose replies are averaged (see the module docstring).

    Subclasses choose the weights of the mean (:meth:`size_weighted`), may fold other
    arrays of the replies into the server state (:meth:`aggregate_extra`) and name
    client metrics to average into the round's metrics (:attr:`reported_metrics`).
    """

    #: client metrics averaged into the round's metrics
    reported_metrics: ClassVar[tuple[str, ...]] = ()

    def lr(self, rnd: int) -> float:
        """Learning rate of round ``rnd`` (``optim.lr``, ``optim.schedule``, ``optim.min_lr``)."""
        o = self.config.optim
        return scheduled_lr(o.lr, rnd, self.config.method.rounds, o.schedule, o.min_lr)

    def size_weighted(self) -> bool:
        """Whether the mean weighs client :math:`j` by :math:`|D_j|` (else a plain mean)."""
        return True

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        if not replies:
            return {"clients": 0.0}
        sizes = [float(r.metrics["num-examples"]) for r in replies.values()]
        ws = [r.weights() for r in replies.values()]
        keys = set(ws[0])
        if any(set(w) != keys for w in ws):
            raise ValueError(f"{self.name}: clients sent different weight sets")
        state.weights.update(mean_arrays(ws, sizes if self.size_weighted() else None))
        self.aggregate_extra(rnd, state, replies)
        out = {"clients": float(len(replies))}
        # a node that sends a DP update keeps its un-noised loss (its release manifest)
        lossy = [
            (float(r.metrics["loss"]), s)
            for r, s in zip(replies.values(), sizes, strict=True)
            if "loss" in r.metrics
        ]
        if lossy:
            out["train_loss"] = float(
                np.average([v for v, _ in lossy], weights=[s for _, s in lossy])
            )
        out["lr"] = self.lr(rnd)
        for k in self.reported_metrics:
            vals = [float(r.metrics[k]) for r in replies.values() if k in r.metrics]
            if vals:
                out[k] = float(np.mean(vals))
        return out

    def aggregate_extra(self, rnd: int, state: ServerState, replies: Mapping[str, Payload]) -> None:
        """Fold non-weight arrays of the replies into ``state`` (default: nothing)."""
