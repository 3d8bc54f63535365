r"""The synthetic models of Wang & Xu (IJCAI 2019), Section 6.

Spiked covariance (low dimension, Section 6.1):

.. math:: \Sigma = \frac{\lambda V V^\top + I_p}{5p(\lambda + 1)}, \qquad V \in V_{p,k}
          \text{ uniform on the Stiefel manifold},

so the top-``k`` eigenvalues are :math:`1/(5p)`, the others :math:`1/(5p(\lambda+1))`,
:math:`\mathrm{tr}\,\Sigma \le 1/5` and Gaussian rows have :math:`\|x\|\le1` with
high probability.  Row-sparse model (Section 6.2): the same :math:`\Sigma` with
:math:`V` a random orthogonal :math:`s\times k` matrix padded with :math:`p-s` zero
rows and row-permuted.
"""

from __future__ import annotations

import numbers

import numpy as np

from fedspectral.checks import check_int, check_real, describe

__all__ = [
    "federated_model",
    "federated_users",
    "random_stiefel",
    "row_sparse_covariance",
    "sample",
    "spiked_covariance",
    "spiked_eigenvalues",
]


def _rng(rng: object) -> np.random.Generator:
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError(
            f"rng must be None, an int seed or a numpy.random.Generator, got {describe(rng)}"
        )
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, numbers.Integral):
        return np.random.default_rng(int(rng))
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError(
        f"rng must be None, an int seed or a numpy.random.Generator, got {type(rng).__name__}"
    )


def random_stiefel(p: int, k: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """A ``p`` x ``k`` matrix with orthonormal columns, uniform (Haar) on :math:`V_{p,k}`
    (QR of a Gaussian matrix with the signs of ``R``'s diagonal fixed)."""
    p = check_int("p", p, low=1)
    k = check_int("k", k, low=1)
    if k > p:
        raise ValueError(f"k must be <= p={p}, got {k!r}")
    g = _rng(rng)
    Q, R = np.linalg.qr(g.standard_normal((p, k)))
    d = np.sign(np.diag(R))
    d[d == 0] = 1.0
    return Q * d


def _sigma_from_V(V: np.ndarray, lam: float) -> np.ndarray:
    p = V.shape[0]
    S = lam * (V @ V.T)
    S[np.diag_indices(p)] += 1.0
    S /= 5.0 * p * (lam + 1.0)
    return 0.5 * (S + S.T)


def spiked_eigenvalues(p: int, k: int, lam: float = 1.0) -> np.ndarray:
    """Eigenvalues of :func:`spiked_covariance` in descending order."""
    p = check_int("p", p, low=1)
    k = check_int("k", k, low=1)
    lam = check_real("lam", lam, low=0.0, low_open=True)
    ev = np.full(p, 1.0 / (5.0 * p * (lam + 1.0)))
    ev[:k] = 1.0 / (5.0 * p)
    return ev


def spiked_covariance(
    p: int, k: int, lam: float = 1.0, rng: np.random.Generator | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Spiked covariance :math:`\Sigma = (\lambda VV^\top + I)/(5p(\lambda+1))`.

    Returns
    -------
    Sigma : ndarray (p, p)
    V : ndarray (p, k)
        Orthonormal basis of the true principal subspace.
    """
    p = check_int("p", p, low=1)
    k = check_int("k", k, low=1)
    lam = check_real("lam", lam, low=0.0, low_open=True)
    if k > p:
        raise ValueError(f"k must be <= p={p}, got {k!r}")
    V = random_stiefel(p, k, _rng(rng))
    return _sigma_from_V(V, lam), V


def row_sparse_covariance(
    p: int, k: int, s: int, lam: float = 1.0, rng: np.random.Generator | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Spiked covariance whose principal subspace is ``s``-row-sparse.

    :math:`V` = a random orthogonal ``s`` x ``k`` matrix padded with ``p - s`` zero
    rows, then row-permuted (seed, Section 6.2); :math:`\|V\|_{2,0} = s`.

    Returns
    -------
    Sigma : ndarray (p, p)
    V : ndarray (p, k)
    """
    p = check_int("p", p, low=1)
    k = check_int("k", k, low=1)
    s = check_int("s", s, low=1)
    lam = check_real("lam", lam, low=0.0, low_open=True)
    if not k <= s <= p:
        raise ValueError(f"s must satisfy k <= s <= p (k={k}, p={p}), got {s!r}")
    g = _rng(rng)
    V = np.zeros((p, k))
    V[:s] = random_stiefel(s, k, g)
    V = V[g.permutation(p)]
    return _sigma_from_V(V, lam), V


def sample(Sigma: np.ndarray, n: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
    r"""``n`` iid rows from :math:`N(0, \Sigma)` (``Sigma`` positive semi-definite).

    Uses a symmetric square root from ``eigh``, so singular ``Sigma`` is fine.
    """
    n = check_int("n", n, low=1)
    Sigma = np.asarray(Sigma, dtype=np.float64)
    if Sigma.ndim != 2 or Sigma.shape[0] != Sigma.shape[1] or Sigma.shape[0] == 0:
        raise ValueError(f"Sigma must be a non-empty square matrix, got shape {Sigma.shape}")
    if not np.isfinite(Sigma).all():
        raise ValueError("Sigma contains NaN or infinite values")
    if not np.allclose(Sigma, Sigma.T, atol=1e-12, rtol=1e-10):
        raise ValueError("Sigma must be symmetric")
    w, U = np.linalg.eigh(0.5 * (Sigma + Sigma.T))
    if w.min() < -1e-10 * max(1.0, abs(w).max()):
        raise ValueError(f"Sigma must be positive semi-definite, smallest eigenvalue {w.min():.3g}")
    root = (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T
    g = _rng(rng)
    return g.standard_normal((n, Sigma.shape[0])) @ root


def federated_model(p: int, k: int, seed: int, spike: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""The spiked model :math:`(\Sigma, V)` every client of a federated PCA run shares,
    :math:`V` Haar-random from ``seed`` (:func:`spiked_covariance`)."""
    return spiked_covariance(p, k, spike, rng=np.random.default_rng([int(seed), 0]))


def federated_users(
    n: int, p: int, k: int, seed: int, partition: int, spike: float = 1.0
) -> np.ndarray:
    r"""``n`` users of client ``partition``, iid :math:`N(0,\Sigma)` of
    :func:`federated_model` (then :math:`\|x\| \le 1` w.h.p.; the norm policy treats the
    rows beyond): the same users in process (``ldp_pca``), on a Flower node and in the
    LDP-PCA app."""
    Sigma, _ = federated_model(p, k, seed, spike)
    return sample(Sigma, n, rng=np.random.default_rng([int(seed), 1, int(partition)]))
