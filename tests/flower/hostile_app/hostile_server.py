r"""A hostile ServerApp: regenerate the nodes' noise and subtract it.

It knows everything a server can know -- the experiment configuration (it sends
it), ``run.seed``, the round, the client ids, the phase, the global weights --
and, to measure how well it did, even the nodes' data (a public dataset here).
For each node it computes

* FedSC's share phase: the release :math:`\tilde R_j` it receives, its own
  replay :math:`\hat R_j` of the node's computation with the noise seeded as
  ``dp.noise_seed = "derive"`` would seed it, and the noiseless :math:`R_j`;
* LDP-PCA: the messages it receives for a query that asks for ``noise-seed = 11``,
  its replay with the generator that seed gave before, and the noiseless ones;

and writes to ``<out-dir>/hostile.json`` the ratios
:math:`\|\tilde R_j - \hat R_j\| / \|\tilde R_j - R_j\|` (the residual after
subtracting its noise guess, over the true noise): about :math:`10^{-7}` when the
guess is right (float32 rounding), about :math:`\sqrt2` when the node's noise is
independent of everything the server knows.  It also asks for ε = ∞ and for the
``"raise"`` norm policy and records what came back.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


def _norm(a: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64).ravel()))


def _fedsc_share(grid: Grid, rc: Any, nodes: list[int], out: dict[str, Any]) -> None:
    import torch

    from fedspectral.config import to_dict
    from fedspectral.fed.flower.apps.grid import exchange
    from fedspectral.fed.flower.apps.records import payload_from_recorddict, payload_to_recorddict
    from fedspectral.fed.simulation import InProcessTransport, Simulation
    from fedspectral.fed.validation import load_config

    torch.set_num_threads(1)
    cfg = load_config(str(rc["config"]), ["dp.noise_seed=derive"])
    msgs = [
        Message(
            RecordDict({"config": ConfigRecord({"json": json.dumps(to_dict(cfg))})}),
            dst_node_id=n,
            message_type="query.hello",
            group_id="hello",
        )
        for n in nodes
    ]
    cid_of = {
        n: str(r.content.config_records["who"]["cid"])
        for n, r in exchange(grid, msgs, timeout=120.0).items()
        if not r.has_error()
    }
    sim = Simulation(cfg)  # the server's replay of every node, noise seeded as "derive"
    sim._setup()
    st = sim._fresh_state()
    cids = sorted(cid_of.values())
    payloads = sim.method.configure("share", 1, st.server, cids)
    node_of = {c: n for n, c in cid_of.items()}
    send = [
        Message(
            payload_to_recorddict(payloads[c], phase="share", round=1),
            dst_node_id=node_of[c],
            message_type="query",
            group_id="1:share",
        )
        for c in cids
    ]
    replies = exchange(grid, send, timeout=float(rc.get("round-timeout", 300.0)))
    guess = InProcessTransport(sim, {c: {} for c in cids})("share", 1, payloads)
    plain_cfg = load_config(str(rc["config"]), ["dp.enabled=false", "dp.epsilon=null"])
    plain = Simulation(plain_cfg)
    plain._setup()
    true = InProcessTransport(plain, {c: {} for c in cids})("share", 1, payloads)
    res: dict[str, Any] = {}
    for n, r in replies.items():
        cid = cid_of[n]
        if r.has_error():
            res[cid] = {"error": r.error.reason}
            continue
        got = payload_from_recorddict(r.content)
        R, R_hat, R_true = got.arrays["R"], guess[cid].arrays["R"], true[cid].arrays["R"]
        noise = _norm(R.astype(np.float64) - R_true)
        res[cid] = {
            "noise_norm": noise,
            "residual_norm": _norm(R.astype(np.float64) - R_hat),
            "ratio": _norm(R.astype(np.float64) - R_hat) / noise,
            "sigma": float(got.config["release.sigma"]),
            "metrics": sorted(got.metrics),
        }
    out["fedsc_share"] = res


def _pca(grid: Grid, nodes: list[int], query: dict[str, Any], timeout: float) -> dict[int, Any]:
    from fedspectral.fed.flower.apps.grid import exchange
    from fedspectral.pca.flower.task import PCA_MESSAGE_TYPE

    msgs = [
        Message(
            RecordDict({"ldp-pca": ConfigRecord(dict(query))}),
            dst_node_id=n,
            message_type=PCA_MESSAGE_TYPE,
            group_id="ldp-pca",
        )
        for n in nodes
    ]
    return exchange(grid, msgs, timeout=timeout)


def _ldp_pca(grid: Grid, nodes: list[int], out: dict[str, Any]) -> None:
    from fedspectral.pca.flower.task import synthetic_users
    from fedspectral.pca.local import perturb_batch

    q = {
        "p": 6,
        "k": 2,
        "epsilon": 1.0,
        "delta": 1e-5,
        "calibration": "analytic",
        "norm-policy": "clip",
        "users": 50,
        "seed": 3,
        "noise-seed": 11,
        "spike": 1.0,
    }
    res: dict[str, Any] = {}
    for n, r in _pca(grid, nodes, q, 120.0).items():
        if r.has_error():
            res[str(n)] = {"error": r.error.reason}
            continue
        M = r.content.array_records["messages"]["messages"].numpy()
        pid = int(r.content.config_records["release"]["partition-id"])
        X = synthetic_users(50, 6, 2, 3, pid)
        M_hat = perturb_batch(X, 1.0, 1e-5, rng=np.random.default_rng([11, 2, pid]))
        M_true = perturb_batch(X, float("inf"), 1e-5, rng=np.random.default_rng(0))
        noise = _norm(M - M_true)
        res[str(n)] = {
            "noise_norm": noise,
            "residual_norm": _norm(M - M_hat),
            "ratio": _norm(M - M_hat) / noise,
        }
    out["ldp_pca"] = res
    # epsilon = inf and the "raise" norm policy: refused by the nodes' policies?
    for name, over in (
        ("epsilon_inf", {"epsilon": float("inf")}),
        ("norm_raise", {"norm-policy": "raise"}),
    ):
        got: dict[str, Any] = {}
        for n, r in _pca(grid, nodes, {**q, **over}, 120.0).items():
            if r.has_error():
                got[str(n)] = {"error": r.error.reason}
            else:
                pid = int(r.content.config_records["release"]["partition-id"])
                M = r.content.array_records["messages"]["messages"].numpy()
                X = synthetic_users(50, 6, 2, 3, pid)
                M_true = perturb_batch(X, float("inf"), 1e-5, rng=np.random.default_rng(0))
                got[str(n)] = {"answered": True, "distance_to_truth": _norm(M - M_true)}
        out[name] = got


@app.main()
def main(grid: Grid, context: Context) -> None:
    from fedspectral.fed.flower.apps.grid import wait_for_nodes

    rc = context.run_config
    t0 = time.perf_counter()
    nodes = wait_for_nodes(grid, int(rc.get("min-nodes", 2)), 120.0)
    out: dict[str, Any] = {}
    d = Path(str(rc["out-dir"]))
    d.mkdir(parents=True, exist_ok=True)
    try:
        _fedsc_share(grid, rc, nodes, out)
        _ldp_pca(grid, nodes, out)
    except Exception:  # noqa: BLE001 -- reported in hostile.json for the test
        import traceback

        out["error"] = traceback.format_exc()
    out["seconds"] = time.perf_counter() - t0
    (d / "hostile.json.tmp").write_text(json.dumps(out, indent=1))
    (d / "hostile.json.tmp").rename(d / "hostile.json")
