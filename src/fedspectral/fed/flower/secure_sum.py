r"""A ``secure_sum`` phase over Flower messages: the four stages of :mod:`fedspectral.fed.secagg`.

:class:`~.runner.GridTransport` carries a phase of kind ``"secure_sum"`` (FedSC's
``share`` with ``method.params.secure_aggregation``) with :func:`grid_secure_sum`:
one round of Flower messages of type ``query.secagg`` per stage, to the clients still
in the exchange, driven by the server:

====  ==================  ==========================================  ========================
stage  server sends        the node                                    the node replies
====  ==================  ==========================================  ========================
0     the phase's payload  checks the request against its policy,      its two X25519 public
      + the sum's          computes its summand
      parameters           (``method.client_phase``), quantises it     keys ``C``, ``S``
                           (a summand out of the bound is refused),
                           draws its keys and seed
1     the roster U1        splits its secrets (Shamir), encrypts a     ``ct/<peer>``: one
      (everyone's keys)    share pair for each peer                    ciphertext per peer
2     its inbox (the       decrypts its shares, masks its summand      ``y``: the masked
      ciphertexts for it)                                              integer vector
3     the survivors U3     the shares the server may have: of ``b``    ``b/<v>``, ``s/<v>``
                           for survivors, of ``s`` for dropped peers
====  ==================  ==========================================  ========================

Between the stages the node keeps its secrets (private keys, self-mask seed, the
shares it holds, its quantised summand) in its own ``context.state``
(:meth:`~fedspectral.fed.secagg.SecAggClient.to_state`), never in a reply; after
stage 3 it erases them, and it takes part in a session (run, round, phase and a
random nonce of the server) once only.  The replies carry the stage's values and
nothing else: no metrics, no config, no release report (the server records the
planned releases when it sends stage 0, as for every phase).

A node that fails or goes silent at some stage is left out of the next ones; the
server unmasks the survivors' sum exactly, as the in-process exchange does; fewer
than ``spec.min_contributors`` at any stage abort the sum (``None``: ``run_round``
releases nothing and ledgers the abort).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message

from fedspectral.fed import secagg
from fedspectral.fed.flower.records import (
    meta_of,
    payload_from_recorddict,
    payload_to_recorddict,
)
from fedspectral.fed.protocol import Payload, SecureSumSpec

__all__ = ["SECAGG", "STAGES", "grid_secure_sum", "node_stage", "start_params", "start_stage"]

#: the Flower message type of every stage
SECAGG = "query.secagg"
STAGES = ("advertise-keys", "share-keys", "masked-input", "unmask")
#: where a node keeps its stage secrets between the messages of one sum
STATE_KEY = "fedspectral.secagg"
SESSIONS_KEY = "fedspectral.secagg.sessions"
_FIELD = 66  # bytes of a share (an element of F_p, p = 2^521 - 1)


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------
def _send(transport: Any, stage: int, phase: str, rnd: int, session: bytes,
          payloads: Mapping[str, Payload], **meta: Any) -> dict[str, Payload | BaseException]:
    msgs = []
    for cid, p in payloads.items():
        if cid not in transport.node_of:
            raise KeyError(f"client {cid!r} has no Flower node (known: "
                           f"{sorted(transport.node_of)})")
        rd = payload_to_recorddict(p, phase=phase, round=int(rnd), **{
            "secagg-stage": int(stage), "secagg-session": session.hex()}, **meta)
        msgs.append(Message(rd, dst_node_id=transport.node_of[cid], message_type=SECAGG,
                            group_id=f"{rnd}:{phase}/{STAGES[stage]}"))
    return transport.send(msgs, rnd, f"{phase}/{STAGES[stage]}", SECAGG)


def _arr(p: Payload, key: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    a = p.arrays.get(key)
    if a is None:
        raise ValueError(f"reply without {key!r}")
    a = np.asarray(a)
    if a.dtype != np.dtype(dtype) or a.shape != shape:
        raise ValueError(f"{key!r} is {a.dtype}{a.shape}, expected {np.dtype(dtype)}{shape}")
    return a


def _collect(stage: int, sent: list[str], replies: Mapping[str, Payload | BaseException],
             decode: Any, failures: dict[str, str]) -> dict[str, Any]:
    """The decoded replies of one stage; every other addressed client into ``failures``."""
    out: dict[str, Any] = {}
    for cid in sent:
        rep = replies.get(cid)
        why = None
        if rep is None:
            why = "no reply"
        elif isinstance(rep, BaseException):
            why = f"{type(rep).__name__}: {rep}"
        else:
            try:
                out[cid] = decode(cid, rep)
            except (ValueError, KeyError, TypeError) as exc:
                why = f"malformed reply: {exc}"
        if why is not None:
            failures[cid] = f"secure sum stage {stage} ({STAGES[stage]}): {why}"
    return out


def grid_secure_sum(transport: Any, phase: str, rnd: int, payloads: Mapping[str, Payload],
                    spec: SecureSumSpec) -> tuple[np.ndarray | None, list[str], dict[str, str]]:
    """``(sum, contributors, failures)`` of one ``secure_sum`` phase over the transport's
    grid (module docstring): the server learns the survivors' sum of the quantised
    summands (dequantised here) and nothing about any single one.  ``None`` (with no
    contributors) when a stage has fewer than ``spec.min_contributors`` clients."""
    roster = list(payloads)
    failures: dict[str, str] = {}
    session = f"{rnd}/{phase}/{secrets.token_hex(16)}".encode()
    params = secagg.SecAggParams(tuple(roster), spec.min_contributors, spec.length, spec.bits,
                                 session)
    scale = secagg.quantisation_scale(spec.bound, len(roster), spec.bits)
    server = secagg.SecAggServer(params)
    start = json.dumps({"clients": roster, "threshold": params.threshold,
                        "length": spec.length, "bits": spec.bits, "bound": spec.bound,
                        "key": spec.key})
    try:
        # stage 0: the payload, the sum's parameters -> the public keys
        rep = _send(transport, 0, phase, rnd, session, payloads, **{"secagg-start": start})
        keys = _collect(0, roster, rep, lambda c, p: (
            _arr(p, "C", np.uint8, (32,)).tobytes(), _arr(p, "S", np.uint8, (32,)).tobytes()),
            failures)
        u1 = server.collect_keys(keys)
        # stage 1: the roster -> encrypted shares for every peer
        ros = Payload(arrays={f"{k}/{c}": np.frombuffer(pk, dtype=np.uint8)
                              for c, (ck, sk) in u1.items()
                              for k, pk in (("C", ck), ("S", sk))})
        rep = _send(transport, 1, phase, rnd, session, {c: ros for c in u1})

        def shares(cid: str, p: Payload) -> dict[str, bytes]:
            out = {}
            for peer in u1:
                if peer != cid:
                    a = p.arrays.get(f"ct/{peer}")
                    if a is None or np.asarray(a).dtype != np.uint8:
                        raise ValueError(f"no ciphertext for {peer!r}")
                    out[peer] = np.asarray(a).tobytes()
            return out

        inbox = server.route_shares(_collect(1, list(u1), rep, shares, failures))
        # stage 2: each its inbox -> the masked inputs
        rep = _send(transport, 2, phase, rnd, session, {
            c: Payload(arrays={f"ct/{s}": np.frombuffer(ct, dtype=np.uint8)
                               for s, ct in box.items()}) for c, box in inbox.items()})
        masked = _collect(2, list(inbox), rep,
                          lambda c, p: _arr(p, "y", np.uint64, (spec.length,)), failures)
        u3 = server.collect_masked(masked)
        # stage 3: the survivors -> the shares that unmask their sum
        dropped = [v for v in server.u2 if v not in u3]
        rep = _send(transport, 3, phase, rnd, session, {c: Payload() for c in u3},
                    **{"secagg-survivors": json.dumps(u3)})

        def answer(cid: str, p: Payload) -> dict[str, dict[str, int]]:
            x = _arr(p, "x", np.int64, (1,))
            return {"x": {"": int(x[0])},
                    "b": {v: int.from_bytes(_arr(p, f"b/{v}", np.uint8, (_FIELD,)).tobytes(),
                                            "big") for v in u3},
                    "s": {v: int.from_bytes(_arr(p, f"s/{v}", np.uint8, (_FIELD,)).tobytes(),
                                            "big") for v in dropped}}

        answers = _collect(3, u3, rep, answer, failures)
        total = server.unmask(answers)
    except secagg.SecAggAborted as exc:
        return None, [], {**failures, "*": f"SecAggAborted: {exc}"}
    return secagg.dequantise(total, scale, spec.bits), list(u3), failures


# --------------------------------------------------------------------------------------
# the node
# --------------------------------------------------------------------------------------
def _sessions(context: Context) -> list[str]:
    if SESSIONS_KEY not in context.state:
        return []
    return [str(s) for s in context.state.config_records[SESSIONS_KEY].get("sessions", [])]


def start_params(meta: Mapping[str, Any], cid: str, context: Context) -> dict[str, Any]:
    """The parameters of a stage-0 request, checked before the node's data is used: the
    node must be in the roster, and the session new to it."""
    try:
        sa = json.loads(str(meta["secagg-start"]))
        session = bytes.fromhex(str(meta["secagg-session"]))
        params = secagg.SecAggParams(tuple(sa["clients"]), int(sa["threshold"]),
                                     int(sa["length"]), int(sa["bits"]), session)
        bound = float(sa["bound"])
        key = str(sa["key"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed secure-sum request: {exc}") from None
    if cid not in params.clients:
        raise PermissionError(f"{cid} is not in the secure sum's roster")
    if session.hex() in _sessions(context):
        raise PermissionError(f"{cid} already took part in secure-sum session "
                              f"{session.decode(errors='replace')!r}")
    scale = secagg.quantisation_scale(bound, len(params.clients), params.bits)
    return {"params": params, "bound": bound, "key": key, "scale": scale}


def start_stage(context: Context, cid: str, sa: Mapping[str, Any], reply: Payload) -> Payload:
    """Stage 0 on the node, after ``method.client_phase`` computed ``reply``: quantise the
    summand (clamped into the bound first: no data-dependent overflow), keep it and the new client's
    secrets in ``context.state``, reply with the public keys only."""
    p: secagg.SecAggParams = sa["params"]
    x = np.asarray(reply.arrays[sa["key"]], dtype=np.float64)
    if x.shape != (p.length,):
        raise ValueError(f"summand of shape {x.shape}, expected ({p.length},)")
    # total: the summand is already noised, so clamping it into the server's bound (and a
    # non-finite value to 0) is post-processing -- raising QuantisationOverflow instead
    # would tell the server whether the node's data crossed a bound it chose
    bound = float(sa["bound"])
    x = np.clip(np.nan_to_num(x, nan=0.0, posinf=bound, neginf=-bound), -bound, bound)
    q = secagg.quantise(x, sa["scale"], bound, p.bits)
    client = secagg.SecAggClient(cid, p)
    st = client.to_state()
    st["input"] = q.astype("<u8").tobytes().hex()
    context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(st)})
    context.state[SESSIONS_KEY] = ConfigRecord({"sessions": [*_sessions(context),
                                                             p.session.hex()]})
    c, s = client.advertise_keys()
    return Payload(arrays={"C": np.frombuffer(c, dtype=np.uint8),
                           "S": np.frombuffer(s, dtype=np.uint8)})


def node_stage(msg: Message, context: Context, cid: str) -> Message:
    """Stages 1-3 on the node: restore its client from ``context.state``, answer the
    stage, keep the new state (erased after stage 3)."""
    meta = meta_of(msg.content)
    stage = int(meta["secagg-stage"])
    if STATE_KEY not in context.state:
        raise PermissionError(f"{cid}: no secure sum in progress (stage {stage})")
    st = json.loads(str(context.state.config_records[STATE_KEY]["json"]))
    client = secagg.SecAggClient.from_state(st)
    if client.params.session.hex() != str(meta["secagg-session"]):
        raise PermissionError(f"{cid}: stage {stage} of a session it is not in")
    p = payload_from_recorddict(msg.content)
    if stage == 1:
        roster = {k[2:]: (np.asarray(p.arrays[f"C/{k[2:]}"]).tobytes(),
                          np.asarray(p.arrays[f"S/{k[2:]}"]).tobytes())
                  for k in p.arrays if k.startswith("C/")}
        out = client.share_keys(roster)
        reply = Payload(arrays={f"ct/{v}": np.frombuffer(ct, dtype=np.uint8)
                                for v, ct in out.items()})
    elif stage == 2:
        inbox = {k[3:]: np.asarray(a).tobytes() for k, a in p.arrays.items()
                 if k.startswith("ct/")}
        x = np.frombuffer(bytes.fromhex(str(st["input"])), dtype="<u8").astype(np.uint64)
        y = client.masked_input(x, inbox)
        reply = Payload(arrays={"y": np.asarray(y, dtype=np.uint64)})
    elif stage == 3:
        ans = client.unmask(json.loads(str(meta["secagg-survivors"])))
        arrays: dict[str, np.ndarray] = {"x": np.asarray([ans["x"][""]], dtype=np.int64)}
        for kind in ("b", "s"):
            for v, share in ans[kind].items():
                arrays[f"{kind}/{v}"] = np.frombuffer(share.to_bytes(_FIELD, "big"),
                                                      dtype=np.uint8)
        reply = Payload(arrays=arrays)
    else:
        raise ValueError(f"unknown secure-sum stage {stage}")
    if stage == 3:
        del context.state[STATE_KEY]
    else:
        new = client.to_state()
        new["input"] = st["input"]
        context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(new)})
    return Message(payload_to_recorddict(reply, **{"secagg-stage": stage}), reply_to=msg)
