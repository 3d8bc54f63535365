r"""A ``secure_sum`` phase over Flower messages: the five stages of :mod:`fedspectral.fed.secagg`.

:class:`~.runner.GridTransport` carries a phase of kind ``"secure_sum"`` (FedSC's
``share`` with ``method.params.secure_aggregation``) with :func:`grid_secure_sum`:
one round of Flower messages of type ``query.secagg`` per stage, to the clients still
in the exchange, driven by the server's one sequence of the stages
(:func:`fedspectral.fed.secagg_server.run_stages`, which the in-process sum runs too)
over :class:`GridStages`:

=====  ===================  ===========================================  =======================
stage   server sends         the node                                     the node replies
=====  ===================  ===========================================  =======================
0      the phase's payload   checks the request against its policy        its two X25519 public
       + the sum's           (and its trust, below), computes its         keys ``C``, ``S`` and
       parameters            summand (``method.client_phase``),           their signature
                             quantises it (a summand out of the           ``sig``
                             bound is refused), draws keys and seed
1      the roster U1         checks every peer's signature against its    ``ct/<peer>``: one
       (keys, signatures)    trusted roster, splits its secrets           ciphertext per peer
                             (Shamir), encrypts a share pair per peer
2      its inbox             decrypts its shares, masks its summand       ``y``: the masked
                                                                          integer vector
3      the survivors U3      checks U3 against its view of U2, signs      ``sig``: its
                             (keys, U2, U3) once                          statement signature
4      the signers U4 and    checks at least t signatures over its own    ``b/<v>``, ``s/<v>``
       their signatures      statement, then the shares the server may
                             have: of ``b`` for survivors, of ``s``
                             for dropped peers
=====  ===================  ===========================================  =======================

*Trust.*  What makes the exchange hold against a server that does not follow it
(:mod:`fedspectral.fed.secagg`, "Guarantee") is a roster of the peers' identity keys the
node obtained *without* the server, set in the node's own policy
(:mod:`.node.policy`): ``secagg-roster`` (a TOML file ``client-<i> = "<hex Ed25519
public key>"``, at top level or under ``[secagg-roster]``) and ``secagg-identity`` (the
node's PEM private key); :func:`write_identities` makes both for a set of clients (what
:class:`~.deploy.local.LocalDeployment` does for its nodes).  ``secagg-roster = "simulation"``
derives every identity from the client id (:func:`simulation_identity`): the
simulation engine's virtual nodes, which belong to the experimenter who runs the server
too.  Without a roster the node refuses the sum (``PolicyRefusal``) unless its policy
says ``secagg-honest-server = true``: then it runs unauthenticated and notes in its own
state (``fedspectral.secagg.trust``) that each such sum assumed an honest-but-curious
server.  ``secagg-colluders = c`` refuses a sum whose threshold is not above
:math:`(n + c)/2`.

Between the stages the node keeps its secrets (private keys, self-mask seed, the
shares it holds, its quantised summand) in its own ``context.state``
(:meth:`~fedspectral.fed.secagg.SecAggClient.to_state`; never its identity key), never in
a reply; after stage 4 it erases them, and it takes part in a session (run, round, phase
and a random nonce of the server) once only.  The replies carry the stage's values and
nothing else: no metrics, no config, no release report (the server records the planned
releases when it sends stage 0, as for every phase).

A node that fails or goes silent at some stage is left out of the next ones; the
server unmasks the survivors' sum exactly, as the in-process exchange does; fewer
than ``spec.min_contributors`` at any stage abort the sum (``None``: ``run_round``
releases nothing and ledgers the abort).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.app import ConfigRecord, Context, Message

from fedspectral.atomic import atomic_write_bytes
from fedspectral.fed import secagg
from fedspectral.fed.flower.apps.records import (
    meta_of,
    payload_from_recorddict,
    payload_to_recorddict,
)
from fedspectral.fed.flower.node.files import read_node_file
from fedspectral.fed.flower.node.policy import NodePolicy
from fedspectral.fed.protocol import Payload
from fedspectral.fed.releases import SecureSumSpec
from fedspectral.fed.secagg_primitives import dequantise, quantisation_scale, quantise
from fedspectral.fed.secagg_server import run_stages

__all__ = [
    "SECAGG",
    "SIMULATION_ROSTER",
    "STAGES",
    "GridStages",
    "grid_secure_sum",
    "load_identity",
    "load_roster",
    "node_stage",
    "node_trust",
    "simulation_identity",
    "start_params",
    "start_stage",
    "write_identities",
]

#: the Flower message type of every stage
SECAGG = "query.secagg"
STAGES = ("advertise-keys", "share-keys", "masked-input", "consistency", "unmask")
#: where a node keeps its stage secrets between the messages of one sum
STATE_KEY = "fedspectral.secagg"
SESSIONS_KEY = "fedspectral.secagg.sessions"
#: where a node notes the sums it ran assuming an honest-but-curious server
TRUST_KEY = "fedspectral.secagg.trust"
#: ``secagg-roster`` value of the simulation engine's virtual nodes
SIMULATION_ROSTER = "simulation"
_FIELD = 66  # bytes of a share (an element of F_p, p = 2^521 - 1)


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------
def _send(
    transport: Any,
    stage: int,
    phase: str,
    rnd: int,
    session: bytes,
    payloads: Mapping[str, Payload],
    **meta: Any,
) -> dict[str, Payload | BaseException]:
    msgs = []
    stage_meta: dict[str, float | str | bool] = {
        "secagg-stage": int(stage),
        "secagg-session": session.hex(),
    }
    for cid, p in payloads.items():
        if cid not in transport.node_of:
            raise KeyError(
                f"client {cid!r} has no Flower node (known: {sorted(transport.node_of)})"
            )
        rd = payload_to_recorddict(
            p,
            phase=phase,
            round=int(rnd),
            **stage_meta,
            **meta,
        )
        msgs.append(
            Message(
                rd,
                dst_node_id=transport.node_of[cid],
                message_type=SECAGG,
                group_id=f"{rnd}:{phase}/{STAGES[stage]}",
            )
        )
    return transport.send(msgs, rnd, f"{phase}/{STAGES[stage]}", SECAGG)


def _arr(p: Payload, key: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    a = p.arrays.get(key)
    if a is None:
        raise ValueError(f"reply without {key!r}")
    a = np.asarray(a)
    if a.dtype != np.dtype(dtype) or a.shape != shape:
        raise ValueError(f"{key!r} is {a.dtype}{a.shape}, expected {np.dtype(dtype)}{shape}")
    return a


def _collect(
    stage: int,
    sent: list[str],
    replies: Mapping[str, Payload | BaseException],
    decode: Any,
    failures: dict[str, str],
) -> dict[str, Any]:
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


def _bytes_arr(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.uint8)


def _opt_sig(p: Payload, key: str = "sig") -> bytes:
    """An optional signature array (absent: an unauthenticated node's empty one)."""
    a = p.arrays.get(key)
    if a is None:
        return b""
    a = np.asarray(a)
    if a.dtype != np.uint8 or a.shape != (64,):
        raise ValueError(f"{key!r} is {a.dtype}{a.shape}, expected uint8(64,)")
    return a.tobytes()


def _sig_arrays(sigs: Mapping[str, bytes]) -> dict[str, np.ndarray]:
    return {f"sig/{c}": _bytes_arr(s) for c, s in sigs.items() if s}


class GridStages:
    """The stages of one sum as rounds of ``query.secagg`` messages over a Flower
    transport (:class:`~.runner.GridTransport` or any object with ``node_of`` and
    ``send``): the :class:`~fedspectral.fed.secagg_server.StageTransport` that
    :func:`~fedspectral.fed.secagg_server.run_stages` drives.  Stage 0 carries the
    phase's ``payloads`` and the sum's parameters (``start``); a reply that is missing, an
    error or malformed leaves its client out and is noted in ``failures``."""

    def __init__(
        self,
        transport: Any,
        phase: str,
        rnd: int,
        session: bytes,
        payloads: Mapping[str, Payload],
        start: str,
        length: int,
    ) -> None:
        self.transport, self.phase, self.rnd, self.session = transport, phase, int(rnd), session
        self.payloads, self.start, self.length = payloads, start, int(length)
        self.failures: dict[str, str] = {}
        self.u2: list[str] = []
        self.u3: list[str] = []

    def _round(
        self, stage: int, payloads: Mapping[str, Payload], decode: Any, **meta: Any
    ) -> dict[str, Any]:
        rep = _send(self.transport, stage, self.phase, self.rnd, self.session, payloads, **meta)
        return _collect(stage, list(payloads), rep, decode, self.failures)

    def advertise_keys(self, clients: Sequence[str]) -> dict[str, tuple[bytes, bytes, bytes]]:
        return self._round(
            0,
            {c: self.payloads[c] for c in clients},
            lambda c, p: (
                _arr(p, "C", np.uint8, (32,)).tobytes(),
                _arr(p, "S", np.uint8, (32,)).tobytes(),
                _opt_sig(p),
            ),
            **{"secagg-start": self.start},
        )

    def share_keys(self, roster: Mapping[str, Sequence[bytes]]) -> dict[str, dict[str, bytes]]:
        ros = Payload(
            arrays={
                f"{k}/{c}": _bytes_arr(pk)
                for c, (ck, sk, sig) in roster.items()
                for k, pk in (("C", ck), ("S", sk), ("sig", sig))
                if pk
            }
        )

        def shares(cid: str, p: Payload) -> dict[str, bytes]:
            out = {}
            for peer in roster:
                if peer != cid:
                    a = p.arrays.get(f"ct/{peer}")
                    if a is None or np.asarray(a).dtype != np.uint8:
                        raise ValueError(f"no ciphertext for {peer!r}")
                    out[peer] = np.asarray(a).tobytes()
            return out

        return self._round(1, dict.fromkeys(roster, ros), shares)

    def masked_input(self, inbox: Mapping[str, Mapping[str, bytes]]) -> dict[str, np.ndarray]:
        self.u2 = list(inbox)
        return self._round(
            2,
            {
                c: Payload(arrays={f"ct/{s}": _bytes_arr(ct) for s, ct in box.items()})
                for c, box in inbox.items()
            },
            lambda c, p: _arr(p, "y", np.uint64, (self.length,)),
        )

    def consistency(self, survivors: list[str]) -> dict[str, bytes]:
        self.u3 = list(survivors)
        return self._round(
            3,
            {c: Payload() for c in survivors},
            lambda c, p: _opt_sig(p),
            **{"secagg-survivors": json.dumps(survivors)},
        )

    def unmask(self, signatures: Mapping[str, bytes]) -> dict[str, dict[str, dict[str, int]]]:
        dropped = [v for v in self.u2 if v not in self.u3]

        def answer(cid: str, p: Payload) -> dict[str, dict[str, int]]:
            x = _arr(p, "x", np.int64, (1,))
            return {
                "x": {"": int(x[0])},
                "b": {
                    v: int.from_bytes(_arr(p, f"b/{v}", np.uint8, (_FIELD,)).tobytes(), "big")
                    for v in self.u3
                },
                "s": {
                    v: int.from_bytes(_arr(p, f"s/{v}", np.uint8, (_FIELD,)).tobytes(), "big")
                    for v in dropped
                },
            }

        return self._round(
            4,
            {c: Payload(arrays=_sig_arrays(signatures)) for c in signatures},
            answer,
            **{"secagg-signers": json.dumps(list(signatures))},
        )


def grid_secure_sum(
    transport: Any,
    phase: str,
    rnd: int,
    payloads: Mapping[str, Payload],
    spec: SecureSumSpec,
    binding: str = "",
) -> tuple[np.ndarray | None, list[str], dict[str, str]]:
    """``(sum, contributors, failures)`` of one ``secure_sum`` phase over the transport's
    grid (module docstring): the stages of :func:`~fedspectral.fed.secagg_server.run_stages`
    carried by :class:`GridStages`; the server learns the survivors' sum of the quantised
    summands (dequantised here) and nothing about any single one.  ``None`` (with no
    contributors) when a stage has fewer than ``spec.min_contributors`` clients."""
    roster = list(payloads)
    bound = f"{binding}/" if binding else ""  # what every holder was asked (session_binding)
    session = f"{rnd}/{phase}/{bound}{secrets.token_hex(16)}".encode()
    params = secagg.SecAggParams(
        tuple(roster), spec.min_contributors, spec.length, spec.bits, session
    )
    scale = quantisation_scale(spec.bound, len(roster), spec.bits)
    start = json.dumps(
        {
            "clients": roster,
            "threshold": params.threshold,
            "length": spec.length,
            "bits": spec.bits,
            "bound": spec.bound,
            "key": spec.key,
        }
    )
    stages = GridStages(transport, phase, rnd, session, payloads, start, spec.length)
    try:
        total, contributors = run_stages(params, stages)
    except secagg.SecAggAborted as exc:
        return None, [], {**stages.failures, "*": f"SecAggAborted: {exc}"}
    return dequantise(total, scale, spec.bits), list(contributors), stages.failures


# --------------------------------------------------------------------------------------
# the node's trust: its identity key and the roster of its peers' keys
# --------------------------------------------------------------------------------------
def simulation_identity(cid: str) -> Ed25519PrivateKey:
    """The identity key of a *simulated* client, derived from its id alone: anyone can
    compute it, so it authenticates nothing against the party running the simulation
    (which owns every virtual node anyway); never for a deployed node."""
    seed = hashlib.sha256(b"fedspectral/secagg/simulation-identity/v1|" + cid.encode())
    return Ed25519PrivateKey.from_private_bytes(seed.digest())


def _public_hex(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        .hex()
    )


def write_identities(
    directory: str | os.PathLike, cids: Iterable[str]
) -> tuple[Path, dict[str, Path]]:
    """Fresh identity keys for ``cids``: ``(roster file, {cid: private key file})`` under
    ``directory``.  The roster (TOML, ``cid = "<hex public key>"``) goes to every node,
    each private key (PEM, PKCS#8, mode 0600) to its own node only."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    keys, lines = {}, []
    for cid in cids:
        k = Ed25519PrivateKey.generate()
        path = d / f"{cid}.identity.pem"
        pem = k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        atomic_write_bytes(path, pem, mode=0o600)  # never readable by others, not even briefly
        keys[cid] = path
        lines.append(f'"{cid}" = "{_public_hex(k)}"')
    roster = d / "roster.toml"
    atomic_write_bytes(roster, ("[secagg-roster]\n" + "\n".join(lines) + "\n").encode())
    return roster, keys


def load_identity(path: str | os.PathLike) -> Ed25519PrivateKey:
    """A node's identity key from its PEM file (``ValueError`` naming the file)."""
    p = Path(path)
    raw = read_node_file(p, f"secagg-identity {str(p)!r}", text=False)
    try:
        key = serialization.load_pem_private_key(raw, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"secagg-identity {str(p)!r}: not a readable PEM private key ({type(exc).__name__})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise TypeError(f"secagg-identity {str(p)!r} is not an Ed25519 key")
    return key


def load_roster(path: str | os.PathLike) -> dict[str, bytes]:
    """The trusted roster ``{cid: raw Ed25519 public key}`` from its TOML file."""
    p = Path(path)
    where = f"secagg-roster {str(p)!r}"
    try:
        data = tomllib.loads(read_node_file(p, where).decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not a readable TOML file ({type(exc).__name__})") from None
    if "secagg-roster" in data:
        beside = sorted(k for k in data if k != "secagg-roster")
        if beside or not isinstance(data["secagg-roster"], dict):
            raise ValueError(
                f"{where}: keys all at top level or all under [secagg-roster] (found "
                f"{', '.join(map(repr, beside)) or 'a non-table secagg-roster'})"
            )
        data = data["secagg-roster"]
    out = {}
    for cid, key in data.items():
        try:
            raw = bytes.fromhex(str(key))
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                f"secagg-roster {str(p)!r}: the key of {cid!r} is not 32 bytes of hex, got {key!r}"
            )
        out[str(cid)] = raw
    return out


def node_trust(policy: NodePolicy, cid: str, params: secagg.SecAggParams) -> dict[str, Any]:
    """``{"identity", "trusted", "honest_server"}`` for a sum, from the node's own policy
    (module docstring); ``PolicyRefusal`` without a roster and without the opt-in, or
    when the threshold is too low for the collusion the policy allows."""
    n, t, c = len(params.clients), params.threshold, int(policy.secagg_colluders)
    if not 2 * t > n + c:
        raise policy.refuse(
            f"a secure sum of {n} clients with threshold {t} does not hold "
            f"against a server colluding with {c} clients (policy "
            f"secagg-colluders: {c}; needs 2 t > n + {c})"
        )
    if policy.secagg_roster == SIMULATION_ROSTER:
        return {
            "identity": simulation_identity(cid),
            "honest_server": False,
            "trusted": {
                v: bytes.fromhex(_public_hex(simulation_identity(v))) for v in params.clients
            },
        }
    if policy.secagg_roster:
        if not policy.secagg_identity:
            raise policy.refuse(
                "secagg-roster is set but secagg-identity (the node's own identity key) is not"
            )
        return {
            "identity": load_identity(policy.secagg_identity),
            "honest_server": False,
            "trusted": load_roster(policy.secagg_roster),
        }
    if policy.secagg_honest_server:
        return {"identity": None, "trusted": None, "honest_server": True}
    raise policy.refuse(
        "no trusted roster of the peers' identity keys (policy "
        "secagg-roster): the node does not run a secure sum against a "
        "server it does not trust (secagg-honest-server = true would "
        "assume an honest-but-curious server)"
    )


def _client(st: Mapping[str, Any], trust: Mapping[str, Any]) -> secagg.SecAggClient:
    return secagg.SecAggClient.from_state(
        st, trust["identity"], trust["trusted"], trust["honest_server"]
    )


# --------------------------------------------------------------------------------------
# the node
# --------------------------------------------------------------------------------------
def _strings(rec: ConfigRecord, key: str) -> list[str]:
    """The list of strings ``rec[key]`` of the node's own state (``[]`` when absent)."""
    v = rec.get(key, [])
    if not isinstance(v, list):
        raise ValueError(f"the node's state {key!r} is not a list: {v!r:.80}")
    return [str(s) for s in v]


def _sessions(context: Context) -> list[str]:
    if SESSIONS_KEY not in context.state:
        return []
    return _strings(context.state.config_records[SESSIONS_KEY], "sessions")


def start_params(
    meta: Mapping[str, Any], cid: str, context: Context, policy: NodePolicy
) -> dict[str, Any]:
    """The parameters of a stage-0 request, checked before the node's data is used: the
    node must be in the roster, the session new to it, and its policy must trust the
    sum (:func:`node_trust`)."""
    try:
        sa = json.loads(str(meta["secagg-start"]))
        session = bytes.fromhex(str(meta["secagg-session"]))
        params = secagg.SecAggParams(
            tuple(sa["clients"]), int(sa["threshold"]), int(sa["length"]), int(sa["bits"]), session
        )
        bound = float(sa["bound"])
        key = str(sa["key"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed secure-sum request: {exc}") from None
    if cid not in params.clients:
        raise PermissionError(f"{cid} is not in the secure sum's roster")
    if session.hex() in _sessions(context):
        raise PermissionError(
            f"{cid} already took part in secure-sum session {session.decode(errors='replace')!r}"
        )
    trust = node_trust(policy, cid, params)
    secagg.SecAggClient(
        cid, params, trust["identity"], trust["trusted"], trust["honest_server"]
    )  # refuses a roster it does not trust
    scale = quantisation_scale(bound, len(params.clients), params.bits)
    return {"params": params, "bound": bound, "key": key, "scale": scale, "trust": trust}


def clamp_summand(x: np.ndarray, bound: float) -> np.ndarray:
    """``x`` clamped into ``[-bound, bound]`` (NaN to 0, ±inf to ±bound): applied to an
    already-noised summand it is post-processing, and quantising it can no longer fail on
    a bound the server chose."""
    return np.clip(
        np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=bound, neginf=-bound),
        -bound,
        bound,
    )


def start_stage(context: Context, cid: str, sa: Mapping[str, Any], reply: Payload) -> Payload:
    """Stage 0 on the node, after ``method.client_phase`` computed ``reply``: quantise the
    summand (clamped into the bound first: no data-dependent overflow), keep it and the
    new client's secrets in ``context.state``, reply with the signed public keys only."""
    p: secagg.SecAggParams = sa["params"]
    x = np.asarray(reply.arrays[sa["key"]], dtype=np.float64)
    if x.shape != (p.length,):
        raise ValueError(f"summand of shape {x.shape}, expected ({p.length},)")
    # total: the summand is already noised, so clamping it into the server's bound (and a
    # non-finite value to 0) is post-processing -- raising QuantisationOverflow instead
    # would tell the server whether the node's data crossed a bound it chose
    bound = float(sa["bound"])
    q = quantise(clamp_summand(x, bound), sa["scale"], bound, p.bits)
    trust = sa["trust"]
    client = secagg.SecAggClient(
        cid, p, trust["identity"], trust["trusted"], trust["honest_server"]
    )
    st = client.to_state()
    st["input"] = q.astype("<u8").tobytes().hex()
    context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(st)})
    context.state[SESSIONS_KEY] = ConfigRecord({"sessions": [*_sessions(context), p.session.hex()]})
    if trust["honest_server"]:  # the node's own note of what this sum assumed
        prev = (
            _strings(context.state.config_records[TRUST_KEY], "sessions")
            if TRUST_KEY in context.state
            else []
        )
        context.state[TRUST_KEY] = ConfigRecord(
            {
                "assumption": "honest-but-curious server (policy secagg-honest-server): no "
                "protection against a server that deviates from the protocol",
                "sessions": [*prev, p.session.hex()],
            }
        )
    c, s, sig = client.advertise_keys()
    arrays = {"C": _bytes_arr(c), "S": _bytes_arr(s)}
    if sig:
        arrays["sig"] = _bytes_arr(sig)
    return Payload(arrays=arrays)


def _stage_reply(
    client: secagg.SecAggClient,
    stage: int,
    p: Payload,
    meta: Mapping[str, Any],
    st: Mapping[str, Any],
) -> Payload:
    """The node's answer to stage 1-4 (module docstring)."""
    if stage == 1:
        roster = {
            k[2:]: (
                np.asarray(p.arrays[f"C/{k[2:]}"]).tobytes(),
                np.asarray(p.arrays[f"S/{k[2:]}"]).tobytes(),
                _opt_sig(p, f"sig/{k[2:]}"),
            )
            for k in p.arrays
            if k.startswith("C/")
        }
        return Payload(
            arrays={f"ct/{v}": _bytes_arr(ct) for v, ct in client.share_keys(roster).items()}
        )
    if stage == 2:
        inbox = {k[3:]: np.asarray(a).tobytes() for k, a in p.arrays.items() if k.startswith("ct/")}
        x = np.frombuffer(bytes.fromhex(str(st["input"])), dtype="<u8").astype(np.uint64)
        return Payload(arrays={"y": np.asarray(client.masked_input(x, inbox), dtype=np.uint64)})
    if stage == 3:
        sig = client.consistency([str(c) for c in json.loads(str(meta["secagg-survivors"]))])
        return Payload(arrays={"sig": _bytes_arr(sig)} if sig else {})
    if stage == 4:
        signers = [str(c) for c in json.loads(str(meta["secagg-signers"]))]
        ans = client.unmask({c: _opt_sig(p, f"sig/{c}") for c in signers})
        arrays: dict[str, np.ndarray] = {"x": np.asarray([ans["x"][""]], dtype=np.int64)}
        for kind in ("b", "s"):
            for v, share in ans[kind].items():
                arrays[f"{kind}/{v}"] = _bytes_arr(share.to_bytes(_FIELD, "big"))
        return Payload(arrays=arrays)
    raise ValueError(f"unknown secure-sum stage {stage}")


def node_stage(msg: Message, context: Context, cid: str, policy: NodePolicy) -> Message:
    """Stages 1-4 on the node: restore its client from ``context.state`` with the trust
    of its policy, answer the stage, keep the new state (erased after stage 4)."""
    meta = meta_of(msg.content)
    stage = int(meta["secagg-stage"])
    if STATE_KEY not in context.state:
        raise PermissionError(f"{cid}: no secure sum in progress (stage {stage})")
    st = json.loads(str(context.state.config_records[STATE_KEY]["json"]))
    if st["params"]["session"] != str(meta["secagg-session"]):
        raise PermissionError(f"{cid}: stage {stage} of a session it is not in")
    params = secagg.SecAggParams(
        tuple(st["params"]["clients"]),
        int(st["params"]["threshold"]),
        int(st["params"]["length"]),
        int(st["params"]["bits"]),
        bytes.fromhex(st["params"]["session"]),
    )
    trust = (
        node_trust(policy, cid, params)
        if st.get("authenticated", True)
        else {"identity": None, "trusted": None, "honest_server": True}
    )
    client = _client(st, trust)
    reply = _stage_reply(client, stage, payload_from_recorddict(msg.content), meta, st)
    if stage == 4:
        del context.state[STATE_KEY]
    else:
        new = client.to_state()
        new["input"] = st["input"]
        context.state[STATE_KEY] = ConfigRecord({"json": json.dumps(new)})
    return Message(payload_to_recorddict(reply, **{"secagg-stage": stage}), reply_to=msg)
