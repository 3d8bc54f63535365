"""A method added from the tests alone (``toy_method.py``: one module and its registration)
runs in process and on Flower's simulation runtime with equal results.

Its ``mean`` phase is a DP release (noised on the client), so the whole contract is
exercised: the round loop prices and records the release the method declares
(``Method.releases``), a Flower node checks the request against the method's reply
manifest, spends the same release in its own ledger and sends only what the manifest
declares, and the privacy report reads the method's threat model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from toy_method import MECHANISM, NAME, ToyMethod, register_toy

from fedspectral.fed.methods import METHODS, build_method, dp_methods, method_class


@pytest.fixture
def toy():
    """The toy method registered for one test (the registry as it was afterwards)."""
    assert NAME not in METHODS
    register_toy()
    yield
    METHODS.pop(NAME, None)


def _config(rounds: int = 2):
    """2 clients of sklearn digits (100 images), DP on the toy's mean (σ = 0.5)."""
    from fedspectral.config import ExperimentConfig
    from fedspectral.fed.validation import validate

    cfg = ExperimentConfig()
    cfg.name = "toy"
    cfg.data.dataset = "digits"
    cfg.data.max_train = 100
    cfg.partition.scheme = "iid"
    cfg.partition.num_clients = 2
    cfg.method.name = NAME
    cfg.method.rounds = rounds
    cfg.method.params = {}
    cfg.dp.enabled, cfg.dp.sigma = True, 0.5
    cfg.eval.every = 1
    cfg.eval.test_size = 50
    cfg.eval.knn_k = 5
    cfg.run.threads = 1
    cfg.run.progress = False
    return validate(cfg)


def test_the_toy_methods_contract_is_read_from_its_class(toy) -> None:
    from fedspectral.fed.flower.node.client_dp import threat_models
    from fedspectral.fed.manifest import phase_manifest, released_objects
    from fedspectral.privacy import PrivacyLedger

    method = build_method(_config())
    assert type(method) is ToyMethod and method_class(NAME) is ToyMethod
    assert method.phases == ("mean", "shrink") and method.phase_kind("mean") == "query"
    assert method.phase_kind("shrink") == "train" and method.phases_of_kind("train") == ("shrink",)
    assert NAME in dp_methods()
    (rel,) = method.releases("mean", 50)
    assert (rel.sigma, rel.sensitivity, rel.neighbouring) == (0.5, 1.0 / 50, "zero_out")
    assert method.releases("mean", 50, "replace_one")[0].sensitivity == 2.0 / 50
    assert method.releases("shrink", 50) == []
    # the shrink phase's manifests are a training phase's, client-level DP's included
    assert {("shrink", "plain"), ("shrink", "client-dp")} <= set(method.reply_manifests())
    man = phase_manifest(NAME, "mean", method.release_variant("mean"))
    assert man.variant == "dp" and man.sample_dp
    objs = released_objects(NAME, method.phases, True, False)
    assert [(o["phase"], o["object"], o["protection"]) for o in objs][:1] == [
        ("mean", "array mean", "dp")
    ]
    led = PrivacyLedger()
    led.record("client-0", MECHANISM, sigma=0.5, sensitivity=0.02, neighbouring="zero_out")
    assert threat_models(led)[MECHANISM].startswith("untrusted server")


@pytest.mark.slow
def test_toy_method_on_flower_equals_in_process(toy, tmp_path) -> None:
    from fedspectral.fed.flower.apps.engine import run_flower_simulation, write_app
    from fedspectral.fed.simulation import CHECKPOINT, Simulation, load_run_state

    sim = Simulation(_config())
    ref = sim.run()
    # both releases of each round are in the run's ledger (recorded when sent)
    assert [(r.party, r.step) for r in sim.state.ledger.releases] == [
        ("client-0", 1),
        ("client-1", 1),
        ("client-0", 2),
        ("client-1", 2),
    ]
    # the simulation app, its ServerApp and ClientApp importing the toy (registering it)
    app = write_app(tmp_path / "app", clientapp="toy_app:client_app")
    toml = (app / "pyproject.toml").read_text()
    server = 'serverapp = "fedspectral.fed.flower.apps.engine:server_app"'
    assert server in toml
    (app / "pyproject.toml").write_text(toml.replace(server, 'serverapp = "toy_app:server_app"'))
    for name in ("toy_method.py", "toy_app.py"):
        shutil.copy(Path(__file__).with_name(name), app)
    out = tmp_path / "out"
    res = run_flower_simulation(_config(), out_dir=out, app_dir=app)
    fl = load_run_state(out / CHECKPOINT, _config())
    assert fl.round == 2 and [r.to_dict() for r in fl.records] == res["records"]
    a, b = sim.state.server, fl.server
    assert list(a.weights) == list(b.weights) and a.arrays.keys() == b.arrays.keys() == {"mean"}
    for k in a.weights:
        assert np.array_equal(a.weights[k], b.weights[k]), k
    assert np.array_equal(a.arrays["mean"], b.arrays["mean"])
    metrics = [{p: ph["metrics"] for p, ph in r["phases"].items()} for r in res["records"]]
    assert metrics == [{p: ph["metrics"] for p, ph in r["phases"].items()} for r in ref["records"]]
    assert [r["knn_projector"] for r in res["records"]] == [
        r["knn_projector"] for r in ref["records"]
    ]
    assert fl.ledger.to_dict() == sim.state.ledger.to_dict()  # the same DP releases
    log = res["flower"]["messages"]
    assert [(m["phase"], m["kind"], m["sent"], m["answered"]) for m in log] == [
        ("mean", "query", 2, 2),
        ("shrink", "train", 2, 2),
    ] * 2


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("placement", ["client", "server"])
def test_the_toys_shrink_phase_gets_client_level_dp_in_process_and_on_flower(
    toy, placement
) -> None:
    """The toy's training phase is called ``shrink``: it is a phase of kind train, so the
    run's client-level DP applies to it (and only to it) whatever its name -- in process
    and through the real ClientApp over Flower's serialisation (``FakeGrid``), with the
    same weights and the same client-level ledger on both; the ``mean`` query keeps its
    own sample-level release."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import FlowerRunner
    from fedspectral.fed.flower.node.client_dp import CLIENT_MECHANISM, ClientDP
    from fedspectral.fed.flower.node.client_dp import MECHANISM as SERVER_MECHANISM
    from fedspectral.fed.simulation import Simulation

    def dp() -> ClientDP:
        return ClientDP(
            clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, seed=3, placement=placement
        )

    ref = Simulation(_config(), client_dp=dp())
    ref_res = ref.run()
    runner = FlowerRunner(_config(), FakeGrid(2), round_timeout=5.0, node_wait=5.0, client_dp=dp())
    res = runner.run()
    for k, v in ref.state.server.weights.items():
        assert np.array_equal(v, runner.state.server.weights[k]), k
    want = CLIENT_MECHANISM if placement == "client" else SERVER_MECHANISM
    for st in (ref.state, runner.state):
        rel = st.client_ledger.releases
        assert {r.mechanism for r in rel} == {want}
        assert [(r.party, r.step) for r in rel] == [
            (f"client-{j}", t) for t in (1, 2) for j in (0, 1)
        ]
        assert {r.mechanism for r in st.ledger.releases} == {MECHANISM}
    assert runner.state.client_ledger.to_dict() == ref.state.client_ledger.to_dict()
    for r in (res, ref_res):
        shrink = r["records"][-1]["phases"]["shrink"]
        assert shrink["kind"] == "train" and "epsilon_client_dp" in shrink["metrics"]
        assert "epsilon_client_dp" not in r["records"][-1]["phases"]["mean"]["metrics"]
    if placement == "client":  # the nodes answered under the client-dp manifest
        assert res["flower"]["client_dp"]["placement"] == "client"


def test_client_level_dp_refuses_a_method_without_a_training_phase(toy) -> None:
    """Client-level DP asks for a phase of kind train, not for a phase named "train": a
    method whose only phase is a query is refused, naming its phases."""
    from fedspectral.fed.flower.node.client_dp import ClientDP
    from fedspectral.fed.phases import RoundPhase
    from fedspectral.kinds import PhaseKind

    class AskOnly(RoundPhase):
        TRAIN = "train", PhaseKind.QUERY  # called "train", but a query

    class Asker(ToyMethod):
        Phase = AskOnly

    with pytest.raises(ValueError, match="no phase of kind train.*train"):
        ClientDP(clipping_norm=0.5, noise_multiplier=1.0).check(Asker(_config()))
