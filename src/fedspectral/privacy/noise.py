r"""Noise sources: where the Gaussian noise of a release is drawn.

Three sources, one interface (``add_gaussian(values, sigma, source)``):

``numpy.random.Generator`` (the *fast* source, mechanism ``"numpy-float"``)
    Seeded numpy (PCG64): reproducible, vectorised, for experiments and for
    simulations of :math:`n` users.  Not cryptographically secure, and a float
    :math:`x + \sigma g` leaks :math:`x` through its low-order bits (Mironov 2012,
    "On significance of the least significant bits for differential privacy").
:class:`SecureNoise` (``"secure"``, mechanism ``"discrete-gaussian-grid"``)
    What a device or a Flower node runs.
    The value rounded to a power-of-two grid :math:`g \le \sigma / 2^{34}` plus
    :math:`g` times discrete Gaussian noise of scale :math:`(1 + 2^{-10})\sigma / g`,
    sampled vectorised from random bits of a Philox counter-mode generator keyed from
    ``os.urandom`` for each release (:mod:`fedspectral.privacy.discrete_gaussian`,
    which states the privacy argument: sensitivity after rounding, discrete vs
    continuous Gaussian, the sampler's :math:`2^{-80}` total variation per value).
    Every output is a multiple of :math:`g`, so its low-order bits carry nothing
    about the input.  The server cannot seed it: it takes no seed at all.  About as
    fast as numpy's ``standard_normal`` (``benchmarks/noise_perf.py``).
:class:`OpenDPNoise` (``"opendp"``, mechanism ``"opendp-gaussian"``)
    OpenDP's Gaussian mechanism on float vectors
    (``opendp.measurements.make_gaussian`` over
    ``vector_domain(atom_domain(T=float))`` with the ``l2_distance`` metric): an exact
    discrete Gaussian on OpenDP's own grid from OpenDP's secure generator, rounded to
    float -- the reference implementation the secure source is tested against
    (``tests/privacy/test_discrete_gaussian.py``), and what ``"secure"`` was before;
    about 50-90 µs a value.

:func:`add_gaussian` dispatches on the source; with a numpy generator it performs
exactly the arithmetic the project has always used (``x + sigma * rng.standard_normal``),
so seeded experiments draw the same numbers as before.  :func:`noise_mechanism` names
the mechanism of a source, as a ledger records it.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np

from fedspectral.checks import check_real, describe
from fedspectral.kinds import SOURCES  # the names a noise source is asked for by
from fedspectral.privacy.discrete_gaussian import MECHANISM, os_bits, release
from fedspectral.privacy.validate import clear_errors, real_values

__all__ = [
    "MECHANISMS",
    "SOURCES",
    "OpenDPNoise",
    "SecureNoise",
    "add_gaussian",
    "as_noise_source",
    "is_secure",
    "noise_mechanism",
]

#: the mechanism each source releases with, as a ledger records it
MECHANISMS = {"fast": "numpy-float", "secure": MECHANISM, "opendp": "opendp-gaussian"}


class SecureNoise:
    """Cryptographically secure, floating-point-safe Gaussian noise on a grid.

    ``add_gaussian(values, sigma)`` releases ``values`` rounded to the grid of ``sigma``
    plus discrete Gaussian noise (:func:`fedspectral.privacy.discrete_gaussian.release`),
    from a Philox generator keyed with fresh OS entropy on every call.  It holds no
    state (its sampling tables are shared by the process) and takes no seed.
    """

    name = "secure"
    mechanism = MECHANISM

    def _bits(self) -> np.random.BitGenerator:
        return os_bits()

    def add_gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:
        """``values`` (any shape, finite) released with noise of scale about ``sigma``
        on the grid of ``sigma``, float64; values beyond the grid's range, or not
        finite, are refused (``ValueError``), never clipped."""
        sigma = check_real("sigma", sigma, low=0.0)
        x = real_values("values", values)
        if sigma == 0.0 or x.size == 0:
            return x.copy()
        return release(x, sigma, self._bits())

    def __repr__(self) -> str:
        return "SecureNoise()"


class OpenDPNoise:
    """OpenDP's floating-point-safe Gaussian mechanism: the reference implementation.

    One object may be reused for any number of releases; it holds no state
    besides a cache of OpenDP measurements per (length, sigma).
    """

    name = "opendp"
    mechanism = MECHANISMS["opendp"]

    def __init__(self) -> None:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        self._dp = dp
        self._cache: dict[tuple[int, float], Any] = {}

    def _measurement(self, size: int, sigma: float) -> Any:
        key = (size, sigma)
        m = self._cache.get(key)
        if m is None:
            dp = self._dp
            m = dp.m.make_gaussian(
                dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size),
                dp.l2_distance(T=float),
                scale=sigma,
            )
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = m
        return m

    @clear_errors
    def add_gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:
        """``values`` (any shape, finite) plus iid :math:`N(0,\\sigma^2)` noise, float64."""
        sigma = check_real("sigma", sigma, low=0.0)
        x = real_values("values", values)
        if sigma == 0.0 or x.size == 0:
            return x.copy()
        flat = x.ravel()
        out = np.asarray(
            self._measurement(flat.size, float(sigma))(flat.tolist()), dtype=np.float64
        )
        return out.reshape(x.shape)

    def __repr__(self) -> str:
        return "OpenDPNoise()"


#: a noise source as the functions of this module return it
NoiseSource = np.random.Generator | SecureNoise | OpenDPNoise


def as_noise_source(source: object) -> NoiseSource:
    """A numpy Generator, :class:`SecureNoise` or :class:`OpenDPNoise` from ``source``.

    Accepts a :class:`numpy.random.Generator` (returned as is), a :class:`SecureNoise`
    or :class:`OpenDPNoise`, or the names ``"secure"`` and ``"opendp"``.  Anything else
    raises ``TypeError``.
    """
    if isinstance(source, (np.random.Generator, SecureNoise, OpenDPNoise)):
        return source
    if isinstance(source, str):
        if source == "secure":
            return SecureNoise()
        if source == "opendp":
            return OpenDPNoise()
        raise ValueError(
            f"noise source must be 'secure' or a numpy.random.Generator, got {describe(source)}"
        )
    raise TypeError(
        f"noise source must be a numpy.random.Generator, a SecureNoise or "
        f"'secure', got {type(source).__name__}"
    )


def is_secure(source: object) -> TypeGuard[SecureNoise | OpenDPNoise]:
    """Whether ``source`` is a secure source (:class:`SecureNoise` or :class:`OpenDPNoise`)."""
    return isinstance(source, (SecureNoise, OpenDPNoise))


def noise_mechanism(source: object) -> str:
    """The mechanism ``source`` releases with (:data:`MECHANISMS`), as a ledger records it:
    ``"discrete-gaussian-grid"``, ``"opendp-gaussian"`` or ``"numpy-float"``."""
    src = as_noise_source(source)
    return MECHANISMS["fast"] if isinstance(src, np.random.Generator) else src.mechanism


def add_gaussian(values: np.ndarray, sigma: float, source: NoiseSource | str) -> np.ndarray:
    """``values + N(0, sigma^2 I)`` drawn from ``source`` (a new array).

    With a numpy generator: ``values + sigma * source.standard_normal(values.shape)``
    (the historical stream).  With :class:`SecureNoise` (``"secure"``): the grid and the
    discrete Gaussian of :mod:`fedspectral.privacy.discrete_gaussian`.  With
    :class:`OpenDPNoise` (``"opendp"``): OpenDP's mechanism.
    """
    s = check_real("sigma", sigma, low=0.0)
    src = as_noise_source(source)
    if not isinstance(src, np.random.Generator):  # SecureNoise or OpenDPNoise
        return src.add_gaussian(values, s)
    real_values("values", values, finite=False)  # a real dtype (NaN flows through)
    x = np.asarray(values)
    if s == 0.0:
        return np.array(x, dtype=np.result_type(x.dtype, np.float64), copy=True)
    return x + s * src.standard_normal(x.shape)
