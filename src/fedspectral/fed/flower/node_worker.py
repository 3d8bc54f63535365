r"""A per-node worker process that keeps what can be kept between ClientApp messages.

Flower's deployment engine runs every ClientApp message in a fresh
``flwr-clientapp`` process (both isolation modes of Flower 1.42 start one per
message).  A fedspectral message would then pay for importing PyTorch and
building the node's data and network each time -- tens of seconds a round for a
round that takes one second in process.  With ``worker-dir`` in its node config,
a node instead forwards each message to one long-lived worker process of its own,
which keeps the imports, the node's partition, the network and the noise
calibration cache between messages:

* the first ClientApp process of the node starts the worker (``python -m
  fedspectral.fed.flower.node_worker``) and every ClientApp process connects to it
  over a Unix socket in ``worker-dir`` (created with mode 0700: only the node's own
  user can connect);
* a request carries the message (type and content, in Flower's own serialisation),
  the node config, the run id and the node's ``context.state``; the worker runs
  the same :func:`~.client_app.make_client_app` handlers and answers with the
  reply content and the updated state (which the ClientApp process hands back to
  the SuperNode, as usual), or with the error;
* the worker exits when the process that launches the node's ClientApps (the
  SuperNode's SuperExec, which itself exits with its SuperNode) is gone or a zombie
  (checked every second), or after ``worker-idle`` seconds without a message
  (default 3600).

Nothing leaves the node through the worker: it listens on a local socket only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["forward", "serve"]

SOCKET = "worker.sock"
_HDR = struct.Struct("!Q")


# -- framing: a JSON header, then the deflated Flower objects -------------------------------
def _pack_records(rd: Any) -> tuple[dict[str, Any], list[bytes]]:
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    objs = get_all_nested_objects(rd)
    ids = list(objs)
    blobs = [objs[i].deflate() for i in ids]
    return {"root": rd.object_id, "ids": ids, "sizes": [len(b) for b in blobs]}, blobs


def _unpack_records(head: dict[str, Any], data: bytes, offset: int) -> tuple[Any, int]:
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

    contents = {}
    for oid, size in zip(head["ids"], head["sizes"], strict=True):
        contents[oid] = data[offset:offset + size]
        offset += size
    return inflate_object_from_contents(head["root"], contents), offset


def _send(sock: socket.socket, header: dict[str, Any], records: dict[str, Any]) -> None:
    parts: list[bytes] = []
    header = dict(header)
    header["records"] = {}
    for name, rd in records.items():
        head, blobs = _pack_records(rd)
        header["records"][name] = head
        parts.extend(blobs)
    h = json.dumps(header).encode()
    body = b"".join(parts)
    sock.sendall(_HDR.pack(len(h)) + h + _HDR.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("node worker connection closed")
        buf.extend(chunk)
    return bytes(buf)


def _recv(sock: socket.socket) -> tuple[dict[str, Any], dict[str, Any]]:
    (n,) = _HDR.unpack(_recv_exact(sock, _HDR.size))
    header = json.loads(_recv_exact(sock, n))
    (m,) = _HDR.unpack(_recv_exact(sock, _HDR.size))
    body = _recv_exact(sock, m)
    records, off = {}, 0
    for name, head in header.pop("records").items():
        records[name], off = _unpack_records(head, body, off)
    return header, records


# -- ClientApp side -----------------------------------------------------------------------
def _connect(path: Path, timeout: float) -> socket.socket | None:
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


def _start_worker(d: Path, idle: float) -> None:
    """Start the node's worker unless one is running (a lock file serialises this)."""
    with open(d / "worker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        s = _connect(d / SOCKET, 0.0)
        if s is not None:
            s.close()
            return
        with contextlib.suppress(FileNotFoundError):
            (d / SOCKET).unlink()
        log = open(d / "worker.log", "ab")  # noqa: SIM115 (the child keeps it)
        subprocess.Popen([sys.executable, "-m", "fedspectral.fed.flower.node_worker",
                          "--dir", str(d), "--parent", str(os.getppid()),
                          "--idle", str(float(idle))],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         close_fds=True)
        log.close()
        s = _connect(d / SOCKET, 300.0)
        if s is None:
            raise RuntimeError(f"the node worker in {d} did not start (see worker.log)")
        s.close()


def forward(msg: Any, context: Any) -> Any:
    """Run ``msg`` in the node's worker; return the reply ``Message`` (state updated)."""
    from flwr.app import Message

    d = Path(str(context.node_config["worker-dir"]))
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    idle = float(context.node_config.get("worker-idle", 3600.0))
    sock = _connect(d / SOCKET, 0.0)
    if sock is None:
        _start_worker(d, idle)
        sock = _connect(d / SOCKET, 60.0)
        if sock is None:
            raise RuntimeError(f"cannot reach the node worker in {d}")
    with sock:
        _send(sock, {"message_type": msg.metadata.message_type,
                     "run_id": int(context.run_id), "node_id": int(context.node_id),
                     "node_config": dict(context.node_config)},
              {"content": msg.content, "state": context.state})
        header, records = _recv(sock)
    context.state = records["state"]
    if "error" in header:
        raise WorkerError(header["error"])
    return Message(records["content"], reply_to=msg)


class WorkerError(RuntimeError):
    """The node worker's handler raised (its text is the handler's error reason)."""


# -- worker side ----------------------------------------------------------------------------
def _handle(conn: socket.socket, app: Any) -> None:
    from flwr.app import Context, Message
    from flwr.supercore.task_identity import TaskIdentity

    header, records = _recv(conn)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = (
        1, header["run_id"], header["node_id"])
    ctx = Context(run_id=header["run_id"], node_id=header["node_id"],
                  node_config=header["node_config"], state=records["state"], run_config={})
    msg = Message(records["content"], dst_node_id=header["node_id"],
                  message_type=header["message_type"])
    out: dict[str, Any] = {}
    try:
        reply = app(msg, ctx)
        content = reply.content
    except Exception as exc:  # noqa: BLE001 -- the ClientApp process re-raises it
        from flwr.app import RecordDict

        out["error"] = f"{type(exc).__name__}: {exc}"
        content = RecordDict()
    _send(conn, out, {"content": content, "state": ctx.state})


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def serve(directory: str | os.PathLike, parent: int, idle: float) -> None:
    """Serve the node's ClientApp messages on ``<directory>/worker.sock``."""
    from fedspectral.fed.flower import client_app

    client_app._IN_WORKER[0] = True
    make_client_app = client_app.make_client_app
    d = Path(directory)
    path = d / SOCKET
    app = make_client_app()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        srv.bind(str(path))
    finally:
        os.umask(old)
    srv.listen(8)
    srv.settimeout(1.0)
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle:
            if not _alive(parent):
                break  # the SuperNode (or its SuperExec) is gone
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(None)
                try:
                    _handle(conn, app)
                except ConnectionError:
                    pass  # a liveness probe, or a ClientApp process that went away
                except OSError as exc:
                    print(f"node worker: request failed: {type(exc).__name__}", flush=True)
            last = time.monotonic()
    finally:
        srv.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="fedspectral node worker (see the module doc)")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--idle", type=float, default=3600.0)
    a = ap.parse_args(argv)
    serve(a.dir, a.parent, a.idle)


if __name__ == "__main__":
    main()
