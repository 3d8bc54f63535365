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
defaults, :data:`~fedspectral.fed.flower.apps.server_app.NODE_WAIT_S` and
:data:`~fedspectral.fed.flower.apps.server_app.ROUND_TIMEOUT_S`), ``out-dir``.

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
(:func:`holder_secure_query`); stages 1-4 are the generic ``query.secagg`` ones.  A holder
that drops out leaves the others able to finish (at least :math:`t`); the server records
the contributors under both threat models (``privacy.secagg`` / ``privacy.fallback``).
``pca-max-users`` (10⁶) bounds a holder's users (the secure sum's range).

A node's users come from ``node_config["pca-data"]`` (a ``.npy`` file, one user
per row) when set; otherwise they are drawn from the seed's synthetic spiked
model :math:`\Sigma = (\lambda VV^\top + I_p)/(5p(\lambda+1))` with a :math:`V`
shared by all nodes (seeded by ``pca-seed``) and users seeded by
``(pca-seed, partition-id)`` -- then the server also reports
:math:`\|\hat V\hat V^\top - VV^\top\|_F`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from fedspectral.accountants import ANALYTIC
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
#: privacy models a node's ``pca-model`` may choose
PCA_MODELS = ("local", "distributed")
PCA_DEFAULTS: dict[str, Any] = {
    "pca-p": 8,
    "pca-k": 2,
    "pca-epsilon": 1.0,
    "pca-delta": 1e-4,
    "pca-calibration": "analytic",
    "pca-vectorisation": "auto",
    "pca-norm-policy": "clip",
    "pca-users": 200,
    "pca-seed": 0,
    "pca-spike": 1.0,
}


def _opt(rc: Any, key: str) -> Any:
    """Run-config ``key``, checked against its type where it enters (a ``pca-k`` of 2.7 is
    refused, never truncated: :func:`~fedspectral.fed.flower.apps.run_config.run_value`)."""
    from fedspectral.fed.flower.apps.run_config import run_value

    if key not in rc and key in PCA_DEFAULTS:
        return PCA_DEFAULTS[key]
    return run_value(rc, key)


def _pca_model(rc: Any) -> str:
    model = _opt(rc, "pca-model")
    if model not in PCA_MODELS:
        raise ValueError(f"run config pca-model={model!r}: must be one of {PCA_MODELS}")
    return str(model)


def synthetic_model(p: int, k: int, seed: int, spike: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""The seed's spiked model :math:`(\Sigma, V)`, :math:`V` Haar-random from ``seed``
    (:func:`fedspectral.pca.synthetic.spiked_covariance`); shared by all nodes."""
    from fedspectral.pca.synthetic import spiked_covariance

    return spiked_covariance(p, k, spike, rng=np.random.default_rng([int(seed), 0]))


def synthetic_users(
    n: int, p: int, k: int, seed: int, partition: int, spike: float = 1.0
) -> np.ndarray:
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
    privacy ``policy`` (:class:`~.node.policy.NodePolicy`; default: the node's own,
    from its node config) before the users' data is read; the noise comes from
    :func:`~.node.policy.node_noise_generator` (never a seed from the server);
    the release goes into the node's ledger.

    Reply: ``ArrayRecord`` ``"messages"`` (n_users x p(p+1)/2, one row per user,
    the packed, noised :math:`x_ix_i^\\top`) and a ``ConfigRecord`` ``"release"`` (σ₁,
    the vectorisation, ε spent at the policy's δ, number of users).

    The node's own ``pca-model`` (:func:`node_model`) decides the model: a ``"plan"``
    request is answered with it and ``pca-min-contributors`` only; a request for the other
    model is refused; under ``"distributed"`` the request is stage 0 of a secure sum
    (:func:`holder_secure_query`).
    """
    from fedspectral.fed.flower.node.policy import NodePolicy
    from fedspectral.fed.manifest import check_manifest

    pol = policy if policy is not None else NodePolicy.from_node(context.node_config)
    check_manifest(pol, "ldp-pca", "query", "dp")  # served at all? (before any data)
    cfg = msg.content.config_records["ldp-pca"]
    model, floor = node_model(context)
    if str(cfg.get("request", "messages")) == "plan":
        return Message(
            RecordDict(
                {
                    "plan": ConfigRecord(
                        {
                            "partition-id": int(context.node_config.get("partition-id", 0)),
                            "model": model,
                            "min-contributors": floor,
                        }
                    )
                }
            ),
            reply_to=msg,
        )
    if str(cfg.get("model", "local")) != model:
        raise pol.refuse(
            f"the server asks for the {str(cfg.get('model', 'local'))!r} model; "
            f"this node's pca-model is {model!r}"
        )
    if model == "distributed":
        return holder_secure_query(msg, context, pol, cfg, floor)
    return _local_query(msg, context, pol, cfg)


def _local_query(msg: Message, context: Context, pol: Any, cfg: ConfigRecord) -> Message:
    """The local model's reply: each user's own perturbed second moment, the release
    checked against the node's policy ``pol`` and ledgered before the data is read."""
    from fedspectral.fed.flower.apps.client_app import uniform_failure
    from fedspectral.fed.flower.node.policy import (
        NodeLedger,
        node_noise_generator,
        node_noise_mechanism,
    )
    from fedspectral.pca.local import (
        MECHANISM,
        SENSITIVITY,
        ldp_noise_scale,
        perturb_batch,
        resolve_vectorisation,
    )
    from fedspectral.privacy.accounting import Release

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
    ledger = NodeLedger(pol, _pca_dataset(context, pid), context)  # fails closed
    if not math.isfinite(eps):
        pol.check_nonprivate("the users' second moments (epsilon = inf)")
    sigma = float(ldp_noise_scale(eps, delta, calibration).sigma)
    release = Release(
        party,
        MECHANISM,
        sigma,
        SENSITIVITY,
        1,
        "replace_one",
        None,
        noise=node_noise_mechanism(pol),
    )
    pol.check_release(release, ledger)  # the request alone against the policy first
    node_users_count(context, cfg, pol)  # the node's bounds on sizes, before any budget
    # checked and spent as one step under the ledger's lock, before the users' data is
    # read: a failure counts too
    (spent,) = ledger.spend([release])
    t0 = time.perf_counter()
    try:
        X = _node_users(context, cfg, p, k, pid)
        rng = node_noise_generator(pol, None, ("ldp-pca", pid))
        # one message per user, each with its own noise (the per-user path a device runs)
        vec = resolve_vectorisation(str(cfg.get("vectorisation", "auto")), calibration)
        msgs = perturb_batch(
            X,
            eps,
            delta,
            rng=rng,
            calibration=calibration,
            norm_policy=norm_policy,
            vectorisation=vec,
        )
    except Exception as exc:  # noqa: BLE001 -- uniform: its type or message may be data
        raise uniform_failure(party, "ldp-pca", 0, t0, exc) from None
    reply = RecordDict(
        {
            "messages": ArrayRecord({"messages": _array(msgs)}),
            "release": ConfigRecord(
                {
                    "sigma": float(sigma),
                    "users": len(X),
                    "partition-id": pid,
                    "vectorisation": vec,
                    "seconds": time.perf_counter() - t0,
                    "synthetic": not data_path,
                    "epsilon": float(spent["epsilon"]),
                    "epsilon-total": float(spent["epsilon_total"]),
                }
            ),
        }
    )
    return Message(reply, reply_to=msg)


#: the node's own bounds on a server's LDP-PCA request (node-config keys, defaults)
NODE_BOUNDS = {"pca-max-dim": 4096, "pca-max-users": 10**6, "pca-max-bytes": 1 << 31}


def node_users_count(context: Context, cfg: Any, pol: Any) -> int:
    r"""How many users this node's reply covers, checked against the node's own bounds
    before any budget is spent or data read: a server-sent size (``p``, the synthetic
    ``users``) is hostile input.

    The count is public: the rows of the node's ``pca-data`` (read from the ``.npy``
    header alone; ``pca-users`` in the node config, if set, declares it and must match),
    or the synthetic users the server asked for.  A holder enters it into the secure sum
    un-noised (:func:`holder_secure_query`), as a fact of the node's config.

    Bounds (node config): ``pca-max-dim`` (4096) on ``p``, ``pca-max-users`` (10⁶) on the
    users, ``pca-max-bytes`` (2 GiB) on the users' packed messages (``users`` x
    :math:`p(p+1)/2` float64).  A request beyond them is refused
    (:class:`~fedspectral.fed.flower.node.policy.PolicyRefusal`)."""
    from fedspectral.checks import check_int, describe

    nc = context.node_config
    bounds = {k: check_int(f"node config {k}", nc.get(k, v), low=1) for k, v in NODE_BOUNDS.items()}
    try:
        p = check_int("p", cfg["p"], low=1)
        k = check_int("k", cfg["k"], low=1, high=p)
    except (TypeError, ValueError, KeyError) as exc:
        raise pol.refuse(f"the request's pca-p/pca-k are not valid ({exc})") from None
    if p > bounds["pca-max-dim"]:
        raise pol.refuse(f"pca-p {p} exceeds this node's pca-max-dim {bounds['pca-max-dim']}")
    del k
    data_path = nc.get("pca-data")
    declared = nc.get("pca-users")
    if data_path:
        try:
            shape = np.load(str(data_path), mmap_mode="r", allow_pickle=False).shape
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"node config pca-data {str(data_path)!r} cannot be read as a .npy array "
                f"({type(exc).__name__})"
            ) from None
        if len(shape) != 2 or shape[1] != p:
            raise pol.refuse(
                f"the request's pca-p {p} does not match the dimension of this node's pca-data"
            )
        n = int(shape[0])
        if declared is not None and check_int("node config pca-users", declared, low=0) != n:
            raise ValueError(
                "node config pca-users (the node's declared, public count) differs from "
                "the rows of its pca-data"
            )
    else:
        users = cfg.get("users")
        if isinstance(users, bool) or not isinstance(users, int) or users < 1:
            raise pol.refuse(
                f"the request's pca-users must be an integer >= 1, got {describe(users)}"
            )
        n = int(users)
    if n > bounds["pca-max-users"]:
        raise pol.refuse(f"{n} users exceed this node's pca-max-users {bounds['pca-max-users']}")
    size = n * (p * (p + 1) // 2) * 8
    if size > bounds["pca-max-bytes"]:
        raise pol.refuse(
            f"{n} users of dimension {p} need {size} bytes of messages, above this "
            f"node's pca-max-bytes {bounds['pca-max-bytes']}"
        )
    return n


def _pca_dataset(context: Context, pid: int) -> str:
    """The key of the node's ledger for its users' data: a SHA-256 digest of the content of
    its ``pca-data`` file (the same file under another path is the same data set), or the
    node's synthetic users.  A file that cannot be read is keyed by its resolved path (its
    loading then fails, after the ledger has recorded the attempt)."""
    import hashlib

    from fedspectral.fed.flower.node.policy import dataset_key

    data_path = context.node_config.get("pca-data")
    if data_path:
        h = hashlib.sha256()
        try:
            with open(str(data_path), "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            return dataset_key("ldp-pca", os.path.realpath(str(data_path)))
        return dataset_key("ldp-pca-content", h.hexdigest())
    return dataset_key("ldp-pca-synthetic", pid)


def _node_users(context: Context, cfg: Any, p: int, k: int, pid: int) -> np.ndarray:
    """The node's users: ``node_config["pca-data"]`` (``.npy``) or the synthetic model."""
    data_path = context.node_config.get("pca-data")
    if data_path:
        from fedspectral.pca.real_data import load_user_rows

        return load_user_rows(str(data_path), p, "node config pca-data")
    return synthetic_users(int(cfg["users"]), p, k, int(cfg["seed"]), pid, float(cfg["spike"]))


def request_digest(request: dict[str, Any]) -> str:
    """SHA-256 (first 32 hex digits) of the canonical JSON of a distributed-model request.
    The server names the secure sum's phase ``ldp-pca-<digest>``; the session, and so
    the parameters every holder signs (:mod:`fedspectral.fed.secagg`), carry it: holders
    asked different things (ε, δ, calibration, ...) cannot complete one sum."""
    import hashlib
    import json

    text = json.dumps({str(k): request[k] for k in sorted(request)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def node_model(context: Context) -> tuple[str, int]:
    """The node's own choice of privacy model, from its node config (never the server's):
    ``pca-model`` (``"local"``, the default, or ``"distributed"``) and
    ``pca-min-contributors`` (default 2), the fewest holders a secure sum it joins must
    need before anything is released (its threshold)."""
    model = str(context.node_config.get("pca-model", "local"))
    if model not in PCA_MODELS:
        raise ValueError(f"node config pca-model must be one of {PCA_MODELS}, got {model!r}")
    floor = int(context.node_config.get("pca-min-contributors", 2))
    if floor < 2:
        raise ValueError(f"node config pca-min-contributors must be >= 2, got {floor}")
    return model, floor


def holder_secure_query(
    msg: Message, context: Context, policy: Any, cfg: Any, floor: int
) -> Message:
    r"""Stage 0 of the distributed model's secure sum on a holder (module docstring).

    Checked before the users' data is read: the request against the node's ``policy``
    (calibration, norm policy, δ; ε = ∞, an un-noised sum, only if it allows
    non-private releases), the secure sum's roster, session and trust
    (:func:`~.secure_sum.start_params`), and its threshold :math:`t` against the node's
    ``pca-min-contributors``, and the session's binding to this very request
    (:func:`request_digest`).  The node then sizes its share for :math:`t` (less its
    policy's ``secagg-colluders``), checks that its message alone (the fallback reading)
    fits its policy, and enters :math:`[\mathrm{svec}(\sum_i x_ix_i^	op) + g, n_h]` into
    the sum (:func:`fedspectral.pca.holder_message`, noise from the node's source)."""
    from fedspectral.fed.flower.apps.client_app import uniform_failure
    from fedspectral.fed.flower.apps.records import meta_of, payload_to_recorddict
    from fedspectral.fed.flower.node.policy import (
        NodeLedger,
        node_noise_generator,
        node_noise_mechanism,
    )
    from fedspectral.fed.flower.node.secure_sum import start_params, start_stage
    from fedspectral.fed.protocol import Payload
    from fedspectral.pca.distributed import MECHANISM, SENSITIVITIES, holder_message, holder_noise
    from fedspectral.privacy.accounting import Release

    p, k = int(cfg["p"]), int(cfg["k"])
    eps, delta = float(cfg["epsilon"]), float(cfg["delta"])
    calibration, norm_policy = str(cfg["calibration"]), str(cfg["norm-policy"])
    pid = int(context.node_config.get("partition-id", 0))
    policy.require("calibrations", calibration, policy.calibrations)
    policy.require("norm-policies", norm_policy, policy.norm_policies)
    policy.check_delta(delta)
    if not math.isfinite(eps):
        policy.check_nonprivate("a holder's un-noised sum of its users' second moments")
    sa = start_params(meta_of(msg.content), f"client-{pid}", context, policy)
    phase = sa["params"].session.split(b"/")[1:2]
    if phase != [f"ldp-pca-{request_digest(dict(cfg))}".encode()]:
        raise policy.refuse(
            "the secure sum's session is not bound to this request (every "
            "holder must be asked the same)"
        )
    t = sa["params"].threshold
    if t < floor:
        raise policy.refuse(
            f"a secure sum with threshold {t}: this node's pca-min-contributors is {floor}"
        )
    noise = holder_noise(
        eps, delta, t, calibration=calibration, colluders=min(policy.secagg_colluders, t - 1)
    )
    release = Release(
        f"users@node{pid}",
        MECHANISM,
        noise.share_sigma,
        SENSITIVITIES["replace_one"],
        1,
        "replace_one",
        None,
        noise=node_noise_mechanism(policy),
    )
    ledger = NodeLedger(policy, _pca_dataset(context, pid), context)  # fails closed
    policy.check_release(release, ledger)  # the request alone against the policy first
    count = node_users_count(context, cfg, policy)  # public: a fact of the node's config
    # its message alone (the fallback reading), checked and spent under the ledger's lock
    # before the users' data is read: a failure counts too
    ledger.spend([release])
    t0 = time.perf_counter()
    try:
        X = _node_users(context, cfg, p, k, pid)
        rng = node_noise_generator(policy, None, ("ldp-pca", pid))
        if len(X) != count:
            raise ValueError("the node's users changed while it served the request")
        # the count is public (the node's config): it enters the sum as it is
        summand = np.append(holder_message(X, noise, rng, norm_policy=norm_policy), count)
        reply = start_stage(context, f"client-{pid}", sa, Payload(arrays={sa["key"]: summand}))
    except Exception as exc:  # noqa: BLE001 -- uniform: its type or message may be data
        raise uniform_failure(f"users@node{pid}", "ldp-pca-holder", 0, t0, exc) from None
    return Message(payload_to_recorddict(reply, **{"secagg-stage": 0}), reply_to=msg)


def _array(a: np.ndarray) -> Any:
    from flwr.app import Array

    return Array(np.ascontiguousarray(a))


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
    from fedspectral.pca.local import CovarianceAggregator, record_ldp_release

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
        per_node[nid] = {
            "partition-id": pid,
            "users": int(rel["users"]),
            "seconds": float(rel["seconds"]),
            "synthetic": bool(rel["synthetic"]),
        }
    for nid in nodes:
        if str(nid) not in per_node and str(nid) not in failures:
            failures[str(nid)] = "no reply"
    return agg, ledger, per_node, failures


def pca_server_main(grid: Grid, context: Context) -> dict[str, Any]:
    """ServerApp body: one non-interactive round, aggregate, report the subspace.

    Writes ``ldp_pca.json`` (and ``ldp_pca_subspace.npy``) to ``out-dir`` when
    set; returns the same dictionary.
    """
    from fedspectral.fed.flower.apps import server_app
    from fedspectral.pca.local import resolve_vectorisation

    rc = context.run_config
    query = _query(rc)
    p, k, delta = query["p"], query["k"], query["delta"]
    min_nodes = _opt(rc, "min-nodes") or 1
    nodes = server_app.wait_for_nodes(grid, min_nodes, float(_opt(rc, "node-wait")))
    t0 = time.perf_counter()
    if _pca_model(rc) == "distributed":
        result, V_hat = distributed_server(grid, rc, query, nodes)
        return _write(result, V_hat, rc)
    out = [
        Message(
            RecordDict({"ldp-pca": ConfigRecord(dict(query))}),
            dst_node_id=nid,
            message_type=PCA_MESSAGE_TYPE,
            group_id="ldp-pca",
        )
        for nid in nodes
    ]
    replies = server_app.exchange(grid, out, timeout=float(_opt(rc, "round-timeout")))
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
        d.mkdir(parents=True, exist_ok=True)
        write_json(d / "ldp_pca.json", result)
        if V_hat is not None:
            np.save(d / "ldp_pca_subspace.npy", V_hat)
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
        from fedspectral.fed.flower.apps import server_app
        from fedspectral.fed.flower.apps.records import decode_replies
        from fedspectral.fed.flower.node.secure_sum import STAGES

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
        replies = server_app.exchange(self.grid, msgs, timeout=self.timeout)
        return decode_replies(replies, self.cid_of)


def _plans(
    grid: Grid, nodes: list[int], timeout: float
) -> tuple[dict[str, tuple[int, str, int]], dict[str, str]]:
    """Ask every node for its own model and min contributors: ``({cid: (node, model,
    floor)}, failures)`` (policy values only, nothing data-dependent)."""
    from fedspectral.fed.flower.apps import server_app

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
    for node, r in server_app.exchange(grid, out, timeout=timeout).items():
        if r.has_error():
            failures[str(node)] = f"{r.error.code}: {r.error.reason}"
            continue
        pl = r.content.config_records["plan"]
        plans[f"client-{int(pl['partition-id'])}"] = (
            int(node),
            str(pl["model"]),
            int(pl["min-contributors"]),
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
    from fedspectral.fed.flower.node.secure_sum import grid_secure_sum
    from fedspectral.fed.protocol import Payload
    from fedspectral.fed.releases import SecureSumSpec
    from fedspectral.pca.distributed import MECHANISM, holder_noise, record_distributed_release
    from fedspectral.pca.local import CovarianceAggregator

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
