"""The round loop: phases, failures, release accounting and byte counts."""

from __future__ import annotations

import numpy as np
import pytest

from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import (
    ClientRuntime,
    Method,
    Payload,
    ServerState,
    client_generators,
    run_round,
    sample_clients,
)
from fedspectral.fed.releases import release_config
from fedspectral.fed.weights import mean_arrays
from fedspectral.kinds import PhaseKind
from fedspectral.privacy import PrivacyLedger


class AskTrain(RoundPhase):
    ASK = "ask", PhaseKind.QUERY
    TRAIN = "train", PhaseKind.TRAIN


class Toy(Method):
    """Query phase: each client reports its value x_j with a release; train: w <- mean."""

    name = "toy"
    Phase = AskTrain

    def build_net(self):  # pragma: no cover - not used
        return None

    def participants(self, phase, rnd, sampled, all_clients, state):
        return list(all_clients) if phase == "ask" else list(sampled)

    def configure(self, phase, rnd, state, cids):
        return {c: Payload.with_weights(state.weights, config={"rnd": rnd}) for c in cids}

    def aggregate(self, phase, rnd, state, replies):
        if phase == "ask":
            state.method_state["asked"] = sorted(replies)
            return {"n": len(replies)}
        if replies:
            state.weights = mean_arrays([r.weights() for r in replies.values()])
        return {"n": len(replies)}

    def client_phase(self, phase, rnd, payload, rt):
        x = float(rt.cid[-1])
        if phase == "ask":
            return Payload(arrays={"x": np.full(3, x)}, config=release_config(2.0, 0.5, "toy/ask"))
        return Payload.with_weights({"w": payload.weights()["w"] + x})


def _transport(method, fail=()):
    def transport(phase, rnd, payloads):
        out = {}
        for cid, p in payloads.items():
            if cid in fail:
                out[cid] = RuntimeError("boom")
                continue
            rt = ClientRuntime(cid, None, None, None, None, None, {}, None)
            out[cid] = method.client_phase(phase, rnd, p, rt)
        return out

    return transport


def test_run_round_failures_bytes_and_ledger():
    m = Toy(None)
    st = m.init_server_state({"w": np.zeros(4, np.float32)}, {"c1": 10, "c2": 30, "c3": 60})
    assert st.q == {"c1": 0.1, "c2": 0.3, "c3": 0.6}
    led = PrivacyLedger()
    rec = run_round(m, st, 1, ["c1", "c3"], _transport(m, fail={"c3"}), led)
    ask, train = rec.phases["ask"], rec.phases["train"]
    assert ask.kind == PhaseKind.QUERY and train.kind == "train"
    assert ask.participants == ("c1", "c2", "c3")
    assert set(ask.failures) == {"c3"} and "boom" in ask.failures["c3"]
    assert st.method_state["asked"] == ["c1", "c2"]
    # the failed client is non-participating: only c1 trains -> w = 0 + 1
    np.testing.assert_array_equal(st.weights["w"], np.ones(4, np.float32))
    assert train.failures == {"c3": "RuntimeError: boom"}
    # bytes: 16 down per payload, 24 up per "ask" reply, 16 per train reply
    assert ask.bytes_down == {"c1": 16, "c2": 16, "c3": 16}
    assert ask.bytes_up == {"c1": 24, "c2": 24}
    assert rec.bytes_down == {"c1": 32, "c2": 16, "c3": 32}
    assert rec.bytes_up_total == 24 + 24 + 16
    # releases recorded per client with the round as step; failed client has none
    assert led.parties == ["c1", "c2"]
    r = led.releases[0]
    assert (r.sigma, r.sensitivity, r.mechanism, r.step) == (2.0, 0.5, "toy/ask", 1)


def test_run_round_all_fail_keeps_state():
    m = Toy(None)
    st = m.init_server_state({"w": np.full(2, 5.0)}, {"c1": 1, "c2": 1})
    rec = run_round(m, st, 2, ["c1", "c2"], lambda ph, r, p: {}, PrivacyLedger())
    np.testing.assert_array_equal(st.weights["w"], [5.0, 5.0])
    assert rec.phases["train"].failures == {"c1": "no reply", "c2": "no reply"}


def test_run_round_rejects_unknown_client_and_round0():
    m = Toy(None)
    st = m.init_server_state({"w": np.zeros(1)}, {"c1": 1})
    with pytest.raises(ValueError, match="c9"):
        run_round(m, st, 1, ["c9"], _transport(m), PrivacyLedger())
    with pytest.raises(ValueError, match="0"):
        run_round(m, st, 0, ["c1"], _transport(m), PrivacyLedger())
    with pytest.raises(ValueError, match="c2"):
        m.init_server_state({"w": np.zeros(1)}, {"c1": 1, "c2": 0})


def test_mean_arrays_plain_and_weighted():
    a = {"x": np.array([1.0, 2.0], np.float32), "n": np.array(3)}
    b = {"x": np.array([3.0, 6.0], np.float32), "n": np.array(5)}
    m = mean_arrays([a, b])
    np.testing.assert_allclose(m["x"], [2.0, 4.0])
    assert m["x"].dtype == np.float32 and m["n"].dtype == a["n"].dtype and int(m["n"]) == 4
    np.testing.assert_allclose(mean_arrays([a, b], [3, 1])["x"], [1.5, 3.0])
    with pytest.raises(ValueError):
        mean_arrays([a, b], [1.0])


def test_sampling_and_generators_deterministic():
    cl = [f"c{i}" for i in range(10)]
    s1 = sample_clients(cl, 3, 4, seed=7)
    assert s1 == sample_clients(cl, 3, 4, seed=7) and len(set(s1)) == 3
    assert s1 == sorted(s1, key=cl.index)
    draws = {tuple(sample_clients(cl, 3, r, seed=7)) for r in range(1, 30)}
    assert len(draws) > 10  # different rounds draw different subsets
    assert sample_clients(cl, 10, 1, 0) == cl
    g1, n1 = client_generators(1, 2, "c1", "train")
    g2, n2 = client_generators(1, 2, "c1", "train")
    g3, _ = client_generators(1, 2, "c2", "train")
    import torch

    a, b, c = (torch.rand(3, generator=g) for g in (g1, g2, g3))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert n1.random() == n2.random()


def test_server_state_roundtrip_is_a_copy():
    st = ServerState({"w": np.arange(3.0)}, {"R": np.eye(2)}, ["a"], method_state={"x": [1]})
    d = st.to_dict()
    st2 = ServerState.from_dict(d)
    st.weights["w"][0] = 99
    st.method_state["x"].append(2)
    assert st2.weights["w"][0] == 0 and st2.method_state["x"] == [1]
    assert st2.clients == ["a"] and st2.round == 0
    np.testing.assert_array_equal(st2.arrays["R"], np.eye(2))


def test_server_state_keeps_the_checkpoint_layout_of_one_info_mapping():
    """A checkpoint holds one ``info`` of the framework's keys then the method's, as
    before the typed fields: an old state's dict reads into the fields and writes back
    equal."""
    old = {
        "weights": {"w": np.zeros(2)},
        "arrays": {},
        "info": {
            "clients": ["a", "b"],
            "client_sizes": {"a": 1, "b": 3},
            "q": {"a": 0.25, "b": 0.75},
            "shared": ["a"],
            "q_sum": 0.25,
            "privacy_warnings": ["w"],
            "round": 2,
            "sampled": ["b"],
        },
    }
    st = ServerState.from_dict(old)
    assert (st.round, st.sampled, st.q["b"], st.privacy_warnings) == (2, ["b"], 0.75, ["w"])
    assert st.method_state == {"shared": ["a"], "q_sum": 0.25}
    back = st.to_dict()["info"]
    assert back == old["info"]
    assert list(back)[:5] == ["clients", "client_sizes", "q", "round", "sampled"]


def test_exponent_floats_read_as_text_by_yaml_are_accepted():
    """PyYAML reads ``mu: 1e-3`` as the string '1e-3'; a float parameter takes it."""
    import yaml

    from fedspectral.fed.methods.fedsc import FedSC

    params = yaml.safe_load("mu: 4e0\nalpha_end: 2e-1")
    assert params == {"mu": "4e0", "alpha_end": "2e-1"}
    out = FedSC.validate_params(params)
    assert out["mu"] == 4.0 and out["alpha_end"] == 0.2
    with pytest.raises(ValueError, match="mu"):
        FedSC.validate_params({"mu": "four"})
