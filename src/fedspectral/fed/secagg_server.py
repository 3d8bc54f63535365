r"""The server of a secure sum, and an in-process run of its five stages.

:class:`SecAggServer` is the party that routes the stages of :mod:`fedspectral.fed.secagg`
and learns only the sum; :func:`secure_sum` runs one :class:`~fedspectral.fed.secagg.SecAggClient`
per client against it in one process (the in-process runner's ``secure_sum="secagg"``,
tests and benchmarks).  The protocol, its guarantee and what it does not cover are in
:mod:`fedspectral.fed.secagg`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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

__all__ = ["SecAggServer", "secure_sum"]


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
# an in-process run of the five stages
# --------------------------------------------------------------------------------------
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
    drop = dict(drop_before or {})
    alive = [c for c in params.clients if c in inputs]

    def live(stage: int) -> list[str]:
        return [c for c in alive if drop.get(c, 99) > stage]

    if honest_server:
        ids: Mapping[str, Ed25519PrivateKey | None] = dict.fromkeys(params.clients)
        trusted = None
    else:
        ids = (
            identities
            if identities is not None
            else {c: Ed25519PrivateKey.generate() for c in params.clients}
        )
        trusted = {c: _raw_ed_public(k) for c, k in ids.items()}  # type: ignore[arg-type]
    clients = {c: SecAggClient(c, params, ids[c], trusted, honest_server) for c in alive}
    server = SecAggServer(params)
    roster = server.collect_keys({c: clients[c].advertise_keys() for c in live(0)})
    sent = {c: clients[c].share_keys(roster) for c in live(1) if c in roster}
    inbox = server.route_shares(sent)
    masked = {
        c: clients[c].masked_input(np.asarray(inputs[c], dtype=np.uint64), inbox[c])
        for c in live(2)
        if c in inbox
    }
    u3 = server.collect_masked(masked)
    sigs = server.collect_signatures({c: clients[c].consistency(u3) for c in live(3) if c in u3})
    answers = {c: clients[c].unmask(sigs) for c in live(4) if c in sigs}
    return server.unmask(answers), u3
