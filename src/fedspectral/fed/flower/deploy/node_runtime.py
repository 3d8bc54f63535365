r"""A SuperNode's ClientApp runtime in Flower's ``process`` isolation mode: one process,
many messages.

Flower 1.42's SuperNode runs ClientApps in one of two isolation modes
(``flower-supernode --isolation``):

``subprocess`` (the default)
    the SuperNode starts a ``flower-superexec``, which polls the SuperNode's Runtime
    API (``AcquireTask``) and starts a fresh ``flwr-clientapp --token ...`` process
    for *every* message; that process installs the run's FAB, loads its ClientApp,
    handles the one message and exits (``flwr.supernode.runtime.run_clientapp``);
``process``
    the SuperNode starts nothing: "a separate independent process" polls its
    Runtime API.  Flower's own such process is again ``flower-superexec``, which
    again starts one ``flwr-clientapp`` per message (its ``--clientappio-api-address``
    option is gone: ``flwr-clientapp`` takes a token and serves exactly one task).

A fedspectral message then pays for importing PyTorch and building the node's data
and network every time (about two CPU seconds each, ten messages a round for five
nodes).  This module is the independent process of the ``process`` mode instead:
it polls the Runtime API of *its* SuperNode and handles each task itself, in a loop,
with the same calls as ``flwr-clientapp`` (``pull_task_input``, the ClientApp,
``push_message``, ``push_task_output``), so what a process keeps -- the imports, the
node's own partition, the network, the noise-calibration cache
(:mod:`.client_app`'s process cache) -- stays between messages.  The node's
``context.state`` (FedSC's cached weights, the baselines' target networks) still
lives in the SuperNode, handed in and out with every task, as in the other modes.

The node runs its own code: the ClientApp is fedspectral's
(:data:`fedspectral.fed.flower.apps.client_app.app`), imported from the node's own
installation, never from the run's FAB (a server cannot ship the node other code).
A run whose FAB names another ClientApp is answered with an error.  The node's
privacy policy is read from its ``--node-config``/policy file as in any mode
(:mod:`.node.policy`).

Usage, next to ``flower-supernode --isolation process --port P ...``::

    python -m fedspectral.fed.flower.deploy.node_runtime --runtime-api-address 127.0.0.1:P \
        --insecure [--parent-pid PID_OF_THE_SUPERNODE]

The Runtime API is the SuperNode's local one (loopback, plain HTTP, as between a
SuperNode and its SuperExec in the default mode); the connection to the SuperLink
(TLS, node authentication) is the SuperNode's and unchanged.  The process exits
when ``--parent-pid`` is gone or a zombie (checked every 0.2 s) and on SIGTERM/SIGINT
(while the SuperNode's Runtime API is unreachable, Flower's retry policy keeps trying).
Each task is logged to stderr as ``task <type> <group> <status> started <Unix time>
input <s> ClientApp <s> output <s>`` (``benchmarks/flower_overhead.py --deployment``
reads these lines to say where a round's time goes).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedspectral.fed.flower.deploy.processes import proc_stat

__all__ = ["CLIENT_APP", "NodeRuntime", "alive", "main"]

_log = logging.getLogger(__name__)

#: the only ClientApp a node runs (its ``[tool.flwr.app.components] clientapp``)
CLIENT_APP = "fedspectral.fed.flower.apps.client_app:app"


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a parent that exited but was not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    st = proc_stat(pid)
    return st is None or st.state != "Z"  # no /proc: trust kill(0)


def _fab_client_app(fab: Any) -> str:
    """The ``clientapp`` component the run's FAB names (``""`` if it cannot be read)."""
    from flwr.common.config import get_fab_config

    try:
        conf = get_fab_config(fab.content)
        return str(conf["tool"]["flwr"]["app"]["components"]["clientapp"])
    except Exception:  # noqa: BLE001 -- an unreadable FAB is a foreign app
        return ""


class NodeRuntime:
    """Poll a SuperNode's Runtime API and run each ClientApp task in this process.

    Parameters
    ----------
    runtime_api_address : str
        ``HOST:PORT`` of the SuperNode's Runtime API (its ``--host``/``--port``).
    insecure : bool
        Plain HTTP (loopback); otherwise HTTPS verified with ``root_certificates``.
    root_certificates : bytes, optional
        PEM CA of the Runtime API's certificate (``flower-supernode --ssl-*``).
    poll : float
        Seconds between two ``AcquireTask`` calls while the node is idle.
    app : ClientApp, optional
        The ClientApp to run (default: :data:`fedspectral.fed.flower.apps.client_app.app`).
    """

    def __init__(
        self,
        runtime_api_address: str,
        insecure: bool = True,
        root_certificates: bytes | None = None,
        poll: float = 0.1,
        app: Any = None,
    ) -> None:
        if not isinstance(runtime_api_address, str) or ":" not in runtime_api_address:
            raise ValueError(
                f"runtime_api_address must be 'HOST:PORT', got {runtime_api_address!r}"
            )
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll <= 60:
            raise ValueError(f"poll must be a number of seconds in (0, 60], got {poll!r}")
        self.address = runtime_api_address
        self.insecure = bool(insecure)
        self.root_certificates = None if self.insecure else root_certificates
        self.poll = float(poll)
        if app is None:
            # lazy: pulls in Flower and scikit-learn
            from fedspectral.fed.flower.apps.client_app import app as own_app

            app = own_app
        self.app = app
        self.tasks = 0
        self._stop = threading.Event()

    def _client(self, *extra: Any, component: str) -> Any:
        from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
        from flwr.supercore.retry import make_simple_http_retry_invoker
        from flwr.supercore.runtime import RuntimeHttpClient

        return RuntimeHttpClient.from_server_address(
            server_address=self.address,
            insecure=self.insecure,
            root_certificates=self.root_certificates,
            interceptors=[RuntimeVersionHttpInterceptor(component_name=component), *extra],
            retry_invoker=make_simple_http_retry_invoker(),
        )

    @staticmethod
    def preload() -> float:
        """Pay a process's one-off costs before the first message arrives; return the
        seconds it took.

        It imports what every training message needs (PyTorch, the methods, the privacy
        core, and ``torch._dynamo``, which PyTorch imports lazily when the first
        optimizer is built: about two CPU seconds), then takes two SGD steps of a
        throw-away convolutional network on random input, so that autograd's engine and
        the convolution kernels are set up.  Nothing of the node's data is touched."""
        t0 = time.perf_counter()
        import torch
        import torch._dynamo

        import fedspectral.fed.correlation  # preloaded: this is what preload() times
        import fedspectral.fed.methods  # preloaded: this is what preload() times
        import fedspectral.fed.simulation  # preloaded: this is what preload() times
        import fedspectral.privacy.accounting  # noqa: F401

        gen = torch.Generator().manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.GroupNorm(2, 4),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * 8 * 8, 4),
        )
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            loss = net(torch.randn(8, 1, 8, 8, generator=gen)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    def stop(self) -> None:
        """Leave :meth:`serve` after the task in progress."""
        self._stop.set()

    def serve(self, max_tasks: int | None = None) -> int:
        """Handle tasks until :meth:`stop` (or ``max_tasks`` tasks); return how many."""
        from flwr.proto.runtime_pb2 import AcquireTaskRequest
        from flwr.supercore.constant import TaskType

        client = self._client(component="SuperExec")
        try:
            while not self._stop.is_set():
                res = client.AcquireTask(
                    AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
                )
                if res.HasField("task") and res.token:
                    self.run_task(res.token)
                    self.tasks += 1
                    if max_tasks is not None and self.tasks >= max_tasks:
                        break
                    continue  # the next message of a phase may already wait
                self._stop.wait(self.poll)
        finally:
            client.close()
        return self.tasks

    def handle(self, message: Any, context: Any, fab: Any) -> tuple[Any, Any, str, str]:
        """Run the node's ClientApp on one message: ``(reply, context, status, details)``.

        A run whose FAB names another ClientApp, or a ClientApp that raises, gets an
        error reply (Flower's codes and reason format) and leaves ``context`` as it
        was before the call."""
        from flwr.app import Message
        from flwr.app.error import Error
        from flwr.common.constant import ErrorCode, SubStatus
        from flwr.common.serde import context_from_proto, context_to_proto

        before = context_to_proto(context)
        try:
            named = _fab_client_app(fab)
            if named != CLIENT_APP:
                raise PermissionError(
                    f"this node runs {CLIENT_APP} only; the run's app "
                    f"names clientapp {named or '(unreadable)'!r}"
                )
            return self.app(message=message, context=context), context, SubStatus.COMPLETED, ""
        except Exception as ex:  # noqa: BLE001 -- reported as Flower reports it
            _log.error("ClientApp raised an exception", exc_info=ex)
            code = (
                ErrorCode.LOAD_CLIENT_APP_EXCEPTION
                if isinstance(ex, PermissionError)
                else ErrorCode.CLIENT_APP_RAISED_EXCEPTION
            )
            reason = str(type(ex)) + ":<'" + str(ex) + "'>"
            return (
                Message(Error(code=code, reason=reason), reply_to=message),
                context_from_proto(before),
                SubStatus.FAILED,
                reason,
            )

    def run_task(self, token: str) -> None:
        """One task, as ``flwr-clientapp --token`` runs it, in this process."""
        from flwr.common.constant import SubStatus
        from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
        from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor
        from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

        client = self._client(RuntimeTokenHttpInterceptor(token), component="flwr-clientapp")
        heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
        heartbeat.start()
        message = context = reply = None
        status, details = SubStatus.FAILED, "ClientApp task failed"
        started_at = time.time()
        t0 = time.perf_counter()
        t1 = t2 = t0
        try:
            message, context, fab = pull_task_input(client)
            t1 = time.perf_counter()
            reply, context, status, details = self.handle(message, context, fab)
            t2 = time.perf_counter()
            push_message(client, reply, context)
        except Exception as ex:  # noqa: BLE001 -- the Runtime API failed: the task fails
            _log.error("task failed outside the ClientApp", exc_info=ex)
            status, details = SubStatus.FAILED, f"{type(ex).__name__}: {ex}"
        finally:
            push_task_output(client=client, context=context, sub_status=status, details=details)
            heartbeat.stop()
            client.close()
            meta = message.metadata if message is not None else None
            _log.info(
                "task %s %s %s started %.3f input %.3f s ClientApp %.3f s output %.3f s",
                getattr(meta, "message_type", "?"),
                getattr(meta, "group_id", "?"),
                status,
                started_at,
                t1 - t0,
                t2 - t1,
                time.perf_counter() - t2,
            )


def pull_task_input(
    client: Any, backoff: float = 0.02, backoff_cap: float = 0.25
) -> tuple[Any, Any, Any]:
    """``(message, context, fab)`` of the task ``client``'s token names.

    ``flwr.supernode.runtime.run_clientapp.pull_task_input`` with a short retry
    backoff: a task is created as soon as the SuperNode has the message's header,
    while the SuperNode may still be downloading its objects from the SuperLink;
    Flower's default backoff for an object not there yet starts at 1 s and doubles
    (1 + 2 s of waiting for a message that arrives a few milliseconds later).
    """
    from flwr.app import Message
    from flwr.common.serde import context_from_proto, fab_from_proto
    from flwr.proto.node_pb2 import Node  # pylint: disable=E0611
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.task_identity import TaskIdentity

    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id = res.task_id
    TaskIdentity.run_id = res.run.run_id
    TaskIdentity.node_id = res.context.node_id
    context = context_from_proto(res.context)
    fab = fab_from_proto(res.fab)
    msgs = client.PullMessages(PullAppMessagesRequest())
    if not msgs.messages_list:
        raise RuntimeError("no message for this task on the SuperNode's Runtime API")
    node = Node(node_id=context.node_id)
    tree = msgs.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=Message,
        initial_backoff=backoff,
        backoff_cap=backoff_cap,
    )
    # the deflated message does not hold its own id (its object id)
    message.metadata.__dict__["_message_id"] = tree.object_id
    return message, context, fab


def _watch_parent(pid: int, rt: NodeRuntime) -> None:
    def watch() -> None:
        while not rt._stop.wait(0.2):
            if not alive(pid):
                rt.stop()
                os.kill(os.getpid(), signal.SIGTERM)  # interrupt a blocked HTTP call too
                return

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m fedspectral.fed.flower.deploy.node_runtime``: see the module docstring."""
    ap = argparse.ArgumentParser(
        prog="python -m fedspectral.fed.flower.deploy.node_runtime",
        description="fedspectral's ClientApp runtime for a SuperNode started with "
        "--isolation process: one long-lived process handles every message",
    )
    ap.add_argument(
        "--runtime-api-address",
        required=True,
        help="HOST:PORT of the SuperNode's Runtime API (its --host/--port)",
    )
    tls = ap.add_mutually_exclusive_group(required=True)
    tls.add_argument("--insecure", action="store_true", help="plain HTTP (loopback)")
    tls.add_argument("--root-certificates", help="CA (PEM) of the Runtime API's certificate")
    ap.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit when this process (the SuperNode) is gone",
    )
    ap.add_argument(
        "--poll",
        type=float,
        default=0.1,
        help="seconds between two task polls while idle (default 0.1)",
    )
    a = ap.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    _log.addHandler(handler)
    _log.setLevel(logging.INFO)
    logging.getLogger("fedspectral.fed.flower.apps.client_app").addHandler(handler)
    try:
        certs = Path(a.root_certificates).read_bytes() if a.root_certificates else None
        rt = NodeRuntime(
            a.runtime_api_address, insecure=a.insecure, root_certificates=certs, poll=a.poll
        )
    except (ValueError, OSError) as exc:
        ap.error(str(exc))

    def on_signal(signum: int, _frame: Any) -> None:
        rt.stop()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if a.parent_pid is not None:
        _watch_parent(a.parent_pid, rt)
    _log.info(
        "one-off costs (imports, a warm-up step) paid in %.2f s; serving %s",
        rt.preload(),
        a.runtime_api_address,
    )
    with contextlib.suppress(SystemExit):
        rt.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
