r"""Gaussian mechanism: noise calibration and symmetric matrix noise.

Every noise scale used anywhere in fedspectral is computed here (single releases)
or in :mod:`fedspectral.privacy.accounting` (composed releases).

Calibrations of one Gaussian release with L2 sensitivity :math:`\Delta`:

``"analytic"``
    The analytic Gaussian mechanism (Balle & Wang, 2018): the smallest
    :math:`\sigma` such that :math:`N(0, \sigma^2)` noise gives
    :math:`(\varepsilon, \delta)`-DP, valid for every :math:`\varepsilon > 0`.
    Computed by ``dp_accounting.get_sigma_gaussian`` (sensitivity 1) times
    :math:`\Delta`.
``"classic"``
    :math:`\sigma = \Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon` (Dwork & Roth,
    Thm. A.1), a sufficient condition only for :math:`\varepsilon < 1`; larger
    :math:`\varepsilon` raises unless ``force=True``.

Releasing a symmetric matrix (:func:`symmetric_gaussian`)
---------------------------------------------------------
A symmetric :math:`p\times p` matrix :math:`A` is released as a vector of
:math:`p(p+1)/2` floats plus iid :math:`N(0,\sigma^2)` noise; the *vectorisation*
(:data:`~fedspectral.linalg.VECTORISATIONS`) says which vector:

``"isometric"`` (default)
    :math:`\mathrm{svec}(A)`: the diagonal entries and :math:`\sqrt2` times the
    off-diagonal ones (:func:`fedspectral.linalg.pack_symmetric`), so that
    :math:`\|\mathrm{svec}(A)\|_2 = \|A\|_F`.  The L2 sensitivity is then the
    Frobenius sensitivity.  Undoing the :math:`\sqrt2`
    (:func:`fedspectral.linalg.unpack_symmetric`) leaves noise of variance
    :math:`\sigma^2` on the diagonal and :math:`\sigma^2/2` off it.
``"upper"``
    The plain upper triangle :math:`\mathrm{vech}(A)` (the seeds' choice): variance
    :math:`\sigma^2` everywhere.

For the releases of both pillars the two vectors have the **same** L2 sensitivity
(:math:`\|xx^\top - yy^\top\|_F \le \sqrt2` on the unit ball, tight at any
orthogonal unit pair, while the upper triangle reaches √2 at :math:`e_1, e_2`;
DP-CalR: μ/n and √2μ/n), so the same σ gives the same (ε, δ) and the isometric
release halves the off-diagonal noise variance.
"""

from __future__ import annotations

import math

import numpy as np

from fedspectral.checks import check_bool, check_choice, check_int, check_real, describe
from fedspectral.linalg import VECTORISATIONS, pack_symmetric, unpack_symmetric
from fedspectral.privacy.noise import SecureNoise, add_gaussian, as_noise_source
from fedspectral.privacy.validate import real_values

CALIBRATIONS = ("analytic", "classic")

#: the range of ε over which single releases (and
#: :func:`~fedspectral.privacy.calibrate_noise_multiplier`) are calibrated; outside it a
#: clear ``ValueError``
EPSILON_RANGE = (1e-6, 1e4)
#: largest number of entries :func:`symmetric_gaussian` draws at once (2 GiB of float64)
MAX_NOISE_ENTRIES = 2**28


def _check_eps_delta(epsilon: object, delta: object) -> tuple[float, float]:
    eps = check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=True)
    dlt = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if math.isfinite(eps) and not EPSILON_RANGE[0] <= eps <= EPSILON_RANGE[1]:
        raise ValueError(
            f"epsilon={eps!r} is outside the calibrated range "
            f"[{EPSILON_RANGE[0]:g}, {EPSILON_RANGE[1]:g}] (below it the noise "
            f"swamps any signal, above it there is no meaningful privacy); "
            f"use epsilon=inf for no noise"
        )
    return eps, dlt


def gaussian_sigma(
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    method: str = "analytic",
    *,
    force: bool = False,
) -> float:
    r"""Standard deviation of Gaussian noise for one :math:`(\varepsilon,\delta)`-DP release.

    Parameters
    ----------
    epsilon : float
        Privacy parameter in :data:`EPSILON_RANGE` (``[1e-6, 1e4]``); ``math.inf`` means
        no privacy (returns 0).
    delta : float
        Privacy parameter in ``(0, 1)``.
    sensitivity : float
        L2 sensitivity :math:`\Delta` of the released quantity under the chosen
        neighbouring relation (finite, ``> 0``).
    method : {"analytic", "classic"}
        See the module docstring.
    force : bool
        Allow ``method="classic"`` with ``epsilon >= 1``, where the classic bound
        is not a proof of privacy (used only to reproduce papers that do so).

    Returns
    -------
    float
        :math:`\sigma` (0.0 when ``epsilon`` is infinite), always finite; a
        ``ValueError`` names the inputs when :math:`\sigma` would overflow.
    """
    eps, dlt = _check_eps_delta(epsilon, delta)
    sens = check_real("sensitivity", sensitivity, low=0.0, low_open=True)
    check_choice("method", method, CALIBRATIONS)
    check_bool("force", force)
    if math.isinf(eps):
        return 0.0
    if method == "classic":
        if eps >= 1 and not force:
            raise ValueError(
                f"the classic Gaussian mechanism is only proven for epsilon < 1, got "
                f"epsilon={eps!r}; use method='analytic' or pass force=True"
            )
        # ln(1.25/δ) as ln 1.25 - ln δ: 1.25/δ overflows below δ ≈ 7e-309
        unit = math.sqrt(2.0 * (math.log(1.25) - math.log(dlt))) / eps
    else:
        import dp_accounting

        unit = float(dp_accounting.get_sigma_gaussian(eps, dlt))
    sigma = sens * unit
    if not math.isfinite(unit):  # not reached for eps >= EPSILON_RANGE[0], delta > 0
        raise ValueError(
            f"the {method} sigma per unit sensitivity is {unit} at epsilon={eps!r}, delta={dlt!r}"
        )
    if not math.isfinite(sigma):
        raise ValueError(
            f"sigma = sensitivity x {unit:.4g} overflows for "
            f"sensitivity={sens!r} (epsilon={eps!r}, delta={dlt!r})"
        )
    return sigma


def symmetric_gaussian(
    p: int,
    sigma: float,
    rng: np.random.Generator,
    *,
    size: int | None = None,
    dtype: type = np.float64,
    vectorisation: str = "isometric",
) -> np.ndarray:
    r"""Symmetric Gaussian matrix noise, as seen in the released matrix.

    It is the matrix form of iid :math:`N(0,\sigma^2)` noise on the packed vector of
    :math:`p(p+1)/2` entries (module docstring).  ``vectorisation="upper"``: the upper
    triangle including the diagonal is iid :math:`N(0,\sigma^2)`, the lower triangle
    mirrors it.  ``"isometric"`` (default): the same draws with the strictly upper
    triangle divided by :math:`\sqrt2` (the un-scaling of the isometric vector), so the
    diagonal is :math:`N(0,\sigma^2)` and every off-diagonal entry
    :math:`N(0,\sigma^2/2)`.  Both consume the same stream of ``rng``.

    Parameters
    ----------
    p : int
        Matrix dimension.
    sigma : float
        Standard deviation of each upper-triangular entry (``>= 0``).
    rng : numpy.random.Generator
        Source of randomness (seeded numpy: experiments and simulations).  A release
        made on a device adds its noise with :func:`add_symmetric_gaussian` and the
        secure source instead, never by adding a drawn matrix in floating point.
    size : int, optional
        If given, return a stack of ``size`` independent matrices, shape ``(size, p, p)``.
    vectorisation : {"isometric", "upper"}
        How the released matrix was packed (module docstring); at most
        :data:`MAX_NOISE_ENTRIES` entries are drawn at once.
    """
    p = check_int("p", p, low=1, high=MAX_NOISE_ENTRIES)
    sigma = check_real("sigma", sigma, low=0.0)
    if size is not None:
        size = check_int("size", size, low=1, high=MAX_NOISE_ENTRIES)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    check_choice("vectorisation", vectorisation, VECTORISATIONS)
    entries = p * p * (1 if size is None else size)
    if entries > MAX_NOISE_ENTRIES:
        raise ValueError(
            f"p={p}{'' if size is None else f' with size={size}'} asks for "
            f"{entries:.3g} noise entries, more than the {MAX_NOISE_ENTRIES:.3g} "
            f"drawn at once; draw in chunks"
        )
    shape = (p, p) if size is None else (size, p, p)
    g = rng.standard_normal(shape, dtype=dtype)
    g *= sigma
    strict = np.triu(g, 1)
    if vectorisation == "isometric":
        strict *= 1.0 / math.sqrt(2.0)  # the off-diagonal sqrt(2) of svec, undone
    diag = g * np.eye(p, dtype=dtype)
    return diag + strict + np.swapaxes(strict, -1, -2)


def add_symmetric_gaussian(
    matrix: np.ndarray,
    sigma: float,
    source: np.random.Generator | SecureNoise | str,
    vectorisation: str = "isometric",
) -> np.ndarray:
    r"""``matrix`` (symmetric, ``(p, p)``) plus symmetric Gaussian noise from ``source``.

    With a numpy generator this is ``matrix + symmetric_gaussian(p, sigma, source,
    vectorisation=vectorisation)`` (the same numbers).  With the secure source
    (:class:`~fedspectral.privacy.noise.SecureNoise` or ``"secure"``) the packed vector
    of ``matrix`` (:func:`fedspectral.linalg.pack_symmetric` with ``vectorisation``) is
    released by OpenDP's floating-point-safe Gaussian mechanism and un-packed, so the
    noise is never added in plain floating point and has the same law.
    """
    real_values("matrix", matrix, finite=False)  # a real dtype (the secure source: finite)
    a = np.asarray(matrix)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"matrix must be square, got {describe(a)}")
    sigma = check_real("sigma", sigma, low=0.0)
    check_choice("vectorisation", vectorisation, VECTORISATIONS)
    src = as_noise_source(source)
    if isinstance(src, np.random.Generator):
        return a + symmetric_gaussian(a.shape[0], sigma, src, vectorisation=vectorisation)
    vec = add_gaussian(pack_symmetric(a, vectorisation), sigma, src)
    return unpack_symmetric(vec, a.shape[0], vectorisation)
