r"""The node side of the locally private PCA app (``query.ldp_pca``): what a node
releases about its users is decided here, on the node.

:func:`pca_client_query` serves the server's query (:mod:`.app`; the ClientApp's ``ldp_pca``
handler calls it):
the node's own ``pca-model`` decides the model (:func:`node_model`); the request is checked
against the node's privacy policy and its own size bounds (:func:`node_users_count`: a
server-sent size is hostile input) before any budget is spent, the release is checked and
spent in the node's ledger (keyed by the data set's identity its operator declares,
node-config ``data-id``, default ``pca-data@node<partition-id>``; the content digest of
its ``pca-data`` is recorded in the ledger, a change logged) before the users' data is
read, and the noise comes from the node's own source.  Under the local
model each user's message is noised alone (:func:`_local_query`); under the distributed
model the node is a holder of one secure sum (:func:`holder_secure_query`) and enters its
noised share and its user count -- a public fact of its config -- into the sum.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fedspectral.checks import check_int, check_real, describe
from fedspectral.fed.flower.apps.records import meta_of, payload_to_recorddict
from fedspectral.fed.flower.node.data import declared_identity, node_partition_id
from fedspectral.fed.flower.node.failure import uniform_failure
from fedspectral.fed.flower.node.policy import (
    NodeLedger,
    NodePolicy,
    dataset_key,
    ledger_key,
    node_noise_generator,
    node_noise_mechanism,
)
from fedspectral.fed.flower.node.secure_sum import start_params, start_stage
from fedspectral.fed.manifest import check_manifest
from fedspectral.fed.protocol import Payload
from fedspectral.pca.flower.task import PCA_MODELS, request_digest, synthetic_users
from fedspectral.pca.local import (
    MECHANISM,
    SENSITIVITY,
    ldp_noise_scale,
    perturb_batch,
    resolve_vectorisation,
)
from fedspectral.pca.real_data import load_user_rows
from fedspectral.privacy.accounting import Release

__all__ = [
    "NODE_BOUNDS",
    "config_float",
    "config_int",
    "holder_secure_query",
    "node_model",
    "node_users",
    "node_users_count",
    "pca_client_query",
    "pca_dataset",
    "synthetic_request",
]


def config_int(rec: ConfigRecord, key: str) -> int:
    """The integer ``rec[key]``: a ``TypeError`` naming ``key`` for anything but an integer
    (a bool, a float such as 2.5 -- never truncated --, text, bytes or a list), a
    ``KeyError`` naming it when it is missing."""
    if key not in rec:
        raise KeyError(f"config record has no entry {key!r}")
    return check_int(f"config record entry {key!r}", rec[key])


def config_float(rec: ConfigRecord, key: str) -> float:
    """The real number ``rec[key]`` (an integer or a float, ±inf allowed, NaN refused): a
    ``TypeError`` naming ``key`` for a bool, text, bytes or a list."""
    if key not in rec:
        raise KeyError(f"config record has no entry {key!r}")
    return check_real(f"config record entry {key!r}", rec[key], allow_inf=True)


def _synthetic_request(context: Context, cfg: Any, pol: Any) -> tuple[int, int, float] | None:
    """The synthetic users' ``(users, seed, spike)`` of the request, parsed and checked
    before any budget is spent (``None`` for a node with ``pca-data``): a malformed request
    is refused (:class:`~fedspectral.fed.flower.node.policy.PolicyRefusal`) and charges
    nothing."""
    if context.node_config.get("pca-data"):
        return None
    try:
        users = config_int(cfg, "users")
        seed = config_int(cfg, "seed")
        spike = config_float(cfg, "spike")
        check_int("the request's seed", seed, low=0, high=2**63 - 1)
        check_real("the request's spike", spike, low=0.0, low_open=True)
    except (TypeError, ValueError, KeyError) as exc:
        raise pol.refuse(f"the request's synthetic users are not valid ({exc})") from None
    return users, seed, spike


#: the requests the node's LDP-PCA handler knows (anything else is refused)
REQUEST_KINDS = ("messages", "plan")


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
    pol = policy if policy is not None else NodePolicy.from_node(context.node_config)
    check_manifest(pol, "ldp-pca", "query", "dp")  # served at all? (before any data)
    cfg = msg.content.config_records["ldp-pca"]
    model, floor = node_model(context)
    kind = cfg.get("request", "messages")
    if kind not in REQUEST_KINDS:  # never answered as a release
        raise pol.refuse(
            f"unknown LDP-PCA request {describe(kind)} (known: {', '.join(REQUEST_KINDS)})"
        )
    if kind == "plan":
        return Message(
            RecordDict(
                {
                    "plan": ConfigRecord(
                        {
                            "partition-id": node_partition_id(context.node_config, 0),
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
    p, k = request_dims(cfg, pol)
    eps, delta = config_float(cfg, "epsilon"), config_float(cfg, "delta")
    calibration, norm_policy = str(cfg["calibration"]), str(cfg["norm-policy"])
    pid = node_partition_id(context.node_config, 0)
    party = f"users@node{pid}"
    # the request against the node's policy, before any user's data is read
    pol.require("calibrations", calibration, pol.calibrations)
    pol.require("norm-policies", norm_policy, pol.norm_policies)
    pol.check_delta(delta)
    data_path = context.node_config.get("pca-data")
    key, digest = _pca_dataset(context, pid)
    ledger = NodeLedger(pol, key, context, digest=digest)  # fails closed
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
        values=p * (p + 1) // 2,  # each user's message
    )
    pol.check_release(release, ledger)  # the request alone against the policy first
    # the request's vectorisation, checked before any budget is spent (it names the value)
    vec = resolve_vectorisation(str(cfg.get("vectorisation", "auto")), calibration)
    node_users_count(context, cfg, pol)  # the node's bounds on sizes, before any budget
    synth = _synthetic_request(context, cfg, pol)  # parsed before any budget is spent
    # checked and spent as one step under the ledger's lock, before the users' data is
    # read: a failure counts too
    (spent,) = ledger.spend([release])
    t0 = time.perf_counter()
    try:
        X = _node_users(context, synth, p, k, pid)
        rng = node_noise_generator(pol, None, ("ldp-pca", pid))
        # one message per user, each with its own noise (the per-user path a device runs)
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
                    "synthetic": not data_path,
                    "epsilon": float(spent["epsilon"]),
                    "epsilon-total": float(spent["epsilon_total"]),
                }
            ),
        }
    )
    return Message(reply, reply_to=msg)


#: the node's own bounds on a server's LDP-PCA request (node-config keys, defaults)
#: sized so that one request costs seconds and at most a few hundred MiB on an ordinary
#: machine (the synthetic users' model costs O(p^3), the messages and their noise
#: ``users`` x p(p+1)/2 float64 a few times over); larger only by the operator's setting
NODE_BOUNDS = {"pca-max-dim": 512, "pca-max-users": 10**6, "pca-max-bytes": 1 << 26}


def request_dims(cfg: Any, pol: Any) -> tuple[int, int]:
    """The request's ``(p, k)``, integers with ``1 <= k <= p``: parsed where they enter,
    before any release is built or anything read; a refusal naming them otherwise."""
    try:
        p = check_int("p", cfg["p"], low=1)
        k = check_int("k", cfg["k"], low=1, high=p)
    except (TypeError, ValueError, KeyError) as exc:
        raise pol.refuse(f"the request's pca-p/pca-k are not valid ({exc})") from None
    return p, k


def node_users_count(context: Context, cfg: Any, pol: Any) -> int:
    r"""How many users this node's reply covers, checked against the node's own bounds
    before any budget is spent or data read: a server-sent size (``p``, the synthetic
    ``users``) is hostile input.

    The count is public: the rows of the node's ``pca-data`` (read from the ``.npy``
    header alone; ``pca-users`` in the node config, if set, declares it and must match),
    or the synthetic users the server asked for.  A holder enters it into the secure sum
    un-noised (:func:`holder_secure_query`), as a fact of the node's config.

    Bounds (node config): ``pca-max-dim`` (512) on ``p``, ``pca-max-users`` (10⁶) on the
    users, ``pca-max-bytes`` (64 MiB) on the users' packed messages (``users`` x
    :math:`p(p+1)/2` float64).  The defaults keep one request to seconds and at most a few
    hundred MiB of memory (a server sizes the synthetic users; measured on a 2-core machine:
    2 s and 210 MiB at p = 512, 0.5 s and 280 MiB at 64 MiB of messages); an operator
    whose node should answer larger requests raises them.  A request beyond them is
    refused (:class:`~fedspectral.fed.flower.node.policy.PolicyRefusal`)."""
    nc = context.node_config
    bounds = {k: check_int(f"node config {k}", nc.get(k, v), low=1) for k, v in NODE_BOUNDS.items()}
    p, _ = request_dims(cfg, pol)
    if p > bounds["pca-max-dim"]:
        raise pol.refuse(f"pca-p {p} exceeds this node's pca-max-dim {bounds['pca-max-dim']}")
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


def _pca_dataset(context: Context, pid: int) -> tuple[str, str | None]:
    """(the key of the node's ledger for its users' data, their content digest).

    The key is the data set's identity as the node's operator declares it (node-config
    ``data-id``; default ``pca-data@node<pid>``, or ``pca-synthetic@node<pid>`` for a node
    without ``pca-data``), never the content: users appended to, reordered in or changed
    in the ``pca-data`` file keep the budget.  The digest (SHA-256 of the file's bytes,
    ``None`` for synthetic users or a file that cannot be read -- its loading then fails,
    after the ledger has recorded the attempt) is recorded in the ledger, which logs a
    change (:class:`~fedspectral.fed.flower.node.policy.NodeLedger`)."""
    import hashlib

    data_path = context.node_config.get("pca-data")
    default = f"pca-data@node{pid}" if data_path else f"pca-synthetic@node{pid}"
    key = ledger_key(declared_identity(context.node_config, default))
    if not data_path:
        return key, None
    h = hashlib.sha256()
    try:
        with open(str(data_path), "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return key, None
    return key, dataset_key("ldp-pca-content", h.hexdigest())


def _node_users(
    context: Context, synth: tuple[int, int, float] | None, p: int, k: int, pid: int
) -> np.ndarray:
    """The node's users: ``node_config["pca-data"]`` (``.npy``) or the synthetic model
    (``synth``: the request's users, seed and spike, :func:`_synthetic_request`)."""
    data_path = context.node_config.get("pca-data")
    if data_path:
        return load_user_rows(str(data_path), p, "node config pca-data")
    assert synth is not None  # parsed before the ledger was charged
    users, seed, spike = synth
    return synthetic_users(users, p, k, seed, pid, spike)


def synthetic_request(context: Context, cfg: Any, pol: Any) -> tuple[int, int, float] | None:
    """:func:`_synthetic_request` for the training ClientApp's PCA methods
    (:mod:`fedspectral.fed.flower.node.users`): one check, both paths."""
    return _synthetic_request(context, cfg, pol)


def pca_dataset(context: Context, pid: int) -> tuple[str, str | None]:
    """:func:`_pca_dataset` (the node's ledger key and content digest) for the training
    ClientApp's PCA methods: one budget for both paths."""
    return _pca_dataset(context, pid)


def node_users(
    context: Context, synth: tuple[int, int, float] | None, p: int, k: int, pid: int
) -> np.ndarray:
    """:func:`_node_users` for the training ClientApp's PCA methods."""
    return _node_users(context, synth, p, k, pid)


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
    msg: Message, context: Context, policy: Any, cfg: ConfigRecord, floor: int
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
    # the distributed model's mechanism (pca.local's MECHANISM is the local model's)
    from fedspectral.pca.holders import MECHANISM, SENSITIVITIES, holder_message, holder_noise

    p, k = request_dims(cfg, policy)
    eps, delta = config_float(cfg, "epsilon"), config_float(cfg, "delta")
    calibration, norm_policy = str(cfg["calibration"]), str(cfg["norm-policy"])
    pid = node_partition_id(context.node_config, 0)
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
        values=p * (p + 1) // 2,  # the holder's share (its count enters un-noised)
    )
    key, digest = _pca_dataset(context, pid)
    ledger = NodeLedger(policy, key, context, digest=digest)  # fails closed
    policy.check_release(release, ledger)  # the request alone against the policy first
    count = node_users_count(context, cfg, policy)  # public: a fact of the node's config
    synth = _synthetic_request(context, cfg, policy)  # parsed before any budget is spent
    # its message alone (the fallback reading), checked and spent under the ledger's lock
    # before the users' data is read: a failure counts too
    ledger.spend([release])
    t0 = time.perf_counter()
    try:
        X = _node_users(context, synth, p, k, pid)
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
