r"""Locally private PCA collection as a Flower app (seed 000, Algorithm 1, one round).

Each Flower node stands for a group of users (a phone fleet, a hospital's
patients): node ``j`` holds the vectors :math:`x_i \in \mathbb{R}^p`,
:math:`\|x_i\|_2 \le 1`, of its users.  The protocol is **non-interactive**: a
single ``query`` message (``"query.ldp_pca"``) asks every node for its users'
messages; each user's message is that user's own perturbed second moment

.. math:: m_i = \mathrm{svec}(x_i x_i^\top) + g_i, \qquad
          g_i \sim N(0, \sigma_1^2 I_{p(p+1)/2}),

(:math:`\mathrm{svec}`: packed upper triangle with the off-diagonal entries times √2;
``pca-vectorisation = "upper"``: the plain upper triangle, the seed's message),

computed by :func:`fedspectral.pca.local.perturb` *on the node* -- raw vectors
never leave it, and the node forwards the :math:`m_i` unaggregated (each user
is protected by its own noise, the local model).  The server adds them into a
:class:`~fedspectral.pca.local.CovarianceAggregator`, forms
:math:`\hat S = \frac1n \sum_i (x_i x_i^\top + Z_i)` and reports the top-``k``
eigenspace of :math:`\hat S` (:func:`fedspectral.linalg.top_k_eigvecs`).  Every
user's release is recorded in a :class:`~fedspectral.privacy.PrivacyLedger`
(party ``"<node>/<user>"``, one Gaussian release each).

Run configuration (``[tool.flwr.app.config]`` of ``flower/pyproject.toml`` or
``--run-config``; all optional):

``task = "ldp-pca"``, ``pca-p`` (8), ``pca-k`` (2), ``pca-epsilon`` (1.0),
``pca-delta`` (1e-4), ``pca-calibration`` (``"analytic"``), ``pca-vectorisation``
(``"auto"``: isometric, upper for the paper calibration; the server un-packs with the
same one), ``pca-norm-policy`` (``"clip"``), ``pca-users`` (users per node for synthetic data, 200),
``pca-seed`` (0: synthetic data), ``min-nodes`` (0: ``num-partitions`` of the
first node), ``node-wait`` (120 s) and ``round-timeout`` (600 s) (the training app's
defaults, :data:`~fedspectral.fed.flower.server_app.NODE_WAIT_S` and
:data:`~fedspectral.fed.flower.server_app.ROUND_TIMEOUT_S`), ``out-dir``.

A node's users come from ``node_config["pca-data"]`` (a ``.npy`` file, one user
per row) when set; otherwise they are drawn from the seed's synthetic spiked
model :math:`\Sigma = (\lambda VV^\top + I_p)/(5p(\lambda+1))` with a :math:`V`
shared by all nodes (seeded by ``pca-seed``) and users seeded by
``(pca-seed, partition-id)`` -- then the server also reports
:math:`\|\hat V\hat V^\top - VV^\top\|_F`.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from fedspectral.linalg import n_packed, subspace_distance, top_k_eigvecs
from fedspectral.privacy import PrivacyLedger
from fedspectral.results import write_json

__all__ = [
    "PCA_DEFAULTS",
    "PCA_MESSAGE_TYPE",
    "pca_client_query",
    "pca_server_main",
    "synthetic_users",
]

PCA_MESSAGE_TYPE = "query.ldp_pca"
PCA_DEFAULTS: dict[str, Any] = {
    "pca-p": 8, "pca-k": 2, "pca-epsilon": 1.0, "pca-delta": 1e-4,
    "pca-calibration": "analytic", "pca-vectorisation": "auto", "pca-norm-policy": "clip",
    "pca-users": 200,
    "pca-seed": 0, "pca-spike": 1.0,
}


def _opt(rc: Any, key: str, default: Any = None) -> Any:
    if default is None:
        default = PCA_DEFAULTS.get(key)
    return rc.get(key, default)


def synthetic_model(p: int, k: int, seed: int, spike: float = 1.0
                    ) -> tuple[np.ndarray, np.ndarray]:
    r"""The seed's spiked model :math:`(\Sigma, V)`, :math:`V` Haar-random from ``seed``
    (:func:`fedspectral.pca.synthetic.spiked_covariance`); shared by all nodes."""
    from fedspectral.pca.synthetic import spiked_covariance

    return spiked_covariance(p, k, spike, rng=np.random.default_rng([int(seed), 0]))


def synthetic_users(n: int, p: int, k: int, seed: int, partition: int,
                    spike: float = 1.0) -> np.ndarray:
    r"""``n`` users of node ``partition``, iid :math:`N(0,\Sigma)` of :func:`synthetic_model`
    (then :math:`\|x\| \le 1` w.h.p.; rows beyond are clipped by ``perturb_batch``)."""
    from fedspectral.pca.synthetic import sample

    Sigma, _ = synthetic_model(p, k, seed, spike)
    return sample(Sigma, n, rng=np.random.default_rng([int(seed), 1, int(partition)]))


# --------------------------------------------------------------------------------------
# client (node) side
# --------------------------------------------------------------------------------------
def pca_client_query(msg: Message, context: Context, policy: Any = None) -> Message:
    """Node handler of ``query.ldp_pca``: perturb each local user's second moment.

    The request (ε, δ, calibration, norm policy) is checked against the node's
    privacy ``policy`` (:class:`~.node_policy.NodePolicy`; default: the node's own,
    from its node config) before the users' data is read; the noise comes from
    :func:`~.node_policy.node_noise_generator` (never a seed from the server);
    the release goes into the node's ledger.

    Reply: ``ArrayRecord`` ``"messages"`` (n_users x p(p+1)/2, one row per user,
    the packed, noised :math:`x_ix_i^\\top`) and a ``ConfigRecord`` ``"release"`` (σ₁,
    the vectorisation, ε spent at the policy's δ, number of users).
    """
    from fedspectral.fed.flower.client_app import _uniform_failure
    from fedspectral.fed.flower.node_policy import (
        NodeLedger,
        NodePolicy,
        dataset_key,
        node_noise_generator,
    )
    from fedspectral.fed.manifest import check_manifest
    from fedspectral.pca.local import (
        MECHANISM,
        SENSITIVITY,
        ldp_noise_scale,
        perturb_batch,
        resolve_vectorisation,
    )
    from fedspectral.privacy.accounting import Release

    pol = policy if policy is not None else NodePolicy.from_node(context.node_config)
    check_manifest(pol, "ldp-pca", "query", "dp")  # served at all? (before any data)
    cfg = msg.content.config_records["ldp-pca"]
    p, k = int(cfg["p"]), int(cfg["k"])
    eps, delta = float(cfg["epsilon"]), float(cfg["delta"])
    calibration, norm_policy = str(cfg["calibration"]), str(cfg["norm-policy"])
    pid = int(context.node_config.get("partition-id", 0))
    party = f"users@node{pid}"
    # the request against the node's policy, before any user's data is read
    pol.require("calibrations", calibration, pol.calibrations)
    pol.require("norm-policies", norm_policy, pol.norm_policies)
    pol.check_delta(delta)
    data_path = context.node_config.get("pca-data")
    dataset = (dataset_key("ldp-pca", os.path.realpath(str(data_path))) if data_path
               else dataset_key("ldp-pca-synthetic", pid))
    ledger = NodeLedger(pol, dataset, context)  # fails closed before any data
    if not math.isfinite(eps):
        pol.check_nonprivate("the users' second moments (epsilon = inf)")
    sigma = float(ldp_noise_scale(eps, delta, calibration).sigma)
    release = Release(party, MECHANISM, sigma, SENSITIVITY, 1, "replace_one", None)
    spent = pol.check_release(release, ledger)
    ledger.record(release)  # spent before the users' data is read: a failure counts too
    t0 = time.perf_counter()
    try:
        if data_path:
            X = np.load(str(data_path), allow_pickle=False)
            if X.ndim != 2 or X.shape[1] != p:
                raise ValueError(f"{data_path}: expected an (n, {p}) array, got {X.shape}")
        else:
            X = synthetic_users(int(cfg["users"]), p, k, int(cfg["seed"]), pid,
                                float(cfg["spike"]))
        rng = node_noise_generator(pol, None, ("ldp-pca", pid))
        # one message per user, each with its own noise (the per-user path a device runs)
        vec = resolve_vectorisation(str(cfg.get("vectorisation", "auto")), calibration)
        msgs = perturb_batch(X, eps, delta, rng=rng, calibration=calibration,
                             norm_policy=norm_policy, vectorisation=vec)
    except Exception as exc:  # noqa: BLE001 -- uniform: its type or message may be data
        raise _uniform_failure(party, "ldp-pca", 0, t0, exc) from None
    reply = RecordDict({
        "messages": ArrayRecord({"messages": _array(msgs)}),
        "release": ConfigRecord({
            "sigma": float(sigma), "users": len(X), "partition-id": pid, "vectorisation": vec,
            "seconds": time.perf_counter() - t0, "synthetic": not data_path,
            "epsilon": float(spent["epsilon"]), "epsilon-total": float(spent["epsilon_total"]),
        }),
    })
    return Message(reply, reply_to=msg)


def _array(a: np.ndarray) -> Any:
    from flwr.app import Array

    return Array(np.ascontiguousarray(a))


# --------------------------------------------------------------------------------------
# server side
# --------------------------------------------------------------------------------------
def pca_server_main(grid: Grid, context: Context) -> dict[str, Any]:
    """ServerApp body: one non-interactive round, aggregate, report the subspace.

    Writes ``ldp_pca.json`` (and ``ldp_pca_subspace.npy``) to ``out-dir`` when
    set; returns the same dictionary.
    """
    from fedspectral.fed.flower import server_app
    from fedspectral.pca.local import (
        CovarianceAggregator,
        record_ldp_release,
        resolve_vectorisation,
    )

    rc = context.run_config
    p, k = int(_opt(rc, "pca-p")), int(_opt(rc, "pca-k"))
    eps, delta = float(_opt(rc, "pca-epsilon")), float(_opt(rc, "pca-delta"))
    if not 1 <= k <= p:
        raise ValueError(f"pca-k must satisfy 1 <= k <= pca-p={p}, got {k}")
    if not eps > 0 or not 0 < delta < 1:
        raise ValueError(f"need pca-epsilon > 0 and 0 < pca-delta < 1, got {eps}, {delta}")
    min_nodes = int(rc.get("min-nodes", 1)) or 1
    nodes = server_app.wait_for_nodes(grid, min_nodes,
                                      float(rc.get("node-wait", server_app.NODE_WAIT_S)))
    query = {
        "p": p, "k": k, "epsilon": eps, "delta": delta,
        "calibration": str(_opt(rc, "pca-calibration")),
        "vectorisation": str(_opt(rc, "pca-vectorisation")),
        "norm-policy": str(_opt(rc, "pca-norm-policy")),
        "users": int(_opt(rc, "pca-users")), "seed": int(_opt(rc, "pca-seed")),
        "spike": float(_opt(rc, "pca-spike")),
    }
    t0 = time.perf_counter()
    out = [Message(RecordDict({"ldp-pca": ConfigRecord(dict(query))}), dst_node_id=nid,
                   message_type=PCA_MESSAGE_TYPE, group_id="ldp-pca")
           for nid in nodes]
    replies = server_app.exchange(
        grid, out, timeout=float(rc.get("round-timeout", server_app.ROUND_TIMEOUT_S)))
    vec = resolve_vectorisation(query["vectorisation"], query["calibration"])
    agg = CovarianceAggregator(p, vec)
    ledger = PrivacyLedger()
    per_node: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for node, r in sorted(replies.items()):
        nid = str(node)
        if r.has_error():
            failures[nid] = f"{r.error.code}: {r.error.reason}"
            continue
        M = r.content.array_records["messages"]["messages"].numpy()
        rel = r.content.config_records["release"]
        if M.shape != (int(rel["users"]), n_packed(p)):
            failures[nid] = f"bad message shape {M.shape}"
            continue
        if str(rel.get("vectorisation", "upper")) != vec:
            failures[nid] = f"messages packed as {rel.get('vectorisation', 'upper')!r}, not {vec!r}"
            continue
        agg.add_batch(M)
        pid = int(rel["partition-id"])
        # one entry per node stands for its users (one message each, same sigma,
        # disjoint data); the recorded sensitivity is the true one whatever the calibration
        record_ldp_release(ledger, float(rel["sigma"]), M.shape[0], party=f"users@node{pid}")
        per_node[nid] = {"partition-id": pid, "users": int(rel["users"]),
                         "seconds": float(rel["seconds"]), "synthetic": bool(rel["synthetic"])}
    for nid in nodes:
        if str(nid) not in per_node and str(nid) not in failures:
            failures[str(nid)] = "no reply"
    if agg.count == 0:
        raise RuntimeError(f"no node answered the LDP-PCA query: {failures}")
    S = agg.covariance()
    eigvals, V_hat = top_k_eigvecs(S, k)
    result: dict[str, Any] = {
        "task": "ldp-pca", "engine": "flower", "query": query, "vectorisation": vec,
        "n": int(agg.count),
        "nodes": per_node, "failures": failures, "eigenvalues": eigvals.tolist(),
        "subspace": V_hat.tolist(), "seconds": time.perf_counter() - t0,
        "privacy": {**ledger.report(delta, accountants=("analytic",)),
                    "ledger": ledger.to_dict()},
    }
    if all(v["synthetic"] for v in per_node.values()):
        _, V = synthetic_model(p, k, query["seed"], query["spike"])
        result["subspace_error"] = subspace_distance(V_hat, V)
    out_dir = str(rc.get("out-dir", ""))
    if out_dir:

        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        write_json(d / "ldp_pca.json", result)
        np.save(d / "ldp_pca_subspace.npy", V_hat)
    return result

