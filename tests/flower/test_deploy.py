"""Flower Deployment Engine on loopback: SuperLink + 3 SuperNodes, ``flwr run``.

One deployment serves both runs (LDP-PCA collection, then 2 FedSC rounds); the
fixture stops every process group with bounded waits and checks that nothing is
left.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_ldp_pca_collection_on_loopback(deployment, app_dir, tmp_path) -> None:
    from fedspectral.fed.protocol import derive_seed
    from fedspectral.linalg import subspace_distance, top_k_eigvecs
    from fedspectral.pca.flower.task import synthetic_users
    from fedspectral.pca.local import CovarianceAggregator, ldp_noise_scale, perturb_batch

    out = tmp_path / "pca"
    rc = {
        "task": "ldp-pca",
        "min-nodes": 3,
        "pca-p": 6,
        "pca-k": 2,
        "pca-users": 150,
        "pca-epsilon": 2.0,
        "pca-delta": 1e-4,
        "pca-seed": 3,
        "out-dir": str(out),
    }
    status = deployment.run(
        app_dir, rc, timeout=150, done=lambda: (out / "ldp_pca_subspace.npy").exists()
    )
    assert status == "finished:completed", deployment.log("superlink")[-3000:]
    res = json.loads((out / "ldp_pca.json").read_text())
    assert res["failures"] == {} and res["n"] == 450
    assert res["vectorisation"] == "isometric"  # pca-vectorisation "auto", analytic σ
    assert sorted(v["partition-id"] for v in res["nodes"].values()) == [0, 1, 2]
    # independent reference: the same users and noise streams (the nodes' own test seed,
    # NODE_TEST_POLICY, never sent by the server), aggregated here
    agg = CovarianceAggregator(6)
    for pid in range(3):
        X = synthetic_users(150, 6, 2, 3, pid)
        rng = np.random.default_rng(derive_seed("node-noise", 11, "ldp-pca", pid))
        agg.add_batch(perturb_batch(X, 2.0, 1e-4, rng=rng))
    _, V_ref = top_k_eigvecs(agg.covariance(), 2)
    V = np.array(res["subspace"])
    assert subspace_distance(V, V_ref) < 1e-9
    # every user's release in the ledger: one party per node, sigma from the calibration
    rel = res["privacy"]["ledger"]["releases"]
    assert len(rel) == 3
    assert all(r["sigma"] == pytest.approx(ldp_noise_scale(2.0, 1e-4).sigma) for r in rel)
    assert res["privacy"]["epsilon_analytic"] == pytest.approx(2.0, rel=1e-6)
    assert np.load(out / "ldp_pca_subspace.npy").shape == (6, 2)
    # each node kept its own ledger of the release (its policy's ledger-dir)
    for i in range(3):
        (led,) = (deployment.dir / f"ledger-{i}").glob("ledger-*.json")
        assert len(json.loads(led.read_text())["releases"]) == 1


def test_fedsc_two_rounds_on_loopback(deployment, app_dir, tiny, tmp_path) -> None:
    from fedspectral.config import save_config
    from fedspectral.fed.simulation import Simulation

    cfg = tiny("fedsc", rounds=2)
    path = tmp_path / "tiny.yaml"
    save_config(cfg, path)
    out = tmp_path / "fedsc"
    status = deployment.run(
        app_dir,
        {"task": "train", "config": str(path), "out-dir": str(out), "round-timeout": 120.0},
        timeout=240,
        done=lambda: (out / "convergence.png").exists(),
    )
    assert status == "finished:completed", deployment.log("superlink")[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["engine"] == "flower" and res["rounds_done"] == 2
    assert sorted(res["flower"]["nodes"]) == ["client-0", "client-1", "client-2"]
    for rec in res["records"]:
        assert set(rec["phases"]) == {"share", "train"}
        for ph in rec["phases"].values():
            assert ph["failures"] == {}
    assert [m["kind"] for m in res["flower"]["messages"]] == ["query", "train"] * 2
    # the same algorithm as in process: same losses and KNN accuracy
    ref = Simulation(tiny("fedsc", rounds=2)).run()
    for a, b in zip(ref["records"], res["records"], strict=True):
        assert a["phases"]["train"]["metrics"] == b["phases"]["train"]["metrics"]
        assert a["knn_projector"] == b["knn_projector"]
