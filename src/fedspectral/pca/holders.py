r"""Distributed private PCA: data holders, one central Gaussian mechanism in shares.

Protocol
--------
Users' rows are held by :math:`m` data holders (hospitals, branches, institutes) whom
their users trust, but who trust neither each other nor the analyst.  Holder :math:`h`
with users :math:`U_h` clips every row to :math:`\|x\|_2 \le 1` (the policy of
:mod:`fedspectral.pca.local`), and releases **one message** of :math:`p(p+1)/2` floats
(:func:`holder_message`),

.. math:: m_h = \mathrm{svec}\Big(\sum_{i\in U_h} x_ix_i^\top\Big) + g_h, \qquad
          g_h \sim N(0, \sigma_s^2 I),

through a secure sum (:mod:`fedspectral.fed.secagg` on a deployment): the analyst sees
:math:`\sum_h m_h = \mathrm{svec}(X^\top X) + \sum_h g_h` only, un-packs it and divides by
:math:`n` (:class:`~fedspectral.pca.CovarianceAggregator`), and returns the top-``k``
eigenspace.  The share :math:`\sigma_s = \sigma/\sqrt{m_{min} - c}` comes from
:func:`fedspectral.privacy.distributed_gaussian` (:func:`holder_noise`): a sum over at
least ``min_contributors`` holders carries the central Gaussian mechanism's noise
:math:`\sigma` ("Analyze Gauss", Dwork, Talwar, Thakurta & Zhang, STOC 2014), so its noise
in :math:`\hat S` is :math:`\sigma/n` per entry, against :math:`\sigma_{LDP}/\sqrt n` in
the local model.

Neighbouring relation and sensitivity (docs/pca.md, "Distributed model")
------------------------------------------------------------------------
A user's row enters exactly one holder's sum.  With the isometric vectorisation
(:math:`\|\mathrm{svec}(A)\| = \|A\|_F`) the L2 sensitivity of that sum is the Frobenius
sensitivity of :math:`X^\top X`:

* ``"add_remove"`` (one row added or removed): :math:`\|xx^\top\|_F = \|x\|^2 \le 1`,
  so :math:`\Delta = 1`;
* ``"replace_one"`` (one row replaced by any other, :math:`n` public):
  :math:`\|xx^\top - yy^\top\|_F^2 = \|x\|^4 + \|y\|^4 - 2(x^\top y)^2 \le 2`, so
  :math:`\Delta = \sqrt2`, attained by any orthogonal pair of unit vectors -- the local
  model's relation, so the two models are compared at the same ε.

The plain upper triangle has the same two sensitivities (:math:`\|\mathrm{vech}(xx^\top)\|
\le \|x\|^2`, and √2 at :math:`e_1, e_2`).  Under ``"add_remove"`` the number of users is
itself private: the subspace does not need it (the top-``k`` eigenspace of
:math:`\sum_h m_h` is that of :math:`\sum_h m_h / n`), so a deployment releases the matrix
sum only; the simulation here still scales by its own ``n``.

Accounting
----------
Users of one holder hold disjoint rows and each is in one summand (parallel
composition): one ledger party per holder, ``users@<holder>``, stands for all its users.
Each contributing holder's release is recorded twice (:func:`record_distributed_release`):
``threat="secagg"`` at the noise of the completed sum the analyst cannot remove,
:math:`\sigma_s\sqrt{C - c}` for :math:`C` contributors, and ``threat="fallback"`` at its
own share :math:`\sigma_s` (secure aggregation broken).  Without secure aggregation
(``secure_aggregation=False``: each holder releases its sum in the clear, the
*per-holder central* model) every holder adds the full :math:`\sigma` and one entry
(``threat="any"``) holds under both readings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from fedspectral.checks import check_bool, check_choice, check_int, describe
from fedspectral.kinds import DISTRIBUTED_RELATIONS
from fedspectral.linalg import VECTORISATIONS, n_packed, pack_symmetric, top_k_eigvecs
from fedspectral.pca.aggregator import check_dimension
from fedspectral.pca.local import (
    NORM_POLICIES,
    _as_rng,
    _check_rows,
    clip_rows,
    second_moment_sum,
)
from fedspectral.privacy import (
    DistributedGaussian,
    PrivacyLedger,
    distributed_gaussian,
    symmetric_gaussian,
)
from fedspectral.privacy.noise import add_gaussian

__all__ = [
    "HOLDER_NOISE_MODES",
    "MECHANISM",
    "NEIGHBOURING",
    "SENSITIVITIES",
    "HolderSums",
    "distributed_from_moment",
    "holder_index",
    "holder_message",
    "holder_noise",
    "party_of",
    "record_distributed_release",
    "simulate_holder_sums",
]

#: neighbouring relations of the distributed model and the L2 sensitivity of one
#: holder's packed sum under each (module docstring)
NEIGHBOURING = DISTRIBUTED_RELATIONS
SENSITIVITIES = {"replace_one": math.sqrt(2.0), "add_remove": 1.0}
#: how a simulation draws the holders' noise: each holder's own share, or their sum at once
HOLDER_NOISE_MODES = ("aggregate", "per_holder")
MECHANISM = "pca/distributed-gaussian"


class HolderSums(NamedTuple):
    """Packed messages of the holders: ``messages[h]`` and ``counts[h]`` for each holder
    id ``h`` (a string), in the order of :func:`holder_index`."""

    messages: dict[str, np.ndarray]
    counts: dict[str, int]


def party_of(holder: str) -> str:
    """The ledger party standing for every user of ``holder``."""
    return f"users@{holder}"


def holder_noise(
    epsilon: float,
    delta: float,
    min_contributors: int,
    *,
    neighbouring: str = "replace_one",
    calibration: str = "analytic",
    colluders: int = 0,
    secure_aggregation: bool = True,
) -> DistributedGaussian:
    r"""The noise every holder adds (:func:`fedspectral.privacy.distributed_gaussian` at
    the sensitivity of ``neighbouring``): share :math:`\sigma/\sqrt{m_{min} - c}` under
    secure aggregation; without it (``secure_aggregation=False``) each holder's release
    must be private on its own, so the share is the full central :math:`\sigma`
    (``min_contributors`` and ``colluders`` are still validated)."""
    check_choice("neighbouring", neighbouring, NEIGHBOURING)
    secure = check_bool("secure_aggregation", secure_aggregation)
    sens = SENSITIVITIES[neighbouring]
    shares = distributed_gaussian(
        epsilon, delta, sens, min_contributors, calibration, colluders=colluders
    )
    if secure:
        return shares
    return distributed_gaussian(epsilon, delta, sens, 1, calibration)


def _label_kind(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "bool"
    if isinstance(v, int | np.integer):
        return "int"
    if isinstance(v, float | np.floating):
        return "float"
    if isinstance(v, str | np.str_):
        return "str"
    if isinstance(v, bytes | np.bytes_):
        return "bytes"
    return type(v).__name__


def _check_label_kinds(groups: Any) -> None:
    """The holder labels are all of one kind (all integers, all strings, ...): ``1`` and
    ``"1"`` are two holders to their owner, but one string after ``numpy.asarray``, so
    mixed kinds would silently merge holders; ``TypeError`` naming the kinds found."""
    arr = groups if isinstance(groups, np.ndarray) else None
    if arr is not None and arr.dtype != object:
        return  # one numpy dtype: one kind
    try:
        items = list(groups.tolist() if arr is not None else groups)
    except TypeError:
        return  # not iterable: the shape check names it
    kinds = {_label_kind(v) for v in items}
    if {"int", "float"} == kinds:
        kinds = {"number"}
    if len(kinds) > 1:
        examples: dict[str, object] = {}
        for v in items:
            examples.setdefault(_label_kind(v), v)
        raise TypeError(
            f"groups mixes holder labels of kinds {sorted(kinds)} (e.g. "
            f"{', '.join(repr(v) for v in list(examples.values())[:4])}): labels such as 1 "
            f"and '1' would merge into one holder; give labels of one kind"
        )


def holder_index(groups: Any, n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(holders, inverse, counts)`` of the holder labels ``groups`` (one per row, any
    sortable labels; ``None``: every row with one holder ``"0"``): the holder ids as
    strings (sorted labels), each row's holder index and each holder's row count."""
    if groups is None:
        return ["0"], np.zeros(n, dtype=np.intp), np.array([n])
    _check_label_kinds(groups)
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise ValueError(f"groups must hold one holder label per row ({n}), got {describe(g)}")
    if g.dtype.kind == "f" and not np.isfinite(g).all():
        raise ValueError("groups contains NaN or infinite labels")
    try:
        labels, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    except TypeError as exc:
        raise TypeError(f"groups must be labels of one sortable kind: {exc}") from None
    names = [str(v) for v in labels.tolist()]
    if len(set(names)) != len(names):
        raise ValueError(f"holder labels must stay distinct as strings, got {names[:10]}")
    return names, inverse.ravel(), counts


def holder_message(
    X: Any,
    noise: DistributedGaussian,
    rng: Any = None,
    *,
    vectorisation: str = "isometric",
    norm_policy: str = "clip",
) -> np.ndarray:
    r"""What one holder releases into the secure sum: :math:`\mathrm{svec}(\sum_i
    x_ix_i^\top) + g`, :math:`g \sim N(0, \sigma_s^2 I)`, ``p(p+1)/2`` floats (module
    docstring), rows of ``X`` clipped by ``norm_policy``.

    ``rng``: ``None`` or ``"secure"`` -- the secure source a deployment runs
    (:class:`fedspectral.privacy.SecureNoise`, a floating-point-safe discrete Gaussian on a grid);
    a numpy generator or seed -- seeded numpy (simulations)."""
    if not isinstance(noise, DistributedGaussian):
        raise TypeError(f"noise must be a DistributedGaussian, got {type(noise).__name__}")
    check_choice("vectorisation", vectorisation, VECTORISATIONS)
    check_choice("norm_policy", norm_policy, NORM_POLICIES)
    X = _check_rows(X)
    gen = _as_rng("secure" if rng is None else rng, secure_ok=True)
    msg = pack_symmetric(second_moment_sum(X, clip_rows(X, norm_policy)), vectorisation)
    if noise.share_sigma == 0:
        return msg
    if isinstance(gen, np.random.Generator):
        return msg + noise.share_sigma * gen.standard_normal(msg.shape[0])
    return add_gaussian(msg, noise.share_sigma, gen)  # a secure source


def simulate_holder_sums(
    X: Any,
    groups: Any,
    noise: DistributedGaussian,
    rng: Any = None,
    *,
    noise_mode: str = "aggregate",
    vectorisation: str = "isometric",
    norm_policy: str = "clip",
) -> tuple[HolderSums, np.ndarray]:
    r"""Every holder's message for the rows of ``X`` split by ``groups``
    (:func:`holder_index`), seeded numpy noise, and the exact packed signal
    :math:`\mathrm{svec}(X^\top X)` of the clipped rows.

    ``noise_mode="per_holder"``: each message carries its own share (what holders send).
    ``"aggregate"``: the messages carry no noise and the returned signal is replaced by
    signal + the sum of all holders' shares drawn at once,
    :math:`N(0, m\sigma_s^2 I)` -- the same law of the sum, one draw.  Returns
    ``(HolderSums, total)``, ``total`` the sum over all holders (noise included)."""
    check_choice("noise_mode", noise_mode, HOLDER_NOISE_MODES)
    check_choice("vectorisation", vectorisation, VECTORISATIONS)
    check_choice("norm_policy", norm_policy, NORM_POLICIES)
    X = _check_rows(X)
    gen = _as_rng(rng)
    holders, inverse, counts = holder_index(groups, X.shape[0])
    f = clip_rows(X, norm_policy)
    if f is not None:
        X = X * f[:, None]
    m = n_packed(X.shape[1])
    msgs: dict[str, np.ndarray] = {}
    for j, h in enumerate(holders):
        msgs[h] = pack_symmetric(second_moment_sum(X[inverse == j]), vectorisation)
        if noise_mode == "per_holder" and noise.share_sigma > 0:
            msgs[h] = msgs[h] + noise.share_sigma * gen.standard_normal(m)
    total = np.sum(list(msgs.values()), axis=0)
    if noise_mode == "aggregate" and noise.share_sigma > 0:
        total = total + noise.total_sigma(len(holders)) * gen.standard_normal(m)
    return HolderSums(msgs, {h: int(c) for h, c in zip(holders, counts, strict=True)}), total


def record_distributed_release(
    ledger: PrivacyLedger,
    noise: DistributedGaussian,
    counts: Mapping[str, int | None],
    *,
    neighbouring: str = "replace_one",
    secure_aggregation: bool = True,
) -> None:
    """Record a completed sum of the holders in ``counts`` (``{holder: users}``: the
    contributors; ``None`` where the analyst does not know a holder's count, e.g. when the
    counts travel in the secure sum) in ``ledger``, under both threat models (module
    docstring)."""
    if not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
    check_choice("neighbouring", neighbouring, NEIGHBOURING)
    c = len(counts)
    if check_bool("secure_aggregation", secure_aggregation):
        secagg = noise.secagg(c, neighbouring)  # refuses c < min_contributors
    share = noise.share(neighbouring)  # the entries come from the mechanism objects
    for h, n_h in counts.items():
        users = "" if n_h is None else f",n_users={int(n_h)}"
        mech = f"{MECHANISM}[holder={h}{users},contributors={c}]"
        if not secure_aggregation:
            ledger.add(share.entry(party_of(h), mech))
            continue
        ledger.add(share.entry(party_of(h), mech, threat="fallback"))
        ledger.add(secagg.entry(party_of(h), mech, threat="secagg"))


def distributed_from_moment(
    S: Any,
    n: int,
    k: int,
    noise: DistributedGaussian,
    contributors: int,
    rng: Any = None,
    *,
    vectorisation: str = "isometric",
) -> tuple[np.ndarray, np.ndarray]:
    r"""The distributed model given the exact second moment :math:`S = X^\top X/n` of ``n``
    users (rows of norm <= 1: the caller vouches) split over ``contributors`` holders:
    :math:`\hat S = S + \frac1n\sum_h G_h`, the holders' shares summed by their law, one
    symmetric Gaussian of σ :math:`\sigma_s\sqrt{C}` per packed entry
    (:func:`fedspectral.privacy.symmetric_gaussian`).  For experiments that draw
    :math:`S` from its Wishart law; how the rows split over holders does not change
    :math:`\hat S`'s law.  Returns ``(V, S_hat)``, ``V`` the top-``k`` eigenvectors."""
    if not isinstance(noise, DistributedGaussian):
        raise TypeError(f"noise must be a DistributedGaussian, got {type(noise).__name__}")
    n = check_int("n", n, low=1)
    check_choice("vectorisation", vectorisation, VECTORISATIONS)
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square matrix, got shape {S.shape}")
    p = check_dimension(S.shape[0], "the dimension p of S")
    k = check_int("k", k, low=1, high=p)
    sd = noise.total_sigma(contributors)
    S_hat = S + symmetric_gaussian(p, sd, _as_rng(rng), vectorisation=vectorisation) / n
    return top_k_eigvecs(S_hat, k)[1], S_hat
