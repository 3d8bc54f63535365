"""The one validator of ``privacy/``'s public arguments.

Every public function of :mod:`fedspectral.privacy` checks its numbers here before any
work: a real is a Python or numpy real (never a ``bool``, ``str``, ``bytes`` or
``complex``: ``'2.0'`` and ``True`` are not a σ of 2 and 1), finite unless a function
states otherwise, within the range its docstring states; a count is an integer (never a
float such as 2.5, which ``int`` would truncate); an array of values has a real numeric
dtype.  Errors are a ``TypeError`` (wrong kind) or ``ValueError`` (bad value) naming the
argument.  Errors of the libraries underneath that a bad value can still reach
(``OverflowError``, ``MemoryError``, OpenDP's) come out as a ``ValueError`` naming the
function (:func:`clear_errors`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from fedspectral.checks import check_choice, check_int, check_real, describe

__all__ = [
    "MAX_COUNT",
    "check_count",
    "check_real",
    "check_release_numbers",
    "check_release_text",
    "clear_errors",
    "real_values",
]

#: the largest count (of releases, of values) a function of ``privacy/`` takes: counts are
#: exact in float64 up to it, and beyond it no accountant's arithmetic holds
MAX_COUNT = 2**53

F = TypeVar("F", bound=Callable[..., Any])


def check_count(name: str, value: object, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """``value`` as a Python int in ``[low, high]`` (default :data:`MAX_COUNT`): integers
    only, never a bool or a float (no ``int(2.5)`` truncation)."""
    return check_int(name, value, low=low, high=high)


def real_values(name: str, values: object, *, finite: bool = True) -> np.ndarray:
    """``values`` as a float64 array: a real numeric dtype only (bool, complex, text,
    bytes, objects and dates refused, ``TypeError``), every value finite (``finite``;
    ``ValueError`` that never quotes a value: they may be private)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers, got {describe(values)}")
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of real numbers ({exc})") from None
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be an array of real numbers, got dtype {a.dtype}")
    try:
        x = np.asarray(a, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{name} holds integers beyond the float64 range") from None
    if finite and not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite (NaN or inf found)")
    return x


def clear_errors(func: F) -> F:
    """Turn ``OverflowError``, ``MemoryError`` and OpenDP's errors escaping ``func`` into a
    ``ValueError`` naming it (the arguments were checked; what is left is a size or a
    range the libraries underneath cannot take)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (OverflowError, MemoryError) as exc:
            raise ValueError(
                f"{func.__qualname__}: the arguments are beyond what it can compute "
                f"({type(exc).__name__}: {exc})"
            ) from None
        except Exception as exc:
            if type(exc).__module__.startswith("opendp"):
                raise ValueError(
                    f"{func.__qualname__}: OpenDP refused the arguments "
                    f"({type(exc).__name__}: {str(exc).strip()[:200]})"
                ) from None
            raise

    return wrapper  # type: ignore[return-value]


def check_release_numbers(release: Any) -> None:
    """Check (and normalise in place) the numbers of a frozen
    :class:`~fedspectral.privacy.accounting.Release`: ``sigma >= 0`` and
    ``sensitivity > 0`` finite reals, ``count`` and ``values`` integers ``>= 1``, ``step``
    an integer; a bool, text, a complex number, NaN, a negative or non-integral count is
    no release."""
    sigma = check_real("sigma", release.sigma, low=0.0)
    sens = check_real("sensitivity", release.sensitivity, low=0.0, low_open=True)
    object.__setattr__(release, "sigma", sigma)
    object.__setattr__(release, "sensitivity", sens)
    object.__setattr__(release, "count", check_count("count", release.count, low=1))
    if release.values is not None:
        object.__setattr__(release, "values", check_count("values", release.values, low=1))
    if release.step is not None:
        object.__setattr__(release, "step", check_int("step", release.step))
    if not math.isfinite(sigma / sens):
        raise ValueError(f"sigma/sensitivity = {sigma!r}/{sens!r} overflows")


def check_release_text(
    release: Any, relations: tuple[str, ...], units: tuple[str, ...], threats: tuple[str, ...]
) -> None:
    """Check the names of a :class:`~fedspectral.privacy.accounting.Release`: ``party`` and
    ``mechanism`` text, its relation, unit and threat tag among the known ones, ``noise``
    text or None.  A release built directly (``epsilon_of_releases``,
    ``BudgetAccountant.spend``, ``PrivacyLedger.replace``) is checked as the ledger's
    ``record`` checks one: an unknown threat tag or unit would leave it out of
    ``PrivacyLedger.view`` or ``epsilon(unit=...)`` (an epsilon too small)."""
    for name in ("party", "mechanism"):
        value = getattr(release, name)
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {describe(value)}")
    check_choice("neighbouring", release.neighbouring, relations)
    check_choice("unit", release.unit, units)
    check_choice("threat", release.threat, threats)
    if release.noise is not None and not isinstance(release.noise, str):
        raise TypeError(f"noise must be a string or None, got {describe(release.noise)}")
