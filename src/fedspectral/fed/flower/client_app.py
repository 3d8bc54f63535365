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
    :func:`fedspectral.fed.simulation.prepare_federation`.
*The experiment configuration*
    sent by the server in the first message of a run (``query.hello``, a JSON
    ``ConfigRecord``) and kept in ``context.state``; a node may override the
    data location with ``node_config["data-root"]``.  So only the server needs
    the YAML file.
*Persistent client state*
    ``ClientRuntime.state`` (e.g. FedSC's cached global weights between its
    ``share`` and ``train`` phases, the baselines' local target networks) lives
    in ``context.state["fedspectral.client-state"]`` (an ``ArrayRecord``),
    loaded before and saved after each handler call; it never leaves the node.
*Randomness*
    ``client_generators(run.seed, round, cid, phase, dp.noise_seed)``, exactly as
    the in-process runner -- so both engines draw the same numbers.  A node whose
    own ``node_config`` sets ``noise = "secure"`` (``flower-supernode --node-config
    "noise='secure'"``) draws its DP noise from the secure source whatever the
    server's config says: the server cannot seed it.
*Data and the network*
    loaded once per process and reused across rounds and nodes (a Ray actor
    serves several virtual nodes): the handler loads the weights it is sent.

Message types: ``train`` (phases of kind ``"train"``), ``query`` (kind
``"query"``), ``query.hello`` (handshake) and ``query.ldp_pca`` (the locally
private PCA app, :mod:`.pca_app`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedspectral.fed.flower.records import meta_of, payload_from_recorddict, payload_to_recorddict

__all__ = ["HELLO", "STATE_KEY", "app", "client_id", "make_client_app"]

HELLO = "query.hello"
STATE_KEY = "fedspectral.client-state"
CONFIG_KEY = "fedspectral.config"

# one experiment per process: (fingerprint, method, federation, net)
_PROCESS_CACHE: dict[str, Any] = {}


def client_id(context: Context) -> str:
    """``client-<partition-id>`` of this node."""
    if "partition-id" not in context.node_config:
        raise ValueError("node_config has no 'partition-id' (start the SuperNode with "
                         "--node-config \"partition-id=<i> num-partitions=<N>\")")
    return f"client-{int(context.node_config['partition-id'])}"


def _config(context: Context, default: Any) -> Any:
    from fedspectral.experiments.config import from_dict

    if CONFIG_KEY in context.state:
        cfg = from_dict(json.loads(str(context.state.config_records[CONFIG_KEY]["json"])))
    elif default is not None:
        cfg = default
    else:
        raise RuntimeError("no experiment configuration: the server's hello message has not "
                           "reached this node")
    root = context.node_config.get("data-root")
    if root:
        cfg.data.root = str(root)
    return cfg


def _setup(cfg: Any) -> tuple[Any, Any, Any]:
    """(method, federation, net) of ``cfg``, built once per process."""
    import torch

    from fedspectral.experiments.config import to_dict
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.simulation import config_fingerprint, prepare_federation

    key = config_fingerprint(to_dict(cfg)) + f"|{cfg.data.root}"
    hit = _PROCESS_CACHE.get("key") == key
    if not hit:
        _PROCESS_CACHE.clear()
        method = build_method(cfg)
        fed = prepare_federation(cfg, method)
        if cfg.run.device != "cpu":  # client data stays on the device, as in process
            fed.clients = {c: d.to(cfg.run.device) for c, d in fed.clients.items()}
        net = method.build_net().to(cfg.run.device)
        _PROCESS_CACHE.update(key=key, method=method, fed=fed, net=net)
    if cfg.run.threads:
        torch.set_num_threads(int(cfg.run.threads))
    return _PROCESS_CACHE["method"], _PROCESS_CACHE["fed"], _PROCESS_CACHE["net"]


def _load_state(context: Context) -> dict[str, np.ndarray]:
    if STATE_KEY not in context.state:
        return {}
    ar = context.state.array_records[STATE_KEY]
    order = list(context.state.config_records.get(STATE_KEY + ".keys", {}).get("keys", []))
    keys = order if sorted(order) == sorted(ar.keys()) else list(ar.keys())
    return {k: ar[k].numpy() for k in keys}


def _save_state(context: Context, state: dict[str, np.ndarray]) -> None:
    context.state[STATE_KEY] = ArrayRecord({k: Array(np.asarray(v)) for k, v in state.items()})
    context.state[STATE_KEY + ".keys"] = ConfigRecord({"keys": list(state)})


def _fault(context: Context, phase: str, rnd: int, cid: str) -> None:
    """Test hook: raise if the server asked this client to fail in (phase, round)."""
    if "fedspectral.fault" not in context.state:
        return
    spec = context.state.config_records["fedspectral.fault"]
    for item in list(spec.get("fail", [])):
        c, r, ph = str(item).split("|")
        if c == cid and int(r) == rnd and ph in (phase, "*"):
            raise RuntimeError(f"injected failure of {cid} in {phase} round {rnd}")


def make_client_app(config: Any = None) -> ClientApp:
    """A ``ClientApp`` serving every fedspectral method (and the LDP-PCA query).

    Parameters
    ----------
    config : ExperimentConfig, optional
        Used when the server's hello carries no configuration (never the case with
        :mod:`.server_app`; kept for direct use with ``run_simulation``).
    """
    app = ClientApp()

    @app.query("hello")
    def hello(msg: Message, context: Context) -> Message:
        cfg_rec = msg.content.config_records.get("config")
        if cfg_rec is not None:
            context.state[CONFIG_KEY] = ConfigRecord({"json": str(cfg_rec["json"])})
        if "fault" in msg.content.config_records:
            context.state["fedspectral.fault"] = ConfigRecord(
                dict(msg.content.config_records["fault"]))
        cid = client_id(context)  # cheap: no data loading in the handshake
        return Message(RecordDict({"who": ConfigRecord({"cid": cid})}), reply_to=msg)

    def handle(msg: Message, context: Context) -> Message:
        from fedspectral.fed.protocol import ClientRuntime, client_generators

        cfg = _config(context, config)
        method, fed, net = _setup(cfg)
        cid = client_id(context)
        if cid not in fed.clients:
            raise ValueError(f"this node is {cid} but the federation has clients "
                             f"{sorted(fed.clients)} (start one SuperNode per client)")
        meta = meta_of(msg.content)
        phase, rnd = str(meta["phase"]), int(meta["round"])
        kind = method.phase_kind(phase)
        if msg.metadata.message_type != kind:
            raise ValueError(f"phase {phase!r} is a {kind!r} phase but came as a "
                             f"{msg.metadata.message_type!r} message")
        _fault(context, phase, rnd, cid)
        payload = payload_from_recorddict(msg.content)
        noise_seed = cfg.dp.noise_seed
        if str(context.node_config.get("noise", "")) == "secure":  # the node's own policy
            noise_seed = "secure"
        g, rng = client_generators(cfg.run.seed, rnd, cid, phase, noise_seed)
        state = _load_state(context)
        rt = ClientRuntime(cid=cid, data=fed.clients[cid], net=net, augment=fed.augment,
                           generator=g, noise_rng=rng, state=state, config=cfg,
                           device=cfg.run.device)
        reply = method.client_phase(phase, rnd, payload, rt)
        _save_state(context, rt.state)
        return Message(payload_to_recorddict(reply, phase=phase, round=rnd), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return handle(msg, context)

    @app.query("ldp_pca")
    def ldp_pca(msg: Message, context: Context) -> Message:
        from fedspectral.fed.flower.pca_app import pca_client_query

        return pca_client_query(msg, context)

    return app


#: the ``clientapp`` component of ``flower/pyproject.toml``
app = make_client_app()
