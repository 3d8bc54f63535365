r"""How a Flower run of the app ends: one line when it fails, a marked results folder, quiet.

``flwr run`` exits 0 whatever the app does (flwr 1.42: the CLI submits the run and, with
``--stream``, prints its log; no status of the app reaches its exit code), so a failed
run is made to read as one instead:

* the ServerApp logs one line, ``fedspectral: run FAILED ...`` (the phase, how many nodes
  refused, each distinct reason once), then raises :class:`RunFailed`, which Flower
  records as ``finished:failed`` (``flwr ls``); its traceback is dropped from Flower's
  log (:class:`QuietFlower`) unless the run config says ``debug=true``;
* the run's folder gets a ``FAILED`` file (:func:`mark_failed`), which ``fedspectral
  status RUN_FOLDER`` reads (exit 1 on a failed run);
* a node's refusal (:class:`~fedspectral.fed.flower.node.policy.PolicyRefusal`) or
  uniform data failure goes back to the server as an error reply with the node's own
  ``Class: message`` (:func:`error_reply_mod`), not as an exception the simulation
  runtime logs with four copies of its Ray traceback.

Warnings that are not the user's business are filtered here, each by its message,
category and module (:func:`quiet_flower`), in the processes that import the app.
Flower's own "default simulated SuperNodes changed" warning is logged before the app is
loaded and cannot be filtered from it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedspectral.atomic import atomic_write_bytes
from fedspectral.fed.flower.node.failure import DataError

__all__ = [
    "FAILED",
    "QuietFlower",
    "RunFailed",
    "debug_run",
    "error_reply_mod",
    "mark_failed",
    "quiet_flower",
    "run_status",
]

#: the file a failed run leaves in its folder (its text: the failure's one line)
FAILED = "FAILED"


class RunFailed(RuntimeError):
    """A run that stopped for a reason the user can act on (every node refused a phase,
    no node answered the handshake, a refused configuration); its message is the one line
    the log shows, and its traceback is not shown (``debug=true`` shows it)."""


def debug_run(run_config: Mapping[str, Any]) -> bool:
    """Whether the run config asks for tracebacks (``debug=true``)."""
    return run_config.get("debug", False) is True


class QuietFlower(logging.Filter):
    """A filter on Flower's logger: drops the simulation actors' "Manually terminating"
    notice and the traceback of a :class:`RunFailed` (its one line was logged already)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Manually terminating %s":
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RunFailed):
            record.exc_info = None
            record.exc_text = None
            record.msg = f"{record.msg} (see the fedspectral line above)"
        return True


def quiet_flower() -> None:
    """Filter, in this process, what is not the user's business (idempotent): Ray's
    ``FutureWarning`` about accelerator environment variables (the app never asks for an
    accelerator through Ray), and :class:`QuietFlower` on Flower's logger."""
    warnings.filterwarnings(
        "ignore",
        message=r"Tip: In future versions of Ray",
        category=FutureWarning,
        module=r"ray\.",
    )
    logger = logging.getLogger("flwr")
    if not any(isinstance(f, QuietFlower) for f in logger.filters):
        logger.addFilter(QuietFlower())


def error_reply_mod(message: Any, context: Any, call_next: Callable[..., Any]) -> Any:
    """A ``ClientApp`` mod: a node's refusal or uniform data failure becomes an error reply
    carrying ``Class: message`` (what the server records as the node's reason), so the
    simulation runtime does not log it as a crash; with ``debug=true`` it is raised."""
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode

    # lazy: pulls in dp-accounting and SciPy
    from fedspectral.fed.flower.node.policy import PolicyRefusal

    try:
        return call_next(message, context)
    except (PolicyRefusal, DataError) as exc:
        if debug_run(getattr(context, "run_config", {}) or {}):
            raise
        reason = f"{type(exc).__name__}: {exc}"
        return Message(
            Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message
        )


def mark_failed(out_dir: str | Path, line: str) -> Path:
    """Write ``out_dir/FAILED`` (the failure's line; atomically) and return its path."""
    path = Path(out_dir) / FAILED
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (line.rstrip("\n") + "\n").encode())
    return path


def run_status(folder: str | Path) -> tuple[str, str]:
    """``(status, line)`` of a run's folder: ``"failed"`` (a ``FAILED`` file: its line),
    ``"completed"`` (a ``results.json`` and no ``FAILED``), ``"incomplete"`` (neither: still
    running, or stopped before its results), or ``"missing"`` (no such folder)."""
    import json

    d = Path(folder)
    if not d.is_dir():
        return "missing", f"no run folder {str(d)!r}"
    if (d / FAILED).is_file():
        return "failed", (d / FAILED).read_text().strip()
    pca = d / "ldp_pca.json"
    if pca.is_file() and not (d / "results.json").is_file():  # task = "ldp-pca"
        return "completed", f"completed: ldp-pca, results in {str(pca)!r}"
    res = d / "results.json"
    if res.is_file():
        try:
            r = json.loads(res.read_text())
        except ValueError as exc:
            return "incomplete", f"{str(res)!r} is not valid JSON ({exc})"
        done, planned = r.get("rounds_done"), r.get("config", {}).get("method", {}).get("rounds")
        what = f"{done}/{planned} rounds" if planned is not None else f"{done} rounds"
        return "completed", f"completed: {what}, results in {str(res)!r}"
    has_ckpt = (d / "checkpoint.pt").is_file()
    return "incomplete", (
        "no results.json yet: still running, or stopped before its end"
        + (" (its checkpoint.pt can be resumed: resume=true out-dir=...)" if has_ckpt else "")
    )
