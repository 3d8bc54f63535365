r"""``run_flower_simulation(config)``: an experiment on Flower's simulation runtime, via
``flwr run``.

Flower 1.42 runs a simulation the way it runs a deployment: ``flwr run APP
CONNECTION`` submits the app to a SuperLink, here a local one started with
``--simulation``, whose SuperExec runs the run in one ``flwr-simulation``
process (the ServerApp, and the ClientApps of ``num-supernodes`` virtual
SuperNodes on the Ray backend).  ``flwr.simulation.run_simulation``, the Python
entry point that did all of this in the caller's process, is deprecated ("use
``flwr run``").  This module does what ``flwr run`` against a local simulation
federation does, for one experiment:

1. writes the configuration (JSON, exactly the caller's) and a small Flower app
   (``pyproject.toml`` naming this module's :data:`server_app` and
   :data:`client_app`) into a temporary work directory;
2. starts ``flower-superlink --simulation`` on 127.0.0.1
   (:class:`~.deploy.local.LocalDeployment` with ``simulation=True``; in-memory state,
   insecure loopback, the caller's working directory);
3. ``flwr run <app> fedspectral-local --run-config ... --federation-config
   "num-supernodes=N client-resources-num-cpus=T init-args-num-cpus=C ..."``;
4. waits until the ServerApp has written its *hand-back file* (the results dict and
   the run's final :class:`~fedspectral.fed.run_state.RunState`, in the checkpoint
   format of :mod:`fedspectral.fed.checkpoint`), or an error file, then stops the
   SuperLink.

It returns the same results dict as the in-process runner
(:class:`fedspectral.fed.simulation.Simulation`), with ``engine = "flower"``;
``fedspectral train --engine flower`` calls it.  The ServerApp is the deployment's
(:func:`.runner.train_server_main`); the virtual nodes' ClientApp is
:func:`.client_app.make_client_app` with :data:`~.client_app.SIMULATION_POLICY`
(they belong to the experimenter, who also runs the server: their noise is the
in-process runner's, so the two engines agree bit for bit).  A deployed node never
runs that ClientApp: :mod:`.node_runtime` runs only ``client_app:app``.

Resources: Ray starts with ``num_cpus`` CPUs (default: the machine's) and each
ClientApp asks for ``run.threads`` of them (1 if unset) and uses that many torch
threads, so ``num_cpus // run.threads`` clients train at once.  Everything before
round 1 and after the last (the SuperLink, ``flwr run``, the ``flwr-simulation``
process, Ray's start-up, the virtual nodes' data loading) is reported as
``timings.flower_startup_seconds`` and excluded from the per-round times.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedspectral.checks import NonFiniteError, check_int, check_real, describe
from fedspectral.config import ExperimentConfig, from_dict, to_dict
from fedspectral.fed.callbacks import Callback
from fedspectral.fed.flower.apps.client_app import SIMULATION_POLICY, make_client_app
from fedspectral.fed.flower.apps.grid import NODE_WAIT_S, ROUND_TIMEOUT_S
from fedspectral.fed.flower.deploy.local import LocalDeployment
from fedspectral.fed.flower.node.client_dp import ClientDP
from fedspectral.fed.flower.node.policy import PolicyRefusal
from fedspectral.fed.methods import build_method
from fedspectral.fed.records import RoundRecord
from fedspectral.fed.run_state import RunState
from fedspectral.fed.validation import config_fingerprint, ensure_valid, validate
from fedspectral.results import write_json

__all__ = [
    "APP_CONFIG",
    "CLIENT_APP",
    "client_app",
    "run_flower_simulation",
    "server_app",
    "write_app",
]

#: hand-back file of the ServerApp (results, run state), its error file, and
#: its progress file (one JSON line per round, read by the caller's progress bar)
HANDBACK, ERROR, PROGRESS = "handback.pt", "error.json", "progress.jsonl"

#: run-config keys of the simulation app (``[tool.flwr.app.config]``) and their defaults
APP_CONFIG: dict[str, Any] = {
    "config-json": "",  # the experiment configuration, JSON (to_dict of the config)
    "out-dir": "",  # checkpoint (and, with write, result files)
    "resume": False,
    "round-timeout": ROUND_TIMEOUT_S,
    "node-wait": NODE_WAIT_S,
    "dp-clip": 0.0,  # client-level DP (off when dp-noise-multiplier is 0)
    "dp-noise-multiplier": 0.0,
    "dp-seed": -1,
    "dp-delta": 1e-5,
    "dp-placement": "server",
    "write": False,  # write the result files into out-dir
    "handback-dir": "",  # where the hand-back (or error) file goes
    "simulation-token": "",  # lets the simulation policy's ClientApp serve (SIMULATION_ENV)
}

_PYPROJECT = """\
# fedspectral's Flower simulation app (written by fedspectral.fed.flower.apps.engine)
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fedspectral-simulation"
version = "0.1.0"
description = "fedspectral on Flower's simulation runtime (one experiment)"
license = "Apache-2.0"
requires-python = ">=3.11"
dependencies = []  # runs in the caller's environment (see flower/pyproject.toml)

[tool.flwr.app]
publisher = "fedspectral"

[tool.flwr.app.components]
serverapp = "fedspectral.fed.flower.apps.engine:server_app"
clientapp = "{clientapp}"

[tool.flwr.app.config]
{config}
"""


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))


#: the ``clientapp`` component of the simulation app
CLIENT_APP = "fedspectral.fed.flower.apps.engine:client_app"


def write_app(
    directory: str | os.PathLike,
    clientapp: str = CLIENT_APP,
    extra_config: Mapping[str, Any] | None = None,
) -> Path:
    """Write the simulation app (``pyproject.toml``) into ``directory``; return it.

    ``clientapp`` (``"module:attribute"``) names another ClientApp for the virtual
    nodes -- a module of ``directory`` itself, or an installed one -- for example one
    that wraps :data:`client_app`; ``extra_config`` adds run-config keys (and their
    values) that such a ClientApp reads from its ``context.run_config``.  Run it with
    ``run_flower_simulation(..., app_dir=directory)``.
    """
    if not isinstance(clientapp, str) or clientapp.count(":") != 1:
        raise ValueError(f"clientapp must be 'module:attribute', got {describe(clientapp)}")
    extra = dict(extra_config or {})
    clash = sorted(set(extra) & set(APP_CONFIG))
    if clash:
        raise ValueError(f"extra_config keys {clash} are the app's own run-config keys")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cfg = "\n".join(f"{k} = {_toml_value(v)}" for k, v in {**APP_CONFIG, **extra}.items())
    (d / "pyproject.toml").write_text(_PYPROJECT.format(config=cfg, clientapp=clientapp))
    return d


# -- the app's components (run in the flwr-simulation process) ------------------------------
server_app = ServerApp()

#: set by :func:`run_flower_simulation` in the environment of the processes it starts (a
#: fresh random token, also in the run config): the simulation policy's ClientApp serves
#: only where both agree, so a SuperNode -- whose environment no server sets -- cannot run
#: it, whatever a FAB names
SIMULATION_ENV = "FEDSPECTRAL_SIMULATION_TOKEN"


def _set_token() -> str:
    """A fresh token in this process's environment (:data:`SIMULATION_ENV`)."""
    token = secrets.token_hex(16)
    os.environ[SIMULATION_ENV] = token
    return token


def _simulation_only(context: Context) -> None:
    token = os.environ.get(SIMULATION_ENV, "")
    if not token or str(context.run_config.get("simulation-token", "")) != token:
        raise PolicyRefusal(
            "the simulation engine's ClientApp (no privacy limits, reproducible noise) runs "
            "only inside `fedspectral train --engine flower`; a deployed node serves "
            "fedspectral.fed.flower.apps.client_app:app with its own policy"
        )


#: the virtual nodes' ClientApp: the experimenter's own nodes (see the module docstring)
client_app = make_client_app(policy=SIMULATION_POLICY, guard=_simulation_only)


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    out = Path(str(rc["handback-dir"]))
    try:
        _serve(grid, context, out)
    except BaseException as exc:
        if not out.is_dir():  # the caller has gone and removed its folder: never recreate it
            raise
        write_json(
            out / ERROR,
            {
                "type": type(exc).__name__,
                "message": str(exc),
                "types": [c.__name__ for c in type(exc).__mro__],
                "traceback": traceback.format_exc(),
            },
        )
        raise


def _serve(grid: Grid, context: Context, out: Path) -> None:
    from fedspectral.fed.checkpoint import save_checkpoint  # lazy: pulls in torch
    from fedspectral.fed.flower.apps.runner import train_server_main  # lazy: pulls in torch

    rc = context.run_config
    cfg = validate(from_dict(json.loads(Path(str(rc["config-json"])).read_text())))
    client_dp = ClientDP.from_run_config(rc, delta=float(rc["dp-delta"]))
    state = _FinalState()
    res = train_server_main(
        grid,
        context,
        cfg,
        out_dir=str(rc["out-dir"]) or None,
        resume=bool(rc["resume"]),
        round_timeout=float(rc["round-timeout"]),
        node_wait=float(rc["node-wait"]),
        client_dp=client_dp,
        write=bool(rc["write"]),
        callbacks=[_ProgressFile(out / PROGRESS), state],
    )
    assert state.state is not None
    back = {
        "results": res,
        "state": state.state.to_dict(),
        "client_dp_events": list(client_dp.events) if client_dp is not None else [],
    }
    if not out.is_dir():  # the caller has gone and removed its folder: never recreate it
        raise RuntimeError(f"the hand-back folder {str(out)!r} is gone (the caller stopped)")
    save_checkpoint(out / HANDBACK, back, config_fingerprint(to_dict(cfg)))


class _FinalState(Callback):
    """ServerApp side of the hand-back: the run's state (which the runner updates in place
    until the run ends)."""

    state: Any = None

    def on_state(self, sim: Any, state: Any) -> None:
        self.state = state


class _ProgressFile(Callback):
    """ServerApp side of the caller's progress bar: each round's record, one JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_round_end(self, sim: Any, rnd: int, record: RoundRecord) -> bool | None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record.to_dict(), default=str) + "\n")
        return False


class _RoundProgress:
    """The caller's progress bar (as the in-process runner's), fed by :class:`_ProgressFile`:
    Flower's start-up shows as the bar at round 0, then one step per finished round."""

    def __init__(self, path: Path, cfg: ExperimentConfig, method: str) -> None:
        from fedspectral.fed.simulation import progress_bar  # lazy: pulls in torch

        self.path, self.seen = path, 0
        self.bar = progress_bar(
            cfg.run.progress, cfg.method.rounds, 0, f"{cfg.name} [{method}, Flower]"
        )
        if self.bar is not None:
            self.bar.set_postfix_str("starting Flower (SuperLink, Ray, the nodes' data)")

    def poll(self) -> None:
        """Show the rounds finished since the last call (complete lines only)."""
        from fedspectral.fed.simulation import show_round  # lazy: pulls in torch

        if self.bar is None or not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").split("\n")[:-1]
        for line in lines[self.seen :]:
            rec = RoundRecord.from_dict(json.loads(line))
            self.bar.n = rec.round - 1  # a resumed run starts past round 1
            show_round(self.bar, rec)
        self.seen = len(lines)

    def close(self) -> None:
        if self.bar is not None:
            self.poll()
            self.bar.close()


# -- the caller's side ------------------------------------------------------------------------
def _check_args(
    num_cpus: Any, round_timeout: Any, resume: bool, out_dir: Any, app_dir: Any
) -> None:
    if num_cpus is not None:
        check_int("num_cpus", num_cpus, low=1)
    check_real("round_timeout", round_timeout, low=0.0, low_open=True, allow_inf=True)
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir (where the checkpoint is)")
    if app_dir is not None and not (Path(app_dir) / "pyproject.toml").is_file():
        raise ValueError(
            f"app_dir={str(app_dir)!r} holds no pyproject.toml (write one with engine.write_app)"
        )


def _error_class(types: list[str]) -> type[Exception]:
    """The first of the ServerApp exception's classes (its MRO, by name) that this side
    knows: fedspectral's own errors, then the built-in ones; ``RuntimeError`` else."""
    from fedspectral.fed.checkpoint import CheckpointError  # lazy: pulls in torch

    known: dict[str, type[Exception]] = {
        e.__name__: e
        for e in (
            CheckpointError,
            NonFiniteError,
            ValueError,
            TypeError,
            KeyError,
            RuntimeError,
            FileNotFoundError,
            PermissionError,
            TimeoutError,
            NotImplementedError,
            ArithmeticError,
            OSError,
        )
    }
    return next((known[t] for t in types if t in known), RuntimeError)


def run_flower_simulation(
    config: Any,
    out_dir: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    num_cpus: int | None = None,
    round_timeout: float = ROUND_TIMEOUT_S,
    client_dp: Any = None,
    write: bool = False,
    verbose: bool = False,
    timeout: float | None = None,
    app_dir: str | os.PathLike | None = None,
    method: Any = None,
) -> dict[str, Any]:
    """Train ``config`` on Flower's simulation runtime (``flwr run``); return the results dict.

    The final state (global weights, method arrays, both ledgers) is the checkpoint's in
    ``out_dir`` (:func:`fedspectral.fed.simulation.load_run_state`); the ledgers are
    also in the results' ``privacy`` section.

    Parameters
    ----------
    config : ExperimentConfig
        A configuration as for the in-process runner.
    out_dir : path, optional
        Checkpoint (and, with ``write=True``, results) folder.
    resume : bool
        Continue from ``out_dir``'s checkpoint (written by either engine).
    num_cpus : int, optional
        CPUs given to Ray.
    round_timeout : float
        Seconds the server waits for the replies of one phase.
    client_dp : ClientDP, optional
        Client-level DP on model updates (:class:`.client_dp.ClientDP`); its
        options travel in the run config, and after the run it holds the run's
        client-level ledger and events (as if it had run here).
    write : bool
        Write the result files into ``out_dir`` (``fedspectral train`` writes them
        itself).
    verbose : bool
        Flower's INFO logs (the run's log, printed once it has ended).
    timeout : float, optional
        Seconds to wait for the whole run (default: ``round_timeout`` per phase of
        every round, plus 15 minutes).
    app_dir : path, optional
        A simulation app written by :func:`write_app` (e.g. with another ClientApp for
        the virtual nodes: the tests' fault-injecting one) to run instead of the
        default one.
    method : Method, optional
        The config's method, built already (``fedspectral train`` builds it once for its
        checks and the run); default: built here.  The ServerApp and the ClientApps,
        other processes, build their own from the config they receive.

    Raises
    ------
    ValueError
        Bad arguments or config (before any process starts).  An exception of the
        ServerApp is raised again here with its message and its type (or the
        nearest base this side knows: ``CheckpointError``, ``NonFiniteError``, a
        built-in exception; ``RuntimeError`` otherwise).
    """
    from fedspectral.fed.federation import client_ids  # lazy: pulls in torch

    cfg = ensure_valid(config)
    _check_args(num_cpus, round_timeout, resume, out_dir, app_dir)
    if timeout is not None:
        check_real("timeout", timeout, low=0.0, low_open=True, allow_inf=True)
    if method is None:
        method = build_method(cfg)
    # how many virtual nodes: one per client of the method's layout (no data loaded)
    n_clients = len(client_ids(cfg, method))
    threads = int(cfg.run.threads or 1)  # torch threads of one ClientApp
    cpus = num_cpus or max(threads, os.cpu_count() or 1)
    if timeout is None:
        timeout = round_timeout * len(method.phases) * cfg.method.rounds + 900.0

    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="fedspectral-flower-sim-"))
    token = _set_token()  # inherited by the processes started below
    try:
        (work / "config.json").write_text(json.dumps(to_dict(cfg)))
        app = Path(app_dir) if app_dir is not None else write_app(work / "app")
        hand = work / "handback"
        hand.mkdir()
        rc = _run_config(work, hand, token, out_dir, resume, round_timeout, write, client_dp)
        bar = _RoundProgress(hand / PROGRESS, cfg, method.name)

        def ended() -> bool:
            bar.poll()
            return (hand / HANDBACK).exists() or (hand / ERROR).exists()

        with LocalDeployment(
            n_clients,
            workdir=work / "superlink",
            simulation=True,
            federation_config=_federation_config(threads, cpus, verbose),
            cwd=os.getcwd(),
        ) as dep:
            run_id = dep.submit(app, rc)
            try:
                status = dep.wait(run_id, timeout=timeout, done=ended)
            finally:
                bar.close()
                if verbose:
                    print(dep.run_log(run_id), flush=True)
            log = dep.run_log(run_id) if not ended() else ""
        total = time.perf_counter() - t0
        back = _read_handback(hand, cfg, status, log)
    finally:
        os.environ.pop(SIMULATION_ENV, None)
        shutil.rmtree(work, ignore_errors=True)

    res = back["results"]
    if client_dp is not None:
        # the caller's object, as if the run had been here: bound to the run's
        # client-level ledger (its epsilon is that ledger's)
        state = RunState.from_dict(back["state"], cfg.method.rounds, client_ids(cfg, method))
        client_dp.bind(state.client_ledger)
        client_dp.events = list(back["client_dp_events"])
    timings = res.setdefault("timings", {})
    timings["flower_wall_seconds"] = total
    # everything before round 1 and after the last: the SuperLink, flwr run, the
    # flwr-simulation process, Ray, data loading on the virtual nodes, shutdown
    timings["flower_startup_seconds"] = max(0.0, total - timings.get("total_seconds", 0.0))
    timings["flower_num_cpus"] = cpus
    res.setdefault("flower", {})["runtime"] = "flwr run (local simulation SuperLink)"
    return res


def _run_config(
    work: Path,
    hand: Path,
    token: str,
    out_dir: Any,
    resume: bool,
    round_timeout: float,
    write: bool,
    client_dp: Any,
) -> dict[str, Any]:
    """The run config of the simulation app (:data:`APP_CONFIG`'s keys) for this run."""
    rc: dict[str, Any] = {
        "config-json": str(work / "config.json"),
        "out-dir": str(Path(out_dir).resolve()) if out_dir is not None else "",
        "resume": bool(resume),
        "round-timeout": float(round_timeout),
        "write": bool(write) and out_dir is not None,
        "handback-dir": str(hand),
        "simulation-token": token,
    }
    if client_dp is not None:
        rc.update(client_dp.to_run_config())
    return rc


def _federation_config(threads: int, cpus: int, verbose: bool) -> dict[str, Any]:
    """The local simulation federation's options (Ray's resources, logging)."""
    return {
        # one ClientApp per `threads` CPUs: with run.threads = 2 on 2 cores the
        # clients train one after the other, as in process (no oversubscription)
        "client-resources-num-cpus": threads,
        "client-resources-num-gpus": 0.0,
        "init-args-num-cpus": cpus,
        "init-args-num-gpus": 0,
        "init-args-logging-level": "INFO" if verbose else "ERROR",
        "init-args-log-to-driver": bool(verbose),
        "verbose": bool(verbose),
    }


def _read_handback(hand: Path, cfg: ExperimentConfig, status: Any, log: str) -> dict[str, Any]:
    """The ServerApp's hand-back (results, run state), or its error raised again here."""
    from fedspectral.fed.checkpoint import load_checkpoint  # lazy: pulls in torch

    if (hand / ERROR).exists():
        err = json.loads((hand / ERROR).read_text())
        raise _error_class(list(err.get("types", [err["type"]])))(err["message"])
    if not (hand / HANDBACK).exists():
        raise RuntimeError(
            f"the Flower simulation run ended {status!r} without results; its log:\n{log[-4000:]}"
        )
    return load_checkpoint(hand / HANDBACK, config_fingerprint(to_dict(cfg)))
