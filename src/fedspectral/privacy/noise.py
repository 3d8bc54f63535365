r"""Noise sources: where the Gaussian noise of a release is drawn.

Two sources, one interface (``add_gaussian(values, sigma) -> values + N(0, sigma^2 I)``):

``numpy.random.Generator`` (the *fast* source)
    Seeded numpy (PCG64): reproducible, vectorised, for experiments and for
    simulations of :math:`n` users.  Not cryptographically secure, and a float
    :math:`x + \sigma g` leaks :math:`x` through its low-order bits (Mironov 2012,
    "On significance of the least significant bits for differential privacy").
:class:`SecureNoise` (``"secure"``, what a device or a Flower node runs)
    OpenDP's Gaussian mechanism on float vectors
    (``opendp.measurements.make_gaussian`` over
    ``vector_domain(atom_domain(T=float))`` with the ``l2_distance`` metric).  It
    samples an exact *discrete* Gaussian on the grid :math:`2^k\mathbb{Z}` from
    OpenDP's cryptographically secure generator (OS entropy) and rounds the sum
    to a float, so the released value is the same function of the input whatever
    the floating-point details (OpenDP's proof covers the rounding; the grid
    :math:`2^k` is OpenDP's default, far below :math:`\sigma`).  The server cannot
    seed it: it takes no seed at all.

:func:`add_gaussian` dispatches on the source; with a numpy generator it performs
exactly the arithmetic the project has always used (``x + sigma * rng.standard_normal``),
so seeded experiments draw the same numbers as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedspectral.checks import check_real, describe

__all__ = ["SOURCES", "SecureNoise", "add_gaussian", "as_noise_source", "is_secure"]

#: names accepted where a noise source is asked for by name
SOURCES = ("fast", "secure")


class SecureNoise:
    """Cryptographically secure, floating-point-safe Gaussian noise (OpenDP).

    One object may be reused for any number of releases; it holds no state
    besides a cache of OpenDP measurements per (length, sigma).
    """

    name = "secure"

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

    def add_gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:
        """``values`` (any shape, finite) plus iid :math:`N(0,\\sigma^2)` noise, float64."""
        x = np.asarray(values, dtype=np.float64)
        if sigma == 0.0 or x.size == 0:
            return x.copy()
        if not np.isfinite(x).all():
            raise ValueError("secure noise needs finite values to privatise")
        flat = x.ravel()
        out = np.asarray(
            self._measurement(flat.size, float(sigma))(flat.tolist()), dtype=np.float64
        )
        return out.reshape(x.shape)

    def __repr__(self) -> str:
        return "SecureNoise()"


def as_noise_source(source: object) -> np.random.Generator | SecureNoise:
    """A numpy Generator or :class:`SecureNoise` from ``source``.

    Accepts a :class:`numpy.random.Generator` (returned as is), a :class:`SecureNoise`,
    or the name ``"secure"``.  Anything else raises ``TypeError``.
    """
    if isinstance(source, (np.random.Generator, SecureNoise)):
        return source
    if isinstance(source, str):
        if source == "secure":
            return SecureNoise()
        raise ValueError(
            f"noise source must be 'secure' or a numpy.random.Generator, got {describe(source)}"
        )
    raise TypeError(
        f"noise source must be a numpy.random.Generator, a SecureNoise or "
        f"'secure', got {type(source).__name__}"
    )


def is_secure(source: object) -> bool:
    """Whether ``source`` is the secure source."""
    return isinstance(source, SecureNoise)


def add_gaussian(
    values: np.ndarray, sigma: float, source: np.random.Generator | SecureNoise
) -> np.ndarray:
    """``values + N(0, sigma^2 I)`` drawn from ``source`` (a new array).

    With a numpy generator: ``values + sigma * source.standard_normal(values.shape)``
    (the historical stream).  With :class:`SecureNoise`: OpenDP's mechanism.
    """
    s = check_real("sigma", sigma, low=0.0)
    src = as_noise_source(source)
    if isinstance(src, SecureNoise):
        return src.add_gaussian(values, s)
    x = np.asarray(values)
    if s == 0.0:
        return np.array(x, dtype=np.result_type(x.dtype, np.float64), copy=True)
    return x + s * src.standard_normal(x.shape)
