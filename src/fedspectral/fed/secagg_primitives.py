r"""Primitives of the secure sum (:mod:`fedspectral.fed.secagg`): Shamir sharing over
:math:`\mathbb F_p`, ChaCha20 masks, HKDF, signed-statement digests, and the quantisation
of bounded floats onto integers modulo :math:`2^{bits}`."""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Mapping, Sequence

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedspectral.checks import check_int, check_real, describe

__all__ = [
    "PRIME",
    "QuantisationOverflow",
    "dequantise",
    "prg_mask",
    "quantisation_scale",
    "quantise",
    "shamir_reconstruct",
    "shamir_split",
]

#: the Shamir field: the Mersenne prime 2^521 - 1 (holds any 32-byte secret)
PRIME = 2**521 - 1
_SECRET_BYTES = 32
_FIELD_BYTES = 66  # ceil(521 / 8)


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


def _raw_ed_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _raw_private(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


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
        raise QuantisationOverflow(
            f"a value of magnitude {worst:.6g} exceeds the bound "
            f"{bound:.6g} the secure sum was sized for; refused"
        )
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
        raise ValueError(
            f"{bits} bits cannot hold a sum of {m} values of magnitude "
            f"{bound:.6g} at unit resolution: the sum could overflow; use "
            f"more bits or a smaller bound"
        )
    s = 2.0 ** math.floor(math.log2(room / bound))
    while m * (s * bound + 0.5) >= 2.0 ** (bits - 1):  # float safety margin
        s /= 2.0
    return s


def _digest(label: bytes, *parts: bytes) -> bytes:
    """SHA-256 of ``label`` and the length-prefixed ``parts`` (unambiguous)."""
    h = hashlib.sha256(label)
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def _names(cids: Sequence[str]) -> bytes:
    return json.dumps(list(cids), separators=(",", ":")).encode()
