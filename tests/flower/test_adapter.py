"""The adapter without Ray: ServerApp runner + ClientApp over an in-process fake Grid.

``FakeGrid`` delivers each message to the real :func:`make_client_app` ClientApp of
its node (one ``Context`` per node, kept across rounds, as Flower keeps
``context.state``), after passing its content through Flower's serialisation.  A
node can be made *dead* from some round on: it never answers, as a killed
SuperNode -- the server must give up after ``round_timeout`` and treat it as
non-participation.
"""

from __future__ import annotations

import time
from uuid import uuid4

import numpy as np
import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from faults import failing  # tests/faults.py
from fedspectral.fed.flower.apps.client_app import SIMULATION_POLICY, STATE_KEY, make_client_app
from fedspectral.fed.flower.apps.records import meta_of
from fedspectral.fed.flower.apps.runner import FlowerRunner
from fedspectral.fed.simulation import Simulation

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def _wire(rd: RecordDict) -> RecordDict:
    contents = {oid: o.deflate() for oid, o in get_all_nested_objects(rd).items()}
    return inflate_object_from_contents(rd.object_id, contents)


class FakeGrid(Grid):
    def __init__(
        self,
        n: int,
        dead: dict[int, int] | None = None,
        policy=SIMULATION_POLICY,
        node_config: dict | None = None,
        app=None,
    ) -> None:
        # policy=None: each node reads its own from its node_config (as a SuperNode), here
        # a simulation node's (the server's partition plan, as in process);
        # app: another ClientApp for every node (e.g. faulty_client.faulty_client_app)
        self.app = app if app is not None else make_client_app(policy=policy)
        self.nodes = {
            1000 + i: Context(
                run_id=1,
                node_id=1000 + i,
                node_config={
                    "partition-id": i,
                    "num-partitions": n,
                    **({"policy-simulation": True} if policy is None else {}),
                    **(node_config or {}),
                },
                state=RecordDict(),
                run_config={},
            )
            for i in range(n)
        }
        self.dead = dead or {}  # partition-id -> first round it stops answering
        self.replies: dict[str, Message] = {}
        self.seen: list[tuple[int, str, str]] = []

    def set_run(self, run_id): ...
    @property
    def run(self): ...
    def create_message(self, *a, **k): ...
    def get_nodes(self): ...
    def send_and_receive(self, *a, **k): ...

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            ctx = self.nodes[msg.metadata.dst_node_id]
            pid = int(ctx.node_config["partition-id"])
            rnd = int(meta_of(msg.content).get("round", 0)) if "fedspectral" in msg.content else 0
            self.seen.append((pid, msg.metadata.message_type, str(rnd)))
            ids.append(mid)
            if pid in self.dead and rnd >= self.dead[pid]:
                continue  # a killed node: no reply, ever
            inbound = Message(
                _wire(msg.content),
                dst_node_id=msg.metadata.dst_node_id,
                message_type=msg.metadata.message_type,
            )
            inbound.metadata.__dict__["_message_id"] = mid
            try:
                reply = self.app(inbound, ctx)
                if reply.has_error():  # the app's own error reply (a refusal), as it is
                    reply = Message(reply.error, reply_to=inbound)
                else:
                    reply = Message(_wire(reply.content), reply_to=inbound)
            except Exception as ex:  # noqa: BLE001 -- as flwr-clientapp answers for it
                reply = Message(
                    Error(
                        code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(ex)}:<'{ex}'>"
                    ),
                    reply_to=inbound,
                )
            self.replies[mid] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]


def test_killed_node_is_non_participation_and_state_stays_on_the_node(tiny) -> None:
    cfg = tiny("fedsc", 2)
    grid = FakeGrid(3, dead={2: 2})  # client-2 dies at round 2
    t = time.perf_counter()
    runner = FlowerRunner(cfg, grid, round_timeout=0.5, node_wait=5.0)
    res = runner.run()
    r2 = res["records"][1]["phases"]
    assert r2["share"]["failures"] == {"client-2": "no reply"}
    assert r2["train"]["failures"] == {"client-2": "no reply"}
    assert time.perf_counter() - t < 60
    # same treatment as a client failing in process
    ref_sim = Simulation(
        tiny("fedsc", 2), transport=failing(lambda phase, rnd, cid: cid == "client-2" and rnd >= 2)
    )
    ref_sim.run()
    for k, v in ref_sim.state.server.weights.items():
        assert np.array_equal(v, runner.state.server.weights[k]), k
    # the config reached every node with the handshake; message types follow phase kinds
    assert {(p, t) for p, t, r in grid.seen if r == "1"} == {
        (p, t) for p in range(3) for t in ("query", "train")
    }
    assert all("fedspectral.config" in c.state for c in grid.nodes.values())
    # persistent client state lives in context.state (FedSC caches the round's weights)
    assert all(STATE_KEY in c.state for c in grid.nodes.values())


def test_handshake_rejects_missing_clients(tiny) -> None:
    grid = FakeGrid(2)  # the experiment has 3 clients
    runner = FlowerRunner(tiny("fedsc", 1), grid, round_timeout=0.5, node_wait=1.0)
    with pytest.raises(TimeoutError, match="2 of 3"):
        runner.run()


def test_bad_runner_arguments(tiny) -> None:
    with pytest.raises(ValueError, match="round_timeout"):
        FlowerRunner(tiny("fedsc", 1), FakeGrid(3), round_timeout=0.0)


def test_a_node_builds_only_its_own_partition(tiny, monkeypatch) -> None:
    import torch

    from fedspectral.data import ImageData
    from fedspectral.fed.federation import prepare_federation
    from fedspectral.fed.flower.apps import client_app as ca
    from fedspectral.fed.methods import build_method

    cfg = tiny("fedsc", 1)
    ref = prepare_federation(cfg, build_method(cfg)).clients
    built: list[int] = []  # the sizes of the image sets the node copies out
    real = ImageData.subset

    def subset(self, idx):
        out = real(self, idx)
        built.append(len(out))
        return out

    monkeypatch.setattr(ImageData, "subset", subset)
    ca._PROCESS_CACHE.clear()
    sim = ca.SIMULATION_POLICY  # a simulation node: the server's plan

    def setup(cid):
        return ca._setup(cfg, cid, None, sim)[1]

    try:
        data = setup("client-1")
        assert built == [len(ref["client-1"])]
        assert list(ca._PROCESS_CACHE["clients"]) == ["simulation|client-1"]
        assert torch.equal(data.images, ref["client-1"].images)
        assert torch.equal(data.labels, ref["client-1"].labels)
        assert setup("client-1") is data and len(built) == 1  # once per process
        # a process serving a second virtual node (a Ray actor) builds that one's too
        assert torch.equal(setup("client-2").images, ref["client-2"].images)
        assert built == [len(ref["client-1"]), len(ref["client-2"])]
        with pytest.raises(ValueError, match="this node is client-3 but the federation"):
            setup("client-3")
        assert len(built) == 2
    finally:
        ca._PROCESS_CACHE.clear()
