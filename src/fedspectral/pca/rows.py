r"""The rows of the locally private PCA simulation: their checks and their Gram sum.

Every user's row must lie in the unit ball (the sensitivity bound of
:mod:`fedspectral.pca.local`): :func:`clip_rows` checks the rows (finite, norm at most
``1 + NORM_TOL``) and returns the factors that scale the rows above it to norm 1
(``norm_policy="clip"``, with a warning) or refuses them (``"raise"``);
:func:`second_moment_sum` is :math:`\sum_i s_i^2 x_i x_i^\top`.  The simulation of
``n`` users does both in one pass over ``X`` (``_checked_second_moment_sum``): per
block of rows that stays in cache, the norms are checked and the block's Gram matrix
added while the block is still there, so ``X`` is read from memory once.
:func:`check_real_data` is the estimators' check of ``X`` itself before scikit-learn
converts it (2-D, real, numbers, within float64's range).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from fedspectral.checks import check_choice

__all__ = ["NORM_POLICIES", "NORM_TOL", "check_real_data", "clip_rows", "second_moment_sum"]

NORM_POLICIES = ("clip", "raise")
#: Rows with norm in (1, 1 + NORM_TOL] are floating-point rounding of norm-1 rows: accepted as is.
NORM_TOL: float = 1e-9

_CHUNK_BYTES = 1 << 21  # ~2 MiB working chunks (cache-friendly, bounded memory)


def _chunk_rows(width: int) -> int:
    return max(1, _CHUNK_BYTES // (8 * max(1, width)))


def _sq_norms_into(Xc: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Squared L2 norms of the rows of ``Xc`` written into ``out`` (one dot product per
    row: ``numpy.vecdot`` where numpy has it, else ``einsum``).  Row by row, so a row's
    value does not depend on the block it is computed in."""
    if _VECDOT is not None:
        return _VECDOT(Xc, Xc, out=out)
    return np.einsum("ij,ij->i", Xc, Xc, out=out)


_VECDOT = getattr(np, "vecdot", None)


def _row_sq_norms(X: np.ndarray) -> np.ndarray:
    n, p = X.shape
    out = np.empty(n)
    step = _chunk_rows(p)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN norms are handled
        for s in range(0, n, step):
            _sq_norms_into(X[s : s + step], out[s : s + step])
    return out


def _safe_norms(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""``(m, r)`` with :math:`\|x\| = m\,r` for finite rows whose squares overflow:
    ``m`` the largest magnitude, ``r = ||x / m||`` in [1, √p] (never overflows)."""
    m = np.abs(rows).max(axis=1)
    return m, np.linalg.norm(rows / m[:, None], axis=1)


def check_real_data(X: Any, name: str = "X") -> None:
    """Refuse what scikit-learn would silently convert to float or fail on unclearly:
    strings (``"0.5"``, refused as :func:`~fedspectral.pca.perturb` does) and objects
    beyond float64's range (``10**400``), arrays that are not 2-D and complex arrays
    (named, shape or dtype shown, where scikit-learn would print the whole array).
    Object arrays of numbers stay accepted, as scikit-learn's estimator checks require;
    sparse input is left to scikit-learn's own clear refusal."""
    if hasattr(X, "tocsr"):
        return
    a = np.asarray(X)
    if a.ndim != 2:
        raise ValueError(
            f"{name} must be a 2D array (n_samples, n_features), got dim "
            f"{a.ndim} (shape {a.shape})"
            + (
                ". Reshape your data either using array.reshape(-1, 1) if it "
                "has a single feature or array.reshape(1, -1) if it contains a "
                "single sample."
                if a.ndim == 1
                else ""
            )
        )
    if a.dtype.kind == "c":  # scikit-learn's wording, without its repr of the whole array
        raise ValueError(f"Complex data not supported: {name} must be real, got dtype {a.dtype}")
    if a.dtype.kind in "USV":
        raise TypeError(
            f"{name} must be a real numeric array, got dtype {a.dtype} "
            "(numbers given as strings: convert them first)"
        )
    if a.dtype.kind == "O":
        try:
            with np.errstate(over="ignore"):
                np.asarray(a, dtype=np.float64)
        except OverflowError:
            raise ValueError(
                f"{name} holds a number beyond float64's range (an integer "
                f"such as 10**400 in an object array)"
            ) from None
        except (TypeError, ValueError):
            pass  # scikit-learn names what it cannot convert


def clip_rows(X: np.ndarray, norm_policy: str = "clip", name: str = "X") -> np.ndarray | None:
    r"""Check the rows of ``X`` and return the per-row factors that enforce
    :math:`\|x_i\| \le 1` (or None when no row needs clipping).

    Rows with norm above ``1 + NORM_TOL`` are scaled to norm 1 with a
    ``UserWarning`` (``norm_policy="clip"``) or rejected with ``ValueError``
    (``"raise"``).  NaN/inf entries raise ``ValueError`` naming the first such row.
    One vectorised pass; rows whose squared norm overflows (finite entries up to
    ``1.8e308``) are measured by scaling before squaring, so they are clipped, not
    zeroed, and their true norm is reported.

    Returns
    -------
    ndarray of shape (n,) or None
        Factors :math:`\min(1, 1/\|x_i\|)` (1 for rows inside the ball).
    """
    check_choice("norm_policy", norm_policy, NORM_POLICIES)
    return _clip_factors(X, norm_policy, name, stacklevel=4)


def _clip_factors(X: np.ndarray, norm_policy: str, name: str, stacklevel: int) -> np.ndarray | None:
    """:func:`clip_rows` with the warning's ``stacklevel`` counted from here."""
    sq = _row_sq_norms(X)
    idx = np.flatnonzero(~np.isfinite(sq))
    m_big = r_big = np.empty(0)
    if idx.size:
        finite = np.isfinite(X[idx]).all(axis=1)
        if not finite.all():
            i = int(idx[np.flatnonzero(~finite)[0]])
            raise ValueError(f"{name} contains NaN or infinite values (first in row {i})")
        m_big, r_big = _safe_norms(X[idx])  # finite rows whose squares overflow
        sq[idx] = np.inf  # beyond any bound; the factor comes from (m, r)
    over = sq > (1.0 + NORM_TOL) ** 2
    n_over = int(over.sum())
    if n_over == 0:
        return None

    def norm_of(i: int) -> str:
        if math.isfinite(sq[i]):
            return f"{math.sqrt(sq[i]):.6g}"
        j = int(np.searchsorted(idx, i))
        return _fmt_product(m_big[j], r_big[j])

    if norm_policy == "raise":
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"{n_over} row(s) of {name} have L2 norm > 1 (first: row {i}, norm "
            f"{norm_of(i)}); the sensitivity bound needs ||x|| <= 1 (use norm_policy='clip')"
        )
    fin = np.flatnonzero(over & np.isfinite(sq))
    if idx.size:
        j = int(np.argmax(np.log(m_big) + np.log(r_big)))
        largest = _fmt_product(m_big[j], r_big[j])
    else:
        largest = f"{math.sqrt(float(sq[fin].max())):.6g}"
    warnings.warn(
        _clip_message(n_over, X.shape[0], name, largest),
        UserWarning,
        stacklevel=stacklevel,
    )
    scale = np.ones(X.shape[0])
    scale[fin] = 1.0 / np.sqrt(sq[fin])
    if idx.size:
        scale[idx] = (1.0 / m_big) / r_big  # 1/m may be subnormal: relative error < 1e-14
    return scale


def _clip_message(n_over: int, n: int, name: str, largest: str) -> str:
    return f"clipped {n_over} of {n} row(s) of {name} to L2 norm 1 (largest norm {largest})"


def _fmt_product(m: float, r: float) -> str:
    """``m * r`` printed without overflow (``m`` finite, ``r`` in [1, √p])."""
    v = float(m) * float(r)  # Python floats: overflow gives inf, no warning
    if math.isfinite(v):
        return f"{v:.6g}"
    e = math.log10(m) + math.log10(r)
    return f"{10 ** (e - math.floor(e)):.6g}e+{math.floor(e)}"


def _gram_block_rows(p: int) -> int:
    """Rows per block of the blocked Gram sums: about 1 MiB of ``X`` (a core's L2 cache
    here), at least 256 rows so that each BLAS call has work enough."""
    return max(_BLOCK_BYTES // (8 * max(1, p)), 256)


_BLOCK_BYTES = 1 << 20
# Per-block calls with the least fixed cost (a few hundred blocks per pass): ``np.dot``
# takes the same BLAS ``syrk`` path as ``np.matmul`` for ``Xc.T @ Xc`` (same bits) at
# 1.3 µs of overhead against 4.6; ``np.maximum.reduce`` (NaN-propagating, as ``max``)
# skips the method's dispatch.
_MAX = np.maximum.reduce


def second_moment_sum(X: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    r""":math:`\sum_i s_i^2 x_i x_i^\top` (``p`` x ``p``), with BLAS, in row chunks.

    ``scale`` (from :func:`clip_rows`) is applied only to the chunks that contain a
    clipped row; elsewhere the rows of ``X`` are used in place (no copy).  Without
    ``scale`` it is one ``X.T @ X``.  With it, the blocks and the order of the sum are
    those of ``_checked_second_moment_sum``, which gives the same matrix bit for bit.
    """
    n, p = X.shape
    if scale is None:
        return X.T @ X
    C = np.zeros((p, p))
    G = np.empty((p, p))
    step = _gram_block_rows(p)
    for s in range(0, n, step):
        Xc = X[s : s + step]
        sc = scale[s : s + step]
        if (sc != 1.0).any():
            Xc = Xc * sc[:, None]
        np.dot(Xc.T, Xc, out=G)
        C += G
    return C


def _checked_second_moment_sum(
    X: np.ndarray, norm_policy: str, name: str, stacklevel: int
) -> np.ndarray:
    r""":func:`clip_rows` and :func:`second_moment_sum` in one pass over ``X``.

    ``X`` is read from memory once: per block of rows sized to stay in cache
    (:func:`_gram_block_rows`), the rows' squared norms are computed and checked
    (finite, at most ``(1 + NORM_TOL)^2``; rows above it scaled to norm 1 under
    ``norm_policy="clip"``), then the block's Gram matrix is added, while the block is
    still in cache.

    The result is **bit for bit** ``second_moment_sum(X, clip_rows(X, norm_policy))``
    with ``scale`` forced (an all-ones one when no row is clipped), and the warning and
    errors are :func:`clip_rows`'s, word for word.  Against one ``X.T @ X`` only the
    order of the floating-point sum differs: entrywise within
    :math:`2\gamma_n (|X|^\top |X|)_{jl}` (:math:`\gamma_n = nu/(1-nu)`, ``u`` the unit
    roundoff; tested).  Anything unusual -- a NaN or infinity, a row whose squared norm
    overflows, a row above the bound under ``norm_policy="raise"`` -- goes back to
    :func:`clip_rows` on the whole of ``X`` for its exact message or its overflow-safe
    norms, before any noise is drawn.

    Parameters
    ----------
    X : ndarray of float64, shape (n, p)
    norm_policy : {"clip", "raise"}
    name : str
        What messages call ``X``.

    Returns
    -------
    ndarray, shape (p, p)
        :math:`\sum_i s_i^2 x_i x_i^\top` with :math:`s_i = \min(1, 1/\|x_i\|)`.
    """
    n = X.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN norms: handled below
        out = _fused_blocks(X, norm_policy == "clip")
    if out is None:
        # non-finite entries, overflowing squares or "raise" with a row above the bound:
        # clip_rows's own path, for its exact message (or its overflow-safe norms)
        f = _clip_factors(X, norm_policy, name, stacklevel + 1)
        return second_moment_sum(X, np.ones(n) if f is None else f)
    C, n_over, largest_sq = out
    if n_over:
        warnings.warn(
            _clip_message(n_over, n, name, f"{math.sqrt(largest_sq):.6g}"),
            UserWarning,
            stacklevel=stacklevel,
        )
    return C


def _fused_blocks(X: np.ndarray, clip: bool) -> tuple[np.ndarray, int, float] | None:
    """The loop of :func:`_checked_second_moment_sum`: ``(C, rows clipped, largest squared
    norm)``, or ``None`` at the first block with a non-finite squared norm (or, unless
    ``clip``, one above the bound).  Run under ``np.errstate(over/invalid="ignore")``
    once for all blocks (entering it per block cost about 1 % of the pass)."""
    n, p = X.shape
    step = _gram_block_rows(p)
    bound = (1.0 + NORM_TOL) ** 2
    C = np.zeros((p, p))
    G = np.empty((p, p))
    sq = np.empty(min(step, n))
    n_over = 0
    largest_sq = 0.0
    for s in range(0, n, step):
        Xc = X[s : s + step]
        q = _sq_norms_into(Xc, sq[: Xc.shape[0]])
        top = _MAX(q)  # NaN if any row has one
        if not top <= bound:
            if not (clip and math.isfinite(top)):
                return None
            over = q > bound
            n_over += int(over.sum())
            largest_sq = max(largest_sq, float(top))
            sc = np.ones(Xc.shape[0])
            sc[over] = 1.0 / np.sqrt(q[over])
            Xc = Xc * sc[:, None]
        np.dot(Xc.T, Xc, out=G)
        C += G
    return C, n_over, largest_sq
