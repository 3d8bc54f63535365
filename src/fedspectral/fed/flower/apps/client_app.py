r"""Flower ``ClientApp`` for any :class:`~fedspectral.fed.protocol.Method`.

The adapter moves messages, nothing else: a message of type ``train`` or
``query`` carries one :class:`~fedspectral.fed.protocol.Payload` (see
:mod:`.records`) and the phase name and round; the handler rebuilds the client's
:class:`~fedspectral.fed.protocol.ClientRuntime` and calls
``method.client_phase(phase, round, payload, runtime)`` -- the same handler the
in-process runner calls.

Where things live
-----------------
*Which client am I*
    ``context.node_config["partition-id"]`` (set by the simulation engine, or by
    ``flower-supernode --node-config "partition-id=i num-partitions=N"``); the
    client id is ``client-<partition-id>``, as in
    :func:`fedspectral.fed.federation.client_ids`.
*The experiment configuration*
    sent by the server in the first message of a run (``query.hello``, a JSON
    ``ConfigRecord``) and kept in ``context.state``: the models and requests.  So
    only the server needs the YAML file.  It never says which data the node uses
    (below).
*Persistent client state*
    ``ClientRuntime.state`` (e.g. global weights a method keeps from one phase of a
    round for the next, a baseline's local target network) lives
    in ``context.state["fedspectral.client-state"]`` (an ``ArrayRecord``),
    loaded before and saved after each handler call; it never leaves the node.
*Privacy policy and noise*
    the node's own :class:`~.node.policy.NodePolicy` (``--node-config`` or a
    local policy file, never the server's message): every request is checked
    against it before the node's data is used (:class:`~.node.policy.PolicyRefusal`
    otherwise, which the server records as a failure), each release goes into the
    node's own ledger, and reply metrics outside the policy are dropped.  Privacy
    noise comes from :func:`~.node.policy.node_noise_generator` (OS entropy: the
    server cannot regenerate it); the policy's test mode ``noise-seed = "derive"``
    draws the in-process runner's streams instead.  Batches and augmentations use
    ``client_generators(run.seed, round, cid, phase)``, as in process.
*Error reasons*
    an exception raised once the node's data is in use is reported to the server
    by its type only (the message, which may quote data -- a row index, a norm --
    goes to the node's own log).
*Data and the network*
    a deployed node reads its data set, its part of it and so ``|D_j|`` from its own
    node config (:mod:`.node.data`: ``data-dataset``, ``data-root``, ``data-limit``,
    ``data-shard``; by position, never by label), never from the server's config; its
    ledger is keyed by the data set's identity its operator declares (``data-id``,
    default ``data-dataset``), never by a digest of the content (which the ledger records,
    logging a change).  Only a simulation node (policy
    ``simulation = true``) builds its partition from the server's plan
    (:func:`fedspectral.fed.federation.client_partition`: only this client's images
    are copied out, bit for bit the in-process runner's; ``node_config["data-root"]``
    says where its copy of the data set lives).  The data is loaded once per process
    and reused across rounds.  A deployed node puts its network back to its initial
    values before every request (:func:`_fresh_net`): nothing an earlier request
    trained on the data survives into the next, and client-level DP clips towards, and
    returns only, the tensors the server sent in this request
    (:func:`~.node.client_dp.node_reference`).  A node started with ``--isolation
    process`` and :mod:`.node_runtime` handles all its messages in one process; in
    Flower's default ``subprocess`` mode every message is a fresh process that builds
    them again; a Ray actor of the simulation engine serves several virtual nodes and
    builds the partition of each the first time it serves it.
*Totality*
    under client-level DP the train phase cannot fail on the data
    (:func:`total_handler`: the reference, noised, instead); every other failure once
    the data is open is one uniform :class:`DataError`, already in the ledger.

Message types: ``train`` (phases of kind ``"train"``), ``query`` (kind ``"query"``; the
PCA method ``ldp_pca``'s too, on the node's users: :mod:`.node.workload`),
``query.secagg`` (the five stages of a ``"secure_sum"`` phase, :mod:`.secure_sum`: the
first computes the summand as ``_handle`` does for any phase, the others run the exchange
on the secrets kept in ``context.state``), ``query.hello`` (handshake) and
``query.ldp_pca`` (the LDP-PCA app, :func:`fedspectral.pca.flower.node.pca_client_query`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedspectral.checks import run_through_nonfinite
from fedspectral.config import ExperimentConfig, from_dict, thaw, to_dict
from fedspectral.fed import manifest  # called as manifest.X: tests patch check_manifest, enforce
from fedspectral.fed.flower.apps.outcome import error_reply_mod, quiet_flower
from fedspectral.fed.flower.apps.records import (
    meta_of,
    payload_from_recorddict,
    payload_to_recorddict,
)
from fedspectral.fed.flower.node import client_dp  # client_dp.X: tests patch NODE_POST_PROCESSORS
from fedspectral.fed.flower.node import secure_sum as ss
from fedspectral.fed.flower.node.client_dp import fallback_reply
from fedspectral.fed.flower.node.data import (
    data_identity,
    load_node_data,
    node_data_root,
    node_data_spec,
    node_partition_id,
)
from fedspectral.fed.flower.node.failure import (
    DataError,
    note_success,
    pad,
    uniform_failure,
)
from fedspectral.fed.flower.node.policy import (
    NodeLedger,
    NodePolicy,
    PolicyRefusal,
    ledger_key,
    node_noise_generator,
    node_noise_mechanism,
)
from fedspectral.fed.flower.node.secure_sum import node_stage
from fedspectral.fed.flower.node.workload import check_node_data, check_session, node_users
from fedspectral.fed.manifest import per_sample_phases
from fedspectral.fed.methods import build_method
from fedspectral.fed.protocol import ClientRuntime, client_generators
from fedspectral.fed.validation import config_fingerprint, ensure_valid
from fedspectral.kinds import REPORTED
from fedspectral.pca.flower.node import pca_client_query
from fedspectral.privacy.mechanisms import CALIBRATIONS

__all__ = [
    "HELLO",
    "LOCAL_SIMULATION_POLICY",
    "SIMULATION_POLICY",
    "STATE_KEY",
    "DataError",
    "app",
    "client_id",
    "make_client_app",
]

_log = logging.getLogger(__name__)

#: the policy of the simulation engine's virtual nodes: they belong to the
#: experimenter who also runs the server (no limit, reproducible noise)
SIMULATION_POLICY = NodePolicy(
    max_epsilon=float("inf"),
    max_epsilon_total=float("inf"),
    max_delta=0.5,
    max_delta_total=0.5,
    calibrations=(*CALIBRATIONS, "paper", *REPORTED),
    norm_policies=("clip", "raise"),
    allow_nonprivate=True,
    noise_seed="derive",
    reply_metrics=("*",),
    methods=("*", *per_sample_phases()),
    allow_unprotected_weights=True,
    relation="",
    ledger_dir="memory",
    secagg_roster="simulation",
    simulation=True,
    source="simulation engine policy (the experimenter's own virtual nodes)",
)


HELLO = "query.hello"
STATE_KEY = "fedspectral.client-state"
CONFIG_KEY = "fedspectral.config"

# one experiment per process: its method, network, view generator and the partitions
# of the clients this process serves (a deployed node: its own; a Ray actor of the
# simulation engine: the virtual nodes it has served)
_PROCESS_CACHE: dict[str, Any] = {}


def client_id(context: Context) -> str:
    """``client-<partition-id>`` of this node."""
    return f"client-{node_partition_id(context.node_config)}"


#: the configuration this process validated last, keyed by the server's text of it and
#: the node's data root: every message of a run carries the same text, and parsing and
#: validating it took about 1.3 ms a message (4 % of a CPU-config round on Flower)
_CONFIG_CACHE: dict[tuple[str, str], Any] = {}


def _config(context: Context, default: Any) -> Any:
    """The run's configuration, validated here with the same
    :func:`~fedspectral.fed.validation.validate` as every other entry point (the server's
    choice is hostile input), once per distinct text (and data root) in this process;
    every message gets the same frozen :class:`~fedspectral.config.ValidConfig` (no
    message can change what the next one reads)."""
    root = node_data_root(context.node_config)  # text or None: never an int made a path
    if CONFIG_KEY in context.state:
        text = str(context.state.config_records[CONFIG_KEY]["json"])
        key = (text, str(root) if root else "")
        if key not in _CONFIG_CACHE:
            cfg = from_dict(json.loads(text))
            if root:
                cfg.data.root = str(root)
            valid = ensure_valid(cfg)  # raises for a bad text: nothing is cached
            _CONFIG_CACHE.clear()
            _CONFIG_CACHE[key] = valid
        return _CONFIG_CACHE[key]  # frozen: shared by the messages, not checked again
    if default is not None:
        cfg = default
    else:
        raise RuntimeError(
            "no experiment configuration: the server's hello message has not reached this node"
        )
    if root:  # on a copy: the default is shared by every virtual node of this process
        cfg = thaw(cfg)
        cfg.data.root = str(root)
    return ensure_valid(cfg)


def _model(cfg: ExperimentConfig) -> tuple[Any, Any]:
    """(method, net) of ``cfg``, built once per process (no data is read)."""
    key = config_fingerprint(to_dict(cfg)) + f"|{cfg.data.root}"
    if _PROCESS_CACHE.get("key") != key:
        _PROCESS_CACHE.clear()
        method = build_method(cfg)
        net = method.build_net()  # None: a PCA method trains none
        net = net.to(cfg.run.device) if net is not None else None
        init = {} if net is None else {k: v.detach().clone() for k, v in net.state_dict().items()}
        _PROCESS_CACHE.update(key=key, method=method, net=net, clients={}, init=init)
    return _PROCESS_CACHE["method"], _PROCESS_CACHE["net"]


def _fresh_net(net: Any) -> None:
    """Put ``net`` back to the values it was built with (no data has touched them): a
    deployed node keeps no state of its network from one request to the next, so a
    tensor the server leaves out of a request is the fresh one, never what an earlier
    request trained on the node's data."""
    import torch

    with torch.no_grad():
        for k, v in net.state_dict().items():
            v.copy_(_PROCESS_CACHE["init"][k])


def _setup(
    cfg: ExperimentConfig, cid: str, context: Context, pol: NodePolicy
) -> tuple[Any, Any, Any, Any, tuple[str, str]]:
    """(method, the node's data, view generator, net, (the data set's declared identity,
    its content digest)), built once per process.

    A deployed node (the default) reads its data from its own node config
    (:mod:`.node.data`: ``data-dataset``, ``data-root``, ``data-limit``, ``data-shard``),
    whatever the server's configuration says; a request reaching a node that names no
    data set is refused before any data is read.  A simulation node (policy
    ``simulation = true``) cuts client ``cid``'s partition from the server's plan
    (:func:`fedspectral.fed.federation.client_partition`: bit for bit what the
    in-process runner gives that client)."""
    import torch

    from fedspectral.fed.federation import augmenter  # lazy: pulls in torch

    method, net = _model(cfg)
    clients = _PROCESS_CACHE["clients"]
    if method.pillar == "pca":  # the node's users (checked before: check_node_data)
        data, ident = node_users(context, pol, cfg, method, cid)
        return method, data, None, net, ident
    if pol.simulation:
        key = f"simulation|{cid}"
    else:
        spec = node_data_spec(context.node_config, pol, cfg.data.dataset)
        key = f"node|{spec!r}"
    if key not in clients:
        if pol.simulation:
            data, ident = _simulation_partition(cfg, method, cid)
        else:
            data, ident = load_node_data(spec)
        if cfg.run.device != "cpu":  # client data stays on the device, as in process
            data = data.to(cfg.run.device)
        clients[key] = (data, ident)
        _PROCESS_CACHE.setdefault("augment", augmenter(cfg, int(data.images.shape[2])))
    if cfg.run.threads and torch.get_num_threads() != int(cfg.run.threads):
        torch.set_num_threads(int(cfg.run.threads))
    data, ident = clients[key]
    return method, data, _PROCESS_CACHE["augment"], net, ident


def _simulation_partition(
    cfg: ExperimentConfig, method: Any, cid: str
) -> tuple[Any, tuple[str, str]]:
    """Client ``cid``'s partition by the server's plan, and (the name, the content digest)
    of the data set it is cut from (a simulation node)."""
    from fedspectral.fed.federation import client_partition_of  # lazy: pulls in torch

    part, train = client_partition_of(cfg, method, cid)
    return part, (cfg.data.dataset, data_identity(cfg.data.dataset, train.images, train.labels))


def _load_state(context: Context) -> dict[str, np.ndarray]:
    if STATE_KEY not in context.state:
        return {}
    ar = context.state.array_records[STATE_KEY]
    rec = context.state.config_records.get(STATE_KEY + ".keys")
    saved = rec.get("keys", []) if rec is not None else []
    order = [str(k) for k in saved] if isinstance(saved, list) else []
    keys = order if sorted(order) == sorted(ar.keys()) else list(ar.keys())
    return {k: ar[k].numpy() for k in keys}


def _save_state(context: Context, state: dict[str, np.ndarray]) -> None:
    context.state[STATE_KEY] = ArrayRecord({k: Array(np.asarray(v)) for k, v in state.items()})
    context.state[STATE_KEY + ".keys"] = ConfigRecord({"keys": list(state)})


#: the policy of the virtual nodes of Flower's simulation runtime (``flwr run flower/``),
#: the same as ``flower/local-node-policy.toml`` (a test keeps them equal): every method
#: the app offers, trained weights without client-level DP, a ledger per run (in the
#: run's context), OS-entropy noise, and no non-private release (``dp = false`` is refused)
LOCAL_SIMULATION_POLICY = NodePolicy(
    simulation=True,
    methods=("*", *per_sample_phases()),
    allow_unprotected_weights=True,
    ledger_dir="memory",
    source="Flower simulation runtime's node policy (flower/local-node-policy.toml)",
)


def in_simulation_runtime() -> bool:
    """Whether this ClientApp runs in Flower's simulation runtime: inside an actor of its
    Ray backend (``flwr run`` on a ``--simulation`` SuperLink, e.g. Flower's local one).

    There, the ServerApp and every virtual node run in one process tree that the run's
    submitter starts with the app (FAB) they submit -- which may name any ClientApp -- on
    the SuperLink machine's data: no node operator exists whose policy could hold against
    that submitter.  A deployed SuperNode runs its ClientApp in its own process, never in
    a Ray actor, and nothing a server sends changes which process serves a message.  Only
    loaded modules are looked at (Ray is never imported here)."""
    ray = sys.modules.get("ray")
    if ray is None or "flwr.simulation.ray_transport.ray_actor" not in sys.modules:
        return False
    try:
        return bool(ray.is_initialized()) and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001 -- not a Ray worker: not the simulation runtime
        return False


def node_policy(context: Context, policy: NodePolicy | None = None) -> NodePolicy:
    """This node's privacy policy: ``policy`` if given; else, a node whose node config names
    no policy (no ``privacy-policy``, no ``policy-*`` key) in Flower's simulation runtime
    (:func:`in_simulation_runtime`: Flower 1.42 gives its virtual nodes no node config to
    carry one) follows :data:`LOCAL_SIMULATION_POLICY`, whatever environment its SuperLink
    was started in; else the node's own (:meth:`NodePolicy.from_node`).

    The simulation runtime is recognised from the process (a Ray actor), an operator's
    choice the server cannot make; the node says so, once per process, in its log
    (a warning naming the Ray actor and the policy it applies), so an operator who runs a
    node inside Ray by other means sees it at start and names a policy."""
    if policy is not None:
        return policy
    named = any(
        isinstance(k, str) and (k == "privacy-policy" or k.startswith("policy-"))
        for k in context.node_config
    )
    if not named and in_simulation_runtime():
        if not _PROCESS_CACHE.get("said-simulation-runtime"):
            _PROCESS_CACHE["said-simulation-runtime"] = True
            _log.warning(
                "this node runs inside a Ray actor of Flower's simulation runtime and names "
                "no privacy policy: it applies the %s (simulation = true: its data follow "
                "the server's plan, its ledger lives in the run's context). A node run in "
                "Ray by other means should name its own policy (privacy-policy or policy-* "
                "node-config keys)",
                LOCAL_SIMULATION_POLICY.source,
            )
        return LOCAL_SIMULATION_POLICY
    return NodePolicy.from_node(context.node_config)


def _noised(cfg: ExperimentConfig) -> bool:
    """Whether the run's sample-level DP adds noise (``dp`` on, σ not fixed at 0)."""
    return bool(cfg.dp.enabled) and not (cfg.dp.sigma is not None and float(cfg.dp.sigma) == 0)


def _variant(method: Any, phase: str, msg: Message) -> str:
    """Which manifest a request needs (:func:`.manifest.phase_manifest`): the method's for
    its release (:meth:`~fedspectral.fed.protocol.Method.release_variant`), else the
    variant of the first of the node's post-processors the request asks for
    (:data:`~fedspectral.fed.flower.node.client_dp.NODE_POST_PROCESSORS`) among those the
    phase has a manifest for (client-side client-level DP: ``client-dp``)."""
    variant = str(method.release_variant(phase))
    manifests = method.reply_manifests()
    posts = [p for p in client_dp.NODE_POST_PROCESSORS if (phase, p.variant) in manifests]
    if variant != "plain" or not posts:  # the request is parsed only where one may apply
        return variant
    payload = payload_from_recorddict(msg.content)
    return next((p.variant for p in posts if p.requested(payload)), "plain")


def _post_processors(variant: str, payload: Any) -> list[Any]:
    """The node's post-processors that shape the reply to ``payload`` under the manifest
    ``variant``: those of that variant the request asks for, in the node's order."""
    return [
        p for p in client_dp.NODE_POST_PROCESSORS if p.variant == variant and p.requested(payload)
    ]


def _check_request(policy: NodePolicy, cfg: ExperimentConfig, method: Any, phase: str) -> None:
    """Config-level policy checks of a phase whose release is noised (before the node's
    data is loaded): its neighbouring relation, and a calibrated σ's accountant and δ."""
    if method.release_variant(phase) == "plain" or not _noised(cfg):
        return
    policy.require("relations", str(method.neighbouring), policy.relations)
    if cfg.dp.sigma is None:
        policy.require("calibrations", str(cfg.dp.accountant), policy.calibrations)
        policy.check_delta(float(cfg.dp.delta), total=True)


def _hello(msg: Message, context: Context) -> Message:
    """The handshake: keep the server's configuration; answer with the client id."""
    cfg_rec = msg.content.config_records.get("config")
    if cfg_rec is not None:
        context.state[CONFIG_KEY] = ConfigRecord({"json": str(cfg_rec["json"])})
    cid = client_id(context)  # cheap: no data loading in the handshake
    return Message(RecordDict({"who": ConfigRecord({"cid": cid})}), reply_to=msg)


def _check_message_type(method: Any, phase: str, msg: Message, meta: dict[str, Any]) -> bool:
    """Whether ``phase`` is a secure-sum phase; raise if the message type is not the
    phase's kind (a secure-sum phase: stage 0 of ``query.secagg``)."""
    if phase not in method.phases:
        raise ValueError(f"method {method.name!r} has no phase {phase!r}")
    kind = method.phase_kind(phase)
    secure = kind == "secure_sum"  # its first stage: compute the summand, draw keys
    if msg.metadata.message_type != (ss.SECAGG if secure else kind) or (
        secure and int(meta.get("secagg-stage", -1)) != 0
    ):
        raise ValueError(
            f"phase {phase!r} is a {kind!r} phase but came as a "
            f"{msg.metadata.message_type!r} message"
        )
    return secure


def _releases(
    pol: NodePolicy,
    method: Any,
    posts: list[Any],
    phase: str,
    rnd: int,
    cid: str,
    n: int,
    payload: Any,
    net: Any,
) -> tuple[list[Any], list[Any], list[Any]]:
    """(the method's releases as objects, their ledger entries, the post-processors'
    entries) of this request; the entries are checked against the node's policy by
    :meth:`NodeLedger.spend`, the objects handed to the handler, which draws its noise
    from them (:meth:`~fedspectral.fed.protocol.Method.client_releases`): the method's
    (:meth:`~fedspectral.fed.protocol.Method.releases`, accounted under the node's own
    neighbouring relation -- its policy's ``relation`` -- with the node's noise; a release
    of σ = 0 is none: the manifest's ``plain`` variant governs it), then those of the
    post-processors ``posts`` that shape the reply (their ``node_releases``).  All depend
    on ``|D_j|`` (public), the request and the node's network, never on the data."""
    relation = pol.relation_for(str(method.neighbouring))
    noise = node_noise_mechanism(pol)
    planned = method.releases(phase, n, relation)
    entries = [r.entry(method.node_party(cid), rnd, noise) for r in planned if r.sigma > 0]
    shaped = [r for p in posts for r in p.node_releases(payload, cid, rnd, net, noise)]
    return planned, entries, shaped


def _client_reply(
    method: Any,
    phase: str,
    rnd: int,
    payload: Any,
    rt: Any,
    posts: list[Any],
    sa: Any,
    context: Context,
    t0: float,
) -> Any:
    """The method's client handler on this node's data, through the node's post-processors
    ``posts`` (client-level DP on the node's own terms: the tensors the server sent,
    clipped towards what it sent and noised; the handler made total under them), and the
    secure sum's first stage on its reply."""
    if not posts:
        reply = method.client_phase(phase, rnd, payload, rt)
    else:  # each post-processor around the next; innermost, the handler made total

        def through(i: int) -> Any:
            if i == len(posts):
                return lambda ref: total_handler(method, phase, rnd, payload, rt, ref, t0)
            return lambda ref: posts[i].on_reply(payload, rt, through(i + 1))

        reply = through(0)({})
    if sa is not None:  # the summand stays here; the reply carries the keys only
        reply = ss.start_stage(context, rt.cid, sa, reply)
    return reply


def total_handler(
    method: Any, phase: str, rnd: int, payload: Any, rt: Any, ref: Any, t0: float
) -> Any:
    """``method.client_phase`` made total for a client-level DP reply: whatever fails on
    the data (a non-finite loss or gradient, a zero or overflowing update, any other
    exception) is replaced by the data-independent reply -- the reference the server
    sent, i.e. a zero update (:func:`~.node.client_dp.fallback_reply`) -- sent no sooner
    than the phase's slowest success here, then clipped and noised as usual.  The reply
    goes out and is priced (the ledger holds it already) whatever the data do, so
    *reply or failure* carries nothing."""
    try:
        with _run_through_nonfinite():  # every step runs: time and outcome carry nothing
            return method.client_phase(phase, rnd, payload, rt)
    except Exception as exc:  # noqa: BLE001 -- every data-dependent failure, one outcome
        _log.error(
            "%s: %s round %d failed on the data; replying with the reference",
            rt.cid,
            phase,
            rnd,
            exc_info=exc,
        )
        pad(phase, t0)
        return fallback_reply(ref, len(rt.data), rt.net)


def _run_through_nonfinite() -> Any:
    """The training loop's mode that runs through a non-finite loss
    (:func:`fedspectral.checks.run_through_nonfinite`)."""
    return run_through_nonfinite()


def _serve(
    msg: Message,
    context: Context,
    pol: NodePolicy,
    cfg: ExperimentConfig,
    cid: str,
    man: Any,
    sa: Any,
    t0: float,
) -> Any:
    """Everything that touches the node's data; the releases are checked and spent in its
    ledger (one step under the ledger's lock) before the computation starts, so a failed
    attempt counts as the release."""
    meta = meta_of(msg.content)
    phase, rnd = str(meta["phase"]), int(meta["round"])
    # the node's own data (its node config), or a simulation node's partition
    method, data, augment, net, ident = _setup(cfg, cid, context, pol)
    payload = payload_from_recorddict(msg.content)
    posts = _post_processors(man.variant, payload)
    planned, releases, shaped = _releases(
        pol, method, posts, phase, rnd, cid, len(data), payload, net
    )
    NodeLedger(pol, ledger_key(ident[0]), context, digest=ident[1]).spend([*releases, *shaped])
    if not pol.simulation and net is not None:  # (a PCA method has no network)
        _fresh_net(net)  # nothing an earlier request trained survives into this one
    # the computation's clock: a failure is padded to the slowest computation, never to a
    # first request's loading of the data (else every later failure outlasts a success)
    t0 = time.perf_counter()
    try:
        g, derived = client_generators(
            cfg.run.seed, rnd, cid, phase, cfg.dp.noise_seed if pol.noise_seed == "derive" else None
        )
        rng = node_noise_generator(pol, derived, (rnd, cid, phase))
        rt = ClientRuntime(
            cid=cid,
            data=data,
            net=net,
            augment=augment,
            generator=g,
            noise_rng=rng,
            state=_load_state(context),
            config=cfg,
            device=cfg.run.device,
            releases=tuple(planned),  # the handler draws from the objects just ledgered
        )
        reply = _client_reply(method, phase, rnd, payload, rt, posts, sa, context, t0)
        if releases and sa is None:  # a handler that did not answer with them: no reply
            reported = reply.release
            noised = next(r for r in planned if r.sigma > 0)
            if reported is None or reported.config() != noised.config():
                raise RuntimeError("the reply's release is not the one the node ledgered")
    except Exception as exc:  # noqa: BLE001 -- uniform: its type or message may be data
        raise uniform_failure(cid, phase, rnd, t0, exc) from None
    _save_state(context, rt.state)
    note_success(phase, t0)
    return reply


def _handle(msg: Message, context: Context, config: Any, policy: NodePolicy | None) -> Message:
    """One phase of a round on this node: the request against the node's policy and
    release manifest (before any data is read), then the method's handler, then the
    reply rebuilt from the manifest alone."""
    from fedspectral.models.per_sample import check_per_sample  # lazy: pulls in torch

    t0 = time.perf_counter()
    pol = node_policy(context, policy)
    cfg = _config(context, config)
    cid = client_id(context)
    meta = meta_of(msg.content)
    phase, rnd = str(meta["phase"]), int(meta["round"])
    method, net = _model(cfg)
    _check_message_type(method, phase, msg, meta)
    man = manifest.check_manifest(pol, method, phase, _variant(method, phase, msg))
    request = payload_from_recorddict(msg.content)
    for post in _post_processors(man.variant, request):  # parsed before any data is read
        post.check_request(request)
    _check_request(pol, cfg, method, phase)
    if man.sample_dp and net is not None:  # (a PCA method has no network)
        try:
            check_per_sample(net, f"{method.name}'s encoder")
        except ValueError as exc:
            raise pol.refuse(str(exc)) from None
    # the secure sum's trust (its roster) is checked before any data as well
    sa = ss.start_params(meta, cid, context, pol) if man.variant == "secure" else None
    if sa is not None:  # the session against what this node was asked
        check_session(sa, pol, method, context)
    NodeLedger.check_writable(pol)  # fails closed before any data
    check_node_data(context, pol, cfg, method)  # the node's own data, before it is read
    try:
        reply = _serve(msg, context, pol, cfg, cid, man, sa, t0)
    except (PolicyRefusal, DataError):
        raise
    except Exception as exc:  # noqa: BLE001 -- loading the partition, |D_j| checks
        raise uniform_failure(cid, phase, rnd, t0, exc) from None
    reply = manifest.enforce(man, reply, pol.reply_metrics_for(method, man))
    if man.variant == "secure":
        return Message(payload_to_recorddict(reply, **{"secagg-stage": 0}), reply_to=msg)
    return Message(payload_to_recorddict(reply, phase=phase, round=rnd), reply_to=msg)


def make_client_app(
    config: Any = None, policy: NodePolicy | None = None, guard: Any = None
) -> ClientApp:
    """A ``ClientApp`` serving every fedspectral method (and the LDP-PCA query).

    Parameters
    ----------
    config : ExperimentConfig, optional
        Used when the server's hello carries no configuration (never the case with
        :mod:`.server_app`; kept for direct use with the simulation engine).
    policy : NodePolicy, optional
        The nodes' privacy policy (the simulation engine passes
        :data:`SIMULATION_POLICY`); by default each node reads its own
        (:meth:`NodePolicy.from_node`).
    guard : callable, optional
        ``guard(context)`` runs first on every message and may refuse it (the simulation
        engine's app serves only inside the simulation it started).
    """
    quiet_flower()  # in each process serving the app (the simulation's Ray actors too)
    # a node's refusal goes back as an error reply, not a crash with a Ray traceback
    app = ClientApp(mods=[error_reply_mod])

    def handle(msg: Message, context: Context) -> Message:
        if guard is not None:
            guard(context)
        return _handle(msg, context, config, policy)

    @app.query("hello")
    def hello(msg: Message, context: Context) -> Message:
        if guard is not None:
            guard(context)
        return _hello(msg, context)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.query("secagg")
    def secagg(msg: Message, context: Context) -> Message:
        if int(meta_of(msg.content).get("secagg-stage", -1)) == 0:
            return handle(msg, context)
        if guard is not None:
            guard(context)
        cid = client_id(context)
        return node_stage(msg, context, cid, node_policy(context, policy))

    @app.query("ldp_pca")
    def ldp_pca(msg: Message, context: Context) -> Message:
        if guard is not None:
            guard(context)
        return pca_client_query(msg, context, node_policy(context, policy))

    return app


#: the ``clientapp`` component of ``flower/pyproject.toml``
app = make_client_app()
