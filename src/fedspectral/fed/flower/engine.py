r"""``run_flower_simulation(config)``: an experiment on Flower's simulation engine.

Runs the :mod:`.server_app` / :mod:`.client_app` pair with
``flwr.simulation.run_simulation`` (Ray backend, one virtual SuperNode per
client) and returns the same results dict as the in-process runner
(:class:`fedspectral.fed.simulation.Simulation`), with ``engine = "flower"``.
``fedspectral train --engine flower`` calls it.

Resources: Ray starts with ``num_cpus`` CPUs (default: the machine's) and each
ClientApp asks for ``run.threads`` of them (1 if unset) and uses that many torch
threads, so ``num_cpus // run.threads`` clients train at once.  Ray's start-up (several seconds) is paid
once per call, before round 1; it is reported as ``timings.flower_startup_seconds``
(wall time from the call to the first message) and excluded from the per-round
times.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["run_flower_simulation"]


def run_flower_simulation(
    config: Any,
    out_dir: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    stop_after: int | None = None,
    num_cpus: int | None = None,
    round_timeout: float = 600.0,
    fail: list[str] | None = None,
    client_dp: Any = None,
    write: bool = False,
    verbose: bool = False,
    capture: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``config`` on Flower's simulation engine; return the results dict.

    Parameters
    ----------
    config : ExperimentConfig
        A configuration as for the in-process runner.
    out_dir : path, optional
        Checkpoint (and, with ``write=True``, results) folder.
    resume : bool
        Continue from ``out_dir``'s checkpoint (written by either engine).
    stop_after : int, optional
        Stop after this round (to test interruption and resume).
    num_cpus : int, optional
        CPUs given to Ray.
    round_timeout : float
        Seconds the server waits for the replies of one phase.
    fail : list of str, optional
        Fault injection for tests: ``"client-1|2|train"`` makes client-1 raise in
        the ``train`` phase of round 2 (``*`` for every phase).
    client_dp : ClientDP, optional
        Client-level DP on model updates (:class:`.client_dp.ClientDP`).
    write : bool
        Write the result files into ``out_dir`` (``fedspectral train`` writes them
        itself).
    verbose : bool
        Flower's INFO logs (default: warnings only).
    capture : dict, optional
        Receives the final ``server_state`` (global weights, method arrays) and
        the ``ledger``.

    Raises
    ------
    ValueError
        Bad arguments or config (before Ray starts).
    """
    from fedspectral.experiments.config import validate

    cfg = validate(config)
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int)
                                 or num_cpus < 1):
        raise ValueError(f"num_cpus must be an integer >= 1, got {num_cpus!r}")
    if not round_timeout > 0:
        raise ValueError(f"round_timeout must be > 0, got {round_timeout!r}")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir (where the checkpoint is)")
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.simulation import prepare_federation

    # how many virtual nodes: one per client of the method's layout
    n_clients = len(prepare_federation(cfg, build_method(cfg)).clients)
    threads = int(cfg.run.threads or 1)  # torch threads of one ClientApp
    cpus = num_cpus or max(threads, os.cpu_count() or 1)

    from flwr.simulation import run_simulation

    from fedspectral.fed.flower.client_app import SIMULATION_POLICY, make_client_app
    from fedspectral.fed.flower.server_app import make_server_app

    sink: dict[str, Any] = {}
    server_app = make_server_app(cfg, sink=sink, out_dir=out_dir, resume=resume,
                                 stop_after=stop_after, round_timeout=round_timeout,
                                 fail=fail, client_dp=client_dp, write=write,
                                 capture=capture)
    # the virtual nodes are the experimenter's own: their policy allows what the
    # config asks for and draws the in-process runner's noise streams (bit-equality)
    client_app = make_client_app(cfg, policy=SIMULATION_POLICY)
    backend = {
        # one ClientApp per `threads` CPUs: with run.threads = 2 on 2 cores the
        # clients train one after the other, as in process (no oversubscription)
        "client_resources": {"num_cpus": threads, "num_gpus": 0.0},
        "init_args": {"num_cpus": cpus, "num_gpus": 0,
                      "logging_level": "INFO" if verbose else "ERROR",
                      "log_to_driver": verbose},
    }
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    if not verbose:
        flwr_logger.setLevel(logging.WARNING)
    t0 = time.perf_counter()
    try:
        run_simulation(server_app=server_app, client_app=client_app,
                       num_supernodes=n_clients, backend_name="ray", backend_config=backend)
    finally:
        flwr_logger.setLevel(level)
    total = time.perf_counter() - t0
    if "error" in sink:
        raise sink["error"]
    if "results" not in sink:
        raise RuntimeError("the Flower simulation ended without results (see Flower's log)")
    res = sink["results"]
    timings = res.setdefault("timings", {})
    timings["flower_wall_seconds"] = total
    # everything before round 1 and after the last: Ray start-up, data loading on the
    # virtual nodes (handshake), shutdown
    timings["flower_startup_seconds"] = max(0.0, total - timings.get("total_seconds", 0.0))
    timings["flower_num_cpus"] = cpus
    if write and out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    return res
