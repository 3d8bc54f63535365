r"""Flower ``ServerApp`` for any :class:`~fedspectral.fed.protocol.Method`.

The round loop is the in-process runner's (:class:`fedspectral.fed.simulation.Simulation`:
sampling, :func:`~fedspectral.fed.protocol.run_round`, evaluation, checkpoints,
results); only the *transport* changes.  :class:`.runner.GridTransport` delivers each
participant's :class:`~fedspectral.fed.protocol.Payload` as its own Flower
message (per-node content: a method may send each client its own arrays) of
type ``train`` or ``query`` according to ``method.phase_kind(phase)``, waits for
the replies (bounded by ``round-timeout``) and hands them back; an error reply
or a missing reply is a non-participating client, which ``run_round`` records
under the round's ``failures`` (the method aggregates the others' replies).  A phase
of kind ``"secure_sum"`` (its replies seen only summed)
travels as the five stages of :mod:`.secure_sum`, one round of ``query.secagg`` messages
each.

Handshake
    Before round 1 the server waits for the nodes (bounded by ``node-wait``),
    sends each a ``query.hello`` carrying the experiment configuration (JSON) and
    learns from the replies which node is which client (``client-<partition-id>``).

Run configuration (``flower/pyproject.toml`` ``[tool.flwr.app.config]``, or
``flwr run ... --run-config``):

``task``
    ``"train"`` (default) or ``"ldp-pca"`` (:mod:`fedspectral.pca.flower.app`).
``num-server-rounds``, ``method``, ``dataset``, ``num-clients``, ``lr``, ``dp``, ``dp-epsilon``, ...
    the experiment's hyper-parameters (:mod:`.run_config`), on an optional YAML base
    (``config``) with ``;``-separated ``section.key=value`` overrides (``set``).
``out-dir``
    where results and the checkpoint go (default: a folder per run,
    ``<run.out or results/<name>>/run-<run id>`` under the SuperLink's working directory;
    for ``task = "ldp-pca"`` ``results/flower_app/run-<run id>``).
``resume``
    continue from ``out-dir``'s checkpoint (same config).
``round-timeout``, ``node-wait``
    seconds (defaults :data:`.grid.ROUND_TIMEOUT_S` = 600 and :data:`.grid.NODE_WAIT_S` = 120, for
    training and LDP-PCA alike).
``dp-clip``, ``dp-noise-multiplier``
    client-level DP on model updates (:mod:`.client_dp`): off when 0.

``debug``
    ``true``: a failure shows its Python tracebacks (the nodes' too); by default a failed
    run logs one line, ``fedspectral: run FAILED: ...`` (:mod:`.outcome`).

Each round's metrics and ε go to Flower's log (``flwr log RUN_ID``, ``flwr run ... --stream``).
``flwr run`` exits 0 even when the run fails (Flower's CLI reports no app status): a failed
run is ``finished:failed`` in ``flwr ls``, and its folder holds a ``FAILED`` file, which
``fedspectral status RUN_FOLDER`` reads (exit status 1).

The training part (:mod:`.runner`) is imported only for ``task = "train"``: it
imports PyTorch, which the LDP-PCA app does not need.
"""

from __future__ import annotations

from logging import ERROR
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedspectral.fed.flower.apps.outcome import RunFailed, debug_run, quiet_flower
from fedspectral.fed.flower.apps.run_config import check_keys, run_value
from fedspectral.pca.flower.app import pca_server_main

__all__ = ["app", "failure_line", "make_server_app"]

quiet_flower()  # Ray's accelerator FutureWarning, the actors' "Manually terminating"

#: the errors a user can act on: one line, no traceback (``debug=true`` shows it)
_USER_ERRORS = (RunFailed, ValueError, TypeError, OSError)


def failure_line(exc: BaseException) -> str:
    """The one line that says why a run failed: the exception's message, its notes (where
    the run's folder is) after it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, RunFailed | ValueError | TypeError):
        text = f"{type(exc).__name__}: {text}"
    notes = [" ".join(n.split()) for n in getattr(exc, "__notes__", ())]
    return "; ".join([text, *notes])


def make_server_app(
    config: Any = None, sink: dict[str, Any] | None = None, **options: Any
) -> ServerApp:
    """A ``ServerApp``; with ``config`` it trains that experiment (simulation engine),
    otherwise it reads the run config.  The results dict goes to ``sink["results"]``
    (an exception to ``sink["error"]``) when a ``sink`` is given."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        debug = debug_run(context.run_config)
        try:
            if config is None:  # the app's own run config: every key declared and typed
                check_keys(context.run_config)
            task = run_value(context.run_config, "task")
            if task == "ldp-pca":
                res = pca_server_main(grid, _pca_context(context))
            elif task == "train":
                # lazy: pulls in torch
                from fedspectral.fed.flower.apps.runner import train_server_main

                res = train_server_main(grid, context, config, **options)
            else:
                raise ValueError(f"run config task must be 'train' or 'ldp-pca', got {task!r}")
            if sink is not None:
                sink["results"] = res
        except BaseException as exc:
            if sink is not None:
                sink["error"] = exc
            if debug or not isinstance(exc, _USER_ERRORS):
                raise
            from flwr.common import log

            line = failure_line(exc)
            log(ERROR, "fedspectral: run FAILED: %s", line)
            # Flower marks the run finished:failed; its traceback is dropped from the log
            # (outcome.QuietFlower): the line above is the whole story
            raise RunFailed(line) from None

    return app


def _pca_context(context: Context) -> Context:
    """``task = "ldp-pca"``'s context, with ``out-dir`` defaulting as a training run's: a
    folder of the run's own, ``results/flower_app/run-<run id>`` under the working
    directory (its ``ldp_pca.json`` and ``ldp_pca_subspace.npy``; the log says where)."""
    import dataclasses
    from pathlib import Path

    if run_value(context.run_config, "out-dir"):
        return context
    run_id = int(getattr(context, "run_id", 0))
    out = Path("results") / "flower_app" / f"run-{run_id}"
    return dataclasses.replace(
        context, run_config={**context.run_config, "out-dir": str(out.resolve())}
    )


#: the ``serverapp`` component of ``flower/pyproject.toml``
app = make_server_app()
