"""Moving messages over a Flower ``Grid``: waiting for the nodes, one round of
messages out and replies in, and the defaults of both.

Shared by the training ServerApp (:mod:`.server_app`, :mod:`.runner`) and the locally
private PCA app (:mod:`fedspectral.pca.flower.app`); it knows no task.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = [
    "NODE_WAIT_S",
    "POLL_HTTP_S",
    "POLL_IN_MEMORY_S",
    "ROUND_TIMEOUT_S",
    "SIMULATION_SETTLE_S",
    "default_poll",
    "exchange",
    "in_simulation",
    "wait_for_nodes",
]

#: default of ``node-wait``: how long a ServerApp waits for its nodes before round 1 (s)
NODE_WAIT_S = 120.0
#: default of ``round-timeout``: how long a ServerApp waits for the replies of a round (s)
ROUND_TIMEOUT_S = 600.0
#: how long the node count of Flower's simulation runtime must stay below what a run needs
#: before :func:`wait_for_nodes` refuses it (s): its nodes are registered in one loop
SIMULATION_SETTLE_S = 3.0
#: reply polling interval of :func:`exchange` (s): on Flower's in-memory simulation grid a
#: pull is a dictionary look-up, over HTTP a request to the SuperLink
POLL_IN_MEMORY_S = 0.02
POLL_HTTP_S = 0.1


def default_poll(grid: Grid) -> float:
    """:data:`POLL_IN_MEMORY_S` for Flower's ``InMemoryGrid`` (the simulation runtime's), else
    :data:`POLL_HTTP_S`.  The class is looked up among the loaded modules: an instance of it
    implies its module is loaded, and importing it here would cost seconds of start-up."""
    return POLL_IN_MEMORY_S if in_simulation(grid) else POLL_HTTP_S


def in_simulation(grid: Grid) -> bool:
    """Whether ``grid`` is Flower's simulation runtime's (``InMemoryGrid``): its virtual
    SuperNodes are all registered before the ServerApp starts, none joins later.  The class
    is looked up among the loaded modules (see :func:`default_poll`)."""
    module = sys.modules.get("flwr.superlink.grid.inmemory_grid")
    return module is not None and isinstance(grid, module.InMemoryGrid)


def wait_for_nodes(grid: Grid, min_nodes: int, timeout: float) -> list[int]:
    """Node ids once at least ``min_nodes`` are connected (bounded by ``timeout`` s).

    On Flower's simulation runtime (:func:`in_simulation`) the virtual nodes are
    registered together as the run starts (in a loop, beside the ServerApp's thread) and
    none joins later: too few, unchanged for :data:`SIMULATION_SETTLE_S`, is refused then
    (no node will come), naming the option that sets their number."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= min_nodes:
            return nodes
        if len(nodes) != seen:
            seen, since = len(nodes), time.monotonic()
        if seen > 0 and in_simulation(grid) and time.monotonic() - since > SIMULATION_SETTLE_S:
            raise ValueError(
                f"the run needs {min_nodes} Flower nodes (one per client) but this "
                f"simulation has {len(nodes)} virtual SuperNodes: run it with "
                f"--federation-config 'num-supernodes={min_nodes}', or set "
                f"num-clients={len(nodes)} (--run-config)"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"only {len(nodes)} of {min_nodes} Flower nodes connected "
                f"after {timeout} s (a local simulation has as many as "
                f"flwr run ... --federation-config "
                f"'num-supernodes={min_nodes}' says; Flower's default is 2)"
            )
        time.sleep(0.2)


def exchange(
    grid: Grid,
    messages: Iterable[Message],
    timeout: float,
    poll: float | None = None,
    timings: dict[str, Any] | None = None,
) -> dict[int, Message]:
    """Send ``messages`` and collect the replies: ``{destination node id: reply}``.

    ``Grid.send_and_receive`` with the replies keyed by the node each message was
    sent to (a reply is matched through ``reply_to_message_id``, so an error reply
    made by the SuperLink on a node's behalf is attributed to that node), polling
    every ``poll`` s (default 0.02 s in simulation, 0.1 s over HTTP; Flower's
    deployment grid sleeps 3 s between pulls) and bounded by ``timeout`` s.  Nodes
    that did not answer in time are absent.  ``timings``, if given, receives
    ``push_seconds`` (handing the messages to the SuperLink) and ``reply_seconds``
    (``{node id: seconds from the start until its reply was pulled}``) and
    ``started_at`` (the start, Unix time).
    """
    if poll is None:
        poll = default_poll(grid)
    msgs = list(messages)
    started_at = time.time()
    t0 = time.monotonic()
    ids = list(grid.push_messages(msgs))
    dst = {mid: m.metadata.dst_node_id for mid, m in zip(ids, msgs, strict=True) if mid}
    pending = set(dst)
    out: dict[int, Message] = {}
    arrived: dict[int, float] = {}
    if timings is not None:
        timings["push_seconds"] = time.monotonic() - t0
        timings["reply_seconds"] = arrived
        timings["started_at"] = started_at
    deadline = time.monotonic() + timeout
    while pending:
        for r in grid.pull_messages(list(pending)):
            mid = r.metadata.reply_to_message_id
            if mid in pending:
                pending.discard(mid)
                out[dst[mid]] = r
                arrived[dst[mid]] = time.monotonic() - t0
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(poll)
    return out
