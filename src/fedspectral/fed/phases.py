"""The phases of a round as objects: a name and a kind the framework asks.

A method declares its round as a :class:`RoundPhase` enum, one member per phase in
round order, each with its :class:`~fedspectral.kinds.PhaseKind`::

    class FedSCPhase(RoundPhase):
        SHARE = "share", PhaseKind.QUERY
        TRAIN = "train", PhaseKind.TRAIN

A member is its name (a ``StrEnum``: ``FedSCPhase.SHARE == "share"``), so hooks keep
taking ``phase: str``; the framework never compares a phase with a name, it asks the
member's :attr:`~RoundPhase.kind` (:meth:`fedspectral.fed.protocol.Method.phase_kind`):
a phase of kind ``train`` is sent as a Flower ``train`` message and gets the run's
post-processors (client-level DP) whatever it is called, a ``query`` phase is a Flower
``query`` message, a ``secure_sum`` phase runs the secure-sum protocol.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fedspectral.kinds import PhaseKind

__all__ = ["RoundPhase", "TrainPhase", "phases_of_kind"]


class RoundPhase(StrEnum):
    """One phase of a method's round: its name (the member's value) and its ``kind``.

    Members are declared as ``NAME = "name", PhaseKind.X``; a member without a kind is
    refused (``TypeError`` naming it), so no phase gets a kind from its name."""

    def __new__(cls, *args: Any) -> RoundPhase:
        if len(args) != 2 or not isinstance(args[0], str):
            raise TypeError(
                f"a phase of {cls.__name__} is declared as NAME = 'name', PhaseKind.X; got {args!r}"
            )
        name, kind = args
        obj = str.__new__(cls, name)
        obj._value_ = name
        setattr(obj, "_phase_kind", PhaseKind(kind))  # noqa: B010 -- not an enum member
        return obj

    @property
    def kind(self) -> PhaseKind:
        """What the phase is: ``train``, ``query`` or ``secure_sum``."""
        return PhaseKind(getattr(self, "_phase_kind"))  # noqa: B009


class TrainPhase(RoundPhase):
    """The round of a method that has one phase, ``train``, of kind train."""

    TRAIN = "train", PhaseKind.TRAIN


def phases_of_kind(phases: type[RoundPhase], kind: PhaseKind | str) -> tuple[str, ...]:
    """The names of ``phases``' members of ``kind``, in round order."""
    k = PhaseKind(kind)
    return tuple(p.value for p in phases if p.kind == k)
