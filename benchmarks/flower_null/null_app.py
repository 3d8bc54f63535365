"""A ServerApp that does nothing but exchange empty messages: a deployment's floor.

Each round is ``phases`` message rounds; each message round sends ``query.hello`` (no
configuration record: the node only answers with its client id) to every node through
:func:`fedspectral.fed.flower.apps.grid.exchange`, the call fedspectral's own
ServerApp makes.  The seconds of each message round go to
``<out-dir>/null_rounds.json`` as ``{"rounds": [[s, s, ...], ...], "nodes": N}``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedspectral.fed.flower.apps.grid import exchange, wait_for_nodes

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    rounds, phases = int(cfg["rounds"]), int(cfg["phases"])
    out = Path(str(cfg["out-dir"]))
    nodes = wait_for_nodes(grid, int(cfg["min-nodes"]), float(cfg["node-wait"]))
    seconds: list[list[float]] = []
    for _ in range(rounds):
        per_phase = []
        for _ in range(phases):
            msgs = [Message(RecordDict(), dst_node_id=n, message_type="query.hello") for n in nodes]
            t = time.monotonic()
            replies = exchange(grid, msgs, float(cfg["timeout"]))
            per_phase.append(time.monotonic() - t)
            if len(replies) != len(nodes):
                raise RuntimeError(f"{len(replies)} of {len(nodes)} nodes answered")
        seconds.append(per_phase)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "null_rounds.json.tmp"
    tmp.write_text(json.dumps({"rounds": seconds, "nodes": len(nodes)}))
    tmp.replace(out / "null_rounds.json")
