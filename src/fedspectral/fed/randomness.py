r"""The randomness of a round, derived -- never carried over -- from the run's seeds.

Client-side randomness (batch order, augmentations, DP noise) is derived from
``(seed, round, cid, phase)`` by :func:`client_generators`, never carried over from
previous rounds: a run resumed at round ``t`` therefore draws exactly the numbers an
uninterrupted run draws, and any transport that forwards the same seed reproduces the
in-process run.  In a real deployment the DP noise comes from the secure source
(``noise_seed=None`` or ``"secure"``: OS entropy, a floating-point-safe discrete Gaussian
on a grid, :class:`fedspectral.privacy.SecureNoise`).  The clients of a round are
sampled from ``(seed, round)`` (:func:`sample_clients`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["client_generators", "derive_seed", "sample_clients"]


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any tuple of values (stable across processes and platforms)."""
    h = hashlib.blake2b(repr(tuple(str(p) for p in parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


def client_generators(
    seed: int, rnd: int, cid: str, phase: str, noise_seed: int | None | str = "derive"
) -> tuple[Any, Any]:
    """The ``(torch.Generator, numpy Generator)`` of one client phase.

    The torch generator (batches, augmentations) is seeded from
    ``(seed, rnd, cid, phase)``.  The noise source is seeded numpy: from
    ``(seed, rnd, cid, phase)`` when ``noise_seed="derive"`` (experiments:
    reproducible), from ``(noise_seed, rnd, cid, phase)`` when an integer is given;
    with ``None`` or ``"secure"`` (deployment: a device or Flower node) it is the
    secure source (:class:`fedspectral.privacy.SecureNoise`: OS entropy, a
    cryptographically secure generator, floating-point-safe Gaussian), which no
    seed can reproduce.
    """
    import torch

    g = torch.Generator()
    g.manual_seed(derive_seed("torch", seed, rnd, cid, phase))
    rng: Any  # seeded numpy, or the secure source
    if noise_seed == "derive":
        rng = np.random.default_rng(derive_seed("noise", seed, rnd, cid, phase))
    elif noise_seed is None or noise_seed == "secure":
        from fedspectral.privacy import SecureNoise  # lazy: pulls in dp-accounting and SciPy

        rng = SecureNoise()
    else:
        rng = np.random.default_rng(derive_seed("noise", int(noise_seed), rnd, cid, phase))
    return g, rng


def sample_clients(all_clients: Sequence[str], per_round: int, rnd: int, seed: int) -> list[str]:
    """Clients sampled in round ``rnd``: ``per_round`` of them without replacement,
    uniformly, from a generator seeded by ``(seed, rnd)``; all clients (in their
    order) when ``per_round >= len(all_clients)``."""
    n = len(all_clients)
    if not isinstance(per_round, int | np.integer) or per_round < 1:
        raise ValueError(f"clients per round must be an integer >= 1, got {per_round!r}")
    if per_round >= n:
        return list(all_clients)
    rng = np.random.default_rng(derive_seed("sample", seed, rnd))
    idx = np.sort(rng.choice(n, size=per_round, replace=False))
    return [all_clients[i] for i in idx]
