"""Real-data loaders of the LDP-PCA experiments: exact preprocessing, errors, offline path."""

from __future__ import annotations

import os
import urllib.error
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedspectral.pca.real_data import (
    COVTYPE_BOUNDS,
    DatasetUnavailableError,
    average_pool,
    load_covertype,
    load_fashion_mnist_pooled,
    normalize_rows,
)


def test_average_pool_matches_torch_avg_pool2d():
    rng = np.random.default_rng(0)
    imgs = rng.random((5, 28, 28))
    ref = torch.nn.functional.avg_pool2d(torch.from_numpy(imgs)[:, None], 4)[:, 0].numpy()
    np.testing.assert_allclose(average_pool(imgs, 4), ref, rtol=0, atol=1e-14)
    # hand value: the top-left tile
    assert average_pool(imgs, 4)[2, 0, 0] == pytest.approx(imgs[2, :4, :4].mean(), abs=1e-15)


def test_average_pool_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of block"):
        average_pool(np.zeros((2, 28, 28)), 5)
    with pytest.raises(ValueError, match="block"):
        average_pool(np.zeros((2, 28, 28)), 0)
    with pytest.raises(ValueError, match="shape"):
        average_pool(np.zeros((28, 28)), 4)


def test_normalize_rows_unit_norm_direction_and_zero_rows():
    X = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 1.0]])
    Y = normalize_rows(X)
    np.testing.assert_allclose(Y, [[0.6, 0.8], [0.0, 0.0], [-(2**-0.5), 2**-0.5]], atol=1e-15)
    with pytest.raises(ValueError, match="2-dimensional"):
        normalize_rows(np.ones(3))


def _fmnist_available() -> bool:
    return os.path.exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


@pytest.mark.skipif(
    not _fmnist_available(),
    reason="Fashion-MNIST idx files not installed (Debian package dataset-fashion-mnist)",
)
def test_fashion_mnist_pooled_is_exactly_pool_then_normalise():
    from fedspectral.data import load_dataset

    X, y = load_fashion_mnist_pooled("test")
    assert X.shape == (10000, 49) and y.shape == (10000,)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    imgs = load_dataset("fashion_mnist", split="test").images  # independent path: torch pooling
    ref = torch.nn.functional.avg_pool2d(imgs.double(), 4).reshape(len(imgs), 49).numpy()
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(X, ref, atol=1e-12)
    assert set(np.unique(y)) == set(range(10))
    # subsampling: reproducible, without replacement, a subset of the rows
    Xa, _ = load_fashion_mnist_pooled("test", n=500, rng=3)
    Xb, _ = load_fashion_mnist_pooled("test", n=500, rng=3)
    np.testing.assert_array_equal(Xa, Xb)
    assert len(np.unique(Xa, axis=0)) == 500
    with pytest.raises(ValueError, match="exceeds"):
        load_fashion_mnist_pooled("test", n=10001)


def test_fashion_mnist_bad_options_fail_before_loading(monkeypatch):
    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("loader called before validation")

    monkeypatch.setattr("fedspectral.data.datasets.load_dataset", boom)
    with pytest.raises(ValueError, match="split"):
        load_fashion_mnist_pooled("validation")
    with pytest.raises(ValueError, match="n must"):
        load_fashion_mnist_pooled("test", n=0)
    with pytest.raises(ValueError, match="block"):
        load_fashion_mnist_pooled("test", block=5)


def test_fashion_mnist_missing_files_clear_error(monkeypatch, tmp_path):
    def missing(*a, **k):
        raise FileNotFoundError("Fashion-MNIST test files ... not found")

    monkeypatch.setattr("fedspectral.data.datasets.load_dataset", missing)
    with pytest.raises(DatasetUnavailableError, match="not found"):
        load_fashion_mnist_pooled("test", root=tmp_path)


def _fake_covtype(n=200, seed=0):
    rng = np.random.default_rng(seed)
    quant = rng.random((n, 10)) * np.array(list(COVTYPE_BOUNDS.values()))
    wild = np.eye(4)[rng.integers(0, 4, n)]
    soil = np.eye(40)[rng.integers(0, 40, n)]
    return SimpleNamespace(data=np.hstack([quant, wild, soil]), target=rng.integers(1, 8, n))


def test_covertype_bounds_scaling_is_data_independent(monkeypatch):
    fake = _fake_covtype()
    monkeypatch.setattr("sklearn.datasets.fetch_covtype", lambda **kw: fake)
    X, y = load_covertype()
    assert X.shape == (200, 54)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)
    ref = fake.data.copy()
    ref[:, :10] /= np.array([4500, 360, 90, 1e4, 1e3, 1e4, 255, 255, 255, 1e4])
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(X, ref, atol=1e-14)
    np.testing.assert_array_equal(y, fake.target)
    # a row's output depends on that row only: appending other rows changes nothing
    fake2 = SimpleNamespace(
        data=np.vstack([fake.data, 7 * fake.data[:10]]), target=np.r_[fake.target, fake.target[:10]]
    )
    monkeypatch.setattr("sklearn.datasets.fetch_covtype", lambda **kw: fake2)
    X2, _ = load_covertype()
    np.testing.assert_allclose(X2[:200], X, atol=1e-15)


def test_covertype_standardize_warns_about_privacy_cost(monkeypatch):
    monkeypatch.setattr("sklearn.datasets.fetch_covtype", lambda **kw: _fake_covtype())
    with pytest.warns(UserWarning, match="NOT accounted"):
        X, _ = load_covertype(scaling="standardize")
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-12)


def test_covertype_subsample(monkeypatch):
    monkeypatch.setattr("sklearn.datasets.fetch_covtype", lambda **kw: _fake_covtype())
    Xa, ya = load_covertype(n=50, rng=1)
    Xb, yb = load_covertype(n=50, rng=np.random.default_rng(1))
    assert Xa.shape == (50, 54)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(ya, yb)


def test_covertype_offline_error_says_network(monkeypatch):
    def offline(**kw):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr("sklearn.datasets.fetch_covtype", offline)
    with pytest.raises(DatasetUnavailableError, match="network access") as info:
        load_covertype()
    assert "Covertype" in str(info.value) and "not cached" in str(info.value)
    assert isinstance(info.value, OSError)


def test_covertype_bad_options_fail_before_fetch(monkeypatch):
    def boom(**kw):  # pragma: no cover - must not be reached
        raise AssertionError("fetch called before validation")

    monkeypatch.setattr("sklearn.datasets.fetch_covtype", boom)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="scaling"):
            load_covertype(scaling="minmax")
        with pytest.raises(ValueError, match="n must"):
            load_covertype(n=-3)
        with pytest.raises(TypeError, match="download_if_missing"):
            load_covertype(download_if_missing="yes")
