"""The one failure a node shows once its data is open.

Once a node has opened its data every outcome is a release: a failure's type, message or
timing could carry data.  So every failure past that point is answered as one
:class:`DataError` with the fixed message :data:`FAILURE`, no sooner than the phase's
slowest success on this node took (:func:`note_success` records it, :func:`uniform_failure`
waits for it); the reason goes to the node's own log only.  Used by the training
ClientApp (:mod:`fedspectral.fed.flower.apps.client_app`) and the locally private PCA
node (:mod:`fedspectral.pca.flower.node`).
"""

from __future__ import annotations

import logging
import time

__all__ = ["FAILURE", "DataError", "note_success", "pad", "uniform_failure"]

_log = logging.getLogger(__name__)

#: the one failure a server sees once the node's data is open: no type, no reason
FAILURE = (
    "the node could not complete the request (no reason is given: once the data "
    "is open every outcome is a release; the attempt is in the node's ledger)"
)
# the longest a phase took on this node: a failure is answered no sooner
_DURATIONS: dict[str, float] = {}


class DataError(RuntimeError):
    """The one failure a server sees once the node's data is in use (message :data:`FAILURE`,
    whatever went wrong; the reason stays in the node's log)."""


def note_success(phase: str, t0: float) -> None:
    """Record that ``phase`` succeeded after starting at ``t0`` (``time.perf_counter()``)."""
    _DURATIONS[phase] = max(_DURATIONS.get(phase, 0.0), time.perf_counter() - t0)


def pad(phase: str, t0: float) -> None:
    """Wait until the phase's slowest success on this node would have answered."""
    wait = _DURATIONS.get(phase, 0.0) - (time.perf_counter() - t0)
    if wait > 0:
        time.sleep(min(wait, 600.0))


def uniform_failure(cid: str, phase: str, rnd: int, t0: float, exc: BaseException) -> DataError:
    """Log ``exc`` on the node; wait as long as the phase's slowest success took here;
    return the uniform :class:`DataError`."""
    _log.error("%s failed in %s round %d", cid, phase, rnd, exc_info=exc)
    pad(phase, t0)
    return DataError(FAILURE)
