"""A deployment the server cannot undo: TLS, SuperNode authentication, node-owned privacy.

One loopback deployment for the module (SuperLink over TLS with SuperNode
authentication, 2 registered SuperNodes with the *default* node policy -- noise
from OS entropy, nothing non-private -- plus the operator's opt-in to send FedSC's
trained weights without client-level DP); the certificates and keys are generated
at start-up with ``cryptography`` in a temporary directory.  On it:

* an authenticated node over TLS completes a FedSC round with DP-CalR on, each
  node keeping its own ledger of its release;
* a hostile ServerApp (``tests/flower/hostile_app``) that knows every
  configuration value and seed replays each node's computation, subtracts its
  noise guess and measures the residual: it stays at the noise level
  (‖residual‖ / ‖noise‖ ≈ √2, where it was 0 when the nodes took the server's
  seeds), for FedSC's share phase and for LDP-PCA; the nodes refuse ε = ∞ and the
  ``"raise"`` norm policy;
* a SuperNode whose key is not registered is refused, and one without the CA
  certificate cannot connect (both against the same SuperLink).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedspectral.fed.flower.deploy.certs import make_node_key
from fedspectral.fed.flower.deploy.local import LocalDeployment

pytestmark = pytest.mark.slow

HOSTILE_APP = Path(__file__).resolve().parent / "hostile_app"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDeployment]:
    dep = LocalDeployment(
        2,
        workdir=tmp_path_factory.mktemp("flower-tls"),
        tls=True,
        auth=True,
        startup_timeout=60.0,
        policy={"allow-unprotected-weights": True, "simulation": True},
    )
    from conftest import running

    yield from running(dep)


@pytest.fixture(scope="module")
def dp_config(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fedspectral.config import save_config
    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", 1)
    cfg.partition.num_clients = 2
    cfg.dp.enabled, cfg.dp.epsilon = True, 2.0
    cfg.method.params["neighbouring"] = "replace_one"  # the nodes' own relation
    path = tmp_path_factory.mktemp("cfg") / "tiny_dp.yaml"
    save_config(validate(cfg), path)
    return path


def _online(dep: LocalDeployment) -> list[str]:
    res = dep.flwr("supernode", "ls", "fedspectral-local", "--format", "json")
    out = json.loads(res.stdout[res.stdout.index("{") :])
    return sorted(n["node-id"] for n in out["nodes"] if n["status"] == "online")


def test_authenticated_nodes_over_tls_complete_a_fedsc_round(
    secure, app_dir, dp_config, tmp_path
) -> None:
    assert all(secure.certs[k].exists() for k in ("ca", "cert", "key"))
    assert "insecure" not in (secure.flwr_home / "config.toml").read_text()
    out = tmp_path / "fedsc"
    status = secure.run(
        app_dir,
        {"task": "train", "config": str(dp_config), "out-dir": str(out), "round-timeout": 180.0},
        timeout=300,
        done=lambda: (out / "convergence.png").exists(),
    )
    assert status == "finished:completed", secure.log("superlink")[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["rounds_done"] == 1 and sorted(res["flower"]["nodes"]) == ["client-0", "client-1"]
    (rec,) = res["records"]
    assert all(ph["failures"] == {} for ph in rec["phases"].values())
    assert "clip_fraction" not in rec["phases"]["share"]["metrics"]
    # each node's own ledger holds its release, with the sigma the server recorded
    server = {r["party"]: r for r in res["privacy"]["ledger"]["releases"]}
    for i in range(2):
        led = sorted((secure.dir / f"ledger-{i}").glob("ledger-*.json"))
        rel = [r for f in led for r in json.loads(f.read_text())["releases"]]
        assert len(rel) == 1 and rel[0]["sigma"] == server[rel[0]["party"]]["sigma"] > 0


def test_hostile_server_cannot_subtract_the_noise(secure, dp_config, tmp_path) -> None:
    out = tmp_path / "hostile"
    status = secure.run(
        HOSTILE_APP,
        {"config": str(dp_config), "out-dir": str(out)},
        timeout=400,
        done=lambda: (out / "hostile.json").exists(),
    )
    assert status == "finished:completed", secure.log("superlink")[-3000:]
    res = json.loads((out / "hostile.json").read_text())
    assert "error" not in res, res.get("error")
    # independent noise: residual = node noise - server's guess, ratio sqrt(2) within a
    # few % (528 and 50 x 21 noise entries); the server's replay was exact (ratio 0)
    # when the nodes drew their noise from seeds it knew
    ratios = [v["ratio"] for v in res["fedsc_share"].values()]
    ratios += [v["ratio"] for v in res["ldp_pca"].values()]
    assert len(ratios) == 4
    assert all(abs(r - math.sqrt(2)) < 0.2 for r in ratios), ratios
    assert all(v["metrics"] == ["num-examples"] for v in res["fedsc_share"].values())
    for key, why in (
        ("epsilon_inf", "allow-nonprivate: false"),
        ("norm_raise", "norm-policies 'raise' is not allowed"),
    ):
        assert len(res[key]) == 2
        for v in res[key].values():
            assert "PolicyRefusal" in v["error"] and why in v["error"], v


def _wait_exit(dep: LocalDeployment, name: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while dep.procs[name].poll() is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} still running after {timeout} s:\n{dep.log(name)[-2000:]}")
        time.sleep(0.5)
    return int(dep.procs[name].returncode)


def test_unregistered_node_is_refused_and_node_without_ca_cannot_connect(secure, tmp_path) -> None:
    before = _online(secure)
    assert len(before) == 2
    intruder = make_node_key(tmp_path, "intruder")  # a valid key, never registered
    cfg = {"partition-id": 1, "num-partitions": 2}
    secure.start_node("intruder", cfg, private_key=intruder["key"], max_wait=20.0)
    secure.start_node("no-ca", cfg, root_certificates=False, max_wait=20.0)
    assert _wait_exit(secure, "intruder", 90.0) != 0
    assert _wait_exit(secure, "no-ca", 90.0) != 0
    assert "Failed to activate SuperNode" in secure.log("intruder")
    assert "CERTIFICATE_VERIFY_FAILED" in secure.log("no-ca")
    assert _online(secure) == before  # neither joined the federation
