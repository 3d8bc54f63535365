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
    ``data-id`` (optional, text)
        the operator's name for the data set: the key of the node's ledger (its budget).
        Default: ``data-dataset``'s value (an LDP-PCA node's users: ``pca-data@node<i>``).
        The same ``data-id`` keeps the same budget whatever the records' content; an
        operator who truly means a new data set declares a new one.

Any other ``data-*`` key is refused (a typo would otherwise be ignored).

Every selection is by position alone, so it is a fixed function of the node's config and
the number of records: changing one record (its image or its label) changes exactly that
record of the node's data set, never which records the node holds -- the replace-one
relation the node prices its releases under.  :math:`|D_j|` is a public fact of the
node's config (and of the file's length).

The key of the node's ledger is the identity its operator declares
(:func:`declared_identity`), never a digest of the content: data that grow (one appended
record, a reordered tail, a record changed outside the node's shard) keep their budget,
as composition requires for the records that stayed.  The content digest
(:func:`data_identity`: SHA-256 of the whole train split's images and labels and the data
set's name) is recorded in the ledger instead, and a change of it is logged
(:class:`~.policy.NodeLedger`).  No path the server sends enters either.

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

from fedspectral.checks import check_int, describe

__all__ = [
    "NODE_DATA_KEYS",
    "NodeData",
    "check_node_data_keys",
    "dataset_key",
    "data_identity",
    "declared_identity",
    "load_node_data",
    "node_data_spec",
    "note_content",
]

#: the node-config keys of the node's data
NODE_DATA_KEYS = ("data-dataset", "data-root", "data-limit", "data-shard", "data-id")
#: the longest ``data-id`` a node accepts
MAX_DATA_ID = 200


def check_node_data_keys(node_config: Mapping[str, Any]) -> None:
    """Refuse a ``data-*`` node-config key the node does not know (a typo such as
    ``data-shards``, ``data_shard`` or ``Data-shard`` would otherwise be ignored, and the
    node serve all its records)."""
    import difflib

    for k in node_config:
        if not isinstance(k, str) or k in NODE_DATA_KEYS:
            continue
        if k.strip().lower().replace("_", "-").startswith("data-"):
            near = difflib.get_close_matches(k, NODE_DATA_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(
                f"unknown node-config key {k!r}{hint}; the node's data keys are "
                f"{', '.join(NODE_DATA_KEYS)}"
            )


def node_partition_id(node_config: Mapping[str, Any], default: int | None = None) -> int:
    """Node-config ``partition-id`` (the node is ``client-<i>``): an integer ``>= 0``, a
    float (1.7), text or a bool refused naming the key (never truncated by ``int()``);
    ``default`` when unset (``None``: required)."""
    value = node_config.get("partition-id")
    if value is None:
        if default is None:
            raise ValueError(
                "node_config has no 'partition-id' (start the SuperNode with "
                '--node-config "partition-id=<i> num-partitions=<N>")'
            )
        return default
    return check_int("node config partition-id", value, low=0)


def node_data_root(node_config: Mapping[str, Any]) -> str | None:
    """Node-config ``data-root``, the folder of the node's data files, as text (``None``
    when unset or empty); ``ValueError`` naming the key for anything else: an integer or a
    list is never made a (relative) path."""
    root = node_config.get("data-root")
    if root is None or root == "":
        return None
    if not isinstance(root, str) or not root.strip() or "\x00" in root:
        raise ValueError(f"node config data-root must be a path (text), got {describe(root)}")
    return root


def declared_identity(node_config: Mapping[str, Any], default: str) -> str:
    """The data set's identity as the node's operator declares it: node-config ``data-id``
    (non-empty printable text of at most :data:`MAX_DATA_ID` characters), else
    ``default``.  The node's ledger is keyed by it (:func:`~.policy.ledger_key`)."""
    ident = node_config.get("data-id")
    if ident is None:
        return default
    if (
        not isinstance(ident, str)
        or not ident.strip()
        or len(ident) > MAX_DATA_ID
        or not ident.isprintable()
    ):
        raise ValueError(
            f"node config data-id must be non-empty printable text of at most {MAX_DATA_ID} "
            f"characters, got {describe(ident)}"
        )
    return ident.strip()


@dataclass(frozen=True)
class NodeData:
    """The node's data as its node config states it (:meth:`from_node_config`)."""

    dataset: str
    root: str | None = None
    limit: int | None = None
    shard: tuple[int, int] | None = None
    data_id: str | None = None

    @property
    def identity(self) -> str:
        """The declared identity (``data-id``, default the data set's name): the ledger's key."""
        return self.data_id or self.dataset

    @classmethod
    def from_node_config(cls, node_config: Mapping[str, Any]) -> NodeData | None:
        """The node's data spec, ``None`` when its config names no ``data-dataset``;
        ``ValueError`` naming the node-config key for a bad value."""
        from fedspectral.data import DATASETS  # lazy: pulls in torch

        check_node_data_keys(node_config)
        root = node_data_root(node_config)  # checked where given, a data set or not
        declared_identity(node_config, "")
        name = node_config.get("data-dataset")
        if name in (None, ""):
            others = [
                k
                for k in NODE_DATA_KEYS[1:]
                if k in node_config and k not in ("data-root", "data-id")
            ]
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
        limit = node_config.get("data-limit")
        if limit is not None:
            limit = check_int("node config data-limit", limit, low=1)
        shard = node_config.get("data-shard")
        if shard is not None:
            shard = _shard(shard)
        data_id = declared_identity(node_config, name)
        return cls(name, root or None, limit, shard, data_id)

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
    import re

    # ASCII digits only: int() would also read '1_0' as 10 and non-ASCII digits
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", value.strip()) if isinstance(value, str) else None
    i, n = (int(m.group(1)), int(m.group(2))) if m else (-1, 0)
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(
            f"node config data-shard must be 'i/N' with 0 <= i < N, got {describe(value)}"
        )
    return i, n


def dataset_key(*parts: Any) -> str:
    """A short digest naming one data set of the node (e.g. its kind and content digest)."""
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def data_identity(dataset: str, images: Any, labels: Any) -> str:
    """The content digest of a data set: SHA-256 of its name and content, recorded in the
    node's ledger (:class:`~.policy.NodeLedger`), which is keyed by the declared identity
    instead (:func:`declared_identity`); paths do not enter it."""
    h = hashlib.sha256()
    for t in (images, labels):
        a = np.ascontiguousarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.data.cast("B"))  # the contiguous array's buffer
    return dataset_key("fedspectral-images", dataset, h.hexdigest())


def load_node_data(spec: NodeData) -> tuple[Any, tuple[str, str]]:
    """(the node's records as an :class:`~fedspectral.data.ImageData`, (the data set's
    declared identity, its content digest)) for ``spec``; never downloads."""
    from fedspectral.data import load_dataset  # lazy: pulls in torch

    train = load_dataset(spec.dataset, "train", root=spec.root, download=False)
    digest = data_identity(spec.dataset, train.images, train.labels)
    pos = spec.positions(len(train))
    if len(pos) == 0:  # the file's length and the node's config: public facts
        shard = None if spec.shard is None else "{}/{}".format(*spec.shard)
        raise ValueError(
            f"node config data-limit {spec.limit} and data-shard {shard!r} select 0 of the "
            f"{len(train)} records of {spec.dataset!r}: a node serves at least one record"
        )
    return train.subset(pos), (spec.identity, digest)


def node_data_spec(node_config: Mapping[str, Any], pol: Any, model_dataset: str) -> NodeData:
    """A deployed node's data spec from its node config, checked before any data is read:
    refused (``pol.refuse``) when the config names no data set, or when the server's model
    is for images of another shape than the node's (``model_dataset``'s: both public
    facts); ``ValueError`` naming the node-config key for a bad value."""
    from fedspectral.data import dataset_info  # lazy: pulls in torch

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


def note_content(data: dict[str, Any], digest: str, ledger: str) -> None:
    """Record in a node ledger's ``data`` table the content digest of the data served now;
    a change under the same declared identity is logged and recorded (``changes``: old
    and new), and the ledger -- the budget -- is kept."""
    import logging

    old = data.get("digest")
    if old is not None and old != digest:
        logging.getLogger("fedspectral.fed.flower.node.policy").warning(
            "the content of the node's data set (ledger %s) changed: digest %s -> %s; "
            "its ledger and budget are kept (declare a new data-id for a new data set)",
            ledger,
            old,
            digest,
        )
        data["changes"] = [*data.get("changes", []), {"old": str(old), "new": digest}]
    data["digest"] = digest
