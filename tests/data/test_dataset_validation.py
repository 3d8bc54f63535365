"""Data validated on load (issue 24): labels in range, one image shape across splits, every
split from the root the user named, counts and corrupt files named by file.

Each test writes tiny idx ``.gz`` files (a few 28 x 28 images) in the Fashion-MNIST
layout; a positive control loads the same layout when it is right.
"""

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

import fedspectral.data.datasets as ds
from fedspectral.data import ImageData, load_dataset

TRAIN = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
TEST = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def idx_bytes(a: np.ndarray) -> bytes:
    magic = 2051 if a.ndim == 3 else 2049
    head = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in a.shape)
    return head + a.astype(np.uint8).tobytes()


def write_split(folder: Path, names, n=6, size=28, labels=None, n_labels=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n, size, size), dtype=np.uint8)
    y = np.arange(n_labels or n) % 10 if labels is None else np.asarray(labels)
    (folder / names[0]).write_bytes(gzip.compress(idx_bytes(x)))
    (folder / names[1]).write_bytes(gzip.compress(idx_bytes(y)))


@pytest.fixture
def no_system_copy(tmp_path, monkeypatch):
    """The Debian copy replaced by a complete fake one: a test proves it is NOT used by
    showing the fake's 9 images never appear."""
    system = tmp_path / "system"
    write_split(system, TRAIN, n=9)
    write_split(system, TEST, n=9)
    monkeypatch.setattr(ds, "DEBIAN_FASHION_MNIST", system)
    return system


def test_a_correct_root_loads(tmp_path, no_system_copy):
    root = tmp_path / "root"
    write_split(root, TRAIN)
    write_split(root, TEST, n=4)
    tr, te = (
        load_dataset("fashion_mnist", "train", root=root),
        load_dataset("fashion_mnist", "test", root=root),
    )
    assert (len(tr), len(te)) == (6, 4) and tr.shape == te.shape == (1, 28, 28)
    assert tr.labels.tolist() == [0, 1, 2, 3, 4, 5]


def test_a_label_beyond_num_classes_names_the_file(tmp_path, no_system_copy):
    write_split(tmp_path / "root", TRAIN, labels=[0, 1, 200, 3, 4, 5])
    with pytest.raises(
        ValueError,
        match=r"train-labels-idx1-ubyte\.gz: label 200 >= "
        r"num_classes=10",
    ):
        load_dataset("fashion_mnist", "train", root=tmp_path / "root")


def test_test_labels_shifted_to_10_19_are_refused(tmp_path, no_system_copy):
    # the run used to "succeed" with KNN 0 %
    root = tmp_path / "root"
    write_split(root, TRAIN)
    write_split(root, TEST, labels=np.arange(10, 16))
    load_dataset("fashion_mnist", "train", root=root)
    with pytest.raises(
        ValueError,
        match=r"t10k-labels-idx1-ubyte\.gz: label 15 >= "
        r"num_classes=10",
    ):
        load_dataset("fashion_mnist", "test", root=root)


def test_images_of_another_shape_are_refused_so_splits_agree(tmp_path, no_system_copy):
    # 32 x 32 training images with 28 x 28 test images used to be trained on
    root = tmp_path / "root"
    write_split(root, TRAIN, size=32)
    write_split(root, TEST)
    with pytest.raises(
        ValueError,
        match=r"train-images-idx3-ubyte\.gz: images of shape "
        r"1x32x32, but fashion_mnist images are 1x28x28",
    ):
        load_dataset("fashion_mnist", "train", root=root)
    assert load_dataset("fashion_mnist", "test", root=root).shape == (1, 28, 28)


def test_every_split_comes_from_the_root_named(tmp_path, no_system_copy):
    # a root with the train files only used to read the test split from the system copy
    root = tmp_path / "root"
    write_split(root, TRAIN)
    with pytest.raises(
        FileNotFoundError,
        match=r"t10k-images-idx3-ubyte\.gz, "
        r"t10k-labels-idx1-ubyte\.gz",
    ) as err:
        load_dataset("fashion_mnist", "test", root=root)
    assert str(root) in str(err.value)
    # an empty root named by the user: not found, the system copy named as not used
    with pytest.raises(FileNotFoundError, match="used only when no root is given"):
        load_dataset("fashion_mnist", "test", root=tmp_path / "empty")
    # without a root the system copy is used (9 images: the fake)
    monkey_root = tmp_path / "default"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ds, "default_root", lambda: monkey_root)
        assert len(load_dataset("fashion_mnist", "test")) == 9


def test_counts_that_disagree_name_both_files(tmp_path, no_system_copy):
    write_split(tmp_path / "root", TRAIN, n=6, n_labels=5)
    with pytest.raises(
        ValueError,
        match=r"6 images in .*train-images-idx3-ubyte\.gz but 5 "
        r"labels in .*train-labels-idx1-ubyte\.gz",
    ):
        load_dataset("fashion_mnist", "train", root=tmp_path / "root")


@pytest.mark.parametrize("damage", ["truncated", "not_gzip", "header"])
def test_corrupt_files_name_the_file(tmp_path, no_system_copy, damage):
    root = tmp_path / "root"
    write_split(root, TRAIN)
    f = root / TRAIN[0]
    blob = f.read_bytes()
    if damage == "truncated":
        f.write_bytes(blob[: len(blob) // 2])  # used to be "unexpected EOFError"
    elif damage == "not_gzip":
        f.write_bytes(b"this is not gzip at all")  # BadGzipFile naming no file
    else:
        f.write_bytes(gzip.compress(idx_bytes(np.zeros((6, 28, 28)))[:10]))
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte\.gz: "):
        load_dataset("fashion_mnist", "train", root=root)


def test_imagedata_refuses_labels_out_of_range():
    x = torch.rand(3, 1, 4, 4)
    with pytest.raises(ValueError, match="label 10 >= num_classes=10"):
        ImageData(x, torch.tensor([0, 10, 1]), 10, "toy")
    with pytest.raises(ValueError, match="label -1 < 0"):
        ImageData(x, torch.tensor([0, -1, 1]), 10, "toy")
    assert len(ImageData(x, torch.tensor([0, 9, 1]), 10, "toy")) == 3
