r"""Real data sets for the locally private PCA experiments (the LDP-PCA paper, Section 6).

Every loader returns rows :math:`x_i` with :math:`\|x_i\|_2 = 1`, the norm bound
that Algorithms 1 and 2 of Wang & Xu (IJCAI 2019) assume, and the labels.

Privacy cost of the preprocessing
---------------------------------
In the local model each user transforms her own row before perturbing it.  A
map applied row by row that uses *no statistic of other rows* (a fixed pooling
matrix, division by public a-priori bounds, scaling the row to unit norm) is
part of the user's own mechanism and costs no privacy.  A map that uses the
data set (feature-wise standardisation by the empirical mean and standard
deviation, or min-max scaling by the observed range) releases information about
everybody and would need its own private estimate.  The loaders therefore
default to data-independent maps:

:func:`load_fashion_mnist_pooled`
    pixels / 255, average pooling of 4 x 4 blocks (28 x 28 -> 7 x 7 = 49
    features), row scaled to norm 1.  Nothing depends on the data: free.
:func:`load_covertype`
    ``scaling="bounds"`` (default): each of the 10 quantitative columns is divided
    by a public a-priori bound on its magnitude derived from its documented
    unit (degrees, metres, an 8-bit hillshade index; :data:`COVTYPE_BOUNDS`),
    the 44 binary indicator columns are kept, then the row is scaled to norm 1.
    Free.  ``scaling="standardize"`` z-scores the columns with the empirical mean
    and standard deviation first (what most papers do); it is offered for
    comparison only, its privacy cost is *not* accounted, and a warning says so.

Rows whose norm is 0 after preprocessing are left at 0 (they satisfy the norm
bound and carry no information); the loaders never produce any for these data.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from fedspectral.checks import check_bool, check_choice, check_int
from fedspectral.inputs import check_input_file

__all__ = [
    "COVTYPE_BOUNDS",
    "DatasetUnavailableError",
    "average_pool",
    "load_covertype",
    "load_fashion_mnist_pooled",
    "load_user_rows",
    "normalize_rows",
]

#: largest users file read (``load_user_rows``): 4 GiB of float64 rows
MAX_USER_FILE_BYTES = 1 << 32


class DatasetUnavailableError(OSError):
    """A data set is neither cached locally nor downloadable (e.g. no network)."""


# Public a-priori bounds of the 10 quantitative Covertype columns, in the units of
# the UCI documentation (covtype.info). They come from the units, not from the data:
# elevations in Colorado are below 4500 m; aspect is an azimuth in degrees; slope is
# in degrees; distances inside the four study areas are below 10 km horizontally and
# 1 km vertically; hillshade is an 8-bit index.
COVTYPE_BOUNDS: dict[str, float] = {
    "Elevation": 4500.0,
    "Aspect": 360.0,
    "Slope": 90.0,
    "Horizontal_Distance_To_Hydrology": 10000.0,
    "Vertical_Distance_To_Hydrology": 1000.0,
    "Horizontal_Distance_To_Roadways": 10000.0,
    "Hillshade_9am": 255.0,
    "Hillshade_Noon": 255.0,
    "Hillshade_3pm": 255.0,
    "Horizontal_Distance_To_Fire_Points": 10000.0,
}
_COVTYPE_N_FEATURES = 54
_SCALINGS = ("bounds", "standardize")


def load_user_rows(path: str | os.PathLike, p: int, source: str) -> np.ndarray:
    """The users of a ``.npy`` file: an ``(n, p)`` array of real numbers, ``n >= 1``,
    read without pickles; ``ValueError`` naming ``source`` (where the path came from,
    e.g. ``"node config pca-data"``) and the file otherwise -- a folder or a device, a
    ``.npz`` archive or any file that is not one ``.npy`` array, another shape or dtype,
    no rows, a file larger than :data:`MAX_USER_FILE_BYTES`."""
    f = check_input_file(path, source)
    if f.stat().st_size > MAX_USER_FILE_BYTES:
        raise ValueError(f"{source} {str(f)!r} is larger than {MAX_USER_FILE_BYTES:,} bytes")
    with open(f, "rb") as fh:
        magic = fh.read(6)
    if magic != b"\x93NUMPY":
        kind = "a .npz archive (a zip of arrays)" if magic[:2] == b"PK" else "no .npy array"
        raise ValueError(
            f"{source} {str(f)!r} is {kind}; give one .npy file of shape (n, {p}) (numpy.save)"
        )
    try:
        X = np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{source} {str(f)!r} cannot be read as a .npy array: {exc}") from None
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{source} {str(f)!r} holds dtype {X.dtype}, not real numbers")
    if X.ndim != 2 or X.shape[1] != p or X.shape[0] == 0:
        raise ValueError(
            f"{source} {str(f)!r}: expected an (n, {p}) array with n >= 1, got shape {X.shape}"
        )
    return X


def normalize_rows(X: np.ndarray) -> np.ndarray:
    r"""Scale every non-zero row to unit L2 norm: :math:`x_i \mapsto x_i/\|x_i\|_2`.

    A per-row map (no statistic of other rows): free of privacy cost in the local
    model.  All-zero rows stay zero.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


def average_pool(images: np.ndarray, block: int) -> np.ndarray:
    r"""Average-pool square images over non-overlapping ``block`` x ``block`` tiles.

    Parameters
    ----------
    images : ndarray, shape (N, H, W)
        ``H`` and ``W`` must be multiples of ``block``.
    block : int
        Tile side.

    Returns
    -------
    ndarray, shape (N, H // block, W // block)
        Tile means.
    """
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3:
        raise ValueError(f"images must have shape (N, H, W), got {images.shape}")
    block = check_int("block", block, low=1)
    n, h, w = images.shape
    if h % block or w % block:
        raise ValueError(f"image size {h}x{w} is not a multiple of block={block}")
    return images.reshape(n, h // block, block, w // block, block).mean(axis=(2, 4))


def _check_n(n: int | None) -> None:
    if n is not None:
        check_int("n", n, low=1)


def _subsample(
    X: np.ndarray, y: np.ndarray, n: int | None, rng: np.random.Generator | int | None
) -> tuple[np.ndarray, np.ndarray]:
    if n is None or n >= len(X):
        if n is not None and n > len(X):
            raise ValueError(f"n={n} exceeds the {len(X)} rows available")
        return X, y
    gen = np.random.default_rng(rng)
    idx = np.sort(gen.choice(len(X), size=n, replace=False))
    return X[idx], y[idx]


def load_covertype(
    n: int | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    scaling: str = "bounds",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    r"""UCI Covertype (581 012 rows, 54 features) with rows of unit norm.

    Fetched through :func:`sklearn.datasets.fetch_covtype` (cached under
    ``data_home``, scikit-learn's default ``~/scikit_learn_data``); the first
    call needs network access.

    Parameters
    ----------
    n : int, optional
        Keep a uniformly random subset of ``n`` rows (without replacement, original
        order kept); all rows when None.
    rng : numpy.random.Generator or int, optional
        Randomness of the subset.
    scaling : {"bounds", "standardize"}
        ``"bounds"`` (default): quantitative columns divided by the public bounds
        :data:`COVTYPE_BOUNDS` (no privacy cost).  ``"standardize"``: empirical
        z-scores of all columns; data dependent, its privacy cost is not accounted
        (a :class:`UserWarning` says so).  Either way each row is then scaled to
        norm 1.
    data_home : path, optional
        scikit-learn's data cache folder.
    download_if_missing : bool
        Allow the download.

    Returns
    -------
    X : ndarray, shape (n, 54)
        Rows of unit L2 norm.
    y : ndarray, shape (n,)
        Cover type, 1..7.

    Raises
    ------
    ValueError
        Bad ``n`` or ``scaling`` (before any download).
    DatasetUnavailableError
        The data are not cached and cannot be downloaded (no network access, or
        ``download_if_missing=False``); the message says what is missing.
    """
    _check_n(n)
    check_choice("scaling", scaling, _SCALINGS)
    download_if_missing = check_bool("download_if_missing", download_if_missing)
    from sklearn.datasets import fetch_covtype, get_data_home

    home = get_data_home(data_home)
    try:
        bunch = fetch_covtype(data_home=data_home, download_if_missing=download_if_missing)
    except Exception as exc:  # URLError, OSError, socket errors, ...
        raise DatasetUnavailableError(
            f"UCI Covertype is not cached in {home} (scikit-learn's data home) and could "
            f"not be downloaded ({type(exc).__name__}: {exc}). The first call of "
            "load_covertype needs network access (sklearn.datasets.fetch_covtype "
            "downloads about 11 MB); afterwards it works offline. Use "
            "load_fashion_mnist_pooled for an offline real-data analogue."
        ) from exc
    X = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target)
    if X.ndim != 2 or X.shape[1] != _COVTYPE_N_FEATURES:
        raise ValueError(f"unexpected Covertype shape {X.shape}; expected (N, 54)")
    X, y = _subsample(X, y, n, rng)
    X = X.copy()
    if scaling == "bounds":
        bounds = np.array(list(COVTYPE_BOUNDS.values()))
        X[:, : len(bounds)] /= bounds
    else:
        warnings.warn(
            "scaling='standardize' uses the empirical mean and standard deviation of the "
            "data set: a data-dependent preprocessing whose privacy cost is NOT accounted",
            UserWarning,
            stacklevel=2,
        )
        sd = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return normalize_rows(X), y


def load_fashion_mnist_pooled(
    split: str = "train",
    *,
    n: int | None = None,
    rng: np.random.Generator | int | None = None,
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
    block: int = 4,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Fashion-MNIST average-pooled to 7 x 7 = 49 features, rows of unit norm.

    Each 28 x 28 image (pixels / 255) is average-pooled over 4 x 4 tiles and
    flattened (row-major) to 49 features, then scaled to norm 1.  The map is the
    same fixed function for every user, so it costs no privacy.  Files are read by
    :func:`fedspectral.data.load_dataset` (``root``, then the Debian package
    ``dataset-fashion-mnist`` in ``/usr/share/datasets/fashion-mnist``; with
    ``download=True`` torchvision fetches them when online).

    Parameters
    ----------
    split : {"train", "test"}
        60 000 or 10 000 images.
    n : int, optional
        Keep a uniformly random subset of ``n`` rows.
    rng : numpy.random.Generator or int, optional
        Randomness of the subset.
    root, download
        Passed to :func:`fedspectral.data.load_dataset`.
    block : int
        Pooling tile side (4 gives 7 x 7; 28 must be a multiple of it).

    Returns
    -------
    X : ndarray, shape (n, (28 // block)**2)
    y : ndarray, shape (n,)
        Class labels 0..9.
    """
    check_choice("split", split, ("train", "test"))
    _check_n(n)
    block = check_int("block", block, low=1)
    if 28 % block:
        raise ValueError(f"block must be a positive divisor of 28, got {block!r}")
    from fedspectral.data import datasets  # lazy: pulls in torch

    try:
        data = datasets.load_dataset("fashion_mnist", split=split, root=root, download=download)
    except FileNotFoundError as exc:
        raise DatasetUnavailableError(str(exc)) from exc
    images = data.images.numpy()[:, 0].astype(np.float64)  # (N, 28, 28) in [0, 1]
    y = data.labels.numpy()
    X = average_pool(images, block).reshape(len(images), -1)
    X, y = _subsample(X, y, n, rng)
    return normalize_rows(X), y
