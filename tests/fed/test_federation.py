"""A node's own partition, planned from the labels alone, against the in-process runner's.

For every client of a config (class, Dirichlet and iid schemes; ``max_train``,
``val_fraction``, ``samples_per_client``; a method with a public split; the pooled
layout of centralized training), :func:`client_partition` equals, tensor for tensor,
what :func:`prepare_federation` gives that client, and builds nothing else: one copy
of the train split (its own images), no test split, no other client's tensor.  Both
are pinned to :data:`DIGESTS`, computed with the code before the split was planned from
the labels (``prepare_federation`` of commit e6574a7; numpy 2 streams).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from fedspectral.data import ImageData, load_dataset, train_val_indices, train_val_split
from fedspectral.fed.federation import (
    client_ids,
    client_partition,
    plan_federation,
    prepare_federation,
)
from fedspectral.fed.methods import build_method
from fedspectral.fed.validation import load_config, validate

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "digits_smoke.yaml"

CASES = {
    "class 5x2": [],
    "class, 10 x 1, val": [
        "partition.num_clients=10",
        "partition.classes_per_client=1",
        "data.val_fraction=0.2",
    ],
    "dirichlet": [
        "partition.scheme=dirichlet",
        "partition.num_clients=4",
        "partition.dirichlet_alpha=0.3",
        "data.max_train=700",
    ],
    "dirichlet, samples, val": [
        "partition.scheme=dirichlet",
        "partition.num_clients=3",
        "data.val_fraction=0.1",
        "partition.samples_per_client=120",
        "run.seed=7",
    ],
    "iid, samples": [
        "partition.scheme=iid",
        "partition.num_clients=4",
        "partition.samples_per_client=50",
        "data.max_train=500",
    ],
    "fedca, public outside": [
        "method.name=fedca",
        "method.params.public_size=100",
        "data.max_train=800",
    ],
    "fedca, public carved": [
        "method.name=fedca",
        "method.params.public_size=150",
        "partition.scheme=dirichlet",
        "data.val_fraction=0.1",
    ],
    "central": ["method.name=central_sc"],
}

#: SHA-256 (16 hex digits) over each client's id, images and labels in client order,
#: then the public split's images
DIGESTS = {
    "class 5x2": "afb3b0a95a139229",
    "class, 10 x 1, val": "96cf02c5f5e825fa",
    "dirichlet": "d00f98dd52178931",
    "dirichlet, samples, val": "2555856cc7b39202",
    "iid, samples": "62adb17d222e795a",
    "fedca, public outside": "103d4140a1afa297",
    "fedca, public carved": "c5310623a547b71f",
    "central": "ff279c0c4f8b1679",
}


def _digest(clients: dict, public=None) -> str:
    h = hashlib.sha256()
    for cid, d in clients.items():
        h.update(cid.encode())
        h.update(d.images.numpy().tobytes())
        h.update(d.labels.numpy().tobytes())
    if public is not None:
        h.update(public.images.numpy().tobytes())
    return h.hexdigest()[:16]


def _cfg(overrides: list[str]):
    return validate(load_config(str(SMOKE), overrides))


@pytest.mark.filterwarnings("ignore:partition_by_class")
@pytest.mark.parametrize("case", list(CASES))
def test_own_partition_is_the_in_process_partition_and_nothing_else_is_built(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(CASES[case])
    fed = prepare_federation(cfg, build_method(cfg))
    assert _digest(fed.clients, fed.public) == DIGESTS[case]
    assert client_ids(cfg, build_method(cfg)) == list(fed.clients)

    subsets: list[int] = []  # sizes of the ImageData copies the node makes
    loads: list[str] = []
    real_subset, real_load = ImageData.subset, load_dataset

    def counted_subset(self, idx):
        out = real_subset(self, idx)
        subsets.append(len(out))
        return out

    def counted_load(name, split, **kw):
        loads.append(split)
        return real_load(name, split, **kw)

    monkeypatch.setattr(ImageData, "subset", counted_subset)
    monkeypatch.setattr("fedspectral.data.load_dataset", counted_load)
    own_clients = {}
    for cid, ref in fed.clients.items():
        subsets.clear()
        loads.clear()
        own = own_clients[cid] = client_partition(cfg, build_method(cfg), cid)
        assert own.images.dtype == ref.images.dtype and own.images.shape == ref.images.shape
        assert torch.equal(own.images, ref.images), cid
        assert torch.equal(own.labels, ref.labels), cid
        assert (own.num_classes, own.name) == (ref.num_classes, ref.name)
        assert loads == ["train"] and subsets == [len(ref)], (cid, loads, subsets)
    assert _digest(own_clients, fed.public) == DIGESTS[case]


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_the_plan_places_the_public_and_validation_splits_as_the_runner_does() -> None:
    cfg = _cfg(CASES["fedca, public carved"])
    method = build_method(cfg)
    fed = prepare_federation(cfg, method)
    full = load_dataset("digits", "train")
    plan = plan_federation(cfg, method, full.labels.numpy(), full.num_classes)
    assert plan.public_source == fed.info["public_source"]
    assert torch.equal(full.subset(plan.public).images, fed.public.images)
    assert len(plan.val) > 0 and len(plan.pool) == sum(len(q) for q in plan.parts)
    assert not set(plan.val) & set(plan.pool) and not set(plan.public) & set(plan.pool)
    assert not set(plan.public) & set(plan.val)
    # every position of the pool is in exactly one client (a partition)
    owned = np.concatenate([plan.client_positions(c) for c in plan.clients])
    assert np.array_equal(np.sort(owned), plan.pool)


def test_client_ids_need_no_data_and_refuse_a_stranger(monkeypatch) -> None:
    cfg = _cfg([])

    def no_data(*a, **k):
        raise AssertionError("data loaded")

    monkeypatch.setattr("fedspectral.data.load_dataset", no_data)
    assert client_ids(cfg, build_method(cfg)) == [f"client-{j}" for j in range(5)]
    central = _cfg(["method.name=central_sc"])
    assert client_ids(central, build_method(central)) == ["client-0"]
    with pytest.raises(
        ValueError,
        match=r"this node is client-5 but the federation has "
        r"clients \['client-0'",
    ):
        client_partition(cfg, build_method(cfg), "client-5")


def test_train_val_indices_are_the_positions_of_train_val_split() -> None:
    data = load_dataset("digits", "train")
    for seed in (0, 3):
        tr, va = train_val_split(data, 0.25, seed)
        i, j = train_val_indices(data.labels.numpy(), 0.25, seed)
        assert torch.equal(data.subset(i).images, tr.images)
        assert torch.equal(data.subset(j).images, va.images)
        assert np.array_equal(np.sort(np.concatenate([i, j])), np.arange(len(data)))
    with pytest.raises(ValueError, match="val_fraction"):
        train_val_indices(data.labels.numpy(), 1.0)
