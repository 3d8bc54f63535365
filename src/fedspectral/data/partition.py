r"""Splitting a training set among federated clients.

All partitioners return a list of ``numpy`` ``int64`` index arrays (one per
client, each sorted), disjoint; no client is ever empty (``ValueError``).

``partition_by_class``
    The FedSC paper's label-skew split (the FedSC paper, Sec. 6): the classes are cut
    into ``num_clients`` disjoint groups of ``classes_per_client`` classes and
    client :math:`j` receives *all* training samples of its classes — SVHN
    5 clients x 2 classes, CIFAR-10 10 x 1, CIFAR-100 20 x 5 (Fashion-MNIST
    10 x 1 or 5 x 2 here).
``partition_dirichlet``
    For each class :math:`c`, proportions :math:`p_c \sim \mathrm{Dir}(\alpha 1_K)`
    split that class's samples among the :math:`K` clients (Hsu et al., 2019);
    redrawn until every client holds at least ``min_size`` samples.
``partition_iid``
    A uniformly random permutation cut into near-equal parts.

:func:`partition_clients` applies a :class:`~fedspectral.config.PartitionConfig`
(scheme, then ``samples_per_client``); :func:`stratified_subset` draws a class-stratified
subset.  :func:`client_weights` gives the aggregation weights
:math:`q_j = |D_j| / \sum_i |D_i|` of the paper's global objective.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedspectral.checks import check_int

if TYPE_CHECKING:
    from fedspectral.config import PartitionConfig

RngLike = np.random.Generator | int | None


def _as_rng(rng: RngLike) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy.random.Generator or an int seed, got {rng!r}")


def _as_labels(labels: np.ndarray | torch.Tensor | Sequence[int]) -> np.ndarray:
    y = labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {y.shape}")
    if y.size == 0:
        raise ValueError("labels is empty")
    if not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels must be integers, got dtype {y.dtype}")
    if y.min() < 0:
        raise ValueError(f"labels must be >= 0, got {int(y.min())}")
    return y.astype(np.int64, copy=False)


def _check_positive_int(name: str, value: object) -> int:
    return check_int(name, value, low=1)


def partition_by_class(
    labels: np.ndarray | torch.Tensor | Sequence[int],
    num_clients: int,
    classes_per_client: int,
    rng: RngLike = None,
    num_classes: int | None = None,
) -> list[np.ndarray]:
    """Disjoint class groups; client ``j`` gets every sample of its classes.

    Parameters
    ----------
    labels : array of int, shape (n,)
    num_clients : int
    classes_per_client : int
        ``num_clients * classes_per_client`` must not exceed the number of
        classes; classes left over are dropped (with a warning).
    rng : numpy.random.Generator, int or None
        ``None``: client ``j`` gets classes ``j*c .. (j+1)*c - 1`` in label
        order (deterministic, the natural reading of the paper). Otherwise the
        classes are randomly permuted before grouping.
    num_classes : int, optional
        Default ``labels.max() + 1``.

    Returns
    -------
    list of numpy.ndarray
        Sorted sample indices of each client.

    Raises
    ------
    ValueError
        ``num_clients * classes_per_client > num_classes``, or a client would
        be empty because one of its classes has no sample.
    """
    num_clients = _check_positive_int("num_clients", num_clients)
    classes_per_client = _check_positive_int("classes_per_client", classes_per_client)
    y = _as_labels(labels)
    k = int(y.max()) + 1 if num_classes is None else _check_positive_int("num_classes", num_classes)
    if y.max() >= k:
        raise ValueError(f"label {int(y.max())} >= num_classes={k}")
    if num_clients * classes_per_client > k:
        raise ValueError(
            f"num_clients * classes_per_client = {num_clients} * {classes_per_client} = "
            f"{num_clients * classes_per_client} exceeds the {k} classes"
        )
    order = np.arange(k) if rng is None else _as_rng(rng).permutation(k)
    used = num_clients * classes_per_client
    if used < k:
        warnings.warn(
            f"partition_by_class uses {used} of {k} classes; the samples of classes "
            f"{sorted(order[used:].tolist())} are left out",
            stacklevel=2,
        )
    counts = np.bincount(y, minlength=k)
    parts = []
    for j in range(num_clients):
        cls = order[j * classes_per_client : (j + 1) * classes_per_client]
        if np.any(counts[cls] == 0):
            empty = [int(c) for c in cls if counts[c] == 0]
            raise ValueError(f"client {j}: class(es) {empty} have no samples")
        parts.append(np.flatnonzero(np.isin(y, cls)).astype(np.int64))
    return parts


def client_classes(
    labels: np.ndarray | torch.Tensor | Sequence[int], parts: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """The sorted distinct labels held by each client."""
    y = _as_labels(labels)
    return [np.unique(y[p]) for p in parts]


def partition_dirichlet(
    labels: np.ndarray | torch.Tensor | Sequence[int],
    num_clients: int,
    alpha: float,
    rng: RngLike,
    min_size: int = 10,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    r"""Label-skewed split with Dirichlet(:math:`\alpha`) class proportions.

    For each class :math:`c` draw :math:`p_c \sim \mathrm{Dir}(\alpha,\dots,\alpha)`
    over the clients and cut the (shuffled) samples of class :math:`c` at the
    cumulative proportions. The whole draw is repeated until every client holds
    at least ``min_size`` samples. Small :math:`\alpha` is more skewed.

    Raises
    ------
    ValueError
        ``alpha <= 0``, ``min_size * num_clients > n``, or no valid draw in
        ``max_tries`` attempts.
    """
    num_clients = _check_positive_int("num_clients", num_clients)
    min_size = _check_positive_int("min_size", min_size)
    max_tries = _check_positive_int("max_tries", max_tries)
    if not isinstance(alpha, (int, float, np.floating)) or not np.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    y = _as_labels(labels)
    if min_size * num_clients > len(y):
        raise ValueError(
            f"min_size * num_clients = {min_size} * {num_clients} exceeds the {len(y)} samples"
        )
    gen = _as_rng(rng)
    by_class = [np.flatnonzero(y == c) for c in np.unique(y)]
    for _ in range(max_tries):
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = gen.permutation(idx)
            p = gen.dirichlet(np.full(num_clients, float(alpha)))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for j, piece in enumerate(np.split(idx, cuts)):
                buckets[j].append(piece)
        parts = [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets]
        if min(len(p) for p in parts) >= min_size:
            return parts
    raise ValueError(
        f"no Dirichlet(alpha={alpha}) split gave every one of {num_clients} clients "
        f">= {min_size} samples in {max_tries} tries; raise alpha or lower min_size"
    )


def partition_iid(n: int, num_clients: int, rng: RngLike) -> list[np.ndarray]:
    """Uniformly random split of ``range(n)`` into ``num_clients`` near-equal parts.

    Raises
    ------
    ValueError
        ``n < num_clients`` (a client would be empty).
    """
    n = _check_positive_int("n", n)
    num_clients = _check_positive_int("num_clients", num_clients)
    if n < num_clients:
        raise ValueError(f"n={n} samples cannot fill num_clients={num_clients} clients")
    perm = _as_rng(rng).permutation(n)
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, num_clients)]


def partition_clients(
    labels: np.ndarray | torch.Tensor | Sequence[int],
    spec: PartitionConfig,
    rng: np.random.Generator,
    num_classes: int | None = None,
) -> list[np.ndarray]:
    """The partition ``spec`` describes: its scheme (``"class"``: classes in label
    order, ``rng`` unused; ``"dirichlet"``, ``"iid"``: drawn from ``rng``), then, when
    ``spec.samples_per_client`` is set, that many samples of each larger client drawn
    without replacement from ``rng`` (sorted).

    Raises
    ------
    ValueError
        The scheme's own errors, or a client left without data.
    """
    y = _as_labels(labels)
    if spec.scheme == "class":
        parts = partition_by_class(
            y, spec.num_clients, spec.classes_per_client, num_classes=num_classes
        )
    elif spec.scheme == "dirichlet":
        parts = partition_dirichlet(y, spec.num_clients, spec.dirichlet_alpha, rng)
    else:
        parts = partition_iid(len(y), spec.num_clients, rng)
    m = spec.samples_per_client
    if m is not None:
        parts = [np.sort(rng.choice(q, size=m, replace=False)) if len(q) > m else q for q in parts]
    empty = [j for j, q in enumerate(parts) if len(q) == 0]
    if empty:
        raise ValueError(f"partition {spec.scheme!r} leaves client(s) {empty} without data")
    return parts


def stratified_subset(
    labels: np.ndarray | torch.Tensor | Sequence[int], n: int, rng: RngLike
) -> np.ndarray:
    """``n`` indices drawn without replacement, class proportions kept (sorted); all of
    them when ``n >= len(labels)``.

    Each class gets ``floor(n_c n / N)`` samples, and the remainder goes one each to
    classes drawn at random."""
    labels = _as_labels(labels)
    n = _check_positive_int("n", n)
    rng = _as_rng(rng)
    if n >= len(labels):
        return np.arange(len(labels))
    classes, counts = np.unique(labels, return_counts=True)
    take = np.floor(counts * n / len(labels)).astype(int)
    rest = n - take.sum()
    order = rng.permutation(len(classes))
    take[order[:rest]] += 1
    out = [
        rng.choice(np.flatnonzero(labels == c), size=k, replace=False)
        for c, k in zip(classes, take, strict=True)
        if k > 0
    ]
    return np.sort(np.concatenate(out))


def client_weights(parts: Sequence[np.ndarray]) -> np.ndarray:
    r"""Aggregation weights :math:`q_j = |D_j| / \sum_i |D_i|` (paper Eq. 1).

    Raises
    ------
    ValueError
        No clients, or an empty client.
    """
    if len(parts) == 0:
        raise ValueError("parts is empty: no clients")
    sizes = np.array([len(p) for p in parts], dtype=np.float64)
    if np.any(sizes == 0):
        raise ValueError(f"client(s) {np.flatnonzero(sizes == 0).tolist()} are empty")
    return sizes / sizes.sum()
