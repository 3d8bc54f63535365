r"""Which training images each client of an experiment holds, as positions (no tensors).

The split of an experiment is a function of its config (``data``, ``partition``,
``run.seed``), of the method (:meth:`~fedspectral.fed.protocol.Method.public_size`,
:meth:`~fedspectral.fed.protocol.Method.layout_clients`) and of the training labels
alone.  :func:`plan_federation` computes it as index arrays into the loaded train
split (:func:`prepare_federation` builds the in-process runner's data from it, a
:class:`Federation`), in this order:

1. ``data.max_train``: a class-stratified subset (seed ``("max_train", seed)``);
2. the method's public split (seed ``("public", seed)``): from outside that subset
   when it leaves enough images, else carved out of it;
3. ``data.val_fraction``: the validation part (seed ``("val", seed)``);
4. the partition of what is left (seed ``("partition", seed)``:
   :func:`fedspectral.data.partition_clients`), laid out by the method.

So a node of a deployment builds only its own partition, bit for bit the one the
in-process runner gives that client (:func:`client_partition`), and the number of
clients is known from the config without loading any data (:func:`client_ids`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedspectral.config import ExperimentConfig
from fedspectral.data.augment import SimCLRAugment
from fedspectral.data.datasets import train_val_indices
from fedspectral.data.partition import partition_clients, stratified_subset
from fedspectral.fed.randomness import derive_seed

if TYPE_CHECKING:  # the method is only passed through: no import of the protocol at run time
    from fedspectral.fed.protocol import Method

__all__ = [
    "Federation",
    "FederationPlan",
    "augmenter",
    "client_ids",
    "client_partition",
    "client_partition_of",
    "plan_federation",
    "prepare_federation",
]

#: where the public split came from (``Federation.info["public_source"]``)
PUBLIC_OUTSIDE = "training images outside data.max_train"
PUBLIC_CARVED = "carved out of the training set before partitioning"


def _client(j: int) -> str:
    return f"client-{j}"


@dataclass(frozen=True)
class FederationPlan:
    """The split of one experiment as sorted positions in the loaded train split.

    Attributes
    ----------
    pool : numpy.ndarray
        The training set the clients are drawn from (after ``data.max_train``, the
        public split and the validation part).
    parts : list of numpy.ndarray
        The partition, as positions in ``pool``.
    clients : dict of str to numpy.ndarray
        Client id -> its images, as positions in ``pool`` (the method's layout of
        ``parts``).
    val : numpy.ndarray or None
        The validation part (``data.val_fraction > 0``).
    public : numpy.ndarray or None
        The server's public split (``method.public_size() > 0``).
    public_source : str or None
        Where the public split came from.
    """

    pool: np.ndarray
    parts: list[np.ndarray]
    clients: dict[str, np.ndarray]
    val: np.ndarray | None = None
    public: np.ndarray | None = None
    public_source: str | None = None

    def client_positions(self, cid: str) -> np.ndarray:
        """Client ``cid``'s images as positions in the loaded train split."""
        return self.pool[self.clients[cid]]


def _public_split(
    cfg: ExperimentConfig, method: Method, labels: np.ndarray, pool: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, str | None]:
    """(pool without the public split, the public split, its source)."""
    n_pub = int(method.public_size())
    if n_pub <= 0:
        return pool, None, None
    rng = np.random.default_rng(derive_seed("public", cfg.run.seed))
    outside = np.setdiff1d(np.arange(len(labels)), pool)
    if len(outside) >= n_pub:  # the clients keep exactly the data of the other methods
        return pool, outside[stratified_subset(labels[outside], n_pub, rng)], PUBLIC_OUTSIDE
    if n_pub < len(pool):
        pick = stratified_subset(labels[pool], n_pub, rng)
        return pool[np.setdiff1d(np.arange(len(pool)), pick)], pool[pick], PUBLIC_CARVED
    raise ValueError(
        f"method {method.name!r} asks for a public split of {n_pub} "
        f"images but the training set has only {len(pool)}"
    )


def plan_federation(
    cfg: ExperimentConfig, method: Method, labels: Any, num_classes: int | None = None
) -> FederationPlan:
    """The split of ``cfg`` for ``method`` given the labels of the whole train split.

    Parameters
    ----------
    cfg : ExperimentConfig
        A validated config.
    method : Method
        Its method (public split, layout of the clients).
    labels : array of int, shape (n,)
        The labels of the loaded train split, in order.
    num_classes : int, optional
        The dataset's number of classes (``ImageData.num_classes``; default
        ``labels.max() + 1``).
    """
    d, seed = cfg.data, cfg.run.seed
    labels = np.asarray(labels)
    pool = np.arange(len(labels))
    if d.max_train is not None and d.max_train < len(labels):
        pool = stratified_subset(
            labels, d.max_train, np.random.default_rng(derive_seed("max_train", seed))
        )
    pool, public, source = _public_split(cfg, method, labels, pool)
    val = None
    if d.val_fraction > 0:
        keep, held = train_val_indices(labels[pool], d.val_fraction, derive_seed("val", seed))
        pool, val = pool[keep], pool[held]
    parts = partition_clients(
        labels[pool],
        cfg.partition,
        np.random.default_rng(derive_seed("partition", seed)),
        num_classes=num_classes,
    )
    layout = method.layout_clients(parts)
    return FederationPlan(
        pool, parts, {_client(j): q for j, q in enumerate(layout)}, val, public, source
    )


def client_ids(cfg: ExperimentConfig, method: Method) -> list[str]:
    """The ids of the method's clients, from the config alone (no data is loaded).

    The method's layout of ``partition.num_clients`` parts: one client per part, or
    one for all of them (centralized training).
    """
    stand_in = [np.array([j], dtype=np.int64) for j in range(cfg.partition.num_clients)]
    return [_client(j) for j in range(len(method.layout_clients(stand_in)))]


def augmenter(cfg: ExperimentConfig, size: int) -> Any:
    """The view generator of ``cfg`` for images of ``size`` x ``size`` pixels."""
    return SimCLRAugment(size, color=cfg.data.color_jitter)


def client_partition(cfg: ExperimentConfig, method: Method, cid: str) -> Any:
    """Client ``cid``'s :class:`~fedspectral.data.ImageData` alone: the train split is
    loaded, the split planned from its labels, and only ``cid``'s images are copied
    out (no other client's tensor is built).

    Raises
    ------
    ValueError
        ``cid`` is not a client of the experiment (before any data is loaded).
    """
    return client_partition_of(cfg, method, cid)[0]


def client_partition_of(cfg: ExperimentConfig, method: Method, cid: str) -> tuple[Any, Any]:
    """(client ``cid``'s partition, the whole train split it is cut from):
    :func:`client_partition` for a caller that also needs the source (a simulation node
    keys its ledger by the source's content)."""
    # per call: tests replace fedspectral.data.load_dataset
    from fedspectral.data import load_dataset

    ids = client_ids(cfg, method)
    if cid not in ids:
        raise ValueError(
            f"this node is {cid} but the federation has clients {ids} "
            "(start one SuperNode per client)"
        )
    d = cfg.data
    train = load_dataset(d.dataset, "train", root=d.root, download=d.download)
    plan = plan_federation(cfg, method, train.labels.numpy(), train.num_classes)
    return train.subset(plan.client_positions(cid)), train


# --------------------------------------------------------------------------------------
# the loaded data of the in-process runner
# --------------------------------------------------------------------------------------
@dataclass
class Federation:
    """The data of one experiment, split as the method sees it.

    ``clients`` maps client id -> its :class:`~fedspectral.data.ImageData`;
    ``bank`` is the un-augmented training set used as the KNN memory bank (and
    the linear probe's training set); ``eval`` the evaluation set (test split, or
    the validation part of the train split); ``augment`` the view generator;
    ``public`` the server's public split (the
    :meth:`~fedspectral.fed.protocol.Method.public_size` images no client holds;
    ``None`` when the method needs none).
    """

    clients: dict[str, Any]
    bank: Any
    eval: Any
    augment: Callable[..., Any]
    info: dict[str, Any]
    public: Any = None


def _capped(ds: Any, size: int | None, tag: str, seed: int) -> Any:
    """``ds``, or a stratified subset of ``size`` of it (seeded by ``tag``) when smaller."""
    if size is None or size >= len(ds):
        return ds
    rng = np.random.default_rng(derive_seed(tag, seed))
    return ds.subset(stratified_subset(ds.labels.numpy(), size, rng))


def prepare_federation(cfg: ExperimentConfig, method: Method) -> Federation:
    """Load the data of ``cfg`` and split it among the method's clients (the split:
    :func:`fedspectral.fed.federation.plan_federation`)."""
    # per call: tests replace fedspectral.data.load_dataset
    from fedspectral.data import load_dataset

    d, seed = cfg.data, cfg.run.seed
    full = load_dataset(d.dataset, "train", root=d.root, download=d.download)
    plan = plan_federation(cfg, method, full.labels.numpy(), full.num_classes)
    if d.eval_split == "val":
        if plan.val is None:  # validation refuses this config
            raise ValueError("data.eval_split 'val' needs data.val_fraction > 0")
        ev = full.subset(plan.val)
    else:
        ev = load_dataset(d.dataset, "test", root=d.root, download=d.download)
    ev = _capped(ev, cfg.eval.test_size, "test", seed)
    clients = {c: full.subset(plan.client_positions(c)) for c in plan.clients}
    used = plan.pool[np.sort(np.concatenate(plan.parts))]
    bank = full.subset(used)
    bank = _capped(bank, cfg.eval.bank_size, "bank", seed)
    info = {
        "train_size": len(used),
        "eval_size": len(ev),
        "bank_size": len(bank),
        "eval_split": d.eval_split,
        "client_sizes": {k: len(v) for k, v in clients.items()},
        "client_classes": {
            k: sorted(int(x) for x in np.unique(v.labels.numpy())) for k, v in clients.items()
        },
    }
    public = None
    if plan.public is not None:
        public = full.subset(plan.public)
        info.update({"public_size": len(public), "public_source": plan.public_source})
    return Federation(clients, bank, ev, augmenter(cfg, full.shape[1]), info, public)
