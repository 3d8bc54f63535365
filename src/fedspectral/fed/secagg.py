r"""Secure aggregation: the server learns the sum over one set of at least :math:`t`
clients, and nothing else -- also when it does not follow the protocol.

A five-stage exchange in the manner of Bonawitz et al. (CCS 2017, "Practical secure
aggregation for privacy-preserving machine learning"), with the consistency round of
their active-adversary variant extended to the views of :math:`U_2`, written here on the
primitives of the ``cryptography`` library.  Inputs are vectors of integers modulo
:math:`2^k` (:func:`~fedspectral.fed.secagg_primitives.quantise` maps bounded floats onto
them).

Every client :math:`u` holds a long-term Ed25519 *identity key* :math:`d_u` and a
*trusted roster*: the identity public keys of its peers, obtained independently of the
server (the node's own configuration, :mod:`fedspectral.fed.flower.node.secure_sum`).  Every
signature below is over a SHA-256 digest that starts with a label of its stage and the
digest :math:`P` of the sum's parameters (session id, roster, :math:`t`, length, bits),
so it cannot be replayed into another stage, sum, round or run.

Stages (one :class:`SecAggClient` per client, one
:class:`~fedspectral.fed.secagg_server.SecAggServer`; an in-process run of all five:
:func:`~fedspectral.fed.secagg_server.secure_sum`):

0. **Advertise keys.**  :math:`u` draws two X25519 key pairs, :math:`(c_u, C_u)`
   (channel) and :math:`(s_u, S_u)` (masks), and sends :math:`C_u, S_u` and
   :math:`\mathrm{Sign}_{d_u}(P, u, C_u, S_u)`; the server broadcasts the roster
   :math:`U_1`.
1. **Share keys.**  :math:`u` checks every peer's signature against that peer's key in
   *its own* trusted roster (a peer without one, a bad signature, or a changed own
   entry: it refuses), draws a 32-byte self-mask seed :math:`b_u`, splits :math:`b_u`
   and the bytes of :math:`s_u` into Shamir shares of threshold :math:`t`
   (:func:`~fedspectral.fed.secagg_primitives.shamir_split`, over :math:`\mathbb F_p`,
   :math:`p = 2^{521}-1`), and sends
   each peer :math:`v` its two shares encrypted with ChaCha20-Poly1305 under
   :math:`\mathrm{HKDF}(\mathrm{X25519}(c_u, C_v))`, bound to the session and the pair.
   The server routes ciphertexts; :math:`U_{2,u}`, *u's view* of :math:`U_2`, are the
   senders of what reaches :math:`u` (with :math:`u`).
2. **Masked input.**  :math:`u` sends

   .. math:: y_u = x_u + \mathrm{PRG}(b_u) + \sum_{v\in U_{2,u}\setminus\{u\}}
             \pm\,\mathrm{PRG}(\mathrm{HKDF}(\mathrm{X25519}(s_u, S_v)))\pmod{2^k},

   :math:`+` when :math:`u` precedes :math:`v` in the roster, :math:`-` otherwise (the
   ChaCha20 key stream of a 256-bit key); the server calls :math:`U_3` those whose
   :math:`y_u` arrived.
3. **Consistency.**  The server announces :math:`U_3`.  :math:`u` checks
   :math:`u\in U_3\subseteq U_{2,u}`, :math:`|U_3|\ge t`, and signs, once per session,
   the statement :math:`\mathrm{Sign}_{d_u}(P, H(U_{1,u}), U_{2,u}, U_3)` -- the keys,
   the :math:`U_2` and the :math:`U_3` it was shown.
4. **Unmask.**  The server forwards the statement signatures of a set
   :math:`U_4\subseteq U_3`.  :math:`u` verifies each against its trusted roster over
   *its own* statement; one that fails, a signer outside :math:`U_3`, or fewer than
   :math:`t` valid signers: it refuses.  Otherwise it returns, once, its shares of
   :math:`b_v` for :math:`v\in U_3` and of :math:`s_v` for :math:`v\in U_{2,u}\setminus
   U_3`.  With :math:`t` shares of each the server rebuilds the survivors' self masks
   and the masks between survivors and dropped clients: it obtains
   :math:`\sum_{u\in U_3} x_u \bmod 2^k` exactly.

Any stage with fewer than :math:`t` clients aborts with :class:`SecAggAborted`.

Guarantee
---------
Assume (a) each honest client's trusted roster holds its peers' genuine identity keys,
(b) at most :math:`n_C` clients collude with the server, and (c) :math:`2t > n + n_C`
(:math:`n`: the roster).  :class:`SecAggParams` requires :math:`2t > n`, i.e. a
malicious server colluding with no client; a node raises the bound with its policy
(``secagg-colluders``).  Then in one sum the server and its colluders learn, beyond
their own inputs, at most :math:`\sum_{u\in U_3^*} x_u` for one set :math:`U_3^*` of at
least :math:`t` clients (at least :math:`t-n_C` of them honest) -- or nothing if the sum
aborts: no single honest input, no sum over fewer than :math:`t` clients, not two sums.

*Why.*  (i) *One statement.*  An honest client signs one statement per session and
reveals shares only with :math:`t` valid signatures on its own.  Two different
statements with :math:`t` signatures each need at least :math:`t-n_C` honest signers
each, disjoint: :math:`2(t-n_C)\le n-n_C`, excluded by (c).  So every honest client
that reveals shares holds the same :math:`(U_1^*, U_2^*, U_3^*)`.  (ii) *What is
rebuilt.*  Those clients reveal shares of :math:`b_v` for :math:`v\in U_3^*` and of
:math:`s_v` for :math:`v\in U_2^*\setminus U_3^*` -- disjoint sets; any other secret has
at most :math:`n_C<t` shares outside its owner.  (iii) *What stays masked.*  Each honest
signer :math:`h` masked :math:`y_h` with every other member of
:math:`U_3^*\subseteq U_2^*`, and no mask key between two honest members of
:math:`U_3^*` is rebuilt.  The masks are independent pseudo-random vectors, so a
combination :math:`\sum_u c_u y_u` leaks only if it cancels each unrebuilt mask, which
forces :math:`c_w = c_h` for every honest :math:`w\in U_3^*` (the sum over
:math:`U_3^*`), or :math:`c_h = 0` for every honest signer.  In the second case its
support :math:`W` are honest non-signers of :math:`U_3^*` whose views
(:math:`\ge t` clients each) lie in :math:`W\cup (U_2^*\setminus U_3^*)` and the
colluders, so :math:`t \le |W| + |U_2^*| - |U_3^*| + n_C` while
:math:`|U_3^*|\ge |W|+t`: :math:`n\ge|U_2^*|\ge 2t-n_C`, excluded by (c).  The
bound is tight for (i): with one colluding client and :math:`t = 3` of 5 the server has
two statements certified (the colluder signs both) and reads a client's input; at
:math:`t = 4` it cannot
(``tests/fed/test_secagg.py::test_a_colluding_client_needs_the_stricter_threshold``).

This is the counting behind Bonawitz et al.'s active-adversary variant, whose stated
parameters (fewer than :math:`n/3` corrupted clients, :math:`t > 2n/3`) are a case of
(c); with no colluding client it needs only :math:`t > n/2`, which is what this module
requires.  Their consistency round signs :math:`U_3` only; together with the check
:math:`U_3\subseteq U_{2,u}` before signing that gives (i)-(iii) as well (a client that
signed without the check could have masked only with peers the others count as
dropped).  Signing :math:`U_{2,u}` and the keys :math:`U_{1,u}` too fixes the set of
secrets that can be rebuilt by the one signed statement, whatever views the server
handed out.  The attack that broke the
unauthenticated exchange (five clients, :math:`t = 3`: the server routed client 0's
shares to two peers, told clients 3, 4 that :math:`U_3=\{0,3,4\}` and clients 1, 2
:math:`\{1,3,4\}`, :math:`\{2,3,4\}`, rebuilt :math:`b_0, s_1, s_2` and read
:math:`x_0`) and key substitution (the server hands out its own keys) are the tests
``tests/fed/test_secagg.py::test_inconsistent_views_attack`` and
``::test_key_substitution_attack``: they succeed with the consistency round and the key
check disabled, and fail on this protocol.

*Not covered.*  The server sees who took part and chooses :math:`U_3^*` (any
:math:`\ge t` clients: it can leave honest clients out; the DP analysis of
docs/fedsc.md section 7 counts only the guaranteed :math:`t`); each session's sum is
revealed, so sums of the same inputs over different sets in different sessions differ by
the inputs left out (FedSC re-noises every contribution, docs/fedsc.md 7.3); integrity
(a server or a client can make the sum wrong or abort it); compromised identity keys;
timing.  Without trusted identity keys (``honest_server=True``, an explicit opt-in)
nothing above holds against an active server: the exchange is secure only against one
that follows the protocol (honest but curious), as in Bonawitz et al.'s first variant.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedspectral.checks import check_int, describe
from fedspectral.fed.secagg_primitives import (
    _FIELD_BYTES,
    _SECRET_BYTES,
    _digest,
    _hkdf,
    _modmask,
    _names,
    _raw_ed_public,
    _raw_private,
    _raw_public,
    prg_mask,
    quantisation_scale,
    shamir_split,
)

__all__ = [
    "SecAggAborted",
    "SecAggClient",
    "SecAggParams",
    "advert_digest",
    "statement_digest",
]


class SecAggAborted(RuntimeError):
    """Fewer clients than the threshold at some stage: the round yields no sum."""


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
        Binds every derived key, ciphertext and signature to this sum (e.g. run and
        round).
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
            raise ValueError(
                f"threshold={t} must exceed half the {len(cl)} clients (else a "
                f"server could have two views of the sum certified and "
                f"unmask a single client; module docstring)"
            )
        check_int("length", self.length, low=1)
        check_int("bits", self.bits, low=8, high=64)
        if not isinstance(self.session, bytes):
            raise TypeError(f"session must be bytes, got {describe(self.session)}")

    def digest(self) -> bytes:
        """SHA-256 of the sum's parameters: every signature of the sum covers it."""
        return _digest(
            b"fedspectral/secagg/params/v1",
            self.session,
            _names(self.clients),
            str(self.threshold).encode(),
            str(self.length).encode(),
            str(self.bits).encode(),
        )

    def scale_for(self, bound: float, clients: int | None = None) -> float:
        """:func:`~fedspectral.fed.secagg_primitives.quantisation_scale` for this sum
        (``clients`` default: the roster)."""
        return quantisation_scale(
            bound, len(self.clients) if clients is None else clients, self.bits
        )


def client_index(params: SecAggParams) -> dict[str, int]:
    """Each client's position in the sum's roster (its Shamir evaluation point is one more)."""
    return {c: i for i, c in enumerate(params.clients)}


# --------------------------------------------------------------------------------------
# signed statements
# --------------------------------------------------------------------------------------
def advert_digest(params: SecAggParams, cid: str, c_pub: bytes, s_pub: bytes) -> bytes:
    """What a client signs in stage 0: its two public keys in this sum."""
    return _digest(b"fedspectral/secagg/advertise/v1", params.digest(), cid.encode(), c_pub, s_pub)


def statement_digest(
    params: SecAggParams,
    roster: Mapping[str, tuple[bytes, ...]],
    u2: Sequence[str],
    u3: Sequence[str],
) -> bytes:
    """What a client signs in stage 3: the keys :math:`U_1`, :math:`U_2` and :math:`U_3`
    it was shown (each in roster order)."""
    order = client_index(params)
    keys = [
        part
        for c in sorted(roster, key=order.__getitem__)
        for part in (c.encode(), roster[c][0], roster[c][1])
    ]
    return _digest(
        b"fedspectral/secagg/consistency/v1",
        params.digest(),
        _digest(b"U1", *keys),
        _names(sorted(u2, key=order.__getitem__)),
        _names(sorted(u3, key=order.__getitem__)),
    )


def _verify(trusted: Mapping[str, bytes], cid: str, sig: bytes, digest: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(trusted[cid]).verify(bytes(sig), digest)
    except (InvalidSignature, KeyError, ValueError, TypeError):
        return False
    return True


# --------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------
class SecAggClient:
    """One client of one secure sum (its keys and seeds live only in this object).

    Parameters
    ----------
    cid, params
        This client and the sum.
    identity : Ed25519PrivateKey, optional
        The client's long-term identity key; its public key must be ``trusted[cid]``.
    trusted : mapping of str to bytes, optional
        The trusted roster: raw Ed25519 public keys of at least every client of
        ``params.clients``, obtained independently of the server.
    honest_server : bool
        Without ``trusted``: run unauthenticated, secure only against a server that
        follows the protocol (module docstring).  Without ``trusted`` and without this
        opt-in the client refuses (``PermissionError``).
    """

    def __init__(
        self,
        cid: str,
        params: SecAggParams,
        identity: Ed25519PrivateKey | None = None,
        trusted: Mapping[str, bytes] | None = None,
        honest_server: bool = False,
    ) -> None:
        if cid not in params.clients:
            raise ValueError(f"client {cid!r} is not in the roster {list(params.clients)}")
        self.cid = cid
        self.params = params
        self._set_trust(identity, trusted, honest_server)
        self._c = X25519PrivateKey.generate()
        self._s = X25519PrivateKey.generate()
        self._b = os.urandom(_SECRET_BYTES)
        self._roster: dict[str, tuple[bytes, bytes]] | None = None
        self._held: dict[str, tuple[int, int]] = {}  # peer -> (share of b_peer, of s_peer)
        self._u2: list[str] | None = None
        self._u3: list[str] | None = None
        self._unmasked = False

    def _set_trust(
        self,
        identity: Ed25519PrivateKey | None,
        trusted: Mapping[str, bytes] | None,
        honest_server: bool,
    ) -> None:
        self._id = identity
        self.trusted = None if trusted is None else {str(c): bytes(k) for c, k in trusted.items()}
        self.honest_server = bool(honest_server)
        if self.trusted is None:
            if not self.honest_server:
                raise PermissionError(
                    f"client {self.cid!r} has no trusted identity keys of its "
                    "peers: it refuses a secure sum against a server it does "
                    "not trust (honest_server=True assumes an honest-but-"
                    "curious server)"
                )
            return
        missing = [c for c in self.params.clients if c not in self.trusted]
        if missing:
            raise PermissionError(
                f"clients {missing} of the secure sum are not in the trusted roster of {self.cid!r}"
            )
        if identity is None or _raw_ed_public(identity) != self.trusted[self.cid]:
            raise ValueError(
                f"the identity key of {self.cid!r} does not match its entry in the trusted roster"
            )

    @property
    def authenticated(self) -> bool:
        """Whether this client checks its peers' identity signatures."""
        return self.trusted is not None

    # -- persistence between messages (a Flower node keeps this in its own state) -----
    def to_state(self) -> dict[str, object]:
        """Everything this client holds for this sum, as JSON-able values (hex strings):
        what a node keeps between the stages in its *own* state.  It contains the
        client's secrets (private keys, self-mask seed, the shares it holds): it must
        never leave the client.  The identity key and the trusted roster are not in it
        (the node's configuration: pass them to :meth:`from_state`)."""
        p = self.params
        return {
            "cid": self.cid,
            "params": {
                "clients": list(p.clients),
                "threshold": p.threshold,
                "length": p.length,
                "bits": p.bits,
                "session": p.session.hex(),
            },
            "authenticated": self.authenticated,
            "c": _raw_private(self._c).hex(),
            "s": _raw_private(self._s).hex(),
            "b": self._b.hex(),
            "roster": (
                None
                if self._roster is None
                else {c: [k[0].hex(), k[1].hex()] for c, k in self._roster.items()}
            ),
            "held": {v: [format(bs, "x"), format(ss, "x")] for v, (bs, ss) in self._held.items()},
            "u2": self._u2,
            "u3": self._u3,
            "unmasked": self._unmasked,
        }

    @classmethod
    def from_state(
        cls,
        st: Mapping[str, Any],
        identity: Ed25519PrivateKey | None = None,
        trusted: Mapping[str, bytes] | None = None,
        honest_server: bool = False,
    ) -> SecAggClient:
        """The client :meth:`to_state` saved (same keys, seeds and shares; ``st`` as read
        back from JSON), with the same trust: a client saved authenticated is restored only
        with a trusted roster."""
        pp = dict(st["params"])
        params = SecAggParams(
            tuple(pp["clients"]),
            int(pp["threshold"]),
            int(pp["length"]),
            int(pp["bits"]),
            bytes.fromhex(str(pp["session"])),
        )
        self = cls.__new__(cls)
        self.cid = str(st["cid"])
        if self.cid not in params.clients:
            raise ValueError(f"client {self.cid!r} is not in the roster {list(params.clients)}")
        self.params = params
        auth = bool(st.get("authenticated", True))
        if auth and trusted is None:
            raise PermissionError(
                f"{self.cid!r} began this sum authenticated: it needs its trusted roster to go on"
            )
        self._set_trust(identity if auth else None, trusted if auth else None, not auth)
        self._c = X25519PrivateKey.from_private_bytes(bytes.fromhex(str(st["c"])))
        self._s = X25519PrivateKey.from_private_bytes(bytes.fromhex(str(st["s"])))
        self._b = bytes.fromhex(str(st["b"]))
        roster = st.get("roster")
        self._roster = (
            None
            if roster is None
            else {
                str(c): (bytes.fromhex(k[0]), bytes.fromhex(k[1])) for c, k in dict(roster).items()
            }
        )
        self._held = {
            str(v): (int(h[0], 16), int(h[1], 16)) for v, h in dict(st.get("held") or {}).items()
        }
        u2, u3 = st.get("u2"), st.get("u3")
        self._u2 = None if u2 is None else [str(c) for c in u2]
        self._u3 = None if u3 is None else [str(c) for c in u3]
        self._unmasked = bool(st.get("unmasked", False))
        return self

    def _sign(self, digest: bytes) -> bytes:
        return b"" if self._id is None or not self.authenticated else self._id.sign(digest)

    # stage 0
    def advertise_keys(self) -> tuple[bytes, bytes, bytes]:
        """``(C_u, S_u, signature)``: the raw X25519 public keys and their Ed25519
        signature by this client's identity key (empty when unauthenticated)."""
        c, s = _raw_public(self._c.public_key()), _raw_public(self._s.public_key())
        return c, s, self._sign(advert_digest(self.params, self.cid, c, s))

    def _channel(self, peer: str) -> ChaCha20Poly1305:
        assert self._roster is not None
        shared = self._c.exchange(X25519PublicKey.from_public_bytes(self._roster[peer][0]))
        return ChaCha20Poly1305(_hkdf(shared, b"fedspectral/secagg/channel/" + self.params.session))

    def _ad(self, sender: str, receiver: str) -> bytes:
        return b"|".join([self.params.session, sender.encode(), receiver.encode()])

    def _check_roster(
        self, roster: Mapping[str, Sequence[bytes]]
    ) -> dict[str, tuple[bytes, bytes]]:
        p = self.params
        if len(roster) < p.threshold:
            raise SecAggAborted(
                f"{len(roster)} clients advertised keys, fewer than the threshold {p.threshold}"
            )
        if any(c not in p.clients for c in roster) or self.cid not in roster:
            raise ValueError(
                f"roster {sorted(roster)} is not a subset of the clients holding {self.cid!r}"
            )
        out = {c: (bytes(k[0]), bytes(k[1])) for c, k in roster.items()}
        if out[self.cid] != (_raw_public(self._c.public_key()), _raw_public(self._s.public_key())):
            raise PermissionError(f"the roster shows {self.cid!r} keys it did not advertise")
        if self.authenticated:
            assert self.trusted is not None
            bad = [
                c
                for c, k in roster.items()
                if len(k) < 3
                or not _verify(self.trusted, c, k[2], advert_digest(p, c, out[c][0], out[c][1]))
            ]
            if bad:
                raise PermissionError(
                    f"{self.cid!r}: the keys of {bad} are not signed by "
                    "their identity keys in its trusted roster"
                )
        return out

    # stage 1
    def share_keys(self, roster: Mapping[str, Sequence[bytes]]) -> dict[str, bytes]:
        """Encrypted Shamir shares of :math:`b_u` and :math:`s_u` for every peer of the
        roster :math:`U_1` (``{cid: (C, S, signature)}``), after checking each
        signature against the trusted roster: ``{peer: ciphertext}``."""
        p = self.params
        if self._roster is not None:
            raise PermissionError(f"{self.cid!r} already shared its keys in this session")
        self._roster = self._check_roster(roster)
        idx = client_index(p)
        xs = [idx[c] + 1 for c in self._roster]
        b_sh = shamir_split(int.from_bytes(self._b, "big"), xs, p.threshold)
        s_sh = shamir_split(int.from_bytes(_raw_private(self._s), "big"), xs, p.threshold)
        out = {}
        for peer in self._roster:
            x = idx[peer] + 1
            plain = b_sh[x].to_bytes(_FIELD_BYTES, "big") + s_sh[x].to_bytes(_FIELD_BYTES, "big")
            if peer == self.cid:
                self._held[self.cid] = (b_sh[x], s_sh[x])
                continue
            nonce = os.urandom(12)
            out[peer] = nonce + self._channel(peer).encrypt(nonce, plain, self._ad(self.cid, peer))
        return out

    # stage 2
    def masked_input(self, x: np.ndarray, inbox: Mapping[str, bytes]) -> np.ndarray:
        """:math:`y_u` for the integer vector ``x`` (``uint64``, modulo :math:`2^{bits}`),
        after decrypting the shares in ``inbox`` (``{sender: ciphertext}``: the senders
        are this client's view of :math:`U_2`)."""
        p = self.params
        if self._roster is None:
            raise RuntimeError("masked_input before share_keys")
        if self._u2 is not None:
            raise PermissionError(f"{self.cid!r} already sent its masked input in this session")
        v = np.asarray(x)
        if v.dtype != np.uint64 or v.shape != (p.length,):
            raise ValueError(f"x must be a uint64 vector of length {p.length}, got {describe(v)}")
        u2 = sorted(set(inbox) | {self.cid}, key=client_index(p).__getitem__)
        if len(u2) < p.threshold:
            raise SecAggAborted(
                f"{len(u2)} clients shared keys, fewer than the threshold {p.threshold}"
            )
        for sender, ct in inbox.items():
            if sender not in self._roster or sender == self.cid:
                raise ValueError(f"share from {sender!r}, not a peer of {self.cid!r}")
            plain = self._channel(sender).decrypt(ct[:12], ct[12:], self._ad(sender, self.cid))
            self._held[sender] = (
                int.from_bytes(plain[:_FIELD_BYTES], "big"),
                int.from_bytes(plain[_FIELD_BYTES:], "big"),
            )
        self._u2 = u2
        y = (v & _modmask(p.bits)) + prg_mask(
            _hkdf(self._b, b"fedspectral/secagg/self/" + p.session), p.length, p.bits
        )
        idx = client_index(p)
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
    def consistency(self, survivors: Sequence[str]) -> bytes:
        """This client's signature of the statement (:func:`statement_digest`) on the
        announced survivors :math:`U_3` (empty when unauthenticated).  Given once per
        session; refused for a list that is not a subset of this client's :math:`U_2`
        of at least ``threshold`` clients including this one."""
        p = self.params
        if self._u2 is None:
            raise RuntimeError("consistency before masked_input")
        if self._u3 is not None:
            raise PermissionError(
                f"client {self.cid!r} already signed a U3 in this session; "
                f"a second one could certify two different views"
            )
        u3 = sorted(
            dict.fromkeys(str(c) for c in survivors),
            key=lambda c: (client_index(p).get(c, len(p.clients)), c),
        )
        if not set(u3) <= set(self._u2) or self.cid not in u3:
            raise PermissionError(
                f"survivors {u3} are not a subset of U2 {self._u2} holding {self.cid!r}"
            )
        if len(u3) < p.threshold:
            raise SecAggAborted(f"{len(u3)} survivors, fewer than the threshold {p.threshold}")
        self._u3 = u3
        return self._sign(self.statement())

    def statement(self) -> bytes:
        """The digest this client signs in stage 3 (and checks the others' signatures on)."""
        if self._roster is None or self._u2 is None or self._u3 is None:
            raise RuntimeError("no statement before the consistency stage")
        return statement_digest(self.params, self._roster, self._u2, self._u3)

    def check_consistency(self, signatures: Mapping[str, bytes]) -> list[str]:
        """The signers whose signature over *this client's* statement verifies against the
        trusted roster; ``PermissionError`` when any signature fails, a signer is not in
        :math:`U_3`, or fewer than ``threshold`` signers remain.  (Unauthenticated: no
        check, the announced signers.)"""
        assert self._u3 is not None
        signers = [str(c) for c in signatures]
        if not self.authenticated:
            return signers
        assert self.trusted is not None
        outside = [c for c in signers if c not in self._u3]
        digest = self.statement()
        bad = [
            c
            for c in signers
            if c not in outside and not _verify(self.trusted, c, signatures[c], digest)
        ]
        if outside or bad:
            raise PermissionError(
                f"{self.cid!r}: consistency check failed (signers outside "
                f"U3: {outside}; signatures over another view: {bad})"
            )
        if len(set(signers)) < self.params.threshold:
            raise PermissionError(
                f"{self.cid!r}: {len(set(signers))} valid consistency "
                f"signatures, fewer than the threshold "
                f"{self.params.threshold}"
            )
        return signers

    # stage 4
    def unmask(self, signatures: Mapping[str, bytes]) -> dict[str, dict[str, int]]:
        """Shares for the survivors :math:`U_3` signed in stage 3, once the consistency
        signatures ``{signer: signature}`` pass :meth:`check_consistency`:
        ``{"b": {v: share of b_v}}`` for the survivors, ``{"s": {v: share of s_v}}`` for
        the dropped members of this client's :math:`U_2`.  Answered once per session."""
        if self._u3 is None or self._u2 is None:
            raise RuntimeError("unmask before consistency")
        if self._unmasked:
            raise PermissionError(
                f"client {self.cid!r} already answered an unmask request "
                f"in this session; a second one could reveal both secrets"
            )
        self.check_consistency(signatures)
        self._unmasked = True
        x = client_index(self.params)[self.cid] + 1
        dropped = [v for v in self._u2 if v not in self._u3]
        return {
            "x": {"": x},
            "b": {v: self._held[v][0] for v in self._u3},
            "s": {v: self._held[v][1] for v in dropped},
        }
