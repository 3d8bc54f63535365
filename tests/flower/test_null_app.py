"""The benchmark's null Flower app (benchmarks/flower_null): the floor of a deployment
round is measured with it, so it must run where the experiment runs."""

import importlib.util
import tomllib
from pathlib import Path

import pytest
from flwr.serverapp import ServerApp

from fedspectral.fed.flower.deploy.node_runtime import CLIENT_APP
from fedspectral.fed.flower.node.policy import NodePolicy, PolicyRefusal

APP = Path(__file__).resolve().parents[2] / "benchmarks" / "flower_null"


def test_null_app_names_the_only_client_app_a_node_runs_and_a_server_app():
    conf = tomllib.loads((APP / "pyproject.toml").read_text())
    comp = conf["tool"]["flwr"]["app"]["components"]
    # a deployed node's runtime answers any other ClientApp with an error
    assert comp["clientapp"] == CLIENT_APP
    module, attr = comp["serverapp"].split(":")
    spec = importlib.util.spec_from_file_location(module, APP / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert isinstance(getattr(mod, attr), ServerApp)
    keys = set(conf["tool"]["flwr"]["app"]["config"])
    assert {"rounds", "phases", "out-dir", "min-nodes", "node-wait", "timeout"} <= keys


def test_the_deployment_benchmarks_node_policy_lets_its_nodes_train():
    """benchmarks/flower_overhead.py --deployment runs FedSC without DP: its nodes must
    send weights without client-level DP. With the policy it had before (no
    allow-unprotected-weights), every node refused the train phase and the run ended
    'finished:failed', so make bench printed no deployment ratio."""
    spec = importlib.util.spec_from_file_location(
        "flower_overhead", APP.parent / "flower_overhead.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    policy = NodePolicy.from_mapping(bench.BENCH_POLICY, "benchmark")
    policy.check_nonprivate("the benchmark's release")
    policy.check_unprotected_weights("fedsc's trained weights")
    before = {k: v for k, v in bench.BENCH_POLICY.items() if k != "allow-unprotected-weights"}
    with pytest.raises(PolicyRefusal, match="allow-unprotected-weights: false"):
        NodePolicy.from_mapping(before, "before").check_unprotected_weights("fedsc's weights")
