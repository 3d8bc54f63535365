r"""Small dense linear-algebra helpers shared by the spectral methods.

* :func:`top_k_eigvecs` -- the principal rank-``k`` eigenspace of a symmetric matrix;
* :func:`subspace_distance` -- :math:`\|VV^\top - WW^\top\|_F` (Stewart 1990; the
  error measure of Wang & Xu, IJCAI 2019, Section 3.3);
* :func:`pack_upper` / :func:`unpack_upper` -- the upper triangle (diagonal included)
  of a symmetric matrix as a flat vector of :math:`p(p+1)/2` floats, in the row-major
  order of ``numpy.triu_indices(p)``: :math:`(0,0),(0,1),\dots,(0,p-1),(1,1),\dots`.
  This is the wire format of a locally private PCA message.
* :func:`pack_symmetric` / :func:`unpack_symmetric` -- the same packing with a choice of
  :data:`VECTORISATIONS`: ``"upper"`` (the plain upper triangle, as above) or
  ``"isometric"`` (off-diagonal entries times :math:`\sqrt2`, so that the vector's L2
  norm equals the matrix's Frobenius norm; :func:`unpack_symmetric` divides them by
  :math:`\sqrt2` again).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import scipy.linalg

from fedspectral.checks import check_int

__all__ = [
    "VECTORISATIONS",
    "n_packed",
    "pack_symmetric",
    "pack_upper",
    "square_and_rank",
    "subspace_distance",
    "top_k_eigvecs",
    "triu_indices",
    "unpack_symmetric",
    "unpack_upper",
]

#: How a symmetric matrix is packed into :math:`p(p+1)/2` floats (:func:`pack_symmetric`).
VECTORISATIONS = ("isometric", "upper")


def _check_dim(p: object, name: str = "p") -> int:
    return check_int(name, p, low=1)


def n_packed(p: int) -> int:
    """Length :math:`p(p+1)/2` of a packed upper triangle of a ``p`` x ``p`` matrix."""
    p = _check_dim(p)
    return p * (p + 1) // 2


@lru_cache(maxsize=64)
def triu_indices(p: int) -> tuple[np.ndarray, np.ndarray]:
    """Cached, read-only ``numpy.triu_indices(p)`` (row-major upper triangle incl. diagonal)."""
    p = _check_dim(p)
    rows, cols = np.triu_indices(p)
    rows.setflags(write=False)
    cols.setflags(write=False)
    return rows, cols


def pack_upper(S: np.ndarray) -> np.ndarray:
    r"""Upper triangle (diagonal included) of ``S`` as a flat vector.

    Parameters
    ----------
    S : ndarray, shape (..., p, p)
        Square matrix or stack of square matrices.  Only the upper triangle is read.

    Returns
    -------
    ndarray, shape (..., p(p+1)/2)
        Entries :math:`S_{ij}, i \le j`, in the order of ``numpy.triu_indices(p)``.
    """
    S = np.asarray(S)
    if S.ndim < 2 or S.shape[-1] != S.shape[-2] or S.shape[-1] == 0:
        raise ValueError(f"S must be a non-empty square matrix (..., p, p), got shape {S.shape}")
    rows, cols = triu_indices(S.shape[-1])
    return S[..., rows, cols]


def unpack_upper(u: np.ndarray, p: int | None = None) -> np.ndarray:
    r"""Symmetric matrix from its packed upper triangle (inverse of :func:`pack_upper`).

    Parameters
    ----------
    u : ndarray, shape (..., p(p+1)/2)
        Packed upper triangles.
    p : int, optional
        Matrix dimension; inferred from ``u.shape[-1]`` when omitted.

    Returns
    -------
    ndarray, shape (..., p, p)
        Symmetric matrices :math:`S` with :math:`S_{ij} = S_{ji} = u_{(i,j)}`.
    """
    u = np.asarray(u)
    if u.ndim < 1:
        raise ValueError(f"u must be at least one-dimensional, got shape {u.shape}")
    m = u.shape[-1]
    if p is None:
        p = round((math.isqrt(8 * m + 1) - 1) / 2)
        if p < 1 or p * (p + 1) // 2 != m:
            raise ValueError(f"length {m} of u is not p(p+1)/2 for any integer p >= 1")
    p = _check_dim(p)
    if m != p * (p + 1) // 2:
        raise ValueError(f"u has length {m}, expected p(p+1)/2 = {p * (p + 1) // 2} for p={p}")
    rows, cols = triu_indices(p)
    S = np.empty(u.shape[:-1] + (p, p), dtype=np.result_type(u.dtype, np.float64))
    S[..., rows, cols] = u
    S[..., cols, rows] = u
    return S


@lru_cache(maxsize=64)
def isometric_weights(p: int) -> np.ndarray:
    r"""Read-only weights of the isometric packing, in the order of :func:`triu_indices`:
    1 on the diagonal, :math:`\sqrt2` off it."""
    rows, cols = triu_indices(p)
    w = np.where(rows == cols, 1.0, math.sqrt(2.0))
    w.setflags(write=False)
    return w


def _check_vectorisation(vectorisation: object) -> str:
    if not isinstance(vectorisation, str) or vectorisation not in VECTORISATIONS:
        raise ValueError(f"vectorisation must be one of {VECTORISATIONS}, got {vectorisation!r}")
    return vectorisation


def pack_symmetric(S: np.ndarray, vectorisation: str = "isometric") -> np.ndarray:
    r"""Pack the upper triangle of ``S`` (diagonal included) into :math:`p(p+1)/2` floats.

    ``"upper"``: :math:`u_{(i,j)} = S_{ij}` (:func:`pack_upper`).  ``"isometric"``:
    :math:`u_{(i,i)} = S_{ii}`, :math:`u_{(i,j)} = \sqrt2\,S_{ij}` for :math:`i<j`, so
    that :math:`\|u\|_2 = \|S\|_F` for symmetric ``S`` and
    :math:`\langle u(A), u(B)\rangle = \langle A, B\rangle_F`.
    """
    _check_vectorisation(vectorisation)
    u = pack_upper(S)
    if vectorisation == "isometric":
        u = u * isometric_weights(np.asarray(S).shape[-1])
    return u


def unpack_symmetric(
    u: np.ndarray, p: int | None = None, vectorisation: str = "isometric"
) -> np.ndarray:
    r"""Symmetric matrix from :func:`pack_symmetric`'s vector (its exact inverse).

    ``"isometric"`` divides the off-diagonal entries by :math:`\sqrt2`: isotropic noise
    :math:`N(0, \sigma^2 I)` added to the vector becomes, in the matrix, variance
    :math:`\sigma^2` on the diagonal and :math:`\sigma^2/2` off it.
    """
    _check_vectorisation(vectorisation)
    S = unpack_upper(u, p)
    if vectorisation == "isometric":
        off = ~np.eye(S.shape[-1], dtype=bool)
        S[..., off] /= math.sqrt(2.0)
    return S


def square_and_rank(S: object, k: object) -> tuple[np.ndarray, int]:
    """``(S as float64, k)`` after checking that ``S`` is a non-empty square matrix and
    ``k`` an integer in ``[1, p]``."""
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] == 0:
        raise ValueError(f"S must be a non-empty square matrix, got shape {S.shape}")
    p = S.shape[0]
    k = check_int("k", k)
    if not 1 <= k <= p:
        raise ValueError(f"k must be an integer with 1 <= k <= p={p}, got {k!r}")
    return S, k


def top_k_eigvecs(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Top-``k`` eigenpairs of a symmetric matrix.

    Computes only the ``k`` largest eigenpairs (``scipy.linalg.eigh`` with
    ``subset_by_index``).  ``S`` is symmetrised as :math:`(S+S^\top)/2` first, so a
    matrix that is symmetric up to rounding gives the same answer whichever
    triangle is stored.  Each eigenvector's sign is fixed so that its entry of
    largest magnitude is positive (deterministic output).

    Parameters
    ----------
    S : ndarray, shape (p, p)
        Symmetric matrix (finite entries).
    k : int
        Number of eigenpairs, ``1 <= k <= p``.

    Returns
    -------
    eigvals : ndarray, shape (k,)
        The ``k`` largest eigenvalues, in descending order.
    V : ndarray, shape (p, k)
        Orthonormal eigenvectors; column ``j`` belongs to ``eigvals[j]``.
    """
    S, k = square_and_rank(S, k)
    p = S.shape[0]
    if not np.isfinite(S).all():
        raise ValueError("S contains NaN or infinite values")
    A = 0.5 * (S + S.T)
    w, V = scipy.linalg.eigh(A, subset_by_index=[p - k, p - 1], check_finite=False)
    w = w[::-1].copy()
    V = V[:, ::-1]
    idx = np.argmax(np.abs(V), axis=0)
    signs = np.sign(V[idx, np.arange(k)])
    signs[signs == 0] = 1.0
    return w, np.ascontiguousarray(V * signs)


def _is_orthonormal(V: np.ndarray, tol: float = 1e-10) -> bool:
    G = V.T @ V
    return bool(np.abs(G - np.eye(G.shape[0])).max() <= tol)


def subspace_distance(V: np.ndarray, W: np.ndarray) -> float:
    r"""Subspace distance :math:`\|VV^\top - WW^\top\|_F` (Wang & Xu 2019, Sec. 3.3).

    For orthonormal :math:`V \in \mathbb{R}^{p\times k}`, :math:`W \in
    \mathbb{R}^{p\times l}` it is computed without forming a ``p`` x ``p`` matrix:

    .. math::
        \|VV^\top - WW^\top\|_F^2 = \|W - V(V^\top W)\|_F^2 + \|V - W(W^\top V)\|_F^2
        = k + l - 2\|V^\top W\|_F^2,

    where the first form (used here) keeps full relative accuracy when the two
    subspaces nearly coincide.  For ``k = l`` it equals
    :math:`\sqrt{2}\,\|\sin\Theta(V, W)\|_F`.  Matrices that are not orthonormal
    (to within 1e-10) are compared by the defining formula.

    Parameters
    ----------
    V, W : ndarray, shape (p, k) and (p, l)
        Bases (a 1-D array is a single vector).

    Returns
    -------
    float
    """
    V = np.asarray(V, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    if V.ndim == 1:
        V = V[:, None]
    if W.ndim == 1:
        W = W[:, None]
    if V.ndim != 2 or W.ndim != 2:
        raise ValueError(f"V and W must be 1-D or 2-D, got shapes {V.shape} and {W.shape}")
    if V.shape[0] != W.shape[0]:
        raise ValueError(
            f"V and W must have the same number of rows, got shapes {V.shape} and {W.shape}"
        )
    if not (np.isfinite(V).all() and np.isfinite(W).all()):
        raise ValueError("V or W contains NaN or infinite values")
    if _is_orthonormal(V) and _is_orthonormal(W):
        rw = W - V @ (V.T @ W)
        rv = V - W @ (W.T @ V)
        return float(math.sqrt(np.vdot(rw, rw) + np.vdot(rv, rv)))
    return float(np.linalg.norm(V @ V.T - W @ W.T, "fro"))
