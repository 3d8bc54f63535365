r"""TensorBoard logging of a run: one scalar per metric per round, ε included.

:class:`TensorBoardCallback` is a :class:`~fedspectral.fed.callbacks.Callback` of the
in-process runner (``fedspectral train --log tensorboard``): after every round it writes
the round's record -- flattened as in ``rounds.csv`` (:func:`fedspectral.results.round_row`)
-- as TensorBoard scalars at step = the round, so the curves grow while the run trains;
the untrained network's evaluation (``eval.initial``) is written at step 0 and the final
linear probe at the last round.  :func:`write_tensorboard` writes the same scalars from a
finished run's results dict: the Flower engine's runs are logged that way once they
return (their rounds run in Flower's own process).

Tags (``tensorboard --logdir DIR``)::

    eval/knn_backbone, eval/knn_projector, eval/sc_objective, eval/linear_probe
    privacy/epsilon_rdp (every round), privacy/epsilon_pld (at evaluation rounds)
    train/<metric>           the train phase's metrics (train_loss, ...)
    <phase>/<metric>         the other phases' metrics (e.g. share/...)
    system/seconds_<phase>, system/seconds_round, system/bytes_up, system/bytes_down,
    system/failures_<phase>, system/clients

Needs the ``tensorboard`` package (``pip install tensorboard``, or the extra from a checkout:
``pip install -e ".[tensorboard]"``); PyTorch's
``torch.utils.tensorboard.SummaryWriter`` writes the event files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedspectral.fed.callbacks import Callback
from fedspectral.fed.records import RoundRecord
from fedspectral.inputs import check_nonempty_path
from fedspectral.kinds import PhaseKind
from fedspectral.results import round_row

__all__ = ["TensorBoardCallback", "check_tensorboard", "scalars_of_record", "write_tensorboard"]

_EVAL = ("knn_backbone", "knn_projector", "sc_objective", "linear_probe")
_SYSTEM = ("clients", "bytes_up", "bytes_down", "seconds_eval", "seconds_round")


def _tag(key: str, phases: Mapping[str, Any]) -> str:
    if key in _EVAL:
        return f"eval/{key}"
    if key.startswith("epsilon_"):
        return f"privacy/{key}"
    if key in _SYSTEM or key.startswith(("seconds_", "failures_")):
        return f"system/{key}"
    for phase, ph in phases.items():  # a training phase's metrics are unprefixed
        if ph.get("kind") != PhaseKind.TRAIN and key.startswith(phase + "_"):
            return f"{phase}/{key[len(phase) + 1 :]}"
    return f"train/{key}"


def scalars_of_record(record: Mapping[str, Any]) -> dict[str, float]:
    """The TensorBoard scalars (tag -> value) of one round record: every finite number of
    its ``rounds.csv`` row."""
    out = {}
    for key, value in round_row(record).items():
        if key == "round" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[_tag(key, record.get("phases", {}))] = float(value)
    return out


def check_tensorboard() -> None:
    """``ValueError`` (before any training) unless the ``tensorboard`` package is there."""
    try:
        import torch.utils.tensorboard  # noqa: F401 - imports the tensorboard package
    except ImportError as exc:  # torch is there; the tensorboard package is the extra
        raise ValueError(
            "--log tensorboard needs the tensorboard package: pip install tensorboard "
            "(or, in a checkout of fedspectral: pip install -e '.[tensorboard]')"
        ) from exc


def _writer(log_dir: str | os.PathLike) -> Any:
    check_tensorboard()
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir))


def _write_initial(w: Any, initial: Mapping[str, Any] | None) -> None:
    for key, value in (initial or {}).items():
        if key in _EVAL and isinstance(value, int | float) and math.isfinite(value):
            w.add_scalar(f"eval/{key}", float(value), 0)


def _write_final(w: Any, results: Mapping[str, Any]) -> None:
    if "linear_probe" in results.get("final", {}):
        w.add_scalar(
            "eval/linear_probe",
            float(results["final"]["linear_probe"]),
            int(results.get("rounds_done", 0)),
        )


class TensorBoardCallback(Callback):
    """Write each round's metrics and ε to TensorBoard event files in ``log_dir`` as the
    run goes (module docstring).  The writer is opened when the run's state is ready
    and closed with the results; on a resumed run, the rounds already done are
    written again from the checkpoint's records (TensorBoard keeps the last value)."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        check_nonempty_path(log_dir, "log_dir")
        self.log_dir = Path(log_dir)
        self._w: Any = None
        self._state: Any = None

    def on_state(self, sim: Any, state: Any) -> None:
        self._w = _writer(self.log_dir)
        self._state = state
        for rec in state.records:
            for tag, v in scalars_of_record(rec.to_dict()).items():
                self._w.add_scalar(tag, v, rec.round)

    def on_round_end(self, sim: Any, rnd: int, record: RoundRecord) -> bool | None:
        if self._state is not None and self._state.initial is not None:  # after on_state
            _write_initial(self._w, self._state.initial)
            self._state = None
        for tag, v in scalars_of_record(record.to_dict()).items():
            self._w.add_scalar(tag, v, rnd)
        self._w.flush()
        return None

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        if self._w is None:
            return
        _write_final(self._w, results)
        self._w.close()
        self._w = None


def write_tensorboard(results: Mapping[str, Any], log_dir: str | os.PathLike) -> Path:
    """Write a finished run's scalars (its ``initial`` evaluation at step 0, every round
    record, the final linear probe) to ``log_dir``; returns ``log_dir``."""
    w = _writer(log_dir)
    try:
        _write_initial(w, results.get("initial"))
        for rec in results.get("records", []):
            for tag, v in scalars_of_record(rec).items():
                w.add_scalar(tag, v, int(rec["round"]))
        _write_final(w, results)
    finally:
        w.close()
    return Path(log_dir)
