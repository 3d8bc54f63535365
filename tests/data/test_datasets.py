"""Dataset loaders: Fashion-MNIST from the idx files, digits, clear errors."""

from pathlib import Path

import numpy as np
import pytest
import torch

from fedspectral.data import (
    DATASETS,
    ImageData,
    dataset_info,
    load_dataset,
    train_val_split,
)
from fedspectral.data.datasets import DEBIAN_FASHION_MNIST

HAS_FMNIST = (DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file()


@pytest.fixture(scope="module")
def fmnist_train() -> ImageData:
    return load_dataset("fashion_mnist", "train")


@pytest.mark.skipif(not HAS_FMNIST, reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_train(fmnist_train: ImageData) -> None:
    d = fmnist_train
    assert d.images.shape == (60000, 1, 28, 28)
    assert d.images.dtype == torch.float32 and d.labels.dtype == torch.int64
    assert float(d.images.min()) == 0.0 and float(d.images.max()) == 1.0
    # balanced: 6000 per class, labels exactly 0..9
    assert d.labels.bincount().tolist() == [6000] * 10
    info = dataset_info("fashion_mnist")
    assert (info.channels, info.size, info.num_classes, info.train_size) == (1, 28, 10, 60000)
    # the stored normalisation constants are the data's own statistics
    assert abs(float(d.images.mean()) - info.mean[0]) < 1e-3
    assert abs(float(d.images.std()) - info.std[0]) < 1e-3


@pytest.mark.skipif(not HAS_FMNIST, reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_test_split_and_reader_matches_torchvision(tmp_path: Path) -> None:
    d = load_dataset("fashion_mnist", "test")
    assert d.images.shape == (10000, 1, 28, 28)
    # independent reference: torchvision's own idx reader on the same files
    import gzip
    import shutil

    from torchvision.datasets.mnist import read_image_file, read_label_file

    for f in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        with gzip.open(DEBIAN_FASHION_MNIST / f"{f}.gz") as src, open(tmp_path / f, "wb") as dst:
            shutil.copyfileobj(src, dst)
    ref_x = read_image_file(str(tmp_path / "t10k-images-idx3-ubyte"))
    ref_y = read_label_file(str(tmp_path / "t10k-labels-idx1-ubyte"))
    assert torch.equal((d.images[:, 0] * 255).round().to(torch.uint8), ref_x)
    assert torch.equal(d.labels, ref_y.long())


def test_digits_deterministic_split() -> None:
    tr, te = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert tr.images.shape == (1343, 1, 8, 8) and te.images.shape == (454, 1, 8, 8)
    info = dataset_info("digits")
    assert (len(tr), len(te)) == (info.train_size, info.test_size)
    assert float(tr.images.min()) >= 0.0 and float(tr.images.max()) <= 1.0
    assert sorted(tr.labels.unique().tolist()) == list(range(10))
    # train and test are disjoint: no test image equals a train image at the same index set
    again = load_dataset("digits", "train")
    assert torch.equal(tr.images, again.images) and torch.equal(tr.labels, again.labels)
    from sklearn.datasets import load_digits

    assert len(tr) + len(te) == len(load_digits().target)
    # stratified: every class in both splits in proportion ~3:1
    ratio = tr.labels.bincount().float() / te.labels.bincount().float()
    assert torch.all((ratio > 2.8) & (ratio < 3.2))


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn"])
def test_missing_files_clear_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        load_dataset(name, "train", root=tmp_path, download=False)
    msg = str(err.value)
    assert str(tmp_path) in msg and "download=True" in msg
    expected = {"cifar10": "data_batch_1", "cifar100": "train", "svhn": "train_32x32.mat"}[name]
    assert expected in msg
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_missing_fashion_mnist_clear_error(tmp_path: Path, monkeypatch) -> None:
    import fedspectral.data.datasets as ds

    monkeypatch.setattr(ds, "DEBIAN_FASHION_MNIST", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
        ds.load_dataset("fashion_mnist", root=tmp_path)


def test_fashion_mnist_from_root(tmp_path: Path) -> None:
    """A root holding the idx files (torchvision layout) is used."""
    if not HAS_FMNIST:
        pytest.skip("dataset-fashion-mnist not installed")
    import shutil

    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for f in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(DEBIAN_FASHION_MNIST / f, raw / f)
    d = load_dataset("fashion_mnist", "test", root=tmp_path)
    assert len(d) == 10000


def test_bad_names() -> None:
    with pytest.raises(ValueError, match="mnist_foo.*fashion_mnist, cifar10"):
        load_dataset("mnist_foo")
    with pytest.raises(ValueError, match="valid"):
        dataset_info("imagenet")
    with pytest.raises(ValueError, match="'val'"):
        load_dataset("digits", split="val")
    assert set(DATASETS) == {"fashion_mnist", "cifar10", "cifar100", "svhn", "digits"}
    for name in DATASETS:
        info = dataset_info(name)
        assert len(info.mean) == len(info.std) == info.channels


def test_imagedata_validation_and_subset() -> None:
    x = torch.rand(5, 1, 4, 4)
    y = torch.arange(5)
    d = ImageData(x, y, 5, "toy")
    s = d.subset(np.array([4, 0]))
    assert torch.equal(s.images, x[[4, 0]]) and s.labels.tolist() == [4, 0]
    assert len(s) == 2 and s.num_classes == 5
    with pytest.raises(ValueError, match="out of range"):
        d.subset([5])
    with pytest.raises(TypeError, match="integer positions"):
        d.subset(torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="float32"):
        ImageData(x.double(), y, 5, "toy")
    with pytest.raises(ValueError, match="5 images but 4 labels"):
        ImageData(x, y[:4], 5, "toy")


def test_train_val_split_stratified_and_seeded() -> None:
    d = load_dataset("digits", "train")
    tr, va = train_val_split(d, 0.2, seed=3)
    tr2, va2 = train_val_split(d, 0.2, seed=3)
    _, va3 = train_val_split(d, 0.2, seed=4)
    assert torch.equal(va.images, va2.images) and torch.equal(tr.labels, tr2.labels)
    assert not torch.equal(va.images, va3.images)
    assert len(tr) + len(va) == len(d)
    counts = d.labels.bincount()
    assert va.labels.bincount().tolist() == [round(0.2 * int(c)) for c in counts]
    with pytest.raises(ValueError, match="1.5"):
        train_val_split(d, 1.5)


def test_cifar10_reader_layout(tmp_path: Path, monkeypatch) -> None:
    """Tiny fake CIFAR-10 files (checksums bypassed): channels land in place, N x 3 x 32 x 32."""
    import pickle

    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(2, 3, 32, 32), dtype=np.uint8)
    for f in ("test_batch",):
        with open(folder / f, "wb") as fh:
            pickle.dump({"data": raw.reshape(2, -1), "labels": [3, 7]}, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [str(i) for i in range(10)]}, fh)
    d = load_dataset("cifar10", "test", root=tmp_path)
    assert d.images.shape == (2, 3, 32, 32) and d.labels.tolist() == [3, 7]
    assert torch.equal((d.images * 255).round().to(torch.uint8), torch.from_numpy(raw))


def test_failed_download_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    import urllib.error

    import torchvision.datasets as tvd

    def offline(self) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(tvd.CIFAR100, "download", offline)
    with pytest.raises(FileNotFoundError, match=r"cifar100 train.*no network.*train, meta"):
        load_dataset("cifar100", "train", root=tmp_path, download=True)
