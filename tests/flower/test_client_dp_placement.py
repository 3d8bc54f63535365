"""Client-level DP, client-side: each client clips its update and adds its share of the noise.

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
    attach,
    privatise_update,
)
from fedspectral.fed.protocol import Payload
from fedspectral.fed.simulation import Simulation

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
    ref = attach(Simulation(tiny("fedsc", 2)), ref_dp)
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
    # Flower's accountant: the aggregate, noise multiplier z with every client answering
    server_side = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5)
    for t in (1, 2):
        server_side.release(t, ["client-0", "client-1", "client-2"], 3)
    assert fl_dp.epsilon() == pytest.approx(server_side.epsilon(), rel=1e-9)


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


def test_client_dp_wraps_a_method_with_a_secure_share_phase(tiny) -> None:
    """The wrapper delegates the secure-sum hooks: FedSC with secure aggregation runs
    with client-level DP; round 1's secure sum (before any training) is the run's
    without DP, bit for bit, and the train releases are ledgered."""
    from fedspectral.fed.validation import validate

    def cfg():
        c = tiny("fedsc", 1)
        c.method.params = {"secure_aggregation": True}
        return validate(c)

    plain = Simulation(cfg())
    plain.run()
    wrapped = attach(Simulation(cfg()), ClientDP(clipping_norm=0.5, noise_multiplier=1.5, seed=3))
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
    each mechanism under its own key; the same holds with client-level DP's hooks."""
    from types import SimpleNamespace

    from fedspectral.fed.flower.apps.runner import _FlowerResults
    from fedspectral.fed.flower.node.client_dp import ClientDPHooks
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
    for hook in (
        _FlowerResults(),
        ClientDPHooks(ClientDP(clipping_norm=1.0, noise_multiplier=1.0)),
    ):
        results = {"privacy": {"threat_models": dict(eps)}}
        hook.on_results(sim, results)
        assert results["privacy"]["threat_models"] == eps
        assert "untrusted server" in results["privacy"]["mechanism_threats"]["fedsc/dp-calr"]
