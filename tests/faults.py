"""Test helpers of the runners: stop a run after a round, make listed clients fail.

Production code has no fault-injection hooks; tests use the runners' public hooks
(:class:`~fedspectral.fed.callbacks.Callback`, ``Simulation(transport=...)``):

* :class:`StopAfter` -- a callback that ends the run after a round (its checkpoint is
  written), to test interruption and resume;
* :func:`failing` -- a transport for ``Simulation(cfg, transport=failing(fail))``: the
  in-process transport, except that the clients ``fail(phase, rnd, cid)`` names raise
  instead of running their handler (in ``secure_sum`` phases too).

The Flower side (a ClientApp that raises on listed messages) is
``tests/flower/faulty_client.py``.  Also :func:`weights_equal`, the tests' check that
two runs ended with the same weights, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fedspectral.fed.callbacks import Callback
from fedspectral.fed.simulation import InProcessTransport


class StopAfter(Callback):
    """End the run after round ``rnd`` (checkpointed, like an interrupted run)."""

    def __init__(self, rnd: int) -> None:
        self.rnd = int(rnd)

    def on_round_end(self, sim, rnd, record) -> bool:
        return rnd >= self.rnd


class FailingTransport(InProcessTransport):
    """:class:`InProcessTransport` whose clients named by ``fail(phase, rnd, cid)`` raise
    (``RuntimeError("injected failure ...")``) without running their handler; the others
    answer exactly as in process, in the order they were addressed."""

    def __init__(self, sim, clients_state, fail: Callable[[str, int, str], bool]) -> None:
        super().__init__(sim, clients_state)
        self.fail = fail

    def __call__(self, phase, rnd, payloads):
        ok = {c: p for c, p in payloads.items() if not self.fail(phase, rnd, c)}
        replies = super().__call__(phase, rnd, ok)
        return {
            c: replies[c]
            if c in ok
            else RuntimeError(f"injected failure of {c} in {phase} round {rnd}")
            for c in payloads
        }


def failing(fail: Callable[[str, int, str], bool]):
    """``Simulation(..., transport=failing(fail))``: see :class:`FailingTransport`."""
    return lambda sim, clients_state: FailingTransport(sim, clients_state, fail)


def weights_equal(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    """Bit-equality of two weight dicts (same names, same arrays)."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
