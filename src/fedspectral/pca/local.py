r"""Algorithm 1 of Wang & Xu (IJCAI 2019): the local Gaussian mechanism for PCA.

Protocol
--------
Each user :math:`i` holds one row :math:`x_i \in \mathbb{R}^p` with
:math:`\|x_i\|_2 \le 1` and sends **one message**: the upper triangle (diagonal
included) of :math:`x_i x_i^\top + Z_i`, where :math:`Z_i` is symmetric and its
upper-triangular entries are iid :math:`N(0, \sigma^2)` -- :math:`p(p+1)/2`
floats (:func:`perturb`).  The server averages the messages,
:math:`\hat S = \frac1n \sum_i (x_i x_i^\top + Z_i)`
(:class:`CovarianceAggregator`), and outputs the top-``k`` eigenspace of
:math:`\hat S` (:class:`fedspectral.pca.estimators.LocalDPPCA`).

Sensitivity (replace-one, the local model)
------------------------------------------
In the local model any two inputs :math:`x, x'` with norm :math:`\le 1` are
neighbours.  Write :math:`a = \mathrm{vech}(xx^\top)` for the packed upper
triangle.  Then

.. math::
    \langle \mathrm{vech}(xx^\top), \mathrm{vech}(yy^\top)\rangle
    = \sum_{i\le j} x_i x_j y_i y_j
    = \tfrac12\big((x^\top y)^2 + \textstyle\sum_i x_i^2 y_i^2\big) \;\ge\; 0,

so :math:`\|a\|^2 = \frac12(\|x\|^4 + \sum_i x_i^4) \le \|x\|^4 \le 1` and

.. math::
    \|a - a'\|^2 = \|a\|^2 + \|a'\|^2 - 2\langle a, a'\rangle \le 2 .

The bound is attained by :math:`x = e_1, x' = e_2` (:math:`a, a'` are orthogonal
unit vectors), so the L2 sensitivity is exactly :data:`SENSITIVITY` :math:`=\sqrt2`.

Calibrations (:func:`ldp_noise_scale`, the one place where σ is chosen)
----------------------------------------------------------------------
``"analytic"`` (default)
    Analytic Gaussian mechanism (Balle & Wang 2018) with :math:`\Delta=\sqrt2`:
    the smallest σ that is :math:`(\varepsilon,\delta)`-LDP, for every ε > 0.
``"classic"``
    :math:`\sigma = \sqrt2\,\sqrt{2\ln(1.25/\delta)}/\varepsilon`, proven only for
    ε < 1 (larger ε raises).
``"paper"``
    The seed's :math:`\sigma_1^2 = 2\ln(1.25/\delta)/\varepsilon^2` exactly, i.e. the
    classic formula with sensitivity 1, used (forced) for every ε.  It is **not** the
    default because (i) the sensitivity of the message is √2, not 1, so the
    promised ε is not met, and (ii) the classic bound is no proof of privacy for
    ε ≥ 1.  The privacy actually delivered is still accounted honestly: the
    ledger records the true sensitivity √2, so its ε is larger than the nominal one.

Accounting
----------
Every user releases exactly one message with the same σ, and users hold disjoint
data, so (parallel composition) each user's guarantee is that of one Gaussian
release with noise multiplier :math:`\sigma/\sqrt2`.  The ledger therefore holds
**one** release for the party :data:`PARTY` ``"user"``, standing for every
user (``n`` identical entries would only make the ledger ``n`` times larger);
its mechanism name records the number of users (:func:`record_ldp_release`).

Simulation of ``n`` users (:func:`simulate_messages_sum`)
-------------------------------------------------------
``noise_mode="per_user"`` draws every user's :math:`p(p+1)/2` noise values (in
chunks of rows, so memory stays bounded) and sums them; ``"aggregate"`` draws the
sum directly: :math:`\sum_i Z_i` is symmetric with iid :math:`N(0, n\sigma^2)`
upper-triangular entries, so :math:`\hat S` has exactly the same distribution.
The signal part :math:`\sum_i x_i x_i^\top = X^\top X` is computed once with BLAS.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from fedspectral.linalg import n_packed, pack_upper, triu_indices, unpack_upper
from fedspectral.privacy import PrivacyLedger, gaussian_sigma
from fedspectral.privacy.noise import SecureNoise, add_gaussian, as_noise_source

__all__ = [
    "CALIBRATIONS",
    "MECHANISM",
    "NOISE_MODES",
    "NORM_POLICIES",
    "NORM_TOL",
    "PARTY",
    "SENSITIVITY",
    "CovarianceAggregator",
    "LDPNoiseScale",
    "clip_rows",
    "ldp_noise_scale",
    "perturb",
    "perturb_batch",
    "record_ldp_release",
    "second_moment_sum",
    "simulate_messages_sum",
]

#: Replace-one L2 sensitivity of the packed upper triangle of :math:`xx^\top`, :math:`\|x\|\le1`.
SENSITIVITY: float = math.sqrt(2.0)
CALIBRATIONS = ("analytic", "classic", "paper")
NOISE_MODES = ("aggregate", "per_user")
NORM_POLICIES = ("clip", "raise")
#: Rows with norm in (1, 1 + NORM_TOL] are floating-point rounding of norm-1 rows: accepted as is.
NORM_TOL: float = 1e-9
#: Ledger party standing for every user (each makes one release at the same σ).
PARTY = "user"
MECHANISM = "ldp-pca/local-gaussian"

_CHUNK_BYTES = 1 << 21  # ~2 MiB working chunks (cache-friendly, bounded memory)


class LDPNoiseScale(NamedTuple):
    """Noise of one user's message: ``sigma`` per packed entry, ``sensitivity`` used to
    calibrate it, and the ``method`` of :func:`fedspectral.privacy.gaussian_sigma`."""

    sigma: float
    sensitivity: float
    method: str


# ----------------------------------------------------------------------------- validation
def _check_choice(value: object, choices: tuple[str, ...], name: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_epsilon(epsilon: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.integer, np.floating)):
        raise ValueError(f"epsilon must be a number > 0 (np.inf allowed), got {epsilon!r}")  # noqa: TRY004
    if math.isnan(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a number > 0 (np.inf allowed), got {epsilon!r}")
    return float(epsilon)


def _check_delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.integer, np.floating)):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")  # noqa: TRY004
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return float(delta)


def _as_rng(rng: object, secure_ok: bool = False) -> np.random.Generator | SecureNoise:
    if isinstance(rng, SecureNoise) or (isinstance(rng, str) and rng == "secure"):
        if not secure_ok:
            raise TypeError("the secure noise source is for device messages (perturb, "
                            "perturb_batch); simulations of n users use seeded numpy")
        return as_noise_source(rng)
    if rng is None or isinstance(rng, (int, np.integer, np.random.SeedSequence)):
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng < 0:
            raise ValueError(f"seed must be >= 0, got {rng!r}")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    raise TypeError(
        f"rng must be None, an int seed, a SeedSequence, a numpy.random.Generator or "
        f"'secure', got {type(rng).__name__}"
    )


def _check_rows(X: object, name: str = "X") -> np.ndarray:
    """Float64 2-D view of ``X`` (no copy when already float64); finiteness is checked
    later from the row norms, in the same pass."""
    X = np.asarray(X)
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real numeric array, got dtype {X.dtype}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_users, p), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {X.shape}")
    return np.asarray(X, dtype=np.float64)


def _chunk_rows(width: int) -> int:
    return max(1, _CHUNK_BYTES // (8 * max(1, width)))


# ----------------------------------------------------------------------------- calibration
def ldp_noise_scale(
    epsilon: float, delta: float, calibration: str = "analytic"
) -> LDPNoiseScale:
    r"""σ of every packed entry of one user's noise :math:`Z_i` (see the module docstring).

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, ``> 0``; ``np.inf`` gives ``sigma = 0`` (no noise).
    delta : float
        In ``(0, 1)``.
    calibration : {"analytic", "classic", "paper"}
        ``"analytic"``: analytic Gaussian, sensitivity √2 (default, valid for all ε);
        ``"classic"``: classic formula, sensitivity √2, ε < 1 only;
        ``"paper"``: the seed's :math:`\sigma_1^2 = 2\ln(1.25/\delta)/\varepsilon^2`
        (classic formula with sensitivity 1, forced for ε ≥ 1) -- under-calibrated by
        a factor √2, kept only to reproduce the paper.

    Returns
    -------
    LDPNoiseScale
        ``(sigma, sensitivity, method)``: the sensitivity is the one used for the
        calibration (1 for ``"paper"``); the true sensitivity is always
        :data:`SENSITIVITY`.
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    _check_choice(calibration, CALIBRATIONS, "calibration")
    return _noise_scale_cached(epsilon, delta, calibration)


@lru_cache(maxsize=256)
def _noise_scale_cached(epsilon: float, delta: float, calibration: str) -> LDPNoiseScale:
    # pure function of validated floats; the analytic calibration is a root search
    if calibration == "analytic":
        return LDPNoiseScale(gaussian_sigma(epsilon, delta, SENSITIVITY, "analytic"),
                             SENSITIVITY, "analytic")
    if calibration == "classic":
        return LDPNoiseScale(gaussian_sigma(epsilon, delta, SENSITIVITY, "classic"),
                             SENSITIVITY, "classic")
    return LDPNoiseScale(gaussian_sigma(epsilon, delta, 1.0, "classic", force=True),
                         1.0, "classic")


def record_ldp_release(
    ledger: PrivacyLedger, sigma: float, n_users: int, party: str = PARTY
) -> None:
    """Record the one-message-per-user release of Algorithm 1 in ``ledger``.

    One entry for ``party`` stands for all ``n_users`` users (each sends one
    message with noise ``sigma``; disjoint data, parallel composition).  The
    recorded sensitivity is always the true one, :data:`SENSITIVITY`
    (replace-one), whatever calibration chose ``sigma``.
    """
    if isinstance(n_users, bool) or not isinstance(n_users, (int, np.integer)) or n_users < 1:
        raise ValueError(f"n_users must be a positive integer, got {n_users!r}")
    ledger.record(party, f"{MECHANISM}[n_users={int(n_users)}]", sigma=float(sigma),
                  sensitivity=SENSITIVITY, count=1, neighbouring="replace_one")


# ----------------------------------------------------------------------------- clipping
def _row_sq_norms(X: np.ndarray) -> np.ndarray:
    n, p = X.shape
    out = np.empty(n)
    step = _chunk_rows(p)
    for s in range(0, n, step):
        Xc = X[s:s + step]
        np.einsum("ij,ij->i", Xc, Xc, out=out[s:s + step])
    return out


def clip_rows(X: np.ndarray, norm_policy: str = "clip", name: str = "X") -> np.ndarray | None:
    r"""Check the rows of ``X`` and return the per-row factors that enforce
    :math:`\|x_i\| \le 1` (or None when no row needs clipping).

    Rows with norm above ``1 + NORM_TOL`` are scaled to norm 1 with a
    ``UserWarning`` (``norm_policy="clip"``) or rejected with ``ValueError``
    (``"raise"``).  NaN/inf entries raise ``ValueError``.  One vectorised pass.

    Returns
    -------
    ndarray of shape (n,) or None
        Factors :math:`\min(1, 1/\|x_i\|)` (1 for rows inside the ball).
    """
    _check_choice(norm_policy, NORM_POLICIES, "norm_policy")
    sq = _row_sq_norms(X)
    bad = ~np.isfinite(sq)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if not np.isfinite(X[i]).all():
            raise ValueError(f"{name} contains NaN or infinite values (first in row {i})")
        # finite but the squares overflow: recompute those norms safely
        idx = np.flatnonzero(bad)
        big = X[idx]
        m = np.abs(big).max(axis=1, keepdims=True)
        sq[idx] = np.inf  # beyond any bound; exact value only needed for the factor
        norms_big = m[:, 0] * np.linalg.norm(big / m, axis=1)
    else:
        idx = np.empty(0, dtype=np.intp)
        norms_big = np.empty(0)
    over = sq > (1.0 + NORM_TOL) ** 2
    n_over = int(over.sum())
    if n_over == 0:
        return None
    if norm_policy == "raise":
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"{n_over} row(s) of {name} have L2 norm > 1 (first: row {i}, norm "
            f"{math.sqrt(sq[i]) if math.isfinite(sq[i]) else float('inf'):.6g}); "
            f"the sensitivity bound needs ||x|| <= 1 (use norm_policy='clip')"
        )
    fin = sq[np.isfinite(sq)]
    largest = max(math.sqrt(float(fin.max())) if fin.size else 0.0,
                  float(norms_big.max()) if norms_big.size else 0.0)
    warnings.warn(
        f"clipped {n_over} of {X.shape[0]} row(s) of {name} to L2 norm 1 "
        f"(largest norm {largest:.6g})",
        UserWarning,
        stacklevel=3,
    )
    scale = np.ones(X.shape[0])
    with np.errstate(divide="ignore"):
        scale[over] = 1.0 / np.sqrt(sq[over])
    if idx.size:
        scale[idx] = 1.0 / norms_big
    return scale


def second_moment_sum(X: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    r""":math:`\sum_i s_i^2 x_i x_i^\top` (``p`` x ``p``), with BLAS, in row chunks.

    ``scale`` (from :func:`clip_rows`) is applied only to the chunks that contain a
    clipped row; elsewhere the rows of ``X`` are used in place (no copy).
    """
    n, p = X.shape
    C = np.zeros((p, p))
    if scale is None:
        return X.T @ X
    step = max(_chunk_rows(p), 1024)
    for s in range(0, n, step):
        Xc = X[s:s + step]
        if scale is not None:
            sc = scale[s:s + step]
            if (sc != 1.0).any():
                Xc = Xc * sc[:, None]
        C += Xc.T @ Xc
    return C


# ----------------------------------------------------------------------------- noise
def _packed_noise_sum(
    n: int, m: int, sigma: float, rng: np.random.Generator, noise_mode: str,
    chunk_rows: int | None = None,
) -> np.ndarray:
    """Sum of ``n`` iid ``N(0, sigma^2 I_m)`` vectors."""
    if sigma == 0.0:
        return np.zeros(m)
    if noise_mode == "aggregate":
        return rng.standard_normal(m) * (sigma * math.sqrt(n))
    step = chunk_rows if chunk_rows is not None else _chunk_rows(m)
    step = min(step, n)
    buf = np.empty((step, m))
    ones = np.ones(step)
    acc = np.zeros(m)
    for s in range(0, n, step):
        r = min(step, n - s)
        b = buf[:r]
        rng.standard_normal(out=b)  # user s..s+r-1: their own m draws each
        acc += ones[:r] @ b
    acc *= sigma
    return acc


# ----------------------------------------------------------------------------- client
def perturb(
    x: np.ndarray,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    calibration: str = "analytic",
    norm_policy: str = "clip",
) -> np.ndarray:
    r"""The message one device sends (Algorithm 1, line 2).

    .. math:: m = \mathrm{vech}(x x^\top + Z), \qquad
              Z = Z^\top,\ Z_{ij} \overset{iid}{\sim} N(0,\sigma^2)\ (i \le j),

    i.e. the packed upper triangle (diagonal included, order of
    ``numpy.triu_indices(p)``) of the noisy outer product: :math:`p(p+1)/2` floats.

    Parameters
    ----------
    x : ndarray, shape (p,)
        The user's record; ``||x|| <= 1`` is enforced by ``norm_policy``.
    epsilon, delta : float
        Local privacy parameters (``epsilon = np.inf``: no noise).
    rng : numpy.random.Generator, int, None, "secure" or SecureNoise
        Noise source.  ``None`` or ``"secure"``: the secure source a real device
        runs (:class:`fedspectral.privacy.SecureNoise`: OS entropy, OpenDP's
        floating-point-safe Gaussian mechanism); a generator or seed: seeded numpy
        (experiments).
    calibration : {"analytic", "classic", "paper"}
        See :func:`ldp_noise_scale`.
    norm_policy : {"clip", "raise"}
        Rows with norm > 1: scaled to norm 1 with a warning, or ``ValueError``.

    Returns
    -------
    ndarray, shape (p(p+1)/2,)
    """
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D (one user's record), got shape {x.shape}")
    rng = "secure" if rng is None else rng  # a device's message: the secure source
    return _messages(x[None, :], epsilon, delta, rng, calibration, norm_policy, "x")[0]


def perturb_batch(
    X: np.ndarray,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    calibration: str = "analytic",
    norm_policy: str = "clip",
) -> np.ndarray:
    """The messages of ``n`` devices at once, shape ``(n, p(p+1)/2)``: row ``i`` is
    :func:`perturb` of ``X[i]``.  Noise is drawn row after row from ``rng`` (the same
    stream :func:`simulate_messages_sum` uses in ``"per_user"`` mode)."""
    return _messages(X, epsilon, delta, rng, calibration, norm_policy, "X")


def _messages(X: np.ndarray, epsilon: float, delta: float,
              rng: np.random.Generator | int | None, calibration: str, norm_policy: str,
              name: str) -> np.ndarray:
    """Rows of :func:`perturb_batch`; ``name`` is what error messages call ``X``."""
    scale = ldp_noise_scale(epsilon, delta, calibration)
    _check_choice(norm_policy, NORM_POLICIES, "norm_policy")
    X = _check_rows(X, name)
    gen = _as_rng(rng, secure_ok=True)
    f = clip_rows(X, norm_policy, name)
    if f is not None:
        X = X * f[:, None]
    rows, cols = triu_indices(X.shape[1])
    msgs = X[:, rows] * X[:, cols]
    if scale.sigma > 0:
        if isinstance(gen, SecureNoise):
            return add_gaussian(msgs, scale.sigma, gen)
        msgs += scale.sigma * gen.standard_normal(msgs.shape)
    return msgs


# ----------------------------------------------------------------------------- simulation
def simulate_messages_sum(
    X: np.ndarray,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    calibration: str = "analytic",
    noise_mode: str = "aggregate",
    norm_policy: str = "clip",
    ledger: PrivacyLedger | None = None,
    chunk_rows: int | None = None,
) -> tuple[np.ndarray, int]:
    r"""Sum of the messages of ``n`` simulated users, packed, and ``n``.

    .. math:: \sum_i \mathrm{vech}(x_i x_i^\top + Z_i)
              = \mathrm{vech}(X^\top X) + \sum_i \mathrm{vech}(Z_i)

    ``noise_mode="per_user"`` draws every :math:`\mathrm{vech}(Z_i)` (``chunk_rows``
    users at a time, default ~2 MiB per chunk; peak memory independent of ``n``)
    and sums them; ``"aggregate"`` draws :math:`\sum_i \mathrm{vech}(Z_i) \sim
    N(0, n\sigma^2 I)` at once -- the same distribution.  Both scale standard
    normals by σ after summing (identical in distribution and exact arithmetic).

    If ``ledger`` is given, the release is recorded there (:func:`record_ldp_release`).
    All arguments are validated before any work.

    Returns
    -------
    total : ndarray, shape (p(p+1)/2,)
    n : int
    """
    scale = ldp_noise_scale(epsilon, delta, calibration)
    _check_choice(noise_mode, NOISE_MODES, "noise_mode")
    _check_choice(norm_policy, NORM_POLICIES, "norm_policy")
    if chunk_rows is not None and (
        isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer))
        or chunk_rows < 1
    ):
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
    X = _check_rows(X)
    gen = _as_rng(rng)
    n, p = X.shape
    f = clip_rows(X, norm_policy)
    total = pack_upper(second_moment_sum(X, f))
    total += _packed_noise_sum(n, n_packed(p), scale.sigma, gen, noise_mode, chunk_rows)
    if ledger is not None:
        record_ldp_release(ledger, scale.sigma, n)
    return total, n


# ----------------------------------------------------------------------------- server
@dataclass
class CovarianceAggregator:
    r"""Server side of Algorithm 1: running sum of packed messages.

    Holds one vector of :math:`p(p+1)/2` floats and a count -- :math:`O(p^2)`
    memory whatever the number of users.  Aggregators over disjoint groups of
    users combine with :meth:`merge` (addition: associative and commutative up
    to floating-point rounding).  :meth:`covariance` returns
    :math:`\hat S = \frac1n\sum_i \mathrm{unpack}(m_i)`, the (noisy, uncentred)
    second moment.

    Parameters
    ----------
    p : int
        Data dimension.
    """

    p: int

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, np.integer)) or self.p < 1:
            raise ValueError(f"p must be a positive integer, got {self.p!r}")
        self.p = int(self.p)
        self._sum = np.zeros(n_packed(self.p))
        self._count = 0

    @property
    def n_packed(self) -> int:
        """Message length :math:`p(p+1)/2`."""
        return self._sum.shape[0]

    @property
    def count(self) -> int:
        """Number of messages aggregated."""
        return self._count

    @property
    def total(self) -> np.ndarray:
        """Sum of the packed messages (a copy)."""
        return self._sum.copy()

    def _check_msgs(self, a: object, ndim: int, name: str) -> np.ndarray:
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{name} must be a real numeric array, got dtype {a.dtype}")
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != ndim or a.shape[-1] != self.n_packed:
            want = "(m,)" if ndim == 1 else "(n, m)"
            raise ValueError(
                f"{name} must have shape {want} with m = p(p+1)/2 = {self.n_packed} "
                f"(p={self.p}), got shape {a.shape}"
            )
        if ndim == 2 and a.shape[0] == 0:
            raise ValueError(f"{name} is empty (shape {a.shape})")
        if not np.isfinite(a).all():
            raise ValueError(f"{name} contains NaN or infinite values")
        return a

    def add(self, message: np.ndarray) -> CovarianceAggregator:
        """Add one user's message (shape ``(p(p+1)/2,)``)."""
        msg = self._check_msgs(message, 1, "message")
        self._sum += msg
        self._count += 1
        return self

    def add_batch(self, messages: np.ndarray) -> CovarianceAggregator:
        """Add the messages of several users (shape ``(n, p(p+1)/2)``)."""
        msgs = self._check_msgs(messages, 2, "messages")
        self._sum += np.ones(msgs.shape[0]) @ msgs
        self._count += msgs.shape[0]
        return self

    def add_sum(self, total: np.ndarray, count: int) -> CovarianceAggregator:
        """Add a pre-summed block of ``count`` messages (e.g. from
        :func:`simulate_messages_sum`)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        t = self._check_msgs(total, 1, "total")
        self._sum += t
        self._count += int(count)
        return self

    def merge(self, other: CovarianceAggregator) -> CovarianceAggregator:
        """Add the state of ``other`` (same ``p``) into this aggregator; returns self."""
        if not isinstance(other, CovarianceAggregator):
            raise TypeError(f"can only merge a CovarianceAggregator, got {type(other).__name__}")
        if other.p != self.p:
            raise ValueError(f"cannot merge aggregators of dimension p={self.p} and p={other.p}")
        self._sum += other._sum
        self._count += other._count
        return self

    def covariance(self) -> np.ndarray:
        r""":math:`\hat S = \frac1n \sum_i \mathrm{unpack}(m_i)`, symmetric ``p`` x ``p``."""
        if self._count == 0:
            raise ValueError("no messages aggregated yet (count = 0)")
        return unpack_upper(self._sum / self._count, self.p)
