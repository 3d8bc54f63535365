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
--------------------------------------------------------
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

from fedspectral.linalg import VECTORISATIONS

CALIBRATIONS = ("analytic", "classic")


def _check_eps_delta(epsilon: float, delta: float) -> None:
    if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer))
            or math.isnan(epsilon)):
        raise ValueError(f"epsilon must be a number > 0, got {epsilon!r}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)) \
            or not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


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
        Privacy parameter, ``> 0``; ``math.inf`` means no privacy (returns 0).
    delta : float
        Privacy parameter in ``(0, 1)``.
    sensitivity : float
        L2 sensitivity :math:`\Delta` of the released quantity under the chosen
        neighbouring relation (``> 0``).
    method : {"analytic", "classic"}
        See the module docstring.
    force : bool
        Allow ``method="classic"`` with ``epsilon >= 1``, where the classic bound
        is not a proof of privacy (used only to reproduce papers that do so).

    Returns
    -------
    float
        :math:`\sigma` (0.0 when ``epsilon`` is infinite).
    """
    _check_eps_delta(epsilon, delta)
    if not sensitivity > 0 or not math.isfinite(sensitivity):
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    if method not in CALIBRATIONS:
        raise ValueError(f"method must be one of {CALIBRATIONS}, got {method!r}")
    if math.isinf(epsilon):
        return 0.0
    if method == "classic":
        if epsilon >= 1 and not force:
            raise ValueError(
                f"the classic Gaussian mechanism is only proven for epsilon < 1, got "
                f"epsilon={epsilon!r}; use method='analytic' or pass force=True"
            )
        return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    import dp_accounting

    return sensitivity * float(dp_accounting.get_sigma_gaussian(float(epsilon), float(delta)))


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
        Source of randomness.
    size : int, optional
        If given, return a stack of ``size`` independent matrices, shape ``(size, p, p)``.
    vectorisation : {"isometric", "upper"}
        How the released matrix was packed (module docstring).
    """
    if not isinstance(p, (int, np.integer)) or p <= 0:
        raise ValueError(f"p must be a positive integer, got {p!r}")
    if not sigma >= 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if not isinstance(vectorisation, str) or vectorisation not in VECTORISATIONS:
        raise ValueError(f"vectorisation must be one of {VECTORISATIONS}, got {vectorisation!r}")
    shape = (p, p) if size is None else (size, p, p)
    g = rng.standard_normal(shape, dtype=dtype)
    g *= sigma
    strict = np.triu(g, 1)
    if vectorisation == "isometric":
        strict *= 1.0 / math.sqrt(2.0)  # the off-diagonal sqrt(2) of svec, undone
    diag = g * np.eye(p, dtype=dtype)
    return diag + strict + np.swapaxes(strict, -1, -2)
