"""``flwr run flower/`` on Flower's local simulation, piece by piece without Ray: the
virtual nodes' policy comes with the simulation runtime (not with the environment a
SuperLink was started in), too few virtual nodes are refused at once, and a run whose
phase every node refuses fails with the nodes' reasons instead of ending "done"."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict
from flwr.common.config import flatten_dict

from fedspectral.fed.flower.apps import client_app
from fedspectral.fed.flower.apps.client_app import LOCAL_SIMULATION_POLICY, node_policy
from fedspectral.fed.flower.node.policy import POLICY_ENV, NodePolicy

REPO = Path(__file__).resolve().parents[2]
POLICY_FILE = REPO / "flower" / "local-node-policy.toml"


def _ctx(node_config: dict | None = None, run_config: dict | None = None) -> Context:
    nc = {"partition-id": 0, "num-partitions": 2, **(node_config or {})}
    return Context(
        run_id=77, node_id=1, node_config=nc, state=RecordDict(), run_config=run_config or {}
    )


def test_the_local_simulation_policy_is_the_apps_policy_file() -> None:
    from_file = NodePolicy.from_file(POLICY_FILE)
    assert replace(from_file, source="") == replace(LOCAL_SIMULATION_POLICY, source="")
    # every method the app offers, the baselines and FedCA's dictionary included
    from fedspectral.fed.methods import ssl_methods

    for name in ssl_methods():
        LOCAL_SIMULATION_POLICY.check_phase(name, "train")
    # and still no non-private release (dp = false is refused, with the key named)
    with pytest.raises(PermissionError, match="allow-nonprivate"):
        LOCAL_SIMULATION_POLICY.check_nonprivate("FedSC's share without DP")


def test_virtual_nodes_follow_the_simulation_policy_whatever_the_environment(
    monkeypatch, tmp_path
) -> None:
    strict = tmp_path / "strict.toml"
    strict.write_text("[privacy]\nmax-epsilon = 0.5\n")
    monkeypatch.setenv(POLICY_ENV, str(strict))  # a SuperLink started in this environment
    assert client_app.in_simulation_runtime() is False  # this process is no Ray actor
    assert node_policy(_ctx()).max_epsilon == 0.5  # a node outside a simulation: its env
    monkeypatch.setattr(client_app, "in_simulation_runtime", lambda: True)
    assert node_policy(_ctx()) is LOCAL_SIMULATION_POLICY
    # a policy the node config names still wins (a node that carries its own)
    assert node_policy(_ctx({"policy-max-epsilon": 1.5})).max_epsilon == 1.5
    assert node_policy(_ctx({"privacy-policy": str(strict)})).max_epsilon == 0.5


def test_too_few_virtual_nodes_are_refused_at_once(monkeypatch) -> None:
    import time

    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    from fedspectral.fed.flower.apps import grid as server_grid

    class Two(InMemoryGrid):
        def __init__(self) -> None:  # no state: only the node ids are asked for
            pass

        def get_node_ids(self):
            return [11, 12]

    monkeypatch.setattr(server_grid, "SIMULATION_SETTLE_S", 0.2)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="num-supernodes=5.*num-clients=2"):
        server_grid.wait_for_nodes(Two(), 5, timeout=120.0)
    assert time.monotonic() - t0 < 5.0
    assert server_grid.wait_for_nodes(Two(), 2, timeout=1.0) == [11, 12]


def _defaults() -> dict:
    doc = tomllib.loads((REPO / "flower" / "pyproject.toml").read_text())
    return flatten_dict(doc["tool"]["flwr"]["app"]["config"])


@pytest.mark.usefixtures("task_identity")
def test_a_share_phase_every_node_refuses_fails_the_run_with_their_reason(
    monkeypatch, tmp_path
) -> None:
    """dp = false on the local simulation's nodes: each refuses FedSC's share phase (its
    policy allows no non-private release); the run stops after round 1 with that reason
    rather than train on as FedAvg+SC.  Its folder is its own (run-<run id>)."""
    from test_adapter import FakeGrid

    from fedspectral.fed.flower.apps.runner import train_server_main

    monkeypatch.chdir(tmp_path)
    logged: list[str] = []
    monkeypatch.setattr("flwr.common.log", lambda level, fmt, *a: logged.append(fmt % a))
    rc = {
        **_defaults(),
        "dp": False,
        "dp-epsilon": 0.0,  # (flwr run drops the default itself: not given explicitly)
        "num-server-rounds": 2,
        "set": "data.max_train=200;eval.test_size=60;eval.knn_k=5;run.threads=1",
    }
    with pytest.raises(RuntimeError, match="every client asked in fedsc's 'share' phase") as e:
        train_server_main(FakeGrid(2, policy=LOCAL_SIMULATION_POLICY), _ctx(run_config=rc))
    assert "allow-nonprivate" in str(e.value) and "run with dp=true" in str(e.value)
    # the node's reason once, in its own words (not the transport's wrapper)
    assert str(e.value).count("PolicyRefusal: ") == 1 and "ClientApp error" not in str(e.value)
    run_dir = tmp_path / "results" / "flower_app" / "run-77"
    assert (run_dir / "checkpoint.pt").is_file()
    # the folder is marked failed with the same line, and its note says so
    assert (run_dir / "FAILED").read_text().strip() == str(e.value)
    assert "marked failed" in " ".join(e.value.__notes__)
    assert "is a smoke run" in logged[1]
    # no metrics line for the round every node refused
    assert not any(line.startswith(("round 0/2", "round 1/2")) for line in logged), logged


def test_resume_without_out_dir_is_refused_before_anything_runs() -> None:
    from fedspectral.fed.flower.apps.runner import train_server_main

    with pytest.raises(ValueError, match="resume=true needs out-dir"):
        train_server_main(None, _ctx(run_config={**_defaults(), "resume": True}))
