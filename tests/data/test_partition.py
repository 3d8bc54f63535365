"""Client partitions: disjoint, covering, the paper's class splits, weights q_j."""

import numpy as np
import pytest
import torch

from fedspectral.config import PartitionConfig
from fedspectral.data import (
    client_classes,
    client_weights,
    partition_by_class,
    partition_clients,
    partition_dirichlet,
    partition_iid,
    stratified_subset,
)


def _labels(num_classes: int, per_class: np.ndarray | int, seed: int = 0) -> np.ndarray:
    counts = np.broadcast_to(per_class, (num_classes,))
    y = np.repeat(np.arange(num_classes), counts)
    return np.random.default_rng(seed).permutation(y)


def _check_disjoint_cover(parts: list[np.ndarray], n: int, cover: bool = True) -> None:
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx), "clients overlap"
    if cover:
        assert np.array_equal(np.sort(allidx), np.arange(n))
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)


@pytest.mark.parametrize(
    ("num_classes", "clients", "per_client"),
    [(10, 5, 2), (10, 10, 1), (100, 20, 5)],  # SVHN, CIFAR-10 / Fashion-MNIST, CIFAR-100
)
def test_by_class_as_paper(num_classes: int, clients: int, per_client: int) -> None:
    counts = np.random.default_rng(1).integers(5, 30, size=num_classes)
    y = _labels(num_classes, counts)
    parts = partition_by_class(y, clients, per_client)
    assert len(parts) == clients
    _check_disjoint_cover(parts, len(y))
    # exact assignment, in label order: client j has classes j*c..(j+1)*c-1, ALL their samples
    for j, p in enumerate(parts):
        cls = np.arange(j * per_client, (j + 1) * per_client)
        assert np.array_equal(np.unique(y[p]), cls)
        assert len(p) == counts[cls].sum()
    q = client_weights(parts)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(q, [len(p) / len(y) for p in parts], rtol=0, atol=0)


def test_by_class_random_groups_reproducible() -> None:
    y = torch.as_tensor(_labels(10, 7))
    a = partition_by_class(y, 5, 2, rng=np.random.default_rng(3))
    b = partition_by_class(y, 5, 2, rng=3)
    c = partition_by_class(y, 5, 2, rng=4)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c, strict=True))
    cls = client_classes(y, a)
    assert all(len(k) == 2 for k in cls)
    assert sorted(np.concatenate(cls).tolist()) == list(range(10))


def test_by_class_validation() -> None:
    y = _labels(10, 5)
    with pytest.raises(ValueError, match=r"11 \* 1 = 11 exceeds the 10 classes"):
        partition_by_class(y, 11, 1)
    with pytest.raises(ValueError, match=r"6 \* 2 = 12"):
        partition_by_class(y, 6, 2)
    with pytest.raises(ValueError, match="num_clients must be >= 1, got 0"):
        partition_by_class(y, 0, 1)
    with pytest.warns(UserWarning, match="uses 8 of 10 classes"):
        parts = partition_by_class(y, 4, 2)
    _check_disjoint_cover(parts, len(y), cover=False)
    # a class with no sample -> that client would be empty
    y_missing = y[y != 3]
    with pytest.raises(ValueError, match=r"client 3: class\(es\) \[3\]"):
        partition_by_class(y_missing, 10, 1, num_classes=10)


def test_dirichlet_reproducible_and_skewed() -> None:
    y = _labels(10, 200)
    a = partition_dirichlet(y, 8, 0.3, np.random.default_rng(7), min_size=10)
    b = partition_dirichlet(y, 8, 0.3, np.random.default_rng(7), min_size=10)
    c = partition_dirichlet(y, 8, 0.3, np.random.default_rng(8), min_size=10)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c, strict=True))
    _check_disjoint_cover(a, len(y))
    assert min(len(p) for p in a) >= 10
    assert client_weights(a).sum() == pytest.approx(1.0)

    # skew grows as alpha shrinks: mean total-variation distance of client label
    # histograms from the global one (uniform). Seeded; margins are large.
    def mean_tv(alpha: float) -> float:
        parts = partition_dirichlet(y, 8, alpha, 0, min_size=1)
        tv = [0.5 * np.abs(np.bincount(y[p], minlength=10) / len(p) - 0.1).sum() for p in parts]
        return float(np.mean(tv))

    assert mean_tv(0.1) > 0.5 > mean_tv(100.0)
    assert mean_tv(100.0) < 0.1


def test_dirichlet_validation() -> None:
    y = _labels(3, 4)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0, got 0"):
        partition_dirichlet(y, 2, 0, 0)
    with pytest.raises(ValueError, match=r"min_size \* num_clients = 5 \* 3 exceeds the 12"):
        partition_dirichlet(y, 3, 1.0, 0, min_size=5)
    with pytest.raises(ValueError, match="no Dirichlet"):
        partition_dirichlet(y, 4, 0.01, 0, min_size=3, max_tries=5)


def test_iid() -> None:
    parts = partition_iid(103, 10, np.random.default_rng(0))
    _check_disjoint_cover(parts, 103)
    assert sorted(len(p) for p in parts) == [10] * 7 + [11] * 3
    again = partition_iid(103, 10, 0)
    assert all(np.array_equal(u, v) for u, v in zip(parts, again, strict=True))
    with pytest.raises(ValueError, match="n=3 samples cannot fill num_clients=4"):
        partition_iid(3, 4, 0)


def test_client_weights_errors() -> None:
    with pytest.raises(ValueError, match=r"client\(s\) \[1\] are empty"):
        client_weights([np.arange(3), np.array([], dtype=np.int64)])
    with pytest.raises(ValueError, match="no clients"):
        client_weights([])
    np.testing.assert_array_equal(client_weights([np.arange(1), np.arange(3)]), [0.25, 0.75])


def test_stratified_subset_keeps_class_proportions() -> None:
    y = _labels(4, np.array([50, 30, 15, 5]), seed=1)
    idx = stratified_subset(y, 21, np.random.default_rng(0))
    assert len(idx) == 21 and len(np.unique(idx)) == 21 and np.all(np.diff(idx) > 0)
    counts = np.bincount(y[idx], minlength=4)
    # floor(n_c * 21 / 100) = 10, 6, 3, 1 and the one left over to a random class
    assert np.all(counts - np.array([10, 6, 3, 1]) >= 0) and counts.sum() == 21
    assert np.array_equal(idx, stratified_subset(y, 21, 0))  # a seed or a Generator
    assert np.array_equal(stratified_subset(y, 500, 0), np.arange(100))
    with pytest.raises(ValueError, match="n must be"):
        stratified_subset(y, 0, 0)
    with pytest.raises(TypeError, match="n"):
        stratified_subset(y, True, 0)
    with pytest.raises(ValueError, match="1-d"):
        stratified_subset(y.reshape(10, 10), 5, 0)


def test_partition_clients_applies_scheme_then_samples_per_client() -> None:
    y = _labels(6, 40)
    spec = PartitionConfig(scheme="dirichlet", num_clients=3, dirichlet_alpha=1.0)
    parts = partition_clients(y, spec, np.random.default_rng(5))
    assert all(
        np.array_equal(a, b)
        for a, b in zip(
            parts, partition_dirichlet(y, 3, 1.0, np.random.default_rng(5)), strict=True
        )
    )
    spec.samples_per_client = 30
    sub = partition_clients(y, spec, np.random.default_rng(5))
    assert [len(q) for q in sub] == [min(30, len(q)) for q in parts]
    assert all(set(b) <= set(a) for a, b in zip(parts, sub, strict=True))
    _check_disjoint_cover(sub, len(y), cover=False)
    by_class = partition_clients(
        y, PartitionConfig(num_clients=3, classes_per_client=2), np.random.default_rng(0)
    )
    assert [np.unique(y[q]).tolist() for q in by_class] == [[0, 1], [2, 3], [4, 5]]
