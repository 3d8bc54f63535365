r"""Secure aggregation: the server learns the sum of the clients' vectors and nothing else.

A four-stage exchange in the manner of Bonawitz et al. (CCS 2017, "Practical secure
aggregation for privacy-preserving machine learning"), written here on the primitives of
the ``cryptography`` library, for an honest-but-curious server and dropouts.  Inputs are
vectors of integers modulo :math:`2^k` (:func:`quantise` maps bounded floats onto them).

Stages (one :class:`SecAggClient` per client, one :class:`SecAggServer`):

0. **Advertise keys.**  Client :math:`u` draws two X25519 key pairs, :math:`(c_u, C_u)`
   (channel) and :math:`(s_u, S_u)` (masks), and sends :math:`C_u, S_u`; the server
   broadcasts the roster :math:`U_1`.
1. **Share keys.**  Client :math:`u` draws a 32-byte self-mask seed :math:`b_u`, splits
   :math:`b_u` and the bytes of :math:`s_u` into Shamir shares of threshold :math:`t`
   (:func:`shamir_split`, over the prime field :math:`\mathbb F_p`,
   :math:`p = 2^{521}-1`), and sends each peer :math:`v` its two shares encrypted with
   ChaCha20-Poly1305 under :math:`\mathrm{HKDF}(\mathrm{X25519}(c_u, C_v))`, bound to the
   session and the pair.  The server only routes ciphertexts; :math:`U_2` are those who
   sent them.
2. **Masked input.**  Client :math:`u \in U_2` sends

   .. math:: y_u = x_u + \mathrm{PRG}(b_u) + \sum_{v\in U_2\setminus\{u\}}
             \pm\,\mathrm{PRG}(\mathrm{HKDF}(\mathrm{X25519}(s_u, S_v)))\pmod{2^k},

   with :math:`+` when :math:`u` precedes :math:`v` in the roster and :math:`-`
   otherwise, so the pairwise masks of two clients cancel in a sum.  The PRG is the
   ChaCha20 stream cipher (a 256-bit key, never folded).  :math:`U_3` are those whose
   :math:`y_u` arrived.
3. **Unmask.**  The server announces :math:`U_3`; every client of :math:`U_3` returns its
   shares of :math:`b_v` for :math:`v \in U_3` and of :math:`s_v` for
   :math:`v\in U_2\setminus U_3` -- never both for one peer, and only once per session.
   With :math:`t` shares the server rebuilds the self masks of the survivors and the
   pairwise masks between the survivors and the dropped clients, and obtains
   :math:`\sum_{u\in U_3} x_u \bmod 2^k` exactly.

Any stage with fewer than :math:`t` clients aborts with :class:`SecAggAborted` (no
sum).  The threshold must exceed half the roster: a server that announced different
:math:`U_3` to different clients would then still never hold :math:`t` shares of both
secrets of one client (the only way to strip every mask from a single :math:`y_u`).

What this module does not do: authenticate the clients' keys (a deployment binds them to
node identities, e.g. Flower's node authentication), defend against an actively
malicious server beyond that threshold argument (Bonawitz's consistency-check round and
signatures are not implemented), or hide *who* contributed.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedspectral.checks import check_int, check_real, describe

__all__ = [
    "PRIME",
    "QuantisationOverflow",
    "SecAggAborted",
    "SecAggClient",
    "SecAggParams",
    "SecAggServer",
    "dequantise",
    "prg_mask",
    "quantisation_scale",
    "quantise",
    "secure_sum",
    "shamir_reconstruct",
    "shamir_split",
]

#: the Shamir field: the Mersenne prime 2^521 - 1 (holds any 32-byte secret)
PRIME = 2**521 - 1
_SECRET_BYTES = 32
_FIELD_BYTES = 66  # ceil(521 / 8)


class SecAggAborted(RuntimeError):
    """Fewer clients than the threshold at some stage: the round yields no sum."""


class QuantisationOverflow(OverflowError):
    """A client's value lies outside the range the field was sized for: refused before
    masking (an out-of-range summand could wrap the modular sum)."""


# --------------------------------------------------------------------------------------
# Shamir secret sharing over F_p
# --------------------------------------------------------------------------------------
def shamir_split(secret: int, xs: Sequence[int], threshold: int) -> dict[int, int]:
    """Shares ``{x: f(x)}`` of ``secret`` for the points ``xs`` (distinct, in 1..p-1):
    ``f`` a uniformly random polynomial of degree ``threshold - 1`` over
    :math:`\\mathbb F_p` with :math:`f(0)` = ``secret``; any ``threshold`` shares give the
    secret, fewer give no information about it."""
    threshold = check_int("threshold", threshold, low=1)
    if not isinstance(secret, int) or not 0 <= secret < PRIME:
        raise ValueError(f"secret must be an integer in [0, p), got {describe(secret)}")
    pts = [int(x) for x in xs]
    if len(set(pts)) != len(pts) or any(not 0 < x < PRIME for x in pts):
        raise ValueError(f"share points must be distinct integers in [1, p), got {pts}")
    if threshold > len(pts):
        raise ValueError(f"threshold={threshold} exceeds the number of shares {len(pts)}")
    coeffs = [secret] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for x in pts:
        acc = 0
        for c in reversed(coeffs):  # Horner
            acc = (acc * x + c) % PRIME
        out[x] = acc
    return out


def shamir_reconstruct(shares: Mapping[int, int]) -> int:
    """:math:`f(0)` by Lagrange interpolation of the given shares ``{x: f(x)}``."""
    if not shares:
        raise ValueError("no shares to reconstruct from")
    xs = list(shares)
    total = 0
    for i in xs:
        num, den = 1, 1
        for j in xs:
            if j != i:
                num = num * (-j) % PRIME
                den = den * (i - j) % PRIME
        total = (total + shares[i] * num * pow(den, -1, PRIME)) % PRIME
    return total


# --------------------------------------------------------------------------------------
# primitives
# --------------------------------------------------------------------------------------
def _hkdf(material: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(material)


def prg_mask(key: bytes, length: int, bits: int) -> np.ndarray:
    """``length`` pseudo-random integers modulo :math:`2^{bits}` (``uint64``): the ChaCha20
    key stream of the 256-bit ``key`` (zero nonce: every key is used once)."""
    if not isinstance(key, bytes) or len(key) != 32:
        raise ValueError(f"key must be 32 bytes, got {describe(key)}")
    enc = Cipher(algorithms.ChaCha20(key, b"\0" * 16), mode=None).encryptor()
    stream = enc.update(b"\0" * (8 * int(length)))
    out = np.frombuffer(stream, dtype="<u8").astype(np.uint64)
    return out & _modmask(bits)


def _modmask(bits: int) -> np.uint64:
    return np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)


def _raw_public(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _raw_private(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


# --------------------------------------------------------------------------------------
# quantisation
# --------------------------------------------------------------------------------------
def quantise(x: np.ndarray, scale: float, bound: float, bits: int) -> np.ndarray:
    """``round(scale * x)`` as integers modulo :math:`2^{bits}` (two's complement).

    Every entry must satisfy :math:`|x| \\le` ``bound``; otherwise
    :class:`QuantisationOverflow` is raised before anything is produced (the caller
    sizes ``scale`` with :func:`SecAggParams.scale_for` so that ``clients`` such values
    can never wrap the sum)."""
    a = np.asarray(x, dtype=np.float64)
    if not np.isfinite(a).all():
        raise QuantisationOverflow("non-finite value to quantise")
    worst = float(np.max(np.abs(a))) if a.size else 0.0
    if worst > bound:
        raise QuantisationOverflow(f"a value of magnitude {worst:.6g} exceeds the bound "
                                   f"{bound:.6g} the secure sum was sized for; refused")
    q = np.rint(a * scale).astype(np.int64)
    return q.view(np.uint64) & _modmask(bits)


def dequantise(total: np.ndarray, scale: float, bits: int) -> np.ndarray:
    """The signed value of a modular sum (two's complement on ``bits``), divided by
    ``scale``."""
    t = np.asarray(total, dtype=np.uint64) & _modmask(bits)
    if bits < 64:
        half = np.uint64(1 << (bits - 1))
        signed = t.astype(np.int64) - np.where(t >= half, np.int64(1 << (bits - 1)) * 2, 0)
    else:
        signed = t.view(np.int64)
    return signed.astype(np.float64) / scale


# --------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SecAggParams:
    """One secure sum.

    Parameters
    ----------
    clients : tuple of str
        The roster, in the order that fixes the signs of the pairwise masks.
    threshold : int
        :math:`t`: Shamir threshold and the fewest clients any stage may go on with;
        must exceed half the roster (module docstring).
    length : int
        Entries of each input vector.
    bits : int
        Inputs and sums are integers modulo :math:`2^{bits}` (``8 <= bits <= 64``).
    session : bytes
        Binds every derived key and ciphertext to this sum (e.g. run and round).
    """

    clients: tuple[str, ...]
    threshold: int
    length: int
    bits: int = 64
    session: bytes = b""

    def __post_init__(self) -> None:
        cl = tuple(str(c) for c in self.clients)
        if len(set(cl)) != len(cl) or len(cl) < 2:
            raise ValueError(f"clients must be at least 2 distinct ids, got {list(cl)}")
        object.__setattr__(self, "clients", cl)
        t = check_int("threshold", self.threshold, low=2, high=len(cl))
        if 2 * t <= len(cl):
            raise ValueError(f"threshold={t} must exceed half the {len(cl)} clients (else a "
                             f"server could collect both secrets of one client)")
        check_int("length", self.length, low=1)
        check_int("bits", self.bits, low=8, high=64)
        if not isinstance(self.session, bytes):
            raise TypeError(f"session must be bytes, got {describe(self.session)}")

    def scale_for(self, bound: float, clients: int | None = None) -> float:
        """:func:`quantisation_scale` for this sum (``clients`` default: the roster)."""
        return quantisation_scale(bound, len(self.clients) if clients is None else clients,
                                  self.bits)


def quantisation_scale(bound: float, clients: int, bits: int) -> float:
    """The largest power of two ``s`` such that ``clients`` values of magnitude at most
    ``bound``, each rounded to ``round(s x)``, sum to a magnitude below
    :math:`2^{bits-1}`: then the modular sum never wraps.  ``ValueError`` when not even
    ``s = 1`` fits (too few bits for that many clients and that range)."""
    bound = check_real("bound", bound, low=0.0, low_open=True)
    m = check_int("clients", clients, low=1)
    bits = check_int("bits", bits, low=8, high=64)
    # m (s bound + 1/2) < 2^(bits-1)  <=>  s < (2^(bits-1)/m - 1/2) / bound
    room = (2.0 ** (bits - 1)) / m - 0.5
    if room <= bound:
        raise ValueError(f"{bits} bits cannot hold a sum of {m} values of magnitude "
                         f"{bound:.6g} at unit resolution: the sum could overflow; use "
                         f"more bits or a smaller bound")
    s = 2.0 ** math.floor(math.log2(room / bound))
    while m * (s * bound + 0.5) >= 2.0 ** (bits - 1):  # float safety margin
        s /= 2.0
    return s


def _index(params: SecAggParams) -> dict[str, int]:
    return {c: i for i, c in enumerate(params.clients)}


# --------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------
class SecAggClient:
    """One client of one secure sum (its keys and seeds live only in this object)."""

    def __init__(self, cid: str, params: SecAggParams) -> None:
        if cid not in params.clients:
            raise ValueError(f"client {cid!r} is not in the roster {list(params.clients)}")
        self.cid = cid
        self.params = params
        self._c = X25519PrivateKey.generate()
        self._s = X25519PrivateKey.generate()
        self._b = os.urandom(_SECRET_BYTES)
        self._roster: dict[str, tuple[bytes, bytes]] | None = None
        self._held: dict[str, tuple[int, int]] = {}  # peer -> (share of b_peer, of s_peer)
        self._u2: list[str] | None = None
        self._unmasked = False

    # -- persistence between messages (a Flower node keeps this in its own state) -----
    def to_state(self) -> dict[str, object]:
        """Everything this client holds, as JSON-able values (hex strings): what a node
        keeps between the stages of one sum in its *own* state.  It contains the
        client's secrets (private keys, self-mask seed, the shares it holds): it must
        never leave the client."""
        p = self.params
        return {"cid": self.cid,
                "params": {"clients": list(p.clients), "threshold": p.threshold,
                           "length": p.length, "bits": p.bits, "session": p.session.hex()},
                "c": _raw_private(self._c).hex(), "s": _raw_private(self._s).hex(),
                "b": self._b.hex(),
                "roster": (None if self._roster is None else
                           {c: [k[0].hex(), k[1].hex()] for c, k in self._roster.items()}),
                "held": {v: [format(bs, "x"), format(ss, "x")]
                         for v, (bs, ss) in self._held.items()},
                "u2": self._u2, "unmasked": self._unmasked}

    @classmethod
    def from_state(cls, st: Mapping[str, object]) -> SecAggClient:
        """The client :meth:`to_state` saved (same keys, seeds and shares)."""
        pp = dict(st["params"])  # type: ignore[arg-type]
        params = SecAggParams(tuple(pp["clients"]), int(pp["threshold"]), int(pp["length"]),
                              int(pp["bits"]), bytes.fromhex(str(pp["session"])))
        self = cls.__new__(cls)
        self.cid = str(st["cid"])
        if self.cid not in params.clients:
            raise ValueError(f"client {self.cid!r} is not in the roster {list(params.clients)}")
        self.params = params
        self._c = X25519PrivateKey.from_private_bytes(bytes.fromhex(str(st["c"])))
        self._s = X25519PrivateKey.from_private_bytes(bytes.fromhex(str(st["s"])))
        self._b = bytes.fromhex(str(st["b"]))
        roster = st.get("roster")
        self._roster = (None if roster is None else
                        {str(c): (bytes.fromhex(k[0]), bytes.fromhex(k[1]))
                         for c, k in dict(roster).items()})  # type: ignore[arg-type]
        self._held = {str(v): (int(h[0], 16), int(h[1], 16))
                      for v, h in dict(st.get("held") or {}).items()}  # type: ignore[arg-type]
        u2 = st.get("u2")
        self._u2 = None if u2 is None else [str(c) for c in u2]  # type: ignore[union-attr]
        self._unmasked = bool(st.get("unmasked", False))
        return self

    # stage 0
    def advertise_keys(self) -> tuple[bytes, bytes]:
        """``(C_u, S_u)``: the raw X25519 public keys."""
        return _raw_public(self._c.public_key()), _raw_public(self._s.public_key())

    def _channel(self, peer: str) -> ChaCha20Poly1305:
        assert self._roster is not None
        shared = self._c.exchange(X25519PublicKey.from_public_bytes(self._roster[peer][0]))
        return ChaCha20Poly1305(_hkdf(shared, b"fedspectral/secagg/channel/" +
                                      self.params.session))

    def _ad(self, sender: str, receiver: str) -> bytes:
        return b"|".join([self.params.session, sender.encode(), receiver.encode()])

    # stage 1
    def share_keys(self, roster: Mapping[str, tuple[bytes, bytes]]) -> dict[str, bytes]:
        """Encrypted Shamir shares of :math:`b_u` and :math:`s_u` for every peer of the
        roster :math:`U_1` (``{peer: ciphertext}``)."""
        p = self.params
        if len(roster) < p.threshold:
            raise SecAggAborted(f"{len(roster)} clients advertised keys, fewer than the "
                                f"threshold {p.threshold}")
        if any(c not in p.clients for c in roster) or self.cid not in roster:
            raise ValueError(f"roster {sorted(roster)} is not a subset of the clients "
                             f"holding {self.cid!r}")
        self._roster = {c: (bytes(k[0]), bytes(k[1])) for c, k in roster.items()}
        idx = _index(p)
        xs = [idx[c] + 1 for c in self._roster]
        b_sh = shamir_split(int.from_bytes(self._b, "big"), xs, p.threshold)
        s_sh = shamir_split(int.from_bytes(_raw_private(self._s), "big"), xs, p.threshold)
        out = {}
        for peer in self._roster:
            x = idx[peer] + 1
            plain = (b_sh[x].to_bytes(_FIELD_BYTES, "big") +
                     s_sh[x].to_bytes(_FIELD_BYTES, "big"))
            if peer == self.cid:
                self._held[self.cid] = (b_sh[x], s_sh[x])
                continue
            nonce = os.urandom(12)
            out[peer] = nonce + self._channel(peer).encrypt(nonce, plain,
                                                            self._ad(self.cid, peer))
        return out

    # stage 2
    def masked_input(self, x: np.ndarray, inbox: Mapping[str, bytes]) -> np.ndarray:
        """:math:`y_u` for the integer vector ``x`` (``uint64``, modulo :math:`2^{bits}`),
        after decrypting the shares in ``inbox`` (``{sender: ciphertext}``: the senders
        are :math:`U_2`)."""
        p = self.params
        if self._roster is None:
            raise RuntimeError("masked_input before share_keys")
        u2 = sorted(set(inbox) | {self.cid}, key=_index(p).__getitem__)
        if len(u2) < p.threshold:
            raise SecAggAborted(f"{len(u2)} clients shared keys, fewer than the threshold "
                                f"{p.threshold}")
        for sender, ct in inbox.items():
            if sender not in self._roster or sender == self.cid:
                raise ValueError(f"share from {sender!r}, not a peer of {self.cid!r}")
            plain = self._channel(sender).decrypt(ct[:12], ct[12:], self._ad(sender, self.cid))
            self._held[sender] = (int.from_bytes(plain[:_FIELD_BYTES], "big"),
                                  int.from_bytes(plain[_FIELD_BYTES:], "big"))
        self._u2 = u2
        v = np.asarray(x)
        if v.dtype != np.uint64 or v.shape != (p.length,):
            raise ValueError(f"x must be a uint64 vector of length {p.length}, got {describe(v)}")
        y = (v & _modmask(p.bits)) + prg_mask(_hkdf(self._b, b"fedspectral/secagg/self/" +
                                                    p.session), p.length, p.bits)
        idx = _index(p)
        for peer in u2:
            if peer == self.cid:
                continue
            m = prg_mask(self._pair_key(peer), p.length, p.bits)
            y = y + m if idx[self.cid] < idx[peer] else y - m
        return y & _modmask(p.bits)

    def _pair_key(self, peer: str) -> bytes:
        assert self._roster is not None
        shared = self._s.exchange(X25519PublicKey.from_public_bytes(self._roster[peer][1]))
        return _hkdf(shared, b"fedspectral/secagg/pair/" + self.params.session)

    # stage 3
    def unmask(self, survivors: Sequence[str]) -> dict[str, dict[str, int]]:
        """Shares for the announced survivors :math:`U_3`: ``{"b": {v: share of b_v}}`` for
        the survivors, ``{"s": {v: share of s_v}}`` for the dropped members of
        :math:`U_2`.  Answered once per session; refused for a list that is not a
        subset of :math:`U_2` of at least ``threshold`` clients including this one."""
        p = self.params
        if self._u2 is None:
            raise RuntimeError("unmask before masked_input")
        if self._unmasked:
            raise PermissionError(f"client {self.cid!r} already answered an unmask request "
                                  f"in this session; a second one could reveal both secrets")
        u3 = list(dict.fromkeys(str(c) for c in survivors))
        if not set(u3) <= set(self._u2) or self.cid not in u3:
            raise PermissionError(f"survivors {u3} are not a subset of U2 {self._u2} "
                                  f"holding {self.cid!r}")
        if len(u3) < p.threshold:
            raise SecAggAborted(f"{len(u3)} survivors, fewer than the threshold {p.threshold}")
        self._unmasked = True
        x = _index(p)[self.cid] + 1
        dropped = [v for v in self._u2 if v not in u3]
        return {"x": {"": x},
                "b": {v: self._held[v][0] for v in u3},
                "s": {v: self._held[v][1] for v in dropped}}


# --------------------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------------------
class SecAggServer:
    """The server of one secure sum: routes messages, learns only the sum."""

    def __init__(self, params: SecAggParams) -> None:
        self.params = params
        self.roster: dict[str, tuple[bytes, bytes]] = {}
        self.u2: list[str] = []
        self.masked: dict[str, np.ndarray] = {}

    def _need(self, n: int, stage: str) -> None:
        if n < self.params.threshold:
            raise SecAggAborted(f"{stage}: {n} clients, fewer than the threshold "
                                f"{self.params.threshold}; no sum")

    def collect_keys(self, keys: Mapping[str, tuple[bytes, bytes]]) -> dict[str, tuple[bytes,
                                                                                    bytes]]:
        """Stage 0: the roster :math:`U_1` to broadcast."""
        self._need(len(keys), "advertise keys")
        self.roster = {c: keys[c] for c in self.params.clients if c in keys}
        return dict(self.roster)

    def route_shares(self, sent: Mapping[str, Mapping[str, bytes]]) -> dict[str, dict[str,
                                                                                     bytes]]:
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
        self.masked = {c: np.asarray(masked[c], dtype=np.uint64) for c in self.u2
                       if c in masked}
        self._need(len(self.masked), "masked input")
        return list(self.masked)

    def unmask(self, answers: Mapping[str, Mapping[str, Mapping[str, int]]]) -> np.ndarray:
        """Stage 3: :math:`\\sum_{u\\in U_3} x_u \\bmod 2^{bits}` from ``threshold`` or more
        answers."""
        p = self.params
        answers = {c: a for c, a in answers.items() if c in self.masked}
        self._need(len(answers), "unmask")
        survivors = list(self.masked)
        dropped = [v for v in self.u2 if v not in self.masked]
        mod = _modmask(p.bits)
        total = np.zeros(p.length, dtype=np.uint64)
        for y in self.masked.values():
            total = total + y
        for v in survivors:
            b = shamir_reconstruct({a["x"][""]: a["b"][v] for a in answers.values()})
            seed = b.to_bytes(_SECRET_BYTES, "big")
            total = total - prg_mask(_hkdf(seed, b"fedspectral/secagg/self/" + p.session),
                                     p.length, p.bits)
        idx = _index(p)
        for v in dropped:
            s = shamir_reconstruct({a["x"][""]: a["s"][v] for a in answers.values()})
            sk = X25519PrivateKey.from_private_bytes(s.to_bytes(_SECRET_BYTES, "big"))
            for u in survivors:
                shared = sk.exchange(X25519PublicKey.from_public_bytes(self.roster[u][1]))
                m = prg_mask(_hkdf(shared, b"fedspectral/secagg/pair/" + p.session),
                             p.length, p.bits)
                # survivor u added +m if it precedes v, else -m: remove it
                total = total - m if idx[u] < idx[v] else total + m
        return total & mod


# --------------------------------------------------------------------------------------
# an in-process run of the four stages
# --------------------------------------------------------------------------------------
def secure_sum(inputs: Mapping[str, np.ndarray], params: SecAggParams,
               drop_before: Mapping[str, int] | None = None) -> tuple[np.ndarray, list[str]]:
    """Run the four stages in process for the integer vectors ``inputs`` (``{cid:
    uint64 vector}``; a roster member without an input does not take part).

    ``drop_before``: ``{cid: stage}``, the client goes silent before that stage (0..3),
    simulating a dropout.  Returns ``(sum mod 2^bits, contributors)``; raises
    :class:`SecAggAborted` when any stage has fewer than ``threshold`` clients.
    """
    drop = dict(drop_before or {})
    alive = [c for c in params.clients if c in inputs]

    def live(stage: int) -> list[str]:
        return [c for c in alive if drop.get(c, 99) > stage]

    clients = {c: SecAggClient(c, params) for c in alive}
    server = SecAggServer(params)
    roster = server.collect_keys({c: clients[c].advertise_keys() for c in live(0)})
    sent = {c: clients[c].share_keys(roster) for c in live(1) if c in roster}
    inbox = server.route_shares(sent)
    masked = {c: clients[c].masked_input(np.asarray(inputs[c], dtype=np.uint64), inbox[c])
              for c in live(2) if c in inbox}
    u3 = server.collect_masked(masked)
    answers = {c: clients[c].unmask(u3) for c in live(3) if c in u3}
    return server.unmask(answers), u3
