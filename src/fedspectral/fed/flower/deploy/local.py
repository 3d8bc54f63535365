r"""A Flower deployment on loopback: one SuperLink, N SuperNodes, ``flwr run``.

This is Flower's *Deployment Engine* (``flower-superlink`` + ``flower-supernode``
+ ``flwr run``), started as local subprocesses on 127.0.0.1 -- for tests, demos
and the documentation's commands.  A real deployment runs the same three
commands on different machines, with TLS and SuperNode authentication
(``LocalDeployment(..., tls=True, auth=True)`` does that here: a test CA, a
server certificate for 127.0.0.1 and one EC key pair per SuperNode, generated at
start-up with ``cryptography`` into the work directory, never stored elsewhere).

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
  here the environment already holds them (``--disable-runtime-dependency-installation``);
* TLS: ``flower-superlink --ssl-ca-certfile CA --ssl-certfile CERT --ssl-keyfile KEY``
  serves all three APIs over HTTPS; a SuperNode verifies it with
  ``--root-certificates CA``, the ``flwr`` CLI with ``root-certificates = CA`` in its
  connection;
* ``flower-supernode --isolation process`` starts no ClientApp process itself: an
  independent process polls its Runtime API for tasks (here
  :mod:`.node_runtime`, one per node, which handles every message in one process;
  in the default ``subprocess`` mode the SuperNode's ``flower-superexec`` starts a
  fresh ``flwr-clientapp`` per message);
* ``flower-superlink --simulation``: its SuperExec runs each submitted run in one
  ``flwr-simulation`` process (the ServerApp and the ClientApps of
  ``num-supernodes`` virtual SuperNodes on Ray), sized by ``flwr run
  --federation-config "num-supernodes=N client-resources-num-cpus=..."``;
* SuperNode authentication: ``flower-superlink --enable-supernode-auth`` (needs TLS)
  accepts only SuperNodes whose public key (OpenSSH, NIST curve) was registered with
  ``flwr supernode register KEY.pub CONNECTION``; the SuperNode signs with
  ``--auth-supernode-private-key KEY`` (OpenSSH private key);
* each node is plain ``flower-supernode``; it sleeps a fixed 3 s between two polls of
  the SuperLink when no message waits (0.5 s while it waits for a reply), which adds
  about 1.5 s to a phase on loopback.

Every process is started in its own session (process group); :meth:`LocalDeployment.stop`
sends SIGTERM to each group, waits a bounded time, then SIGKILLs what is left, so
the ServerApp/ClientApp processes that the SuperLink/SuperNodes spawn go too.
All waits are bounded.
"""

from __future__ import annotations

import contextlib
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

from fedspectral.checks import check_choice
from fedspectral.fed.flower.deploy.certs import HOST, make_node_key, make_tls_certificates
from fedspectral.fed.flower.deploy.processes import stop_tree

__all__ = [
    "CONNECTION",
    "LocalDeployment",
    "format_run_config",
    "free_port",
]

#: name of the SuperLink connection written to ``$FLWR_HOME/config.toml``
CONNECTION = "fedspectral-local"
#: ``LocalDeployment(isolation=...)``: how a SuperNode runs its ClientApp
ISOLATIONS = ("process", "subprocess")


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
            raise TypeError(
                f"run-config value of {k!r} must be bool, int, float or str, got {type(v).__name__}"
            )
        parts.append(f"{k}={s}")
    return " ".join(parts)


def _bin(name: str) -> str:
    """The Flower command ``name`` next to this interpreter (the venv), else on PATH."""
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"Flower command {name!r} not found next to {sys.executable} or on PATH (install flwr)"
        )
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
        Extra per-node configuration, e.g. the node's own data (``data-dataset``,
        ``data-root``, ``data-shard``: :mod:`.node.data`).  A node without it serves only
        if ``policy`` makes it a simulation node (``{"simulation": True}``: it cuts its
        partition from the server's plan, as the tests' deployments do).
    startup_timeout : float
        Seconds to wait for each server to open its port.
    policy : dict, optional
        Privacy-policy keys given to every node (``{"allow-nonprivate": True}``
        becomes ``--node-config "policy-allow-nonprivate=true"``, see
        :mod:`.node.policy`); each node also gets its own ``policy-ledger-dir``
        in the work directory and, unless ``policy`` names a ``secagg-roster``, its
        secure-aggregation identity: one Ed25519 key per node and the roster of their
        public keys, written in ``<workdir>/secagg`` at start-up
        (:func:`.secure_sum.write_identities`; the operator of all the nodes is the
        party that distributes the roster here).
    tls : bool
        Serve the SuperLink over TLS (test CA and certificate in ``<workdir>/certs``);
        nodes and the ``flwr`` CLI verify it with the CA.
    auth : bool
        SuperNode authentication (needs ``tls``): one key pair per node, each public
        key registered with the SuperLink before the node starts.
    isolation : {"process", "subprocess"}
        How each SuperNode runs its ClientApp (``flower-supernode --isolation``).
        ``"process"`` (default): next to each SuperNode (``supernode-<i>-runtime``
        in :attr:`procs`, watching the SuperNode's pid), one long-lived
        :mod:`.node_runtime` process handles every message, so the imports, the
        node's own partition and its network are kept between messages.
        ``"subprocess"``: Flower's default, a fresh ``flwr-clientapp`` process per
        message (imports PyTorch and builds the node's data each time).
    simulation : bool
        A local *simulation* federation instead: the SuperLink runs with
        ``--simulation`` and no SuperNode is started; ``flwr run`` (:meth:`submit`)
        then runs the ServerApp and ``num_nodes`` virtual SuperNodes' ClientApps in
        one ``flwr-simulation`` process (Ray backend).  Insecure loopback only.
    federation_config : dict, optional
        With ``simulation``: ``flwr run --federation-config`` keys besides
        ``num-supernodes`` (``client-resources-num-cpus``, ``init-args-num-cpus``,
        ``init-args-logging-level``, ``verbose``, ...).
    cwd : path, optional
        Working directory of the Flower processes (default: the work directory).

    Examples
    --------
    >>> with LocalDeployment(3) as dep:                      # doctest: +SKIP
    ...     status = dep.run("flower", {"task": "ldp-pca"}, timeout=120)
    """

    num_nodes: int = 3
    workdir: str | os.PathLike | None = None
    node_config: list[Mapping[str, Any]] | None = None
    startup_timeout: float = 60.0
    policy: Mapping[str, Any] | None = None
    tls: bool = False
    auth: bool = False
    isolation: str = "process"
    simulation: bool = False
    federation_config: Mapping[str, Any] | None = None
    cwd: str | os.PathLike | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    superlink_port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.num_nodes, int) or self.num_nodes < 1:
            raise ValueError(f"num_nodes must be an integer >= 1, got {self.num_nodes!r}")
        if self.node_config is not None and len(self.node_config) != self.num_nodes:
            raise ValueError(
                f"node_config must have {self.num_nodes} entries, got {len(self.node_config)}"
            )
        if not self.startup_timeout > 0:
            raise ValueError(f"startup_timeout must be > 0, got {self.startup_timeout!r}")
        if not isinstance(self.tls, bool) or not isinstance(self.auth, bool):
            raise TypeError(f"tls and auth must be True or False, got {self.tls!r}, {self.auth!r}")
        check_choice("isolation", self.isolation, ISOLATIONS)
        if not isinstance(self.simulation, bool):
            raise TypeError(f"simulation must be True or False, got {self.simulation!r}")
        if self.simulation and self.tls:
            raise ValueError(
                "a simulation federation runs on insecure loopback only (tls=False, auth=False)"
            )
        if self.federation_config is not None and not self.simulation:
            raise ValueError("federation_config needs simulation=True")
        if self.auth and not self.tls:
            raise ValueError(
                "auth=True needs tls=True (Flower authenticates SuperNodes over TLS only)"
            )
        self.certs: dict[str, Path] = {}
        self.node_keys: dict[str, dict[str, Path]] = {}
        self._own_dir = self.workdir is None
        self._logs: dict[str, Any] = {}

    # -- environment ------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        if self.workdir is None:  # set by start()
            raise RuntimeError("the deployment has no working folder before it starts")
        return Path(self.workdir)

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
        """Start the SuperLink, then the SuperNodes; return once their ports are open (and,
        in ``process`` isolation, their node runtimes serve)."""
        if self.procs:
            raise RuntimeError("deployment already started")
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="fedspectral-flower-")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        try:
            self.superlink_port = free_port()
            conn = f'[superlink.{CONNECTION}]\naddress = "{HOST}:{self.superlink_port}"\n'
            link = [
                _bin("flower-superlink"),
                "--host",
                HOST,
                "--port",
                str(self.superlink_port),
                "--disable-runtime-dependency-installation",
            ]
            if self.tls:
                self.certs = make_tls_certificates(self.dir / "certs")
                conn += f'root-certificates = "{self.certs["ca"]}"\n'
                link += [
                    "--ssl-ca-certfile",
                    str(self.certs["ca"]),
                    "--ssl-certfile",
                    str(self.certs["cert"]),
                    "--ssl-keyfile",
                    str(self.certs["key"]),
                ]
                if self.auth:
                    link.append("--enable-supernode-auth")
            else:
                conn += "insecure = true\n"
                link.append("--insecure")
            if self.simulation:
                link.append("--simulation")
            (self.flwr_home / "config.toml").write_text(
                f'[superlink]\ndefault = "{CONNECTION}"\n\n{conn}'
            )
            self._spawn("superlink", link)  # in-memory state: a fresh federation each time
            self._wait_port("superlink", self.superlink_port)
            node_ports = []
            ids = self._secagg_identities()
            for i in range(0 if self.simulation else self.num_nodes):
                name = f"supernode-{i}"
                if self.auth:
                    self.node_keys[name] = make_node_key(self.dir / "keys", name)
                    self.register_node_key(self.node_keys[name]["pub"])
                cfg: dict[str, Any] = {"partition-id": i, "num-partitions": self.num_nodes}
                for k, v in (self.policy or {}).items():
                    cfg[f"policy-{k}"] = v
                cfg.setdefault("policy-ledger-dir", str(self.dir / f"ledger-{i}"))
                if ids is not None:
                    cfg.setdefault("policy-secagg-roster", str(ids[0]))
                    cfg.setdefault("policy-secagg-identity", str(ids[1][f"client-{i}"]))
                if self.node_config is not None:
                    cfg.update(self.node_config[i])
                node_ports.append(self.start_node(name, cfg))
            for i, port in enumerate(node_ports):
                self._wait_port(f"supernode-{i}", port)
            if self.isolation == "process":
                for i in range(len(node_ports)):
                    self._wait_serving(f"supernode-{i}-runtime")
        except BaseException:
            self.stop()
            raise
        return self

    def register_node_key(self, public_key: str | os.PathLike) -> None:
        """``flwr supernode register KEY.pub``: let the SuperLink accept that key."""
        res = self.flwr("supernode", "register", str(public_key), CONNECTION)
        if res.returncode != 0:
            raise RuntimeError(
                f"flwr supernode register failed (code {res.returncode}):\n"
                f"{res.stdout}\n{res.stderr}"
            )

    def _secagg_identities(self) -> tuple[Path, dict[str, Path]] | None:
        """The nodes' secure-aggregation identities (class docstring), or ``None``."""
        if self.simulation or "secagg-roster" in (self.policy or {}):
            return None
        # lazy: pulls in Flower and dp-accounting
        from fedspectral.fed.flower.node.secure_sum import write_identities

        return write_identities(self.dir / "secagg", [f"client-{i}" for i in range(self.num_nodes)])

    def start_node(
        self,
        name: str,
        node_config: Mapping[str, Any],
        *,
        private_key: str | os.PathLike | None = None,
        root_certificates: str | os.PathLike | None | bool = True,
        max_wait: float | None = None,
    ) -> int:
        """Start one SuperNode ``name`` and return its Runtime API port (not waited for).

        By default it uses this deployment's TLS CA (``root_certificates=True``) and
        its own registered key (``private_key`` None with ``auth``); tests pass
        another key, or ``root_certificates=False`` (no CA: the system's roots).
        """
        port = free_port()
        argv = [
            _bin("flower-supernode"),
            "--superlink",
            f"{HOST}:{self.superlink_port}",
            "--host",
            HOST,
            "--port",
            str(port),
            "--node-config",
            format_run_config(node_config),
            "--max-wait-time",
            str(float(max_wait or self.startup_timeout)),
        ]
        if not self.tls:
            argv.append("--insecure")
        elif root_certificates is True:
            argv += ["--root-certificates", str(self.certs["ca"])]
        elif root_certificates:
            argv += ["--root-certificates", str(root_certificates)]
        key = (
            private_key
            if private_key is not None
            else (self.node_keys[name]["key"] if name in self.node_keys else None)
        )
        if key is not None:
            argv += ["--auth-supernode-private-key", str(key)]
        argv += ["--isolation", self.isolation]
        self._spawn(name, argv)
        if self.isolation == "process":
            # the node's ClientApp runtime: it exits when its SuperNode is gone
            # (and kill_node / stop signal it with its SuperNode)
            # nodes that share this machine share its cores: PyTorch's default of one
            # thread per core in every node oversubscribes them
            threads = str(max(1, (os.cpu_count() or 1) // self.num_nodes))
            self._spawn(
                f"{name}-runtime",
                [
                    sys.executable,
                    "-m",
                    "fedspectral.fed.flower.deploy.node_runtime",
                    "--runtime-api-address",
                    f"{HOST}:{port}",
                    "--insecure",
                    "--parent-pid",
                    str(self.procs[name].pid),
                ],
                extra_env={"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads},
            )
        return port

    def _spawn(
        self, name: str, argv: list[str], extra_env: Mapping[str, str] | None = None
    ) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        self._logs[name] = log
        self.procs[name] = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**self.env(), **(extra_env or {})},
            cwd=str(self.cwd if self.cwd is not None else self.dir),
            start_new_session=True,
        )

    def _wait_until(self, name: str, ready: Callable[[], bool], failing: str) -> None:
        """Poll ``ready()`` every 0.2 s until it holds; raise if process ``name`` exits
        first or ``startup_timeout`` passes (``failing``: what it did not do)."""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            p = self.procs[name]
            if p.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {p.returncode} during start-up; "
                    f"log:\n{self.log(name)[-3000:]}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"{name} {failing} within {self.startup_timeout} s")

    def _wait_port(self, name: str, port: int) -> None:
        self._wait_until(name, lambda: _port_open(port), f"did not open port {port}")

    def _wait_serving(self, name: str) -> None:
        """Wait until node runtime ``name`` has paid its one-off costs and polls its
        SuperNode (its ``serving`` log line), so that they are start-up, not round 1."""
        self._wait_until(name, lambda: "; serving " in self.log(name), "was not serving")

    def log(self, name: str) -> str:
        """The combined stdout/stderr of process ``name`` so far."""
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` and its ClientApp processes (its runtime) at once: a
        crashed client."""
        name = f"supernode-{i}"
        p = self.procs.get(name)
        if p is None:
            raise ValueError(f"no SuperNode {i} (have {self.num_nodes})")
        _kill_group(p, signal.SIGKILL, 5.0)
        if f"{name}-runtime" in self.procs:
            _kill_group(self.procs[f"{name}-runtime"], signal.SIGKILL, 5.0)

    def pgids(self) -> list[int]:
        """Process-group ids of the started processes (their pids)."""
        return [p.pid for p in self.procs.values()]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every started process, everything it started (the SuperLink's detached
        SuperExec, ``flwr-simulation``, Ray's processes) and their groups, wait up to
        ``timeout`` s, SIGKILL the rest (:func:`.processes.stop_tree`)."""
        procs = list(self.procs.values())
        stop_tree([p.pid for p in procs], timeout)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5.0)
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
        return subprocess.run(
            [_bin("flwr"), *args],
            check=False,
            env=self.env(),
            cwd=str(self.dir),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def submit(
        self, app_dir: str | os.PathLike, run_config: Mapping[str, Any] | None = None
    ) -> int:
        """``flwr run APP_DIR fedspectral-local --run-config ...`` (in simulation, with
        ``--federation-config "num-supernodes=N ..."``); return the run id."""
        app = Path(app_dir).resolve()
        if not (app / "pyproject.toml").exists():
            raise FileNotFoundError(f"no Flower app (pyproject.toml) in {app}")
        args = ["run", str(app), CONNECTION, "--format", "json"]
        if run_config:
            args += ["--run-config", format_run_config(run_config)]
        if self.simulation:
            fed = {"num-supernodes": self.num_nodes, **(self.federation_config or {})}
            args += ["--federation-config", format_run_config(fed)]
        res = self.flwr(*args)
        try:
            out = json.loads(res.stdout[res.stdout.index("{") :])
        except ValueError:
            out = {}
        if res.returncode != 0 or not out.get("success"):
            raise RuntimeError(
                f"flwr run failed (code {res.returncode}):\n{res.stdout}\n{res.stderr}"
            )
        return int(out["run-id"])

    def status(self, run_id: int) -> str:
        """Status of a run (``pending``, ``running``, ``finished:completed``, ...)."""
        res = self.flwr("ls", CONNECTION, "--run-id", str(run_id), "--format", "json")
        try:
            out = json.loads(res.stdout[res.stdout.index("{") :])
            return str(out["runs"][0]["status"])
        except (ValueError, KeyError, IndexError):
            return f"unknown ({res.stdout.strip()[-200:]} {res.stderr.strip()[-200:]})"

    def wait(
        self,
        run_id: int,
        timeout: float = 300.0,
        poll: float = 3.0,
        done: Callable[[], bool] | None = None,
    ) -> str:
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

    def run_log(self, run_id: int) -> str:
        """The run's log as the SuperLink holds it (``flwr log RUN_ID --show``)."""
        res = self.flwr("log", str(run_id), CONNECTION, "--show")
        return res.stdout + res.stderr

    def run(
        self,
        app_dir: str | os.PathLike,
        run_config: Mapping[str, Any] | None = None,
        timeout: float = 300.0,
        done: Callable[[], bool] | None = None,
    ) -> str:
        """Submit a run and wait for it (see :meth:`wait`); return its final status."""
        return self.wait(self.submit(app_dir, run_config), timeout=timeout, done=done)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_group(p: subprocess.Popen, sig: int, timeout: float) -> None:
    _signal_group(p.pid, sig)
    # a timeout is not expected after SIGKILL (it cannot be ignored)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=timeout)
