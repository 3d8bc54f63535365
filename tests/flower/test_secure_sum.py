"""FedSC's secure share phase over Flower messages, without Ray: the server-side transport
drives the five stages of :mod:`fedspectral.fed.secagg` through the real ClientApp
(``FakeGrid`` of test_adapter.py: Flower's wire format, one ``Context`` per node).

Pinned here: the run equals the in-process five-stage exchange bit for bit; each stage
is one round of ``query.secagg`` messages whose replies carry that stage's values and
nothing else; the node keeps its secrets in its own state and erases them; a node that
drops after key sharing leaves the survivors' exact sum; fewer than the threshold abort
the sum cleanly, as in process.
"""

from __future__ import annotations

import numpy as np
import pytest
from faulty_client import faulty_client_app
from flwr.app import Context, Message, RecordDict
from test_adapter import FakeGrid

from faults import failing  # tests/faults.py
from fedspectral.fed.flower.apps.records import meta_of, payload_from_recorddict
from fedspectral.fed.flower.apps.runner import FlowerRunner
from fedspectral.fed.flower.node.secure_sum import SECAGG, SESSIONS_KEY, STAGES, STATE_KEY
from fedspectral.fed.secagg_primitives import dequantise, quantisation_scale
from fedspectral.fed.simulation import Simulation

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py

#: what each stage's reply may hold (array keys, by prefix)
_REPLY_ARRAYS = {0: {"C", "S", "sig"}, 1: {"ct"}, 2: {"y"}, 3: {"sig"}, 4: {"x", "b", "s"}}


def _cfg(tiny, rounds=2, **params):
    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", rounds)
    cfg.method.params = {"secure_aggregation": True, **params}
    return validate(cfg)


class RecordingGrid(FakeGrid):
    """FakeGrid that keeps every reply the server pulls (what the server sees)."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.pulled: list = []

    def pull_messages(self, message_ids):
        out = super().pull_messages(message_ids)
        self.pulled.extend(out)
        return out


def _same(a, b) -> None:
    for k, v in a.weights.items():
        assert np.array_equal(v, b.weights[k]), k
    assert a.arrays.keys() == b.arrays.keys()
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k


def test_secure_share_over_messages_equals_in_process_exchange(tiny) -> None:
    ref = Simulation(_cfg(tiny), secure_sum="secagg")
    ref_res = ref.run()
    grid = RecordingGrid(3)
    runner = FlowerRunner(_cfg(tiny), grid, round_timeout=30.0, node_wait=5.0)
    res = runner.run()
    _same(ref.state.server, runner.state.server)
    assert set(runner.state.server.arrays) == {"A"}  # sums only, never a client's matrix
    for a, b in zip(ref_res["records"], res["records"], strict=True):
        assert (
            b["phases"]["share"]["contributors"]
            == a["phases"]["share"]["contributors"]
            == ["client-0", "client-1", "client-2"]
        )
        assert b["phases"]["share"]["metrics"] == a["phases"]["share"]["metrics"]
        assert b["phases"]["train"]["metrics"] == a["phases"]["train"]["metrics"]
    # one round of query.secagg messages per stage, to every client
    log = res["flower"]["messages"]
    assert [(m["phase"], m["kind"], m["sent"], m["answered"]) for m in log] == [
        *[(f"share/{s}", SECAGG, 3, 3) for s in STAGES],
        ("train", "train", 3, 3),
    ] * 2
    # what the server received in the stages: the stage's arrays, no metrics, no config
    sec = [r for r in grid.pulled if "secagg-stage" in meta_of(r.content)]
    assert len(sec) == 2 * 5 * 3

    for r in sec:
        stage = int(meta_of(r.content)["secagg-stage"])
        p = payload_from_recorddict(r.content)
        assert not p.metrics and not p.config
        assert {k.split("/")[0] for k in p.arrays} <= _REPLY_ARRAYS[stage], (stage, list(p.arrays))
        assert set(meta_of(r.content)) == {"secagg-stage"}
    # the masked inputs do not add up to the sum: without the unmasking shares the
    # server holds vectors spread uniformly over the whole field (|A| is below 0.2, the
    # field spans +-2^63/scale = +-8; for 8256 uniform entries the median of |.| is ~4)
    spec = runner.method.secure_sum_spec("share", 1, runner.state.server, [])
    scale = quantisation_scale(spec.bound, 3, spec.bits)
    raw = np.zeros(spec.length, dtype=np.uint64)
    for r in sec:
        if int(meta_of(r.content)["secagg-stage"]) == 2:
            raw = raw + payload_from_recorddict(r.content).arrays["y"]
    a = runner.state.server.arrays["A"]
    half = 2.0 ** (spec.bits - 1) / scale
    assert np.abs(a).max() < half / 20
    assert np.median(np.abs(dequantise(raw, scale, spec.bits))) > half / 4
    # the node erased its stage secrets after unmasking, and remembers its two sessions
    for ctx in grid.nodes.values():
        assert STATE_KEY not in ctx.state
        assert len(ctx.state.config_records[SESSIONS_KEY]["sessions"]) == 2


def test_dropout_after_key_sharing_leaves_the_survivors_exact_sum(tiny) -> None:
    """client-2 raises on its masked-input message of round 2 (it advertised keys and
    shared its secrets): the server unmasks the exact sum of the two others, as the
    in-process exchange does when client-2 fails; the run equals it bit for bit."""
    cfg = _cfg(tiny, min_contributors=2)
    ref = Simulation(
        cfg,
        secure_sum="secagg",
        transport=failing(lambda ph, rnd, cid: (ph, rnd, cid) == ("share", 2, "client-2")),
    )
    ref_res = ref.run()
    grid = FakeGrid(3, app=faulty_client_app(fail=["client-2|2|secagg-2"]))
    runner = FlowerRunner(_cfg(tiny, min_contributors=2), grid, round_timeout=30.0, node_wait=5.0)
    res = runner.run()
    sh = res["records"][1]["phases"]["share"]
    assert sh["contributors"] == ["client-0", "client-1"] and not sh["aborted"]
    assert list(sh["failures"]) == ["client-2"]
    assert "stage 2 (masked-input)" in sh["failures"]["client-2"]
    assert ref_res["records"][1]["phases"]["share"]["contributors"] == sh["contributors"]
    _same(ref.state.server, runner.state.server)
    assert runner.state.server.method_state["secure_last"] == {
        "client-0": 2,
        "client-1": 2,
        "client-2": 1,
    }


def test_below_threshold_aborts_the_sum_cleanly(tiny) -> None:
    """Two of three clients drop before unmasking in round 1 (threshold 2): no sum, the
    abort is ledgered, nothing is folded in -- as in process; round 2 goes on."""
    cfg = _cfg(tiny, min_contributors=2)
    ref = Simulation(
        cfg,
        secure_sum="secagg",
        transport=failing(lambda ph, rnd, cid: ph == "share" and rnd == 1 and cid != "client-0"),
    )
    ref.run()
    grid = FakeGrid(3, app=faulty_client_app(fail=["client-1|1|secagg-4", "client-2|1|secagg-4"]))
    runner = FlowerRunner(_cfg(tiny, min_contributors=2), grid, round_timeout=30.0, node_wait=5.0)
    res = runner.run()
    r1 = res["records"][0]["phases"]["share"]
    assert r1["aborted"] and r1["contributors"] == []
    assert "SecAggAborted" in r1["failures"]["*"]
    assert res["records"][1]["phases"]["share"]["contributors"] == [
        "client-0",
        "client-1",
        "client-2",
    ]
    assert runner.state.server.method_state["secure_aborted"] == [1]

    def aborted(ledger):  # the reason's wording differs (the stage that fell short)
        return [(a["step"], a["mechanism"], a["parties"]) for a in ledger.to_dict()["aborted"]]

    assert (
        aborted(runner.state.ledger)
        == aborted(ref.state.ledger)
        == [(1, "fedsc/dp-calr", ["client-0", "client-1", "client-2"])]
    )
    _same(ref.state.server, runner.state.server)


def test_threshold_at_most_half_the_clients_refused_before_round_1(tiny) -> None:
    """min_contributors is the Shamir threshold: 2 of 4 would let a server that tells two
    halves different survivors rebuild both secrets of one client, so the runner refuses
    it before any message is sent; 3 of 4 is accepted."""
    from fedspectral.fed.validation import validate

    def cfg(m):
        from fedspectral.config import thaw

        c = thaw(_cfg(tiny, min_contributors=m))  # editable (a validated config is frozen)
        c.partition.num_clients = 4
        return validate(c)

    grid = RecordingGrid(4)
    with pytest.raises(ValueError, match=r"min_contributors=2.*use at least 3"):
        FlowerRunner(cfg(2), grid)
    FlowerRunner(cfg(3), grid)
    assert grid.pulled == [] and grid.seen == []


# --------------------------------------------------------------------------------------
# the node's trust, from its own policy: the server's driver against the node's stage
# handlers, with given summands (no model: fast)
# --------------------------------------------------------------------------------------
class NodesTransport:
    """``grid_secure_sum``'s transport, delivering each stage message to the node's own
    handlers (:func:`start_params`/:func:`start_stage` for stage 0 with a given summand,
    :func:`node_stage` after); ``tamper(stage, cid, payload)`` lets a hostile server
    change what a node receives."""

    def __init__(self, policies, summands, tamper=None) -> None:
        self.policies, self.summands, self.tamper = policies, summands, tamper
        self.node_of = {c: 2000 + i for i, c in enumerate(policies)}
        self.ctx = {
            c: Context(run_id=1, node_id=n, node_config={}, state=RecordDict(), run_config={})
            for c, n in self.node_of.items()
        }
        self.refusals: dict[str, BaseException] = {}

    def send(self, msgs, rnd, label, kind):
        from fedspectral.fed.flower.apps.records import payload_to_recorddict
        from fedspectral.fed.flower.node.secure_sum import node_stage, start_params, start_stage
        from fedspectral.fed.protocol import Payload

        by_node = {n: c for c, n in self.node_of.items()}
        out = {}
        for msg in msgs:
            cid = by_node[msg.metadata.dst_node_id]
            meta = meta_of(msg.content)
            stage = int(meta["secagg-stage"])
            p = payload_from_recorddict(msg.content)
            if self.tamper is not None:
                p = self.tamper(stage, cid, p)
            rd = payload_to_recorddict(p, **meta)
            inbound = Message(rd, dst_node_id=msg.metadata.dst_node_id, message_type=SECAGG)
            inbound.metadata.__dict__["_message_id"] = f"{label}/{cid}"
            try:
                if stage == 0:
                    sa = start_params(meta, cid, self.ctx[cid], self.policies[cid])
                    out[cid] = start_stage(
                        self.ctx[cid], cid, sa, Payload(arrays={"v": self.summands[cid]})
                    )
                else:
                    rep = node_stage(inbound, self.ctx[cid], cid, self.policies[cid])
                    out[cid] = payload_from_recorddict(rep.content)
            except Exception as exc:  # noqa: BLE001 -- the node's error reply
                self.refusals[cid] = exc
                out[cid] = exc
        return out


def _trust_sum(policies, tamper=None):
    from fedspectral.fed.flower.node.secure_sum import grid_secure_sum
    from fedspectral.fed.protocol import Payload
    from fedspectral.fed.releases import SecureSumSpec

    rng = np.random.default_rng(0)
    xs = {c: rng.uniform(-1, 1, 6) for c in policies}
    tr = NodesTransport(policies, xs, tamper)
    spec = SecureSumSpec(key="v", length=6, min_contributors=2, bound=1.0, bits=64)
    total, contributors, failures = grid_secure_sum(
        tr, "share", 1, {c: Payload() for c in policies}, spec
    )
    return total, contributors, failures, tr, sum(xs.values())


def test_node_trust_comes_from_its_own_policy(tmp_path) -> None:
    from fedspectral.fed.flower.node.policy import NodePolicy, PolicyRefusal
    from fedspectral.fed.flower.node.secure_sum import TRUST_KEY, write_identities

    cids = ["client-0", "client-1", "client-2"]
    roster, keys = write_identities(tmp_path, cids)
    trusted = {c: NodePolicy(secagg_roster=str(roster), secagg_identity=str(keys[c])) for c in cids}
    total, contributors, failures, tr, ref = _trust_sum(trusted)
    assert contributors == cids and failures == {}
    np.testing.assert_allclose(total, ref, atol=1e-12)
    assert all(TRUST_KEY not in ctx.state for ctx in tr.ctx.values())
    # no roster (the default policy): every node refuses before its summand is used
    total, contributors, failures, tr, _ = _trust_sum(dict.fromkeys(cids, NodePolicy()))
    assert total is None and contributors == [] and "SecAggAborted" in failures["*"]
    assert (
        all(
            isinstance(e, PolicyRefusal) and "no trusted roster" in str(e)
            for e in tr.refusals.values()
        )
        and sorted(tr.refusals) == cids
    )
    # the explicit opt-in: the sum goes through, each node notes what it assumed
    total, contributors, _, tr, ref = _trust_sum(
        dict.fromkeys(cids, NodePolicy(secagg_honest_server=True))
    )
    np.testing.assert_allclose(total, ref, atol=1e-12)
    for ctx in tr.ctx.values():
        note = ctx.state.config_records[TRUST_KEY]
        assert "honest-but-curious" in note["assumption"] and len(note["sessions"]) == 1
    # the simulation roster (keys anyone can derive) only in the simulation's test mode
    with pytest.raises(ValueError, match="only with noise-seed 'derive'"):
        NodePolicy(secagg_roster="simulation")
    # a node that allows one colluder refuses t = 2 of 3 (needs 2t > n + 1)
    one = {
        c: NodePolicy(secagg_roster=str(roster), secagg_identity=str(keys[c]), secagg_colluders=1)
        for c in cids
    }
    total, _, _, tr, _ = _trust_sum(one)
    assert total is None and all("secagg-colluders: 1" in str(e) for e in tr.refusals.values())


def test_key_substitution_over_messages_is_refused(tmp_path) -> None:
    """The server swaps client-1's keys in the roster it sends the others (its own keys,
    signed with its own identity key): both peers refuse at stage 1, nothing is masked,
    the sum aborts.  With the honest-but-curious opt-in the swap passes stage 1 unnoticed
    (the rest of that attack, which reads client-0's input, is
    tests/fed/test_secagg.py::test_key_substitution_attack)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from fedspectral.fed.flower.node.policy import NodePolicy
    from fedspectral.fed.flower.node.secure_sum import write_identities
    from fedspectral.fed.secagg_primitives import _raw_public

    cids = ["client-0", "client-1", "client-2"]
    roster, keys = write_identities(tmp_path, cids)
    mine = Ed25519PrivateKey.generate()

    def swap(stage, cid, p):
        if stage == 1 and cid != "client-1":
            fake = [_raw_public(X25519PrivateKey.generate().public_key()) for _ in range(2)]
            p.arrays["C/client-1"], p.arrays["S/client-1"] = (
                np.frombuffer(k, dtype=np.uint8) for k in fake
            )
            p.arrays["sig/client-1"] = np.frombuffer(mine.sign(b"x"), dtype=np.uint8)
        return p

    pol = {c: NodePolicy(secagg_roster=str(roster), secagg_identity=str(keys[c])) for c in cids}
    total, _, failures, tr, _ = _trust_sum(pol, tamper=swap)
    assert total is None and "stage 1 (share-keys)" in failures["client-0"]
    assert sorted(tr.refusals) == ["client-0", "client-2"]
    assert all("not signed by their identity keys" in str(e) for e in tr.refusals.values())
    hbc = dict.fromkeys(cids, NodePolicy(secagg_honest_server=True))
    _, _, failures, _, _ = _trust_sum(hbc, tamper=swap)
    assert not any("stage 1" in why for why in failures.values())
    assert "stage 2 (masked-input)" in failures["client-0"]  # client-1's real shares
