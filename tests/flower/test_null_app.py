"""The benchmark's null Flower app (benchmarks/flower_null): the floor of a deployment
round is measured with it, so it must run where the experiment runs."""

import importlib.util
import tomllib
from pathlib import Path

from flwr.serverapp import ServerApp

from fedspectral.fed.flower.deploy.node_runtime import CLIENT_APP

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
