"""The node worker's wire format and liveness check (no processes but one ``true``).

The worker itself runs in every loopback deployment test (``LocalDeployment``
starts its nodes with a ``worker-dir``)."""

from __future__ import annotations

import socket
import subprocess
import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedspectral.fed.flower.node_worker import _alive, _recv, _send


def test_records_cross_the_socket_bit_exact() -> None:
    w = np.array([[1.5, -0.0], [np.nan, 1e-310]], dtype=np.float64)
    content = RecordDict({"a": ArrayRecord({"w": Array(w)}),
                          "c": ConfigRecord({"phase": "share", "round": 3})})
    state = RecordDict({"s": ConfigRecord({"json": "{}"})})
    a, b = socket.socketpair()
    with a, b:
        _send(a, {"message_type": "query", "node_config": {"partition-id": 1}},
              {"content": content, "state": state})
        header, rec = _recv(b)
    assert header == {"message_type": "query", "node_config": {"partition-id": 1}}
    got = rec["content"].array_records["a"]["w"].numpy()
    assert got.dtype == w.dtype and got.tobytes() == w.tobytes()
    assert dict(rec["content"].config_records["c"]) == {"phase": "share", "round": 3}
    assert dict(rec["state"].config_records["s"]) == {"json": "{}"}


def test_a_finished_parent_counts_as_gone_even_as_a_zombie() -> None:
    import os

    assert _alive(os.getpid())
    p = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while _alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(p.pid)  # exited, not yet reaped: a zombie
    p.wait()
    assert not _alive(p.pid)
