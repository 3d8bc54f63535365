r"""The node's own data: which records it holds, how many, and their identity.

In a deployment **the data is the node's**: a deployed node reads its data set, its
part of it and so its size :math:`|D_j|` from its own node config
(``flower-supernode --node-config ...``, Flower's ``Context.node_config``), never from the
server's configuration.  The server sends models and requests; it chooses neither the
records a node uses, nor how they are split, nor how a release over them is priced, nor
the key of the node's budget.

Node-config keys
    ``data-dataset`` (required on a deployed node)
        one of :data:`fedspectral.data.DATASETS`; the node's records are the train split
        of that data set, read from ``data-root``.
    ``data-root`` (optional)
        the folder holding the data set's files (default: the library's default root).
    ``data-limit`` (optional, integer >= 1)
        keep the first ``data-limit`` records (by position in the file, never by label).
    ``data-shard`` (optional, ``"i/N"``)
        keep the ``i``-th of ``N`` contiguous blocks of positions
        (``numpy.array_split``), after ``data-limit``.

Every selection is by position alone, so it is a fixed function of the node's config and
the number of records: changing one record (its image or its label) changes exactly that
record of the node's data set, never which records the node holds -- the replace-one
relation the node prices its releases under.  :math:`|D_j|` is a public fact of the
node's config (and of the file's length).

The identity of the data (:func:`data_identity`, the key of the node's ledger) is a
SHA-256 digest of the whole train split's content (images and labels) and the data set's
name: the same files under another path are the same data set (the same budget), and no
path the server sends enters it.

A simulation node (its policy's ``simulation = true``: the experimenter's own virtual
nodes, where the server is the experimenter's own process) cuts its partition from the
server's plan instead (:func:`fedspectral.fed.federation.client_partition`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["NODE_DATA_KEYS", "NodeData", "data_identity", "load_node_data", "node_data_spec"]

#: the node-config keys of the node's data
NODE_DATA_KEYS = ("data-dataset", "data-root", "data-limit", "data-shard")


@dataclass(frozen=True)
class NodeData:
    """The node's data as its node config states it (:meth:`from_node_config`)."""

    dataset: str
    root: str | None = None
    limit: int | None = None
    shard: tuple[int, int] | None = None

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> NodeData | None:
        """The node's data spec, ``None`` when its config names no ``data-dataset``;
        ``ValueError`` naming the node-config key for a bad value."""
        from fedspectral.checks import check_int, describe
        from fedspectral.data import DATASETS

        name = node_config.get("data-dataset")
        if name in (None, ""):
            others = [k for k in NODE_DATA_KEYS[1:] if k in node_config and k != "data-root"]
            if others:
                raise ValueError(
                    f"node config sets {', '.join(others)} but no data-dataset: name the "
                    f"node's data set (one of {', '.join(DATASETS)})"
                )
            return None
        if not isinstance(name, str) or name not in DATASETS:
            raise ValueError(
                f"node config data-dataset must be one of {', '.join(DATASETS)}, got "
                f"{describe(name)}"
            )
        root = node_config.get("data-root")
        if root is not None and not isinstance(root, str):
            raise ValueError(f"node config data-root must be a path, got {describe(root)}")
        limit = node_config.get("data-limit")
        if limit is not None:
            limit = check_int("node config data-limit", limit, low=1)
        shard = node_config.get("data-shard")
        if shard is not None:
            shard = _shard(shard)
        return cls(name, root or None, limit, shard)

    def positions(self, n: int) -> np.ndarray:
        """The positions of the node's records among ``n`` (no label is read)."""
        pos = np.arange(int(n))
        if self.limit is not None:
            pos = pos[: self.limit]
        if self.shard is not None:
            i, parts = self.shard
            pos = np.array_split(pos, parts)[i]
        return pos


def _shard(value: Any) -> tuple[int, int]:
    from fedspectral.checks import describe

    text = str(value).strip() if isinstance(value, str) else None
    try:
        i_s, n_s = text.split("/") if text is not None else ("", "")
        i, n = int(i_s), int(n_s)
    except ValueError:
        i, n = -1, 0
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(
            f"node config data-shard must be 'i/N' with 0 <= i < N, got {describe(value)}"
        )
    return i, n


def data_identity(dataset: str, images: Any, labels: Any) -> str:
    """The node's identity of a data set: SHA-256 of its name and content (the ledger's
    key, :class:`~.policy.NodeLedger`); paths do not enter it."""
    from fedspectral.fed.flower.node.policy import dataset_key

    h = hashlib.sha256()
    for t in (images, labels):
        a = np.ascontiguousarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.data.cast("B"))  # the contiguous array's buffer
    return dataset_key("fedspectral-images", dataset, h.hexdigest())


def load_node_data(spec: NodeData) -> tuple[Any, str]:
    """(the node's records as an :class:`~fedspectral.data.ImageData`, the data set's
    identity) for ``spec``; never downloads."""
    from fedspectral.data import load_dataset

    train = load_dataset(spec.dataset, "train", root=spec.root, download=False)
    ident = data_identity(spec.dataset, train.images, train.labels)
    return train.subset(spec.positions(len(train))), ident


def node_data_spec(node_config: Mapping[str, Any], pol: Any, model_dataset: str) -> NodeData:
    """A deployed node's data spec from its node config, checked before any data is read:
    refused (``pol.refuse``) when the config names no data set, or when the server's model
    is for images of another shape than the node's (``model_dataset``'s: both public
    facts); ``ValueError`` naming the node-config key for a bad value."""
    from fedspectral.data import dataset_info

    spec = NodeData.from_node_config(node_config)
    if spec is None:
        raise pol.refuse(
            "this node's data set is not configured (node config data-dataset, "
            "data-root; see docs/flower.md): a deployed node never takes its data "
            "from the server"
        )
    want, have = dataset_info(model_dataset), dataset_info(spec.dataset)
    if (want.channels, want.size) != (have.channels, have.size):
        raise pol.refuse(
            f"the server's model is for {model_dataset!r} images "
            f"({want.channels}x{want.size}x{want.size}); this node holds "
            f"{spec.dataset!r} ({have.channels}x{have.size}x{have.size})"
        )
    return spec
