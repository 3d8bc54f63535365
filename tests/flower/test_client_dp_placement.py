"""Client-level DP, a post-processor of the train phase: client-side (each client clips its
update and adds its share of the noise) and server-side; its ε against Flower's accountant.

No Ray, no processes: the in-process runner against the server-side runner over
``test_adapter``'s ``FakeGrid`` (real ClientApp, Flower serialisation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedspectral.fed.flower.apps.runner import FlowerRunner
from fedspectral.fed.flower.node.client_dp import (
    CLIENT_MECHANISM,
    MECHANISM,
    THREAT_MODELS,
    ClientDP,
    privatise_update,
)
from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import Method, Payload
from fedspectral.fed.simulation import Simulation
from fedspectral.fed.weights import mean_arrays
from fedspectral.kinds import PhaseKind

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def test_client_shares_sum_to_the_server_side_noise() -> None:
    """m clipped updates, each with N(0, (zC)^2/m): the mean's noise has Flower's
    server-side standard deviation zC/m (``compute_stdv``), within 2 %."""
    from flwr.supercore.differential_privacy import compute_stdv

    C, z, m, d = 0.5, 1.3, 6, 40_000
    rng = np.random.default_rng(0)
    ref = {"a": np.zeros(d, np.float64)}
    clean, noisy = [], []
    for j in range(m):
        upd = rng.normal(size=d)  # norm ~ 200 >> C: clipped to exactly C
        rep = Payload.with_weights({"a": upd})
        clean.append(privatise_update(rep, ref, C, 0.0, rng).weights()["a"])
        noisy.append(
            privatise_update(
                rep, ref, C, z * C / math.sqrt(m), np.random.default_rng(j + 1)
            ).weights()["a"]
        )
    assert all(np.linalg.norm(c) == pytest.approx(C) for c in clean)
    noise = np.mean(noisy, axis=0) - np.mean(clean, axis=0)
    assert np.std(noise) == pytest.approx(compute_stdv(z, C, m), rel=0.02)


def test_client_side_dp_on_flower_equals_in_process_and_is_ledgered(tiny) -> None:
    from test_adapter import FakeGrid

    def dp() -> ClientDP:
        return ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, placement="client")

    ref_dp = dp()
    ref = Simulation(tiny("fedsc", 2), client_dp=ref_dp)
    ref_res = ref.run()
    fl_dp = dp()
    runner = FlowerRunner(
        tiny("fedsc", 2), FakeGrid(3), round_timeout=5.0, node_wait=5.0, client_dp=fl_dp
    )
    res = runner.run()
    for k, v in ref.state.server.weights.items():
        assert np.array_equal(v, runner.state.server.weights[k]), k
    assert runner.state.ledger.to_dict() == ref.state.ledger.to_dict()
    assert runner.state.client_ledger.to_dict() == ref.state.client_ledger.to_dict()
    # client-level releases live in their own ledger, never composed with DP-CalR's
    assert not [r for r in runner.state.ledger.releases if r.mechanism.startswith("flower/")]
    rel = [r for r in runner.state.client_ledger.releases if r.mechanism.startswith("flower/")]
    assert {r.mechanism for r in rel} == {CLIENT_MECHANISM}
    assert [(r.party, r.step) for r in rel] == [
        (f"client-{j}", t) for t in (1, 2) for j in range(3)
    ]
    # against the server: each update's own noise, z / sqrt(m); the aggregate: z
    assert all(
        r.sigma == pytest.approx(1.5 * 0.5 / math.sqrt(3)) and r.sensitivity == 0.5 for r in rel
    )
    for r in (res, ref_res):
        tm = r["privacy"]["mechanism_threats"]
        assert tm[CLIENT_MECHANISM] == THREAT_MODELS[CLIENT_MECHANISM]
        assert "untrusted server" in tm["fedsc/dp-calr"]
    assert res["flower"]["client_dp"]["placement"] == "client"
    # the server-side option is labelled as what it is
    assert THREAT_MODELS[MECHANISM].startswith("trusted server")
    # the aggregate: noise multiplier z with every client answering, as Flower accounts it
    assert fl_dp.epsilon() == ref_dp.epsilon() == pytest.approx(_flower_epsilon([1.5, 1.5]))
    assert [e["round"] for e in fl_dp.events] == [1, 2]


def _flower_epsilon(zs: list[float], delta: float = 1e-5) -> float:
    """The oracle: Flower's client-level ``RdpAccountant`` (no sampling amplification,
    add or remove one client) composing one ``GaussianPrivacyEvent`` per round."""
    from flwr.serverapp import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        RdpAccountant,
        SamplingMethod,
    )

    acc = RdpAccountant(
        PrivacyConfig(
            target_delta=delta,
            population_size=3,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
    for z in zs:
        acc.compose(GaussianPrivacyEvent(noise_multiplier=z, sample_size=3, population_size=3))
    return float(acc.get_privacy_spent().epsilon)


@pytest.mark.parametrize("placement", ["server", "client"])
def test_the_ledger_epsilon_equals_flowers_accountant(placement) -> None:
    """The aggregate's ε comes from the run's client-level ledger alone; Flower's
    accountant, fed the events it would see, agrees (to 1e-9).  Client-side with a client
    missing: the two shares that arrived sum to z sqrt(2/3)."""
    from fedspectral.privacy import PrivacyLedger

    dp = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, placement=placement)
    ledger = PrivacyLedger(unit="client")
    dp.bind(ledger)
    dp.release(1, ["client-0", "client-1", "client-2"], asked=3)
    dp.release(2, ["client-0", "client-2"], asked=3)
    z2 = 1.5 * math.sqrt(2 / 3) if placement == "client" else 1.5
    assert dp.round_multipliers() == pytest.approx([1.5, z2], rel=1e-12)
    assert dp.epsilon() == pytest.approx(_flower_epsilon([1.5, z2]), rel=1e-9)
    assert [e["epsilon_rdp"] for e in dp.events][-1] == dp.epsilon()
    # resumed: a fresh object bound to the same ledger has the same ε (nothing kept aside)
    again = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, placement=placement)
    again.bind(ledger)
    assert again.epsilon() == dp.epsilon() and again.events == []
    mech = CLIENT_MECHANISM if placement == "client" else MECHANISM
    assert [(r.party, r.step, r.mechanism) for r in ledger.releases] == [
        ("client-0", 1, mech),
        ("client-1", 1, mech),
        ("client-2", 1, mech),
        ("client-0", 2, mech),
        ("client-2", 2, mech),
    ]


def test_node_refuses_a_share_of_noise_too_small_for_its_policy(tiny) -> None:
    from test_adapter import FakeGrid

    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", 1)
    cfg.dp.enabled, cfg.dp.epsilon = True, 2.0
    # a narrow network: the nodes' secure noise costs tens of microseconds per weight
    cfg.model.width, cfg.model.projector_hidden, cfg.model.projector_out = 4, 32, 16
    grid = FakeGrid(
        3, policy=None, node_config={"policy-max-epsilon": 10.0, "policy-max-epsilon-total": 20.0}
    )
    grid.nodes[1002].node_config["policy-max-epsilon"] = 1.0  # z/sqrt(3) is not enough
    dp = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, placement="client")
    res = FlowerRunner(validate(cfg), grid, round_timeout=5.0, node_wait=5.0, client_dp=dp).run()
    fails = res["records"][0]["phases"]["train"]["failures"]
    assert set(fails) == {"client-2"}
    assert "flower/client-dp-local-noise release would spend epsilon" in fails["client-2"]
    assert "above max-epsilon 1" in fails["client-2"]


def test_client_dp_leaves_a_secure_share_phase_alone(tiny) -> None:
    """The post-processor applies to the train phase only: FedSC with secure aggregation
    runs with client-level DP; round 1's secure sum (before any training) is the run's
    without DP, bit for bit, and the train releases are ledgered."""
    from fedspectral.fed.validation import validate

    def cfg():
        c = tiny("fedsc", 1)
        c.method.params = {"secure_aggregation": True}
        return validate(c)

    plain = Simulation(cfg())
    plain.run()
    wrapped = Simulation(cfg(), client_dp=ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=3))
    res = wrapped.run()
    assert np.array_equal(wrapped.state.server.arrays["A"], plain.state.server.arrays["A"])
    assert res["records"][0]["phases"]["share"]["contributors"] == [
        "client-0",
        "client-1",
        "client-2",
    ]
    assert [(r.party, r.mechanism) for r in wrapped.state.client_ledger.releases] == [
        (f"client-{j}", MECHANISM) for j in range(3)
    ]
    assert any(
        not np.array_equal(wrapped.state.server.weights[k], v)
        for k, v in plain.state.server.weights.items()
    )  # the noised mean


def test_flower_results_keep_the_epsilon_per_threat_model() -> None:
    """A secure share phase's ε per threat model (``privacy.threat_models``, written by
    the runner) survives the Flower part of the results, which puts the threat model of
    each mechanism under its own key; the same holds with client-level DP's."""
    from types import SimpleNamespace

    from fedspectral.fed.flower.apps.runner import _FlowerResults
    from fedspectral.privacy import PrivacyLedger

    ledger = PrivacyLedger()
    ledger.record("client-0", "fedsc/dp-calr", 0.1, 0.01)
    eps = {"secagg": {"epsilon_rdp": 1.0}, "fallback": {"epsilon_rdp": 3.7}}
    sim = SimpleNamespace(
        state=SimpleNamespace(ledger=ledger, client_ledger=PrivacyLedger()),
        grid_transport=None,
        client_dp=None,
        flower={},
    )
    for hook in (_FlowerResults(), ClientDP(clipping_norm=1.0, noise_multiplier=1.0)):
        results = {"privacy": {"threat_models": dict(eps)}}
        hook.on_results(sim, results)
        assert results["privacy"]["threat_models"] == eps
        assert "untrusted server" in results["privacy"]["mechanism_threats"]["fedsc/dp-calr"]


class AskTrain(RoundPhase):
    ASK = "ask", PhaseKind.QUERY
    TRAIN = "train", PhaseKind.TRAIN


class _Toy(Method):
    """Two phases, ``ask`` (a query: each client reports) and ``train`` (each client
    returns the global weights plus 10: an update far outside the clipping ball); the
    fold is the plain mean.  No model: the round loop alone."""

    name = "toy"
    Phase = AskTrain

    def build_net(self):  # pragma: no cover - not used
        return None

    def configure(self, phase, rnd, state, cids):
        return {c: Payload.with_weights(state.weights) for c in cids}

    def aggregate(self, phase, rnd, state, replies):
        if phase == "ask":
            state.arrays["asked"] = np.array([len(replies)])
        elif replies:
            state.weights = mean_arrays([r.weights() for r in replies.values()])
        return {"n": len(replies)}

    def client_phase(self, phase, rnd, payload, rt):
        return Payload.with_weights({k: v + 10.0 for k, v in payload.weights().items()})


@pytest.mark.parametrize("placement", ["server", "client"])
def test_the_round_loop_post_processes_the_train_phase_only(placement) -> None:
    """``run_round`` applies the post-processor to the train phase alone: the query
    phase's requests, replies and fold are the method's own; client-side, only the train
    requests ask for the clip and the share of noise; server-side, the train replies are
    clipped towards the global weights, averaged by the method's own fold and the mean
    noised from ``(seed, round)``; each train release is in the ledger it was bound to,
    nothing of the query phase."""
    from fedspectral.fed.flower.node.client_dp import CLIP_KEY, STD_KEY
    from fedspectral.fed.protocol import derive_seed, run_round
    from fedspectral.privacy import PrivacyLedger
    from fedspectral.privacy.client_level import mean_sigma, share_sigma

    method = _Toy(None)
    st = method.init_server_state({"w": np.zeros(4, np.float32)}, {"a": 10, "b": 10})
    seen = {}

    def transport(phase, rnd, payloads):
        seen[phase] = {c: dict(p.config) for c, p in payloads.items()}
        return {c: method.client_phase(phase, rnd, p, None) for c, p in payloads.items()}

    dp = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=4, placement=placement)
    ledger = PrivacyLedger(unit="client")
    dp.bind(ledger)
    rec = run_round(method, st, 1, ["a", "b"], transport, PrivacyLedger(), dp)
    assert seen["ask"] == {"a": {}, "b": {}}
    assert rec.phases["ask"].metrics == {"n": 2.0}
    assert st.arrays["asked"].tolist() == [2]
    train = rec.phases["train"].metrics
    assert train["epsilon_client_dp"] == dp.epsilon() > 0
    assert [(r.party, r.step) for r in ledger.releases] == [("a", 1), ("b", 1)]
    if placement == "client":  # the nodes clip and noise: here, the transport's replies pass
        std = share_sigma(1.5, 0.5, 2)
        assert seen["train"] == {c: {CLIP_KEY: 0.5, STD_KEY: std} for c in "ab"}
        assert train["dp_client_noise_std"] == std
        assert np.array_equal(st.weights["w"], np.full(4, 10.0, np.float32))
    else:
        assert seen["train"] == {"a": {}, "b": {}}
        assert train["dp_clipped_fraction"] == 1.0 and train["dp_update_norm"] == 20.0
        assert train["dp_noise_std"] == mean_sigma(1.5, 0.5, 2)
        rng = np.random.default_rng(derive_seed("client-dp", 4, 1))
        clipped = np.full(4, 0.25)  # 10 per entry, norm 20, scaled to norm 0.5
        want = (clipped + mean_sigma(1.5, 0.5, 2) * rng.standard_normal(4)).astype(np.float32)
        assert np.array_equal(st.weights["w"], want)


def test_a_runner_keeps_its_method_and_is_given_client_dp(tiny) -> None:
    """Client-level DP is the runner's post-processor, never a method swapped in: the
    method is the registry's own object before and after the run, the post-processor is
    its first callback (bound to the run's client-level ledger when the state is ready),
    and a method it cannot apply to is refused by the runner's constructor."""
    from fedspectral.fed.methods import build_method

    dp = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=1)
    cfg = tiny("fedavg_sc", 1)
    sim = Simulation(cfg, client_dp=dp)
    method = sim.method
    assert type(method) is type(build_method(tiny("fedavg_sc", 1)))
    assert sim.callbacks[0] is dp and sim.client_dp is dp
    sim.run()
    assert sim.method is method and dp.ledger is sim.state.client_ledger
    assert {r.mechanism for r in dp.ledger.releases} == {MECHANISM}
    weighted = tiny("fedavg_sc", 1)
    weighted.method.weighted = True
    with pytest.raises(ValueError, match="weighted"):
        Simulation(weighted, client_dp=ClientDP(1.0, 1.0))
