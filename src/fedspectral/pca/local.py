r"""Algorithm 1 of Wang & Xu (IJCAI 2019): the local Gaussian mechanism for PCA.

Protocol
--------
Each user :math:`i` holds one row :math:`x_i \in \mathbb{R}^p` with
:math:`\|x_i\|_2 \le 1` and sends **one message** of :math:`p(p+1)/2` floats
(:func:`perturb`): the packed upper triangle (diagonal included) of :math:`x_i x_i^\top`
plus iid :math:`N(0, \sigma^2)` noise on every packed entry.  The server sums the
messages, un-packs the sum into a symmetric matrix and divides by :math:`n`,
:math:`\hat S = \frac1n \sum_i (x_i x_i^\top + Z_i)`
(:class:`CovarianceAggregator`), and outputs the top-``k`` eigenspace of
:math:`\hat S` (:class:`fedspectral.pca.estimators.LocalDPPCA`).

Vectorisation (how the message packs the matrix)
------------------------------------------------
``"isometric"`` (the default for the analytic and classic calibrations)
    :math:`m = \mathrm{svec}(xx^\top) + g`, :math:`g \sim N(0,\sigma^2 I)`, where
    :math:`\mathrm{svec}` keeps the diagonal and multiplies the off-diagonal entries
    :math:`x_jx_l` (:math:`j<l`) by :math:`\sqrt2`
    (:func:`fedspectral.linalg.pack_symmetric`): :math:`\|\mathrm{svec}(A)\| =
    \|A\|_F`.  The server undoes the :math:`\sqrt2` once, on the sum of the
    messages (:meth:`CovarianceAggregator.covariance`, through
    :func:`fedspectral.linalg.unpack_symmetric`), so :math:`Z_i` has variance
    :math:`\sigma^2` on the diagonal and :math:`\sigma^2/2` off it.
``"upper"`` (the paper's; the default for ``calibration="paper"``)
    :math:`m = \mathrm{vech}(xx^\top) + g`: :math:`Z_i` has iid :math:`N(0,\sigma^2)`
    upper-triangular entries, lower triangle mirrored.

``vectorisation="auto"`` (the default of every function here that also takes a
``calibration``) means ``"upper"`` for ``calibration="paper"`` (the seed exactly) and
``"isometric"`` otherwise (:func:`resolve_vectorisation`).  σ, the message length and
the noise draws are the same for both; only the packing of :math:`xx^\top` and the
server's un-packing differ.

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

For the isometric vector, :math:`\|\mathrm{svec}(xx^\top) - \mathrm{svec}(yy^\top)\|^2
= \|xx^\top - yy^\top\|_F^2 = \|x\|^4 + \|y\|^4 - 2(x^\top y)^2 \le 2`, attained by
*every* orthogonal pair of unit vectors: the same sensitivity √2, hence the same σ
and the same ledger entry for both vectorisations.

Calibrations (:func:`ldp_noise_scale`, the one place where σ is chosen)
-----------------------------------------------------------------------
``"analytic"`` (default)
    Analytic Gaussian mechanism (Balle & Wang 2018) with :math:`\Delta=\sqrt2`:
    the smallest σ that is :math:`(\varepsilon,\delta)`-LDP, for every ε > 0.
``"classic"``
    :math:`\sigma = \sqrt2\,\sqrt{2\ln(1.25/\delta)}/\varepsilon`, proven only for
    ε < 1 (larger ε raises).
``"paper"``
    The paper's :math:`\sigma_1^2 = 2\ln(1.25/\delta)/\varepsilon^2` exactly, i.e. the
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
---------------------------------------------------------
``noise_mode="per_user"`` draws every user's :math:`p(p+1)/2` noise values (in
chunks of rows, so memory stays bounded) and sums them; ``"aggregate"`` draws the
sum of the packed noise vectors directly, :math:`\sum_i g_i \sim N(0, n\sigma^2 I)`,
so :math:`\hat S` has exactly the same distribution (for either vectorisation).
The signal part :math:`\sum_i x_i x_i^\top = X^\top X` is computed once with BLAS.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal, NamedTuple, overload

import numpy as np

from fedspectral.checks import (
    ALLOW_LARGE_ENV,
    check_bool,
    check_choice,
    check_int,
    check_real,
    describe,
    large_allowed,
)
from fedspectral.linalg import (
    VECTORISATIONS,
    isometric_weights,
    n_packed,
    pack_symmetric,
    top_k_eigvecs,
    triu_indices,
)
from fedspectral.pca.aggregator import (
    MAX_P,
    CovarianceAggregator,
    check_dimension,
    dense_real,
)
from fedspectral.pca.rows import (
    NORM_POLICIES,
    NORM_TOL,
    _checked_second_moment_sum,
    _chunk_rows,
    clip_rows,
    second_moment_sum,
)
from fedspectral.privacy import PrivacyLedger, Release, gaussian_sigma, symmetric_gaussian
from fedspectral.privacy.noise import (
    NoiseSource,
    OpenDPNoise,
    SecureNoise,
    add_gaussian,
    as_noise_source,
    is_secure,
)

#: a device message's ``rng``: a seed, a numpy generator, a secure source or its name
DeviceRng = np.random.Generator | SecureNoise | OpenDPNoise | str | int | None

__all__ = [
    "CALIBRATIONS",
    "MAX_BATCH_ENTRIES",
    "MAX_P",
    "MECHANISM",
    "NOISE_MODES",
    "NORM_POLICIES",
    "NORM_TOL",
    "PARTY",
    "SENSITIVITY",
    "VECTORISATIONS",
    "CovarianceAggregator",
    "LDPNoiseScale",
    "clip_rows",
    "ldp_from_moment",
    "ldp_noise_scale",
    "ldp_release",
    "perturb",
    "perturb_batch",
    "record_ldp_release",
    "resolve_vectorisation",
    "second_moment_sum",
    "simulate_messages_sum",
]

#: Replace-one L2 sensitivity of the packed upper triangle of :math:`xx^\top`, :math:`\|x\|\le1`.
SENSITIVITY: float = math.sqrt(2.0)
CALIBRATIONS = ("analytic", "classic", "paper")
NOISE_MODES = ("aggregate", "per_user")
#: Ledger party standing for every user (each makes one release at the same σ).
PARTY = "user"
MECHANISM = "ldp-pca/local-gaussian"

#: Largest :func:`perturb_batch` output without ``allow_large``: n x p(p+1)/2 floats,
#: 2 GiB (a twelfth of this 24 GiB machine); it is built a few MiB of rows at a time, so
#: the peak memory is the output plus a chunk.  Past it: call it on chunks of rows (the
#: same messages and noise stream) or :func:`simulate_messages_sum` for their sum.
MAX_BATCH_ENTRIES: int = 2**28


class LDPNoiseScale(NamedTuple):
    """Noise of one user's message: ``sigma`` per packed entry, ``sensitivity`` used to
    calibrate it, and the ``method`` of :func:`fedspectral.privacy.gaussian_sigma`."""

    sigma: float
    sensitivity: float
    method: str


# ----------------------------------------------------------------------------- validation
def _check_epsilon(epsilon: object) -> float:
    return check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=True)


def _check_delta(delta: object) -> float:
    return check_real("delta", delta, low=0.0, low_open=True, high=1.0, high_open=True)


@overload
def _as_rng(
    rng: object, secure_ok: Literal[False] = False, *, name: str = "rng"
) -> np.random.Generator: ...


@overload
def _as_rng(rng: object, secure_ok: bool, *, name: str = "rng") -> NoiseSource: ...


def _as_rng(rng: object, secure_ok: bool = False, *, name: str = "rng") -> NoiseSource:
    if is_secure(rng) or (isinstance(rng, str) and rng in ("secure", "opendp")):
        if not secure_ok:
            raise TypeError(
                "the secure noise source is for device messages (perturb, "
                "perturb_batch); simulations of n users use seeded numpy"
            )
        return as_noise_source(rng)
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError(
            f"{name} must be None, an int seed, a SeedSequence or a "
            f"numpy.random.Generator, got {describe(rng)}"
        )
    if rng is None or isinstance(rng, (int, np.integer, np.random.SeedSequence)):
        if isinstance(rng, (int, np.integer)) and rng < 0:
            raise ValueError(f"{name} (a seed) must be >= 0, got {int(rng)}")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    secure = " or 'secure'" if secure_ok else ""
    raise TypeError(
        f"{name} must be None, an int seed, a SeedSequence, a numpy.random.Generator"
        f"{secure}, got {type(rng).__name__}"
    )


def _check_rows(X: object, name: str = "X") -> np.ndarray:
    """Float64 2-D view of ``X`` (no copy when already float64); finiteness is checked
    later from the row norms, in the same pass."""
    X = dense_real(X, name)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_users, p), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {X.shape}")
    check_dimension(X.shape[1], f"the number of columns p of {name}")
    return np.asarray(X, dtype=np.float64)


def resolve_vectorisation(vectorisation: object, calibration: str) -> str:
    """The packing used: ``"auto"`` is ``"upper"`` for ``calibration="paper"`` (the
    seed's message) and ``"isometric"`` otherwise; explicit values are returned as is."""
    if isinstance(vectorisation, str) and vectorisation == "auto":
        return "upper" if calibration == "paper" else "isometric"
    return check_choice("vectorisation", vectorisation, VECTORISATIONS + ("auto",))


# ----------------------------------------------------------------------------- calibration
def ldp_noise_scale(epsilon: float, delta: float, calibration: str = "analytic") -> LDPNoiseScale:
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
        ``"paper"``: the paper's :math:`\sigma_1^2 = 2\ln(1.25/\delta)/\varepsilon^2`
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
    check_choice("calibration", calibration, CALIBRATIONS)
    return _noise_scale_cached(epsilon, delta, calibration)


@lru_cache(maxsize=256)
def _noise_scale_cached(epsilon: float, delta: float, calibration: str) -> LDPNoiseScale:
    # pure function of validated floats; the analytic calibration is a root search
    if calibration == "analytic":
        return LDPNoiseScale(
            gaussian_sigma(epsilon, delta, SENSITIVITY, "analytic"), SENSITIVITY, "analytic"
        )
    if calibration == "classic":
        return LDPNoiseScale(
            gaussian_sigma(epsilon, delta, SENSITIVITY, "classic"), SENSITIVITY, "classic"
        )
    return LDPNoiseScale(gaussian_sigma(epsilon, delta, 1.0, "classic", force=True), 1.0, "classic")


def record_ldp_release(
    ledger: PrivacyLedger, sigma: float, n_users: int, party: str = PARTY
) -> None:
    """Record the one-message-per-user release of Algorithm 1 in ``ledger``.

    One entry for ``party`` stands for all ``n_users`` users (each sends one
    message with noise ``sigma``; disjoint data, parallel composition).  The
    recorded sensitivity is always the true one, :data:`SENSITIVITY`
    (replace-one), whatever calibration chose ``sigma``.
    """
    n_users = check_int("n_users", n_users, low=1)
    ledger.record(
        party,
        f"{MECHANISM}[n_users={int(n_users)}]",
        sigma=float(sigma),
        sensitivity=SENSITIVITY,
        count=1,
        neighbouring="replace_one",
    )


def ldp_release(sigma: float) -> Release:
    """The release :func:`record_ldp_release` records for one user, known before any data
    (what a fit declares to a :class:`~fedspectral.privacy.BudgetAccountant`)."""
    return PrivacyLedger(unit="sample").record(
        PARTY,
        MECHANISM,
        sigma=float(sigma),
        sensitivity=SENSITIVITY,
        count=1,
        neighbouring="replace_one",
    )


# ----------------------------------------------------------------------------- noise
def _packed_noise_sum(
    n: int,
    m: int,
    sigma: float,
    rng: np.random.Generator,
    noise_mode: str,
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
    rng: DeviceRng = None,
    calibration: str = "analytic",
    norm_policy: str = "clip",
    vectorisation: str = "auto",
) -> np.ndarray:
    r"""The message one device sends (Algorithm 1, line 2).

    .. math:: m = \mathrm{svec}(x x^\top) + g \quad\text{(isometric)}, \qquad
              m = \mathrm{vech}(x x^\top) + g \quad\text{(upper)}, \qquad
              g \sim N(0, \sigma^2 I_{p(p+1)/2}),

    packed in the order of ``numpy.triu_indices(p)`` (diagonal included):
    :math:`p(p+1)/2` floats.  In the isometric packing the off-diagonal entries of
    :math:`xx^\top` are multiplied by :math:`\sqrt2` before the noise is added; the
    server divides them by :math:`\sqrt2` (:meth:`CovarianceAggregator.covariance`),
    which leaves off-diagonal noise of variance :math:`\sigma^2/2`.  The noise draws do
    not depend on the vectorisation.

    Parameters
    ----------
    x : ndarray, shape (p,)
        The user's record; ``||x|| <= 1`` is enforced by ``norm_policy``.
    epsilon, delta : float
        Local privacy parameters (``epsilon = np.inf``: no noise).
    rng : numpy.random.Generator, int, None, "secure" or SecureNoise
        Noise source.  ``None`` or ``"secure"``: the secure source a real device
        runs (:class:`fedspectral.privacy.SecureNoise`: OS entropy, a discrete
        Gaussian on a power-of-two grid, floating-point safe); ``"opendp"``: OpenDP's
        mechanism (the reference); a generator or seed: seeded numpy (experiments).
    calibration : {"analytic", "classic", "paper"}
        See :func:`ldp_noise_scale`.
    norm_policy : {"clip", "raise"}
        Rows with norm > 1: scaled to norm 1 with a warning, or ``ValueError``.
    vectorisation : {"auto", "isometric", "upper"}
        See the module docstring (``"auto"``: ``"upper"`` for ``calibration="paper"``,
        else ``"isometric"``).  The server's :class:`CovarianceAggregator` must use the
        same one.

    Returns
    -------
    ndarray, shape (p(p+1)/2,)
    """
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D (one user's record), got shape {x.shape}")
    rng = "secure" if rng is None else rng  # a device's message: the secure source
    return _messages(x[None, :], epsilon, delta, rng, calibration, norm_policy, "x", vectorisation)[
        0
    ]


def perturb_batch(
    X: np.ndarray,
    epsilon: float,
    delta: float,
    rng: DeviceRng = None,
    calibration: str = "analytic",
    norm_policy: str = "clip",
    vectorisation: str = "auto",
    *,
    allow_large: bool = False,
) -> np.ndarray:
    """The messages of ``n`` devices at once, shape ``(n, p(p+1)/2)``: row ``i`` is
    :func:`perturb` of ``X[i]``.  Noise is drawn row after row from ``rng`` (the same
    stream :func:`simulate_messages_sum` uses in ``"per_user"`` mode), so calling it on
    consecutive chunks of rows with one generator gives the same messages.

    The output is bounded by :data:`MAX_BATCH_ENTRIES` (2 GiB) before any work;
    ``allow_large=True`` (or ``FEDSPECTRAL_ALLOW_LARGE=1`` in the environment) lifts the
    bound for a caller who has the memory (the peak is the output plus a few MiB)."""
    large = check_bool("allow_large", allow_large) or large_allowed()
    return _messages(
        X,
        epsilon,
        delta,
        rng,
        calibration,
        norm_policy,
        "X",
        vectorisation,
        max_entries=None if large else MAX_BATCH_ENTRIES,
    )


def _messages(
    X: np.ndarray,
    epsilon: float,
    delta: float,
    rng: DeviceRng,
    calibration: str,
    norm_policy: str,
    name: str,
    vectorisation: str = "auto",
    *,
    max_entries: int | None = None,
) -> np.ndarray:
    """Rows of :func:`perturb_batch`; ``name`` is what error messages call ``X``.  Built a
    chunk of rows at a time (the noise stream is the one of a single draw)."""
    scale = ldp_noise_scale(epsilon, delta, calibration)
    vec = resolve_vectorisation(vectorisation, calibration)
    check_choice("norm_policy", norm_policy, NORM_POLICIES)
    X = _check_rows(X, name)
    n, p = X.shape
    m = n_packed(p)
    if max_entries is not None and n * m > max_entries:
        raise ValueError(
            f"{name} of shape {X.shape} asks for {n} messages of p(p+1)/2 = {m} floats "
            f"({n * m * 8 / 2**30:.3g} GiB), more than MAX_BATCH_ENTRIES = {max_entries} "
            f"({max_entries * 8 / 2**30:.3g} GiB); call perturb_batch on chunks of rows "
            f"(same messages), use simulate_messages_sum for their sum, or pass "
            f"allow_large=True (or set {ALLOW_LARGE_ENV}=1) to go past it knowingly"
        )
    gen = _as_rng(rng, secure_ok=True)
    f = clip_rows(X, norm_policy, name)
    if f is not None:
        X = X * f[:, None]
    rows, cols = triu_indices(p)
    weights = isometric_weights(p) if vec == "isometric" else None
    out = np.empty((n, m))
    step = _chunk_rows(m)
    for s in range(0, n, step):
        block = out[s : s + step]
        Xc = X[s : s + step]
        np.multiply(Xc[:, rows], Xc[:, cols], out=block)
        if weights is not None:
            block *= weights  # svec: off-diagonal entries times sqrt(2)
        if scale.sigma > 0:
            if isinstance(gen, np.random.Generator):
                block += scale.sigma * gen.standard_normal(block.shape)
            else:  # a secure source
                block[...] = add_gaussian(block, scale.sigma, gen)
    return out


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
    vectorisation: str = "auto",
) -> tuple[np.ndarray, int]:
    r"""Sum of the messages of ``n`` simulated users, packed, and ``n``.

    .. math:: \sum_i m_i = \mathrm{svec}(X^\top X) + \sum_i g_i
              \quad(\mathrm{vech}\ \text{for}\ \texttt{vectorisation="upper"})

    (``vectorisation`` as in :func:`perturb`; un-pack the sum with a
    :class:`CovarianceAggregator` of the same vectorisation).

    ``noise_mode="per_user"`` draws every :math:`\mathrm{vech}(Z_i)` (``chunk_rows``
    users at a time, default ~2 MiB per chunk; peak memory independent of ``n``)
    and sums them; ``"aggregate"`` draws :math:`\sum_i g_i \sim
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
    vec = resolve_vectorisation(vectorisation, calibration)
    check_choice("noise_mode", noise_mode, NOISE_MODES)
    check_choice("norm_policy", norm_policy, NORM_POLICIES)
    if chunk_rows is not None:
        chunk_rows = check_int("chunk_rows", chunk_rows, low=1)
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
    X = _check_rows(X)
    gen = _as_rng(rng)
    n, p = X.shape
    total = pack_symmetric(_checked_second_moment_sum(X, norm_policy, "X", stacklevel=3), vec)
    total += _packed_noise_sum(n, n_packed(p), scale.sigma, gen, noise_mode, chunk_rows)
    if ledger is not None:
        record_ldp_release(ledger, scale.sigma, n)
    return total, n


def ldp_from_moment(
    S: np.ndarray,
    n: int,
    k: int,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    *,
    calibration: str = "analytic",
    vectorisation: str = "auto",
    ledger: PrivacyLedger | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Algorithm 1 given the exact second moment :math:`S = X^\top X/n` of ``n`` users
    (rows of norm at most 1: the caller vouches), in the aggregate-noise mode.

    :math:`\hat S = S + \frac1n\sum_i Z_i`, the sum of the users' noise drawn at once as
    one symmetric matrix (:func:`fedspectral.privacy.symmetric_gaussian`, standard
    deviation :math:`\sigma\sqrt n` per packed entry, ``vectorisation``'s law; σ from
    :func:`ldp_noise_scale`): the distribution of :class:`CovarianceAggregator`'s
    :math:`\hat S` for rows with that moment, for experiments that sample :math:`S`
    directly (from its Wishart law) instead of rows.  The release is recorded in
    ``ledger`` if given (:func:`record_ldp_release`).

    Returns
    -------
    V : ndarray, shape (p, k)
        The top-``k`` eigenvectors of :math:`\hat S`.
    S_hat : ndarray, shape (p, p)
    """
    scale = ldp_noise_scale(epsilon, delta, calibration)
    vec = resolve_vectorisation(vectorisation, calibration)
    n = check_int("n", n, low=1)
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square matrix, got shape {S.shape}")
    p = check_dimension(S.shape[0], "the dimension p of S")
    k = check_int("k", k, low=1, high=p)
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
    gen = _as_rng(rng)
    S_hat = S + symmetric_gaussian(p, scale.sigma * math.sqrt(n), gen, vectorisation=vec) / n
    if ledger is not None:
        record_ldp_release(ledger, scale.sigma, n)
    return top_k_eigvecs(S_hat, k)[1], S_hat
