r"""Image datasets as in-memory tensors.

Every dataset is returned as an :class:`ImageData`: ``float32`` images in
:math:`[0, 1]` of shape ``N x C x H x W`` and ``int64`` labels. Augmentation
(:mod:`fedspectral.data.augment`) works on whole batches of such tensors, so no
per-image PIL pipeline or ``DataLoader`` is needed.

Sources
-------
``"fashion_mnist"``
    The four idx ``.gz`` files, read directly with :mod:`gzip` + :mod:`numpy`
    from the first of ``root``, ``root/FashionMNIST/raw`` that holds any of them
    (every split from that one folder: a folder holding some of the files but not
    the split's is an error naming what is missing); the Debian package
    ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``) is used only
    when no ``root`` was given.  If none has them and ``download=True``,
    torchvision downloads them into ``root/FashionMNIST/raw``.
``"cifar10"``, ``"cifar100"``, ``"svhn"``
    Through :mod:`torchvision.datasets` (``download=True`` fetches them when
    online); a missing file raises :class:`FileNotFoundError` naming the files
    expected and the folder to put them in.
``"digits"``
    scikit-learn's bundled 8x8 handwritten digits (1797 images, values 0..16
    scaled to [0, 1], kept at 8x8), split deterministically and stratified into
    1343 train / 454 test images (every 4th image of each class is test). For
    tiny tests; needs no file.

The default root is ``$FEDSPECTRAL_DATA`` if set, else ``~/.cache/fedspectral/data``.

Validation on load
------------------
Every split is checked before it is returned, and errors name the file: a corrupt
or truncated ``.gz`` (``ValueError``), an idx header that disagrees with its data,
images of another shape than the dataset's (``C x H x W`` of :func:`dataset_info`:
so train and test always agree), a number of images different from the number of
labels (both files named), and any label outside ``0 .. num_classes-1`` (a test
split with labels 10..19 is refused, not scored at 0 %).  :class:`ImageData` itself
refuses labels outside that range.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedspectral.checks import check_bool, check_real

DATASETS: tuple[str, ...] = ("fashion_mnist", "cifar10", "cifar100", "svhn", "digits")
SPLITS: tuple[str, ...] = ("train", "test")
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

_FMNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a dataset, available without loading it.

    ``mean``/``std`` are the per-channel statistics of the training images in
    [0, 1] (used by :class:`fedspectral.data.augment.Normalize`).
    """

    name: str
    channels: int
    size: int
    num_classes: int
    train_size: int
    test_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


_INFO: dict[str, DatasetInfo] = {
    "fashion_mnist": DatasetInfo("fashion_mnist", 1, 28, 10, 60000, 10000, (0.2860,), (0.3530,)),
    "cifar10": DatasetInfo(
        "cifar10",
        3,
        32,
        10,
        50000,
        10000,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
    ),
    "cifar100": DatasetInfo(
        "cifar100",
        3,
        32,
        100,
        50000,
        10000,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
    ),
    "svhn": DatasetInfo(
        "svhn",
        3,
        32,
        10,
        73257,
        26032,
        (0.4377, 0.4438, 0.4728),
        (0.1980, 0.2010, 0.1970),
    ),
    "digits": DatasetInfo("digits", 1, 8, 10, 1343, 454, (0.3057,), (0.3763,)),
}


@dataclass
class ImageData:
    """A labelled image set held in memory.

    Attributes
    ----------
    images : torch.Tensor
        ``float32``, shape ``N x C x H x W``, values in [0, 1].
    labels : torch.Tensor
        ``int64``, shape ``N``, values in ``0 .. num_classes-1``.
    num_classes : int
        Number of classes of the dataset (not only those present here).
    name : str
        Dataset name (one of :data:`DATASETS` or user-defined).
    """

    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.images, torch.Tensor) or self.images.ndim != 4:
            shape = getattr(self.images, "shape", None)
            raise ValueError(f"images must be a 4-d tensor N x C x H x W, got shape {shape}")
        if self.images.dtype != torch.float32:
            raise TypeError(f"images must be float32, got {self.images.dtype}")
        if not isinstance(self.labels, torch.Tensor) or self.labels.ndim != 1:
            shape = getattr(self.labels, "shape", None)
            raise ValueError(f"labels must be a 1-d tensor, got shape {shape}")
        if self.labels.dtype != torch.int64:
            raise TypeError(f"labels must be int64, got {self.labels.dtype}")
        if len(self.labels) != len(self.images):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels")
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"num_classes must be a positive int, got {self.num_classes!r}")
        _check_labels(self.labels, self.num_classes, "labels")

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        c, h, w = self.images.shape[1:]
        return int(c), int(h), int(w)

    def subset(self, idx: np.ndarray | torch.Tensor | list[int]) -> ImageData:
        """The images at positions ``idx`` (a copy), same ``num_classes`` and ``name``."""
        arr = idx.cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"idx must hold integer positions, got dtype {arr.dtype}")
        index = torch.as_tensor(arr, dtype=torch.int64)
        if index.ndim != 1:
            raise ValueError(f"idx must be 1-d, got shape {tuple(index.shape)}")
        if len(index) and (int(index.min()) < -len(self) or int(index.max()) >= len(self)):
            raise ValueError(f"idx out of range for {len(self)} samples")
        return ImageData(self.images[index], self.labels[index], self.num_classes, self.name)

    def to(self, device: torch.device | str) -> ImageData:
        """The same data on ``device``."""
        return ImageData(
            self.images.to(device), self.labels.to(device), self.num_classes, self.name
        )


def _check_labels(labels: torch.Tensor | np.ndarray, num_classes: int, where: str) -> None:
    """Every label in ``0 .. num_classes-1``, else ``ValueError`` naming ``where``."""
    if len(labels) == 0:
        return
    lo, hi = int(labels.min()), int(labels.max())
    if hi >= num_classes:
        raise ValueError(
            f"{where}: label {hi} >= num_classes={num_classes} (labels must lie "
            f"in 0..{num_classes - 1})"
        )
    if lo < 0:
        raise ValueError(f"{where}: label {lo} < 0 (labels must lie in 0..{num_classes - 1})")


def _check_split(
    name: str,
    split: str,
    images: torch.Tensor,
    labels: np.ndarray,
    image_src: object,
    label_src: object,
) -> None:
    """Shape, count and label range of a loaded split, naming the files at fault."""
    info = _INFO[name]
    want = (info.channels, info.size, info.size)
    got = tuple(images.shape[1:])
    if got != want:
        raise ValueError(
            f"{image_src}: images of shape {'x'.join(map(str, got))}, but "
            f"{name} images are {'x'.join(map(str, want))} (C x H x W); every "
            "split must hold images of the dataset's shape"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"{len(images)} images in {image_src} but {len(labels)} labels in {label_src}"
        )
    _check_labels(labels, info.num_classes, str(label_src))


def _check_name(name: str) -> str:
    if not isinstance(name, str) or name.lower() not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return name.lower()


def dataset_info(name: str) -> DatasetInfo:
    """Channels, image size, number of classes, split sizes, mean and std of ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`DATASETS`.
    """
    return _INFO[_check_name(name)]


def default_root() -> Path:
    """``$FEDSPECTRAL_DATA`` if set, else ``~/.cache/fedspectral/data``."""
    env = os.environ.get("FEDSPECTRAL_DATA")
    return Path(env).expanduser() if env else Path("~/.cache/fedspectral/data").expanduser()


def load_dataset(
    name: str,
    split: str = "train",
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
) -> ImageData:
    """Load a dataset split as an :class:`ImageData`.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    split : {"train", "test"}
    root : path, optional
        Folder holding (or receiving) the files; default :func:`default_root`.
    download : bool
        Let torchvision download missing files (needs network access).

    Raises
    ------
    ValueError
        Unknown ``name`` or ``split``.
    FileNotFoundError
        Files missing and ``download=False``; the message names the files
        expected and where to put them.
    """
    name = _check_name(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    download = check_bool("download", download)
    root_path = default_root() if root is None else Path(root).expanduser()
    if name == "digits":
        return _load_digits(split)
    if name == "fashion_mnist":
        return _load_fashion_mnist(split, root_path, download, system=root is None)
    return _load_torchvision(name, split, root_path, download)


# --------------------------------------------------------------------- digits
def _load_digits(split: str) -> ImageData:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.images.astype(np.float32) / 16.0
    y = bunch.target.astype(np.int64)
    # deterministic stratified split: per class, every 4th sample (in file order) is test
    test = np.zeros(len(y), dtype=bool)
    for c in range(10):
        idx = np.flatnonzero(y == c)
        test[idx[::4]] = True
    keep = test if split == "test" else ~test
    images = torch.from_numpy(np.ascontiguousarray(x[keep])).unsqueeze(1)
    return ImageData(images, torch.from_numpy(y[keep]), 10, "digits")


# -------------------------------------------------------------- fashion-mnist
#: largest idx array read (its header's declared size): Fashion-MNIST's training images
#: are 47 MB; the bound keeps a crafted file (a few MB of gzip that inflate to gigabytes)
#: from being inflated into memory
MAX_IDX_BYTES = 1 << 28


def _read_idx_gz(path: Path, expected_magic: int) -> np.ndarray:
    """The array of an idx ``.gz`` file; ``ValueError`` naming ``path`` when it is not
    one (corrupt or truncated gzip, wrong magic number, header and data disagreeing, a
    declared size above :data:`MAX_IDX_BYTES`).  The header is read first and the data
    after it only up to the size it declares (plus one byte, to see a longer stream):
    what is inflated is bounded by the header, never by the compressed stream."""
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4:
                raise ValueError(f"{path}: {len(head)} bytes, too short for an idx header")
            magic = int.from_bytes(head, "big")
            if magic != expected_magic:
                raise ValueError(
                    f"{path}: bad idx magic number {magic} (expected {expected_magic})"
                )
            ndim = head[3]
            dims_raw = f.read(4 * ndim)
            if len(dims_raw) < 4 * ndim:
                raise ValueError(f"{path}: truncated idx header ({4 + len(dims_raw)} bytes)")
            dims = [int.from_bytes(dims_raw[4 * i : 4 * i + 4], "big") for i in range(ndim)]
            size = math.prod(dims)
            if ndim == 0 or dims[0] == 0:
                raise ValueError(f"{path}: its idx header declares no items (dims {dims})")
            if size > MAX_IDX_BYTES:
                raise ValueError(
                    f"{path}: its header declares {dims} = {size:,} values, above the "
                    f"{MAX_IDX_BYTES:,} an idx file of this dataset may hold"
                )
            raw = f.read(size + 1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(
            f"{path}: not a complete gzip file ({type(err).__name__}: {err}); "
            "the file is truncated or corrupt: fetch it again"
        ) from err
    if len(raw) != size:
        more = "more than" if len(raw) > size else f"{len(raw)} values,"
        raise ValueError(f"{path}: {more} the {size} values its header says {dims}")
    return np.frombuffer(raw, dtype=np.uint8).reshape(dims)


def _fashion_mnist_dir(root: Path, split: str, system: bool = True) -> Path | None:
    """The folder every split is read from: the first of ``root``,
    ``root/FashionMNIST/raw`` (and, when ``system``, the Debian copy) holding any
    Fashion-MNIST file; ``FileNotFoundError`` when it lacks ``split``'s files."""
    files = _FMNIST_FILES[split]
    every = [f for pair in _FMNIST_FILES.values() for f in pair]
    folders = [root, root / "FashionMNIST" / "raw"] + ([DEBIAN_FASHION_MNIST] if system else [])
    for folder in folders:
        if any((folder / f).exists() for f in every):
            missing = [f for f in files if not (folder / f).is_file()]
            if missing:
                raise FileNotFoundError(
                    f"Fashion-MNIST {split} split: {folder} holds Fashion-MNIST files but not "
                    f"{', '.join(missing)} (as regular files); every split is read from one "
                    "folder, so put them there (no other copy is used)"
                )
            return folder
    return None


def _load_fashion_mnist(split: str, root: Path, download: bool, system: bool = True) -> ImageData:
    folder = _fashion_mnist_dir(root, split, system)
    if folder is None and download:
        from torchvision.datasets import FashionMNIST

        try:
            FashionMNIST(str(root), train=(split == "train"), download=True)
        except (OSError, RuntimeError) as err:  # offline: URLError is an OSError
            raise FileNotFoundError(
                f"Fashion-MNIST download into {root / 'FashionMNIST' / 'raw'} failed ({err}); "
                f"put {', '.join(_FMNIST_FILES[split])} there or install the Debian package "
                "dataset-fashion-mnist"
            ) from err
        folder = _fashion_mnist_dir(root, split, system)
    if folder is None:
        img_f, lab_f = _FMNIST_FILES[split]
        where = (
            f"{root}, {root / 'FashionMNIST' / 'raw'} or {DEBIAN_FASHION_MNIST}"
            if system
            else f"{root} or {root / 'FashionMNIST' / 'raw'} (the root given; the "
            f"system copy in {DEBIAN_FASHION_MNIST} is used only when no root is given)"
        )
        raise FileNotFoundError(
            f"Fashion-MNIST {split} files {img_f}, {lab_f} not found in {where}. Install the "
            "Debian package dataset-fashion-mnist, put the files in one of those folders, or "
            "download them (needs network access): --set data.download=true on the CLI, "
            "data.download: true in a config, download=True in Python."
        )
    img_f, lab_f = _FMNIST_FILES[split]
    x = _read_idx_gz(folder / img_f, 2051)
    y = _read_idx_gz(folder / lab_f, 2049)
    if x.ndim != 3 or y.ndim != 1:
        bad, nd = (img_f, x.ndim) if x.ndim != 3 else (lab_f, y.ndim)
        raise ValueError(
            f"{folder / bad}: an idx array of {nd} dimensions (images: N x H x W, labels: N)"
        )
    images = torch.from_numpy(x.astype(np.float32)).div_(255.0).unsqueeze(1)
    _check_split("fashion_mnist", split, images, y, folder / img_f, folder / lab_f)
    return ImageData(images, torch.from_numpy(y.astype(np.int64)), 10, "fashion_mnist")


# ------------------------------------------------------ torchvision datasets
def _expected_files(name: str, split: str, root: Path) -> tuple[Path, list[str], str]:
    """(folder, files in it, where to get them) that torchvision reads for ``name``."""
    if name == "cifar10":
        files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        return (
            root / "cifar-10-batches-py",
            files + ["batches.meta"],
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (extract into root)",
        )
    if name == "cifar100":
        return (
            root / "cifar-100-python",
            [split, "meta"],
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz (extract into root)",
        )
    return (
        root,
        [f"{split}_32x32.mat"],
        f"http://ufldl.stanford.edu/housenumbers/{split}_32x32.mat",
    )


def missing_files(
    name: str, split: str = "train", root: str | os.PathLike[str] | None = None
) -> tuple[Path | None, list[str], str]:
    """What :func:`load_dataset` would not find for ``name``'s ``split``, without reading
    any image: ``(folder, missing file names, where to get them)``; the list is empty
    when the split is on disk (``digits`` needs no file).  ``root`` as for
    :func:`load_dataset`; a Fashion-MNIST folder holding only some of the files is
    reported with the ones it lacks.

    Raises
    ------
    ValueError
        Unknown ``name`` or ``split``.
    """
    name = _check_name(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root_path = default_root() if root is None else Path(root).expanduser()
    if name == "digits":
        return None, [], "scikit-learn (bundled)"
    if name == "fashion_mnist":
        source = "the Debian package dataset-fashion-mnist or the Fashion-MNIST idx .gz files"
        try:
            folder = _fashion_mnist_dir(root_path, split, system=root is None)
        except FileNotFoundError:  # a folder with some of the files
            every = [f for pair in _FMNIST_FILES.values() for f in pair]
            for cand in (root_path, root_path / "FashionMNIST" / "raw", DEBIAN_FASHION_MNIST):
                if any((cand / f).exists() for f in every):
                    lack = [f for f in _FMNIST_FILES[split] if not (cand / f).is_file()]
                    return cand, lack, source
            raise  # pragma: no cover - _fashion_mnist_dir raised for one of them
        if folder is None:
            return root_path, list(_FMNIST_FILES[split]), source
        return folder, [], source
    folder, files, source = _expected_files(name, split, root_path)
    return folder, [f for f in files if not (folder / f).is_file()], source


def _load_torchvision(name: str, split: str, root: Path, download: bool) -> ImageData:
    from torchvision import datasets as tvd

    folder, files, source = _expected_files(name, split, root)
    missing = [f for f in files if not (folder / f).is_file()]
    if missing and not download:
        raise FileNotFoundError(
            f"{name} {split} split: missing {', '.join(missing)} in {folder}. Get them from "
            f"{source}, point the data root at the folder that holds them (root= in Python, "
            "data.root in a config), or download them (needs network access): --set "
            "data.download=true on the CLI, data.download: true in a config, download=True "
            "in Python."
        )
    root.mkdir(parents=True, exist_ok=True)
    try:
        if name == "svhn":
            ds = tvd.SVHN(str(root), split=split, download=download)
        else:
            cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
            ds = cls(str(root), train=(split == "train"), download=download)
    except (OSError, RuntimeError) as err:  # offline download, corrupt archive
        raise FileNotFoundError(
            f"{name} {split} split could not be loaded from or downloaded into {folder} "
            f"({err}); expected {', '.join(files)} there, from {source}"
        ) from err
    if name == "svhn":
        x = np.asarray(ds.data)  # N x 3 x 32 x 32 uint8
        y = np.asarray(ds.labels, dtype=np.int64)
        images = torch.from_numpy(x.astype(np.float32)).div_(255.0)
    else:
        x = np.asarray(ds.data)  # N x 32 x 32 x 3 uint8
        y = np.asarray(ds.targets, dtype=np.int64)
        if x.ndim != 4:
            raise ValueError(
                f"{folder}: {name} {split} images of shape {x.shape}, expected N x 32 x 32 x 3"
            )
        images = torch.from_numpy(x.astype(np.float32)).div_(255.0).permute(0, 3, 1, 2)
        images = images.contiguous()
    src = f"{name} {split} split in {folder}"
    _check_split(name, split, images, y, src, src)
    return ImageData(images, torch.from_numpy(y), dataset_info(name).num_classes, name)


# ------------------------------------------------------------ validation split
def train_val_indices(
    labels: np.ndarray, val_fraction: float, seed: int | np.random.Generator = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The positions (train, validation) of :func:`train_val_split`, sorted, from the
    labels alone (no image is touched)."""
    val_fraction = check_real(
        "val_fraction", val_fraction, low=0.0, high=1.0, low_open=True, high_open=True
    )
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {labels.shape}")
    val_parts = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n_val = round(val_fraction * len(idx))
        val_parts.append(rng.permutation(idx)[:n_val])
    val = np.sort(np.concatenate(val_parts))
    mask = np.ones(len(labels), dtype=bool)
    mask[val] = False
    train = np.flatnonzero(mask)
    if len(val) == 0 or len(train) == 0:
        raise ValueError(
            f"val_fraction={val_fraction} leaves an empty split of {len(labels)} samples"
        )
    return train, val


def train_val_split(
    data: ImageData, val_fraction: float, seed: int | np.random.Generator = 0
) -> tuple[ImageData, ImageData]:
    """Split a training set into (train, validation), stratified by class.

    From each class, ``round(val_fraction * n_c)`` samples chosen at random go to
    validation. Used to choose settings without touching the test split.
    The positions alone: :func:`train_val_indices`.

    Parameters
    ----------
    data : ImageData
    val_fraction : float
        In ``(0, 1)``.
    seed : int or numpy.random.Generator
        The split is a function of the seed.
    """
    if not isinstance(data, ImageData):
        raise TypeError(f"data must be an ImageData, got {type(data).__name__}")
    train, val = train_val_indices(data.labels.numpy(), val_fraction, seed)
    return data.subset(train), data.subset(val)
