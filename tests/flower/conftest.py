"""Shared fixtures of the Flower tests: a tiny experiment and one loopback deployment.

Ray and process start-up dominate these tests, so the deployment (a SuperLink and
three SuperNodes on 127.0.0.1) is started once per module and always stopped,
even when a test fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "flower"
#: the privacy policy of the shared deployment's nodes (set by the nodes, not the server)
#: ``simulation``: the test's own loopback nodes cut their partitions from the server's
#: plan (bit-equality with the in-process runner); a real node reads its own data
NODE_TEST_POLICY = {
    "allow-nonprivate": True,
    "allow-unprotected-weights": True,
    "noise-seed": 11,
    "simulation": True,
}


def tiny_config(method: str = "fedsc", rounds: int = 2):
    """3 clients of sklearn digits (iid, 300 images), small CNN, 2 rounds, 1 thread:
    validated (``method.params`` complete) and thawed, an editable copy for the tests to
    change (a :class:`~fedspectral.config.ValidConfig` is frozen); the runners validate
    it again."""
    from fedspectral.config import ExperimentConfig, thaw
    from fedspectral.fed.validation import validate

    cfg = ExperimentConfig()
    cfg.name = "flower-tiny"
    cfg.data.dataset = "digits"
    cfg.data.max_train = 300
    cfg.partition.scheme = "iid"
    cfg.partition.num_clients = 3
    cfg.method.name = method
    cfg.method.rounds = rounds
    cfg.optim.batch_size = 32
    cfg.eval.every = 1
    cfg.eval.test_size = 100
    cfg.eval.knn_k = 10
    cfg.run.threads = 1  # same thread count in every process: bit-equal float sums
    cfg.run.progress = False
    return thaw(validate(cfg))


@pytest.fixture(scope="session")
def tiny():
    """``tiny(method, rounds)`` -> a validated, editable tiny config (:func:`tiny_config`)."""
    return tiny_config


@pytest.fixture(scope="session")
def app_dir() -> Path:
    return APP_DIR


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from fedspectral.fed.flower.deploy.local import LocalDeployment

    # the nodes' own policy: the tiny FedSC config runs without DP, and the LDP-PCA
    # check regenerates the noise from the seed the nodes chose (tests only)
    dep = LocalDeployment(
        3,
        workdir=tmp_path_factory.mktemp("flower-deploy"),
        startup_timeout=60.0,
        policy=NODE_TEST_POLICY,
    )
    yield from running(dep)


@pytest.fixture
def task_identity():
    """Flower stamps messages with the identity of the running task: set one (tests that
    drive the ServerApp/ClientApp in process use it)."""
    from flwr.supercore.task_identity import TaskIdentity

    old = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = old


def running(dep):
    """Start ``dep``, yield it, and stop it; no Flower process may outlive the stop."""
    from fedspectral.fed.flower.deploy.processes import live_processes_in_groups

    try:
        dep.start()
        yield dep
    finally:
        groups = dep.pgids()
        dep.stop(timeout=10.0)
        left = live_processes_in_groups(groups)
        assert not left, f"stray Flower processes after stop: {left}"
