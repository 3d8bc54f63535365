"""Bad arguments are rejected before any work (no SuperLink, no Ray, no process started)."""

from __future__ import annotations

import pytest

from fedspectral.fed.flower.apps.engine import run_flower_simulation
from fedspectral.fed.flower.deploy.local import LocalDeployment, format_run_config
from fedspectral.fed.flower.node.client_dp import ClientDP


def test_run_flower_simulation_rejects_bad_arguments(tiny) -> None:
    with pytest.raises(ValueError, match="num_cpus"):
        run_flower_simulation(tiny(), num_cpus=0)
    with pytest.raises(ValueError, match="round_timeout"):
        run_flower_simulation(tiny(), round_timeout=-1.0)
    with pytest.raises(ValueError, match="out_dir"):
        run_flower_simulation(tiny(), resume=True)
    with pytest.raises(ValueError, match="app_dir"):
        run_flower_simulation(tiny(), app_dir="/nonexistent/app")
    with pytest.raises(ValueError, match="timeout"):
        run_flower_simulation(tiny(), timeout=0.0)


def test_write_app_names_another_client_app_and_refuses_bad_ones(tmp_path) -> None:
    import tomllib

    from fedspectral.fed.flower.apps.engine import APP_CONFIG, CLIENT_APP, write_app

    app = write_app(
        tmp_path / "a", clientapp="faulty_client:app", extra_config={"fail": "client-1|2|*"}
    )
    doc = tomllib.loads((app / "pyproject.toml").read_text())
    assert doc["tool"]["flwr"]["app"]["components"]["clientapp"] == "faulty_client:app"
    assert doc["tool"]["flwr"]["app"]["config"] == {**APP_CONFIG, "fail": "client-1|2|*"}
    default = tomllib.loads((write_app(tmp_path / "b") / "pyproject.toml").read_text())
    assert default["tool"]["flwr"]["app"]["components"]["clientapp"] == CLIENT_APP
    assert default["tool"]["flwr"]["app"]["config"] == APP_CONFIG
    with pytest.raises(ValueError, match="clientapp"):
        write_app(tmp_path / "c", clientapp="faulty_client.app")
    with pytest.raises(ValueError, match="resume"):
        write_app(tmp_path / "d", extra_config={"resume": True})


@pytest.mark.parametrize(
    "kw",
    [
        {"clipping_norm": 0.0, "noise_multiplier": 1.0},
        {"clipping_norm": 1.0, "noise_multiplier": float("nan")},
        {"clipping_norm": 1.0, "noise_multiplier": 1.0, "seed": -2},
        {"clipping_norm": 1.0, "noise_multiplier": 1.0, "delta": 1.0},
    ],
)
def test_client_dp_rejects_bad_values(kw) -> None:
    with pytest.raises(ValueError):
        ClientDP(**kw)


def test_client_dp_travels_as_run_config_keys_and_back() -> None:
    """The engine writes client-level DP as run-config keys, the ServerApp reads them back
    (one function each way): the same options; no noise multiplier means off; a bad value
    is refused by the constructor's checks."""
    dp = ClientDP(clipping_norm=0.7, noise_multiplier=1.3, seed=5, delta=1e-6, placement="client")
    back = ClientDP.from_run_config(dp.to_run_config(), delta=dp.delta)
    assert back is not None and back.to_run_config() == dp.to_run_config()
    assert ClientDP.from_run_config({}, delta=1e-5) is None
    assert ClientDP.from_run_config({"dp-noise-multiplier": 0.0, "dp-clip": 1.0}, 1e-5) is None
    plain = ClientDP.from_run_config({"dp-noise-multiplier": 2.0, "dp-clip": 1.0}, delta=1e-4)
    assert (plain.seed, plain.placement, plain.delta) == (-1, "server", 1e-4)
    with pytest.raises(ValueError, match="clipping_norm"):
        ClientDP.from_run_config({"dp-noise-multiplier": 2.0, "dp-clip": -1.0}, delta=1e-4)


def test_client_dp_refuses_a_weighted_mean(tiny) -> None:
    from fedspectral.fed.methods import build_method

    cfg = tiny()
    cfg.method.weighted = True
    with pytest.raises(ValueError, match="weighted"):
        ClientDP(1.0, 1.0).check(build_method(cfg))


def test_run_config_formatting() -> None:
    assert (
        format_run_config(
            {"task": "ldp-pca", "pca-k": 2, "eps": 0.5, "resume": False, "out-dir": '/tmp/a "b"'}
        )
        == 'task="ldp-pca" pca-k=2 eps=0.5 resume=false out-dir="/tmp/a \\"b\\""'
    )
    with pytest.raises(ValueError):
        format_run_config({"a b": 1})
    with pytest.raises(TypeError):
        format_run_config({"a": [1]})


def test_deployment_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="num_nodes"):
        LocalDeployment(0)
    with pytest.raises(ValueError, match="node_config"):
        LocalDeployment(2, node_config=[{}])
    with pytest.raises(ValueError, match="isolation"):
        LocalDeployment(2, isolation="thread")
    with pytest.raises(ValueError, match="simulation"):
        LocalDeployment(2, simulation=True, tls=True)
    with pytest.raises(ValueError, match="simulation"):
        LocalDeployment(2, federation_config={"verbose": True})
    with pytest.raises(TypeError, match="simulation"):
        LocalDeployment(2, simulation=1)  # type: ignore[arg-type]


def test_node_runtime_rejects_bad_arguments() -> None:
    from fedspectral.fed.flower.deploy.node_runtime import NodeRuntime

    with pytest.raises(ValueError, match="runtime_api_address"):
        NodeRuntime("localhost", app=object())
    with pytest.raises(ValueError, match="poll"):
        NodeRuntime("127.0.0.1:9094", poll=0.0, app=object())
    with pytest.raises(ValueError, match="poll"):
        NodeRuntime("127.0.0.1:9094", poll=True, app=object())


def test_a_server_app_error_comes_back_with_its_type() -> None:
    """The simulation's ServerApp runs in another process: its exception is re-raised
    in the caller as the nearest class this side knows (its MRO, by name)."""
    from fedspectral.checks import NonFiniteError
    from fedspectral.fed.checkpoint import CheckpointError
    from fedspectral.fed.flower.apps.engine import _error_class

    def mro(cls: type) -> list[str]:
        return [c.__name__ for c in cls.__mro__]

    assert _error_class(mro(CheckpointError)) is CheckpointError
    assert _error_class(mro(NonFiniteError)) is NonFiniteError
    assert _error_class(mro(ZeroDivisionError)) is ArithmeticError
    assert _error_class(["SomeAppError", "Exception", "BaseException", "object"]) is RuntimeError


def test_the_reply_poll_is_chosen_by_the_grid_class_not_its_name() -> None:
    """Flower's in-memory grid (the simulation runtime's, subclasses included) is polled
    fast; any other grid, even one merely *named* InMemoryGrid, at the HTTP interval."""
    from flwr.superlink.grid import InMemoryGrid

    from fedspectral.fed.flower.apps.grid import POLL_HTTP_S, POLL_IN_MEMORY_S, default_poll

    class Sub(InMemoryGrid):
        pass

    impostor = type("InMemoryGrid", (), {})
    assert default_poll(object.__new__(InMemoryGrid)) == POLL_IN_MEMORY_S
    assert default_poll(object.__new__(Sub)) == POLL_IN_MEMORY_S
    assert default_poll(impostor()) == POLL_HTTP_S
    assert POLL_IN_MEMORY_S < POLL_HTTP_S


def test_a_nodes_data_root_does_not_reach_the_apps_default_config(tiny, tmp_path) -> None:
    """Virtual nodes of one process share the ClientApp's default config: one node's
    ``data-root`` must set that node's copy only (it was set on the default in place)."""
    from flwr.app import Context, RecordDict

    from fedspectral.fed.flower.apps.client_app import _config

    default = tiny()
    before = default.data.root

    def ctx(node_config):
        return Context(
            run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={}
        )

    mine = _config(ctx({"partition-id": 0, "data-root": str(tmp_path)}), default)
    assert mine.data.root == str(tmp_path)
    assert default.data.root == before
    assert _config(ctx({"partition-id": 1}), default).data.root == before
