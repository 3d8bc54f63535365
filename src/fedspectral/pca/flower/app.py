r"""Locally private PCA collection as a Flower app (the LDP-PCA paper, Algorithm 1, one round).

Each Flower node stands for a group of users (a phone fleet, a hospital's
patients): node ``j`` holds the vectors :math:`x_i \in \mathbb{R}^p`,
:math:`\|x_i\|_2 \le 1`, of its users.  The protocol is **non-interactive**: a
single ``query`` message (``"query.ldp_pca"``) asks every node for its users'
messages; each user's message is that user's own perturbed second moment

.. math:: m_i = \mathrm{svec}(x_i x_i^\top) + g_i, \qquad
          g_i \sim N(0, \sigma_1^2 I_{p(p+1)/2}),

(:math:`\mathrm{svec}`: packed upper triangle with the off-diagonal entries times √2;
``pca-vectorisation = "upper"``: the plain upper triangle, the paper's message),

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
defaults, :data:`~fedspectral.fed.flower.apps.grid.NODE_WAIT_S` and
:data:`~fedspectral.fed.flower.apps.grid.ROUND_TIMEOUT_S`), ``out-dir``.

**Distributed model** (docs/pca.md, section 9): with ``pca-model = "distributed"`` in
the run config the server first asks every node for its *own* choice (``request =
"plan"``: the node's ``pca-model`` and ``pca-min-contributors`` from its node config,
defaults ``"local"`` and 2; nothing data-dependent).  The nodes that chose the
distributed model are the holders; the secure sum's threshold :math:`t` is the largest of
their minimums, the run config's ``pca-min-contributors`` and a majority.  Stage 0 of the
secure sum (:mod:`.secure_sum`) goes to each holder as ``query.ldp_pca`` with the request;
the holder checks it against its policy (ε = ∞ only if non-private releases are allowed;
:math:`t` at least its own minimum; its message alone within ``max-epsilon``: the
fallback reading; the sum's session bound to the digest of its request,
:func:`request_digest`, so that holders asked different things cannot complete one sum),
sizes its share for :math:`t` (:func:`fedspectral.pca.holder_noise`)
and enters :math:`[\mathrm{svec}(\sum_i x_ix_i^\top) + g_h, n_h]`
(:func:`.node.holder_secure_query`); stages 1-4 are the generic ``query.secagg`` ones.  A holder
that drops out leaves the others able to finish (at least :math:`t`); the server records
the contributors under both threat models (``privacy.secagg`` / ``privacy.fallback``).
``pca-max-users`` (10⁶) bounds a holder's users (the secure sum's range).

A node's users come from ``node_config["pca-data"]`` (a ``.npy`` file, one user
per row) when set; otherwise they are drawn from the paper's synthetic spiked
model :math:`\Sigma = (\lambda VV^\top + I_p)/(5p(\lambda+1))` with a :math:`V`
shared by all nodes (seeded by ``pca-seed``) and users seeded by
``(pca-seed, partition-id)`` -- then the server also reports
:math:`\|\hat V\hat V^\top - VV^\top\|_F`.
"""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from fedspectral.atomic import atomic_batch, atomic_write_bytes
from fedspectral.fed.flower.apps.grid import exchange, wait_for_nodes
from fedspectral.fed.flower.apps.records import decode_replies
from fedspectral.fed.flower.apps.run_config import run_value
from fedspectral.fed.flower.node.secure_sum import STAGES, grid_secure_sum
from fedspectral.fed.protocol import Payload
from fedspectral.fed.releases import SecureSumSpec
from fedspectral.inputs import check_output_folder
from fedspectral.kinds import ANALYTIC
from fedspectral.linalg import n_packed, subspace_distance, top_k_eigvecs
from fedspectral.pca.flower.node import config_float, config_int
from fedspectral.pca.flower.task import (
    PCA_DEFAULTS,
    PCA_MESSAGE_TYPE,
    PCA_MODELS,
    request_digest,
    synthetic_model,
    synthetic_users,
)
from fedspectral.pca.holders import MECHANISM, holder_noise, record_distributed_release
from fedspectral.pca.local import CovarianceAggregator, record_ldp_release, resolve_vectorisation
from fedspectral.privacy import PrivacyLedger
from fedspectral.results import write_json

__all__ = [
    "PCA_DEFAULTS",
    "PCA_MESSAGE_TYPE",
    "pca_server_main",
    "synthetic_users",
]


def _opt(rc: Any, key: str) -> Any:
    """Run-config ``key``, checked against its type where it enters (a ``pca-k`` of 2.7 is
    refused, never truncated: :func:`~fedspectral.fed.flower.apps.run_config.run_value`)."""
    if key not in rc and key in PCA_DEFAULTS:
        return PCA_DEFAULTS[key]
    return run_value(rc, key)


def _pca_model(rc: Any) -> str:
    model = _opt(rc, "pca-model")
    if model not in PCA_MODELS:
        raise ValueError(f"run config pca-model={model!r}: must be one of {PCA_MODELS}")
    return str(model)


# --------------------------------------------------------------------------------------
# server side
# --------------------------------------------------------------------------------------
def _query(rc: Any) -> dict[str, Any]:
    """The LDP-PCA query the ServerApp sends, from its run config (checked first)."""
    p, k = int(_opt(rc, "pca-p")), int(_opt(rc, "pca-k"))
    eps, delta = float(_opt(rc, "pca-epsilon")), float(_opt(rc, "pca-delta"))
    if not 1 <= k <= p:
        raise ValueError(f"pca-k must satisfy 1 <= k <= pca-p={p}, got {k}")
    if not eps > 0 or not 0 < delta < 1:
        raise ValueError(f"need pca-epsilon > 0 and 0 < pca-delta < 1, got {eps}, {delta}")
    return {
        "p": p,
        "k": k,
        "epsilon": eps,
        "delta": delta,
        "calibration": str(_opt(rc, "pca-calibration")),
        "vectorisation": str(_opt(rc, "pca-vectorisation")),
        "norm-policy": str(_opt(rc, "pca-norm-policy")),
        "users": int(_opt(rc, "pca-users")),
        "seed": int(_opt(rc, "pca-seed")),
        "spike": float(_opt(rc, "pca-spike")),
    }


def _aggregate(
    replies: dict[int, Message], nodes: list[int], p: int, vec: str
) -> tuple[Any, PrivacyLedger, dict[str, Any], dict[str, str]]:
    """The nodes' users' messages summed (a ``CovarianceAggregator``), each node's release
    ledgered, and per node what it sent or why it was left out."""
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
        if M.shape != (config_int(rel, "users"), n_packed(p)):
            failures[nid] = f"bad message shape {M.shape}"
            continue
        if str(rel.get("vectorisation", "upper")) != vec:
            failures[nid] = f"messages packed as {rel.get('vectorisation', 'upper')!r}, not {vec!r}"
            continue
        agg.add_batch(M)
        pid = config_int(rel, "partition-id")
        # one entry per node stands for its users (one message each, same sigma,
        # disjoint data); the recorded sensitivity is the true one whatever the calibration
        sigma = config_float(rel, "sigma")
        record_ldp_release(ledger, sigma, M.shape[0], party=f"users@node{pid}")
        per_node[nid] = {
            "partition-id": pid,
            "users": config_int(rel, "users"),
            "synthetic": bool(rel["synthetic"]),
        }
    for node in nodes:
        if str(node) not in per_node and str(node) not in failures:
            failures[str(node)] = "no reply"
    return agg, ledger, per_node, failures


def pca_server_main(grid: Grid, context: Context) -> dict[str, Any]:
    """ServerApp body: one non-interactive round, aggregate, report the subspace.

    Writes ``ldp_pca.json`` (and ``ldp_pca_subspace.npy``) to ``out-dir`` when
    set; returns the same dictionary.
    """
    rc = context.run_config
    query = _query(rc)
    p, k, delta = query["p"], query["k"], query["delta"]
    if _opt(rc, "out-dir"):  # a read-only or misnamed folder: refused before any release
        check_output_folder(_opt(rc, "out-dir"), "run config out-dir")
    min_nodes = _opt(rc, "min-nodes") or 1
    nodes = wait_for_nodes(grid, min_nodes, float(_opt(rc, "node-wait")))
    t0 = time.perf_counter()
    if _pca_model(rc) == "distributed":
        return _write(*distributed_server(grid, rc, query, nodes), rc)
    out = [
        Message(
            RecordDict({"ldp-pca": ConfigRecord(dict(query))}),
            dst_node_id=nid,
            message_type=PCA_MESSAGE_TYPE,
            group_id="ldp-pca",
        )
        for nid in nodes
    ]
    replies = exchange(grid, out, timeout=float(_opt(rc, "round-timeout")))
    vec = resolve_vectorisation(query["vectorisation"], query["calibration"])
    agg, ledger, per_node, failures = _aggregate(replies, nodes, p, vec)
    if agg.count == 0:
        raise RuntimeError(f"no node answered the LDP-PCA query: {failures}")
    S = agg.covariance()
    eigvals, V_hat = top_k_eigvecs(S, k)
    result: dict[str, Any] = {
        "task": "ldp-pca",
        "engine": "flower",
        "query": query,
        "vectorisation": vec,
        "n": int(agg.count),
        "nodes": per_node,
        "failures": failures,
        "eigenvalues": eigvals.tolist(),
        "subspace": V_hat.tolist(),
        "seconds": time.perf_counter() - t0,
        "privacy": {**ledger.report(delta, accountants=(ANALYTIC,)), "ledger": ledger.to_dict()},
    }
    if all(v["synthetic"] for v in per_node.values()):
        _, V = synthetic_model(p, k, query["seed"], query["spike"])
        result["subspace_error"] = subspace_distance(V_hat, V)
    return _write(result, V_hat, rc)


def _write(result: dict[str, Any], V_hat: np.ndarray | None, rc: Any) -> dict[str, Any]:
    """Write ``ldp_pca.json`` (and ``ldp_pca_subspace.npy``) to ``out-dir`` when set; log
    the result line (:func:`result_line`) to Flower's log (``flwr log``, ``--stream``)."""
    from flwr.common import log

    out_dir = _opt(rc, "out-dir")
    if out_dir:
        d = Path(out_dir)
        with atomic_batch():  # both files, or neither (a full disk: no half-written file)
            write_json(d / "ldp_pca.json", result)
            if V_hat is not None:
                buf = io.BytesIO()
                np.save(buf, V_hat)
                atomic_write_bytes(d / "ldp_pca_subspace.npy", buf.getvalue())
    log(logging.INFO, "%s", result_line(result))
    if out_dir:
        log(logging.INFO, "fedspectral: results in %s", Path(out_dir).resolve())
    return result


def result_line(result: dict[str, Any]) -> str:
    """One line for an LDP-PCA result: model, users, nodes, eigenvalues, subspace error
    (synthetic users), ε, failures."""
    q = result.get("query", {})
    model = result.get("model", "local")
    parts = [f"fedspectral: ldp-pca ({model}) p={q.get('p')} k={q.get('k')}"]
    if result.get("aborted"):
        parts.append("ABORTED (too few holders survived the secure sum)")
    if "n" in result:
        parts.append(f"n={result['n']} users")
    nodes = result.get("nodes", result.get("contributors"))
    if nodes is not None:
        parts.append(f"from {len(nodes)} node(s)")
    if "eigenvalues" in result:
        parts.append("eigenvalues=[" + ", ".join(f"{v:.4g}" for v in result["eigenvalues"]) + "]")
    if "subspace_error" in result:
        parts.append(f"subspace_error={result['subspace_error']:.4f}")
    priv = result.get("privacy", {})
    if "epsilon_analytic" in priv:
        parts.append(f"eps={priv['epsilon_analytic']:.4g} (delta={q.get('delta'):g})")
    for th in ("secagg", "fallback"):
        if isinstance(priv.get(th), dict):
            parts.append(f"eps[{th}]={priv[th]['epsilon_analytic']:.4g}")
    if result.get("failures"):
        parts.append(f"failures={result['failures']}")
    return " ".join(parts)


# --------------------------------------------------------------------------------------
# the distributed model: holders' shares of one central Gaussian, summed securely
# --------------------------------------------------------------------------------------
class _HolderTransport:
    """The transport :func:`~.secure_sum.grid_secure_sum` drives: stage 0 goes out as
    ``query.ldp_pca`` carrying the PCA request (the node computes its holder sum there),
    stages 1-4 as ``query.secagg`` (the node's generic secure-sum stages)."""

    def __init__(
        self, grid: Grid, node_of: dict[str, int], timeout: float, query: dict[str, Any]
    ) -> None:
        self.grid, self.node_of, self.timeout = grid, dict(node_of), float(timeout)
        self.cid_of = {n: c for c, n in self.node_of.items()}
        self.query = query

    def send(self, msgs: list[Message], rnd: int, label: str, kind: str) -> dict[str, Any]:
        if label.endswith(STAGES[0]):
            for m in msgs:
                m.content["ldp-pca"] = ConfigRecord(dict(self.query))
            msgs = [
                Message(
                    m.content,
                    dst_node_id=m.metadata.dst_node_id,
                    message_type=PCA_MESSAGE_TYPE,
                    group_id=m.metadata.group_id,
                )
                for m in msgs
            ]
        replies = exchange(self.grid, msgs, timeout=self.timeout)
        return decode_replies(replies, self.cid_of)


def _plans(
    grid: Grid, nodes: list[int], timeout: float
) -> tuple[dict[str, tuple[int, str, int]], dict[str, str]]:
    """Ask every node for its own model and min contributors: ``({cid: (node, model,
    floor)}, failures)`` (policy values only, nothing data-dependent)."""

    out = [
        Message(
            RecordDict({"ldp-pca": ConfigRecord({"request": "plan"})}),
            dst_node_id=n,
            message_type=PCA_MESSAGE_TYPE,
            group_id="ldp-pca/plan",
        )
        for n in nodes
    ]
    plans: dict[str, tuple[int, str, int]] = {}
    failures: dict[str, str] = {}
    for node, r in exchange(grid, out, timeout=timeout).items():
        if r.has_error():
            failures[str(node)] = f"{r.error.code}: {r.error.reason}"
            continue
        pl = r.content.config_records["plan"]
        plans[f"client-{config_int(pl, 'partition-id')}"] = (
            int(node),
            str(pl["model"]),
            config_int(pl, "min-contributors"),
        )
    return plans, failures


def distributed_server(
    grid: Grid, rc: Any, query: dict[str, Any], nodes: list[int]
) -> tuple[dict[str, Any], np.ndarray | None]:
    """The distributed model over the nodes whose policy chose it: the threshold
    :math:`t` is the largest of the holders' ``pca-min-contributors``, the run config's
    ``pca-min-contributors`` and a majority of them; one secure sum of the holders'
    messages (and counts); the ledger under both threat models (fallback: each holder's
    share at the σ of :math:`t` with no colluders -- the nodes' own colluders only make
    their shares larger)."""
    timeout = float(_opt(rc, "round-timeout"))
    plans, failures = _plans(grid, nodes, timeout)
    holders = sorted(c for c, v in plans.items() if v[1] == "distributed")
    failures.update({c: f"pca-model {v[1]!r}" for c, v in plans.items() if c not in holders})
    t = max(
        [_opt(rc, "pca-min-contributors"), len(holders) // 2 + 1, 2]
        + [plans[c][2] for c in holders]
    )
    if len(holders) < t:
        raise RuntimeError(
            f"{len(holders)} holder(s) chose the distributed model, the secure "
            f"sum needs {t}: {failures}"
        )
    p, k, delta = query["p"], query["k"], query["delta"]
    noise = holder_noise(query["epsilon"], delta, t, calibration=query["calibration"])
    bound = float(_opt(rc, "pca-max-users")) + 12.0 * noise.sigma  # share <= sigma
    spec = SecureSumSpec("summand", n_packed(p) + 1, t, bound, 64, MECHANISM)
    request = dict(query, model="distributed")
    transport = _HolderTransport(grid, {c: plans[c][0] for c in holders}, timeout, request)
    t0 = time.perf_counter()
    total, contributors, fails = grid_secure_sum(
        transport, f"ldp-pca-{request_digest(request)}", 0, {c: Payload() for c in holders}, spec
    )
    failures.update(fails)
    ledger = PrivacyLedger()
    result: dict[str, Any] = {
        "task": "ldp-pca",
        "model": "distributed",
        "engine": "flower",
        "query": query,
        "holders": holders,
        "threshold": t,
        "contributors": list(contributors),
        "failures": failures,
    }
    if total is None:
        ledger.record_aborted(0, MECHANISM, holders, failures.get("*", "aborted"))
        return result | {"aborted": True, "privacy": {"ledger": ledger.to_dict()}}, None
    n = round(float(total[-1]))
    S = CovarianceAggregator(p, "isometric").add_sum(total[:-1], n).covariance()
    eigvals, V_hat = top_k_eigvecs(S, k)
    record_distributed_release(ledger, noise, {c: None for c in contributors})
    privacy = {
        th: {
            "epsilon_analytic": ledger.epsilon(delta, accountant=ANALYTIC, threat=th),
            "sigma": min(r.sigma for r in ledger.releases if r.threat == th),
        }
        for th in ("secagg", "fallback")
    }
    return result | {
        "aborted": False,
        "n": n,
        "vectorisation": "isometric",
        "eigenvalues": eigvals.tolist(),
        "subspace": V_hat.tolist(),
        "seconds": time.perf_counter() - t0,
        "covariance": S.tolist(),
        "privacy": {
            **privacy,
            "sigma_share": noise.share_sigma,
            "sigma_central": noise.sigma,
            "ledger": ledger.to_dict(),
        },
    }, V_hat
