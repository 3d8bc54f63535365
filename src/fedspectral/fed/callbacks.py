r"""Public hooks of the runners: what a caller may do at fixed points of a run.

:class:`fedspectral.fed.simulation.Simulation` (and the Flower runner, which is
one) calls each of its ``callbacks`` at three points, in the order they were given:

``on_state(sim, state)``
    once the run's state is there -- fresh (round 0, before the initial evaluation)
    or read back from the checkpoint (``resume=True``) -- and before round 1 (or the
    first resumed round).  ``state`` is the run's
    :class:`~fedspectral.fed.run_state.RunState` (also ``sim.state``), which the runner
    updates in place as the rounds go.  The method is the runner's own: what changes a
    ``train`` phase's release (client-level DP) is a post-processor the runner is given
    (:mod:`.postprocess`), never a method swapped in here.
``on_round_end(sim, rnd, record) -> bool | None``
    after round ``rnd`` is recorded and checkpointed (``record``: its
    :class:`~fedspectral.fed.records.RoundRecord`); returning ``True`` ends the run
    after this round (the results then hold the rounds done so far, ``final`` empty).
``on_results(sim, results)``
    on the results dict before the runner returns it (in place).

Every hook of :class:`Callback` does nothing: subclass it and override the hooks
you need.  This module imports nothing heavy (no PyTorch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedspectral.fed.records import RoundRecord
    from fedspectral.fed.run_state import RunState

__all__ = ["Callback"]


class Callback:
    """Base of a runner callback: every hook does nothing (see the module docstring)."""

    def on_state(self, sim: Any, state: RunState) -> None:
        """The run's state is ready (fresh or loaded from the checkpoint)."""

    def on_round_end(self, sim: Any, rnd: int, record: RoundRecord) -> bool | None:
        """Round ``rnd`` is recorded and checkpointed; ``True`` stops the run here."""
        return None

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        """The results dict, to complete in place before the runner returns it."""
