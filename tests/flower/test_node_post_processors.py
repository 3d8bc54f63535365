"""A Flower node applies post-processors through their node-side hooks, as the in-process
runner does: the ClientApp builds no release and calls no client-level DP function of its
own, it asks each of the node's post-processors (``NODE_POST_PROCESSORS``) whether the
request wants it, has it parse the request before any data is read, spends the releases it
declares, and lets it shape the reply.

No Ray, no processes: the Flower runner over ``test_adapter``'s ``FakeGrid`` (the real
ClientApp and Flower serialisation).
"""

from __future__ import annotations

import pytest

from fedspectral.fed.flower.node import client_dp as cdp
from fedspectral.fed.flower.node.client_dp import CLIENT_MECHANISM, ClientDP, ClientDPNode

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


class _Spy(ClientDPNode):
    """Client-side client-level DP, recording each hook call ``(hook, cid or None)``."""

    def __init__(self, calls: list, asked: bool = True) -> None:
        self.calls, self.asked = calls, asked

    def requested(self, payload):
        self.calls.append(("requested", None))
        return self.asked and super().requested(payload)

    def check_request(self, payload):
        self.calls.append(("check_request", None))
        super().check_request(payload)

    def node_releases(self, payload, cid, rnd, net, noise):
        self.calls.append(("node_releases", cid))
        return super().node_releases(payload, cid, rnd, net, noise)

    def on_reply(self, payload, rt, handler):
        self.calls.append(("on_reply", rt.cid))
        return super().on_reply(payload, rt, handler)


def _run(tiny, posts):
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner

    dp = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=1, placement="client")
    grid = FakeGrid(3)
    runner = FlowerRunner(
        tiny("fedavg_sc", 1), grid, round_timeout=5.0, node_wait=5.0, client_dp=dp
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cdp, "NODE_POST_PROCESSORS", posts)
        runner.run()
    return runner


def test_the_node_runs_its_post_processors_hooks_in_order(tiny) -> None:
    calls: list = []
    runner = _run(tiny, (_Spy(calls),))
    node_hooks = [c for c in calls if c[0] != "requested"]
    # per node: the request parsed, the release declared (and spent), then the reply shaped
    per_node = {}
    for hook, cid in node_hooks:
        per_node.setdefault(cid, []).append(hook)
    assert per_node.pop(None) == ["check_request"] * 3  # before any data
    assert per_node == {f"client-{j}": ["node_releases", "on_reply"] for j in range(3)}
    # the server's ledger holds the same share each node declared
    rel = runner.state.client_ledger.releases
    assert [(r.party, r.mechanism) for r in rel] == [
        (f"client-{j}", CLIENT_MECHANISM) for j in range(3)
    ]


def test_a_post_processor_the_request_does_not_ask_for_is_not_applied(tiny) -> None:
    """Of two client-dp post-processors the node holds, the one the request does not ask
    for is asked and then left alone: no parse, no release, no reply shaping."""
    used, unused = [], []
    _run(tiny, (_Spy(unused, asked=False), _Spy(used)))
    assert {h for h, _ in unused} == {"requested"}
    assert {h for h, _ in used} == {"requested", "check_request", "node_releases", "on_reply"}


def test_the_client_app_builds_no_release_and_calls_no_client_dp_function() -> None:
    """The structural half: client_app.py names no release constructor and none of
    client-level DP's functions; the post-processor's hooks do that work."""
    from pathlib import Path

    import fedspectral.fed.flower.apps.client_app as app

    src = Path(app.__file__).read_text()
    for name in ("Release(", "privatised_reply", "client_dp_request", "CLIENT_MECHANISM"):
        assert name not in src, name
