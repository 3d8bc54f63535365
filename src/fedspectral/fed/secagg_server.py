r"""The server of a secure sum, the one sequence of its five stages, and an in-process
transport for them.

:class:`SecAggServer` is the party that routes the stages of :mod:`fedspectral.fed.secagg`
and learns only the sum.  :func:`run_stages` is the only place the five stages are put in
order: it asks a :class:`StageTransport` for each stage's answers of the clients still in
the exchange and hands them to the server.  Two transports drive it:
:class:`InProcessStages` (one :class:`~fedspectral.fed.secagg.SecAggClient` per client in
this process: :func:`secure_sum`, the in-process runner's ``secure_sum="secagg"``, tests
and benchmarks) and the Flower one, :class:`fedspectral.fed.flower.node.secure_sum.GridStages`
(one round of ``query.secagg`` messages per stage).  The protocol, its guarantee and what
it does not cover are in :mod:`fedspectral.fed.secagg`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from fedspectral.fed.secagg import SecAggAborted, SecAggClient, SecAggParams, client_index
from fedspectral.fed.secagg_primitives import (
    _SECRET_BYTES,
    _hkdf,
    _modmask,
    _raw_ed_public,
    prg_mask,
    shamir_reconstruct,
)

__all__ = ["InProcessStages", "SecAggServer", "StageTransport", "run_stages", "secure_sum"]

#: ``{cid: (C, S, signature)}``: the public keys a client advertises (stage 0)
Keys = dict[str, tuple[bytes, ...]]
#: a client's stage-4 answer: ``{"x": {"": its share index}, "b": {v: share}, "s": {v: share}}``
Answer = Mapping[str, Mapping[str, int]]


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------
class SecAggServer:
    """The server of one secure sum: routes messages, learns only the sum."""

    def __init__(self, params: SecAggParams) -> None:
        self.params = params
        self.roster: dict[str, tuple[bytes, bytes, bytes]] = {}
        self.u2: list[str] = []
        self.masked: dict[str, np.ndarray] = {}
        self.signatures: dict[str, bytes] = {}

    def _need(self, n: int, stage: str) -> None:
        if n < self.params.threshold:
            raise SecAggAborted(
                f"{stage}: {n} clients, fewer than the threshold {self.params.threshold}; no sum"
            )

    def collect_keys(self, keys: Mapping[str, Sequence[bytes]]) -> dict[str, tuple[bytes, ...]]:
        """Stage 0: the roster :math:`U_1` to broadcast (``{cid: (C, S, signature)}``)."""
        self._need(len(keys), "advertise keys")
        self.roster = {
            c: (
                bytes(keys[c][0]),
                bytes(keys[c][1]),
                bytes(keys[c][2]) if len(keys[c]) > 2 else b"",
            )
            for c in self.params.clients
            if c in keys
        }
        return dict(self.roster)

    def route_shares(self, sent: Mapping[str, Mapping[str, bytes]]) -> dict[str, dict[str, bytes]]:
        """Stage 1: ``{receiver: {sender: ciphertext}}`` for the senders :math:`U_2`."""
        self.u2 = [c for c in self.params.clients if c in sent and c in self.roster]
        self._need(len(self.u2), "share keys")
        inbox: dict[str, dict[str, bytes]] = {c: {} for c in self.u2}
        for sender in self.u2:
            for receiver, ct in sent[sender].items():
                if receiver in inbox:
                    inbox[receiver][sender] = ct
        return inbox

    def collect_masked(self, masked: Mapping[str, np.ndarray]) -> list[str]:
        """Stage 2: the survivors :math:`U_3` to announce."""
        self.masked = {c: np.asarray(masked[c], dtype=np.uint64) for c in self.u2 if c in masked}
        self._need(len(self.masked), "masked input")
        return list(self.masked)

    def collect_signatures(self, signatures: Mapping[str, bytes]) -> dict[str, bytes]:
        """Stage 3: the consistency signatures of :math:`U_4 \\subseteq U_3` to forward."""
        self.signatures = {c: bytes(signatures[c]) for c in self.masked if c in signatures}
        self._need(len(self.signatures), "consistency")
        return dict(self.signatures)

    def unmask(self, answers: Mapping[str, Mapping[str, Mapping[str, int]]]) -> np.ndarray:
        """Stage 4: :math:`\\sum_{u\\in U_3} x_u \\bmod 2^{bits}` from ``threshold`` or more
        answers."""
        p = self.params
        answers = {c: a for c, a in answers.items() if c in self.signatures}
        self._need(len(answers), "unmask")
        survivors = list(self.masked)
        dropped = [v for v in self.u2 if v not in self.masked]
        total = np.zeros(p.length, dtype=np.uint64)
        for y in self.masked.values():
            total = total + y
        for v in survivors:
            b = shamir_reconstruct({a["x"][""]: a["b"][v] for a in answers.values()})
            seed = b.to_bytes(_SECRET_BYTES, "big")
            total = total - prg_mask(
                _hkdf(seed, b"fedspectral/secagg/self/" + p.session), p.length, p.bits
            )
        idx = client_index(p)
        for v in dropped:
            s = shamir_reconstruct({a["x"][""]: a["s"][v] for a in answers.values()})
            sk = X25519PrivateKey.from_private_bytes(s.to_bytes(_SECRET_BYTES, "big"))
            for u in survivors:
                shared = sk.exchange(X25519PublicKey.from_public_bytes(self.roster[u][1]))
                m = prg_mask(
                    _hkdf(shared, b"fedspectral/secagg/pair/" + p.session), p.length, p.bits
                )
                # survivor u added +m if it precedes v, else -m: remove it
                total = total - m if idx[u] < idx[v] else total + m
        return total & _modmask(p.bits)


# --------------------------------------------------------------------------------------
# the five stages, in order, over a transport
# --------------------------------------------------------------------------------------
class StageTransport(Protocol):
    """What carries the stages to the clients: each method sends one stage to the clients
    named and returns the answers of those that answered (a client absent from the
    answer dropped out of the sum)."""

    def advertise_keys(self, clients: Sequence[str]) -> Mapping[str, Sequence[bytes]]:
        """Stage 0: ``{cid: (C, S, signature)}`` of ``clients``."""
        ...

    def share_keys(self, roster: Keys) -> Mapping[str, Mapping[str, bytes]]:
        """Stage 1: the roster :math:`U_1` to its members -> ``{sender: {receiver: ct}}``."""
        ...

    def masked_input(self, inbox: Mapping[str, Mapping[str, bytes]]) -> Mapping[str, np.ndarray]:
        """Stage 2: each member of :math:`U_2` its inbox -> ``{cid: masked vector}``."""
        ...

    def consistency(self, survivors: list[str]) -> Mapping[str, bytes]:
        """Stage 3: the survivors :math:`U_3` to each of them -> ``{cid: signature}``."""
        ...

    def unmask(self, signatures: Mapping[str, bytes]) -> Mapping[str, Answer]:
        """Stage 4: the signers :math:`U_4` and their signatures -> each signer's shares."""
        ...


def run_stages(params: SecAggParams, transport: StageTransport) -> tuple[np.ndarray, list[str]]:
    """The five stages of one secure sum, in order, driven over ``transport``:
    ``(sum mod 2^bits, contributors U_3)``; :class:`SecAggAborted` when a stage has fewer
    than ``params.threshold`` clients."""
    server = SecAggServer(params)
    roster = server.collect_keys(transport.advertise_keys(list(params.clients)))
    inbox = server.route_shares(transport.share_keys(roster))
    survivors = server.collect_masked(transport.masked_input(inbox))
    signatures = server.collect_signatures(transport.consistency(survivors))
    return server.unmask(transport.unmask(signatures)), survivors


class InProcessStages:
    """The clients of a sum in this process: one :class:`SecAggClient` per client with an
    input; ``drop_before`` ``{cid: stage}`` silences a client from that stage (0..4) on,
    simulating a dropout."""

    def __init__(
        self,
        params: SecAggParams,
        inputs: Mapping[str, np.ndarray],
        identities: Mapping[str, Ed25519PrivateKey | None],
        trusted: Mapping[str, bytes] | None,
        honest_server: bool,
        drop_before: Mapping[str, int] | None = None,
    ) -> None:
        self.inputs = inputs
        self.drop = dict(drop_before or {})
        self.clients = {
            c: SecAggClient(c, params, identities[c], trusted, honest_server)
            for c in params.clients
            if c in inputs
        }

    def _live(self, stage: int, addressed: Mapping[str, object] | Sequence[str]) -> list[str]:
        return [c for c in self.clients if self.drop.get(c, 99) > stage and c in addressed]

    def advertise_keys(self, clients: Sequence[str]) -> dict[str, tuple[bytes, bytes, bytes]]:
        return {c: self.clients[c].advertise_keys() for c in self._live(0, clients)}

    def share_keys(self, roster: Keys) -> dict[str, dict[str, bytes]]:
        return {c: self.clients[c].share_keys(roster) for c in self._live(1, roster)}

    def masked_input(self, inbox: Mapping[str, Mapping[str, bytes]]) -> dict[str, np.ndarray]:
        return {
            c: self.clients[c].masked_input(np.asarray(self.inputs[c], dtype=np.uint64), inbox[c])
            for c in self._live(2, inbox)
        }

    def consistency(self, survivors: list[str]) -> dict[str, bytes]:
        return {c: self.clients[c].consistency(survivors) for c in self._live(3, survivors)}

    def unmask(self, signatures: Mapping[str, bytes]) -> dict[str, Answer]:
        return {c: self.clients[c].unmask(signatures) for c in self._live(4, signatures)}


def secure_sum(
    inputs: Mapping[str, np.ndarray],
    params: SecAggParams,
    drop_before: Mapping[str, int] | None = None,
    identities: Mapping[str, Ed25519PrivateKey] | None = None,
    honest_server: bool = False,
) -> tuple[np.ndarray, list[str]]:
    """Run the five stages in process for the integer vectors ``inputs`` (``{cid:
    uint64 vector}``; a roster member without an input does not take part).

    ``drop_before``: ``{cid: stage}``, the client goes silent before that stage (0..4),
    simulating a dropout.  ``identities``: every roster member's identity key (default:
    fresh ones, whose public keys form every client's trusted roster -- the simulation
    is one trust domain); ``honest_server=True`` runs unauthenticated instead.  Returns
    ``(sum mod 2^bits, contributors)``; raises :class:`SecAggAborted` when any stage has
    fewer than ``threshold`` clients.
    """
    if honest_server:
        ids: Mapping[str, Ed25519PrivateKey | None] = dict.fromkeys(params.clients)
        trusted = None
    else:
        keys = (
            identities
            if identities is not None
            else {c: Ed25519PrivateKey.generate() for c in params.clients}
        )
        ids, trusted = keys, {c: _raw_ed_public(k) for c, k in keys.items()}
    return run_stages(
        params, InProcessStages(params, inputs, ids, trusted, honest_server, drop_before)
    )
