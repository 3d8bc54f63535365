r"""A Flower deployment on loopback: one SuperLink, N SuperNodes, ``flwr run``.

This is Flower's *Deployment Engine* (``flower-superlink`` + ``flower-supernode``
+ ``flwr run``), started as local subprocesses on 127.0.0.1 -- for tests, demos
and the documentation's commands.  A real deployment runs the same three
commands on different machines (with TLS instead of ``--insecure``).

Flower 1.42 facts this relies on (read from the installed source):

* the SuperLink serves its Fleet, Control and Runtime APIs over HTTP on one
  ``--host``/``--port``; each SuperNode serves its own Runtime API on its own
  ``--port`` and reaches the SuperLink with ``--superlink HOST:PORT``;
* ``flwr run APP_DIR CONNECTION`` reads the SuperLink connection ``CONNECTION``
  from ``$FLWR_HOME/config.toml`` (``[superlink.<name>] address, insecure``),
  builds the FAB from ``APP_DIR`` and returns once the run is *submitted*; its
  status is then polled with ``flwr ls CONNECTION --run-id ID --format json``
  until it reads ``finished:...``;
* the SuperLink would ``uv sync`` an app's dependencies at run time by default;
  here the environment already holds them (``--disable-runtime-dependency-installation``).

Every process is started in its own session (process group); :meth:`LocalDeployment.stop`
sends SIGTERM to each group, waits a bounded time, then SIGKILLs what is left, so
the ServerApp/ClientApp processes that the SuperLink/SuperNodes spawn go too.
All waits are bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

__all__ = ["CONNECTION", "LocalDeployment", "format_run_config", "free_port"]

#: name of the SuperLink connection written to ``$FLWR_HOME/config.toml``
CONNECTION = "fedspectral-local"
HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((HOST, port)) == 0


def format_run_config(cfg: Mapping[str, Any]) -> str:
    """``{"a": 1, "b": "x"}`` -> ``'a=1 b="x"'`` (TOML values, as ``flwr run --run-config``)."""
    parts = []
    for k, v in cfg.items():
        if not isinstance(k, str) or not k or any(c.isspace() or c == "=" for c in k):
            raise ValueError(f"run-config key must be a non-empty word, got {k!r}")
        if isinstance(v, bool):
            s = "true" if v else "false"
        elif isinstance(v, int | float):
            s = repr(v)
        elif isinstance(v, str):
            s = json.dumps(v)  # a TOML basic string
        else:
            raise TypeError(f"run-config value of {k!r} must be bool, int, float or str, "
                            f"got {type(v).__name__}")
        parts.append(f"{k}={s}")
    return " ".join(parts)


def _bin(name: str) -> str:
    """The Flower command ``name`` next to this interpreter (the venv), else on PATH."""
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"Flower command {name!r} not found next to {sys.executable} "
                                "or on PATH (install flwr)")
    return found


@dataclass
class LocalDeployment:
    """SuperLink + ``num_nodes`` SuperNodes on 127.0.0.1, as subprocesses.

    Parameters
    ----------
    num_nodes : int
        Number of SuperNodes; node ``i`` gets ``--node-config "partition-id=i
        num-partitions=N"`` plus ``node_config[i]`` if given.
    workdir : path, optional
        Logs and ``FLWR_HOME`` go here (a temporary directory, removed on
        :meth:`stop`, when not given).  The SuperLink keeps its state in memory.
    node_config : list of dict, optional
        Extra per-node configuration (e.g. where the node's data lives).
    startup_timeout : float
        Seconds to wait for each server to open its port.

    Examples
    --------
    >>> with LocalDeployment(3) as dep:                      # doctest: +SKIP
    ...     status = dep.run("flower", {"task": "ldp-pca"}, timeout=120)
    """

    num_nodes: int = 3
    workdir: str | os.PathLike | None = None
    node_config: list[Mapping[str, Any]] | None = None
    startup_timeout: float = 60.0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    superlink_port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.num_nodes, int) or self.num_nodes < 1:
            raise ValueError(f"num_nodes must be an integer >= 1, got {self.num_nodes!r}")
        if self.node_config is not None and len(self.node_config) != self.num_nodes:
            raise ValueError(f"node_config must have {self.num_nodes} entries, "
                             f"got {len(self.node_config)}")
        if not self.startup_timeout > 0:
            raise ValueError(f"startup_timeout must be > 0, got {self.startup_timeout!r}")
        self._own_dir = self.workdir is None
        self._logs: dict[str, Any] = {}

    # -- environment ------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return Path(self.workdir)  # type: ignore[arg-type]

    @property
    def flwr_home(self) -> Path:
        return self.dir / "flwr-home"

    def env(self) -> dict[str, str]:
        """Environment of every Flower process: our ``FLWR_HOME``, the venv first on PATH."""
        env = dict(os.environ)
        env["FLWR_HOME"] = str(self.flwr_home)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["FLWR_TELEMETRY_ENABLED"] = "0"
        return env

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Self:
        """Start the SuperLink, then the SuperNodes; return once their ports are open."""
        if self.procs:
            raise RuntimeError("deployment already started")
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="fedspectral-flower-")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        try:
            self.superlink_port = free_port()
            (self.flwr_home / "config.toml").write_text(
                f'[superlink]\ndefault = "{CONNECTION}"\n\n'
                f'[superlink.{CONNECTION}]\naddress = "{HOST}:{self.superlink_port}"\n'
                "insecure = true\n"
            )
            self._spawn("superlink", [
                _bin("flower-superlink"), "--insecure", "--host", HOST,
                "--port", str(self.superlink_port),
                "--disable-runtime-dependency-installation",
            ])  # in-memory state: a fresh federation each time (no stale nodes)
            self._wait_port("superlink", self.superlink_port)
            node_ports = []
            for i in range(self.num_nodes):
                port = free_port()
                node_ports.append(port)
                cfg: dict[str, Any] = {"partition-id": i, "num-partitions": self.num_nodes}
                if self.node_config is not None:
                    cfg.update(self.node_config[i])
                self._spawn(f"supernode-{i}", [
                    _bin("flower-supernode"), "--insecure",
                    "--superlink", f"{HOST}:{self.superlink_port}",
                    "--host", HOST, "--port", str(port),
                    "--node-config", format_run_config(cfg),
                    "--max-wait-time", str(float(self.startup_timeout)),
                ])
            for i, port in enumerate(node_ports):
                self._wait_port(f"supernode-{i}", port)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        self._logs[name] = log
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env(), cwd=str(self.dir), start_new_session=True,
        )

    def _wait_port(self, name: str, port: int) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            p = self.procs[name]
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with code {p.returncode} during start-up; "
                                   f"log:\n{self.log(name)[-3000:]}")
            if _port_open(port):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{name} did not open port {port} within {self.startup_timeout} s")

    def log(self, name: str) -> str:
        """The combined stdout/stderr of process ``name`` so far."""
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` (and its ClientApp processes) at once: a crashed client."""
        name = f"supernode-{i}"
        p = self.procs.get(name)
        if p is None:
            raise ValueError(f"no SuperNode {i} (have {self.num_nodes})")
        _kill_group(p, signal.SIGKILL, 5.0)

    def pgids(self) -> list[int]:
        """Process-group ids of the started processes (their pids)."""
        return [p.pid for p in self.procs.values()]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process group, wait up to ``timeout`` s, SIGKILL the rest."""
        procs = list(self.procs.values())
        for p in procs:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            _kill_group(p, signal.SIGKILL, 5.0)
        # children that outlived their parent in the group
        for p in procs:
            _signal_group(p.pid, signal.SIGKILL)
        for f in self._logs.values():
            f.close()
        self._logs.clear()
        if self._own_dir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- runs -------------------------------------------------------------------------
    def flwr(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run the ``flwr`` CLI against this deployment (bounded by ``timeout``)."""
        return subprocess.run([_bin("flwr"), *args], check=False, env=self.env(), cwd=str(self.dir),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def submit(self, app_dir: str | os.PathLike, run_config: Mapping[str, Any] | None = None
               ) -> int:
        """``flwr run APP_DIR fedspectral-local --run-config ...``; return the run id."""
        app = Path(app_dir).resolve()
        if not (app / "pyproject.toml").exists():
            raise FileNotFoundError(f"no Flower app (pyproject.toml) in {app}")
        args = ["run", str(app), CONNECTION, "--format", "json"]
        if run_config:
            args += ["--run-config", format_run_config(run_config)]
        res = self.flwr(*args)
        try:
            out = json.loads(res.stdout[res.stdout.index("{"):])
        except ValueError:
            out = {}
        if res.returncode != 0 or not out.get("success"):
            raise RuntimeError(f"flwr run failed (code {res.returncode}):\n{res.stdout}\n"
                               f"{res.stderr}")
        return int(out["run-id"])

    def status(self, run_id: int) -> str:
        """Status of a run (``pending``, ``running``, ``finished:completed``, ...)."""
        res = self.flwr("ls", CONNECTION, "--run-id", str(run_id), "--format", "json")
        try:
            out = json.loads(res.stdout[res.stdout.index("{"):])
            return str(out["runs"][0]["status"])
        except (ValueError, KeyError, IndexError):
            return f"unknown ({res.stdout.strip()[-200:]} {res.stderr.strip()[-200:]})"

    def wait(self, run_id: int, timeout: float = 300.0, poll: float = 3.0,
             done: Callable[[], bool] | None = None) -> str:
        """Poll until the run is finished (bounded by ``timeout``); return its status.

        Each status poll is a ``flwr ls`` process (about a second of CPU, taken from
        the run itself on a small machine), hence one every ``poll`` s.  With
        ``done`` (e.g. "the result file exists"), ``done()`` is checked every 0.2 s
        and ``flwr ls`` only every 15 s (to notice a failed run) until it holds.
        """
        deadline = time.monotonic() + timeout
        st = "unknown"
        last_ls = time.monotonic()
        while done is not None and time.monotonic() < deadline and not done():
            time.sleep(0.2)
            if time.monotonic() - last_ls > 15.0:
                last_ls = time.monotonic()
                st = self.status(run_id)
                if st.startswith("finished"):
                    return st
        if done is not None:
            poll = min(poll, 1.0)
        while time.monotonic() < deadline:
            st = self.status(run_id)
            if st.startswith("finished"):
                return st
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
        self.flwr("stop", str(run_id), CONNECTION)
        raise TimeoutError(f"run {run_id} not finished after {timeout} s (last status {st!r})")

    def run(self, app_dir: str | os.PathLike, run_config: Mapping[str, Any] | None = None,
            timeout: float = 300.0, done: Callable[[], bool] | None = None) -> str:
        """Submit a run and wait for it (see :meth:`wait`); return its final status."""
        return self.wait(self.submit(app_dir, run_config), timeout=timeout, done=done)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(p: subprocess.Popen, sig: int, timeout: float) -> None:
    _signal_group(p.pid, sig)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass


def live_processes_in_groups(pgids: list[int]) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is one of ``pgids``."""
    want = set(pgids)
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...
        rest = stat[stat.rindex(")") + 2:].split()
        if rest[0] != "Z" and int(rest[2]) in want:
            out.append(int(d.name))
    return out
