"""Parameter checks shared by every public entry point (bottom layer, no project imports).

One rule everywhere: numbers may be Python or numpy scalars (``np.float32(1.0)``,
``np.int64(3)``), booleans are never numbers, and every error is a ``TypeError`` (wrong
kind) or ``ValueError`` (right kind, bad value) whose message names the parameter and
shows the value.  Use these at API boundaries only; internal code trusts its callers.

>>> check_real("epsilon", np.float32(0.5), low=0.0, low_open=True)
0.5
>>> check_int("k", True)
Traceback (most recent call last):
...
TypeError: k must be an integer, got bool True
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

__all__ = [
    "ALLOW_LARGE_ENV",
    "NonFiniteError",
    "check_bool",
    "check_choice",
    "check_int",
    "check_real",
    "check_size",
    "describe",
    "did_you_mean",
    "warnings_at_caller",
    "large_allowed",
    "nonfinite_raises",
    "run_through_nonfinite",
]


class NonFiniteError(ValueError):
    """NaN or inf met or produced where a finite value is required: a non-finite input, or
    a computation (a training loss) that diverged.  A ``ValueError``, so callers that
    catch bad input catch it too; runners catch it to name the round that diverged."""


_RUN_THROUGH: ContextVar[bool] = ContextVar("fedspectral_run_through_nonfinite", default=False)


@contextmanager
def run_through_nonfinite() -> Iterator[None]:
    """Within this block a training loss that is not finite raises no
    :class:`NonFiniteError` (:func:`nonfinite_raises` is false): the local SGD loop runs
    every step and the non-finite values propagate into the weights, so neither the
    duration nor the outcome says whether the data made the loss non-finite.  A node's
    client-level DP reply trains in it (its non-finite weights are then replaced by the
    server's reference: :func:`fedspectral.fed.flower.node.client_dp.privatise_update`)."""
    token = _RUN_THROUGH.set(True)
    try:
        yield
    finally:
        _RUN_THROUGH.reset(token)


def nonfinite_raises() -> bool:
    """Whether a non-finite training loss raises here (see :func:`run_through_nonfinite`)."""
    return not _RUN_THROUGH.get()


def describe(value: object) -> str:
    """A short, safe rendering of ``value`` for an error message (never a whole array)."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (bool, np.bool_)):
        return f"bool {bool(value)}"
    if isinstance(value, np.generic):
        return repr(value.item())
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_real(value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (numbers.Real, np.floating, np.integer))


def check_real(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` as a Python float, checked to lie in the stated interval.

    NaN is always refused; ±inf only with ``allow_inf`` (and still subject to the bounds).
    """
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an integer beyond the float range
        raise ValueError(f"{name} must be finite, got {describe(value)}") from None
    if math.isnan(x):
        raise ValueError(f"{name} must be a number, got nan")
    if math.isinf(x) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {x}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {x!r}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {x!r}")
    return x


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as a Python int (numpy integers accepted, bools and floats refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    n = int(value)
    if low is not None and n < low:
        raise ValueError(f"{name} must be >= {low}, got {n}")
    if high is not None and n > high:
        raise ValueError(f"{name} must be <= {high}, got {n}")
    return n


def check_bool(name: str, value: object) -> bool:
    """``value`` as a Python bool (numpy bools accepted, 0/1 refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choice closest to a misspelt ``value``
    (:func:`difflib.get_close_matches`), or ``""`` when none is close."""
    import difflib

    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@contextmanager
def warnings_at_caller(category: type[Warning] = UserWarning) -> Iterator[None]:
    """Re-issue the ``category`` warnings raised in this block at the first frame outside
    fedspectral and scikit-learn (the user's line that called the estimator), instead of
    the library line that happened to warn; other warnings pass through unchanged."""
    import sys

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        yield
    here = os.path.dirname(os.path.abspath(__file__))
    frame: Any = sys._getframe(1)  # the frame that entered the block: stacklevel 1
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(here)
        or f"{os.sep}sklearn{os.sep}" in frame.f_code.co_filename
        or f"{os.sep}contextlib.py" in frame.f_code.co_filename
    ):
        frame, level = frame.f_back, level + 1
    for w in caught:
        if issubclass(w.category, category):
            warnings.warn(w.message, w.category, stacklevel=level + 1)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` as one of the strings in ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"{name} must be one of {', '.join(map(repr, choices))}; got {describe(value)}"
            f"{did_you_mean(value, choices)}"
        )
    return value


#: Environment variable that lifts the documented size bounds (:func:`check_size`): set it
#: to ``1`` to run a size above its bound knowingly (memory and time are then yours to judge).
ALLOW_LARGE_ENV = "FEDSPECTRAL_ALLOW_LARGE"


def large_allowed() -> bool:
    """Whether :data:`ALLOW_LARGE_ENV` is set to ``1`` (sizes above their bounds accepted)."""
    return os.environ.get(ALLOW_LARGE_ENV, "").strip() == "1"


def check_size(name: str, value: object, bound: int, *, low: int = 1, why: str = "") -> int:
    """``value`` as an int ``>= low`` and, unless :func:`large_allowed`, ``<= bound``.

    ``bound`` is a size's documented upper bound (derived from the memory and time of
    the work it sizes, ``why`` says how); the message names the parameter, the value,
    the bound and how to go past it knowingly (``FEDSPECTRAL_ALLOW_LARGE=1``).
    """
    n = check_int(name, value, low=low)
    if n > bound and not large_allowed():
        reason = f" ({why})" if why else ""
        raise ValueError(
            f"{name}={n} is above its bound {bound:,}{reason}; to go past it "
            f"knowingly, set the environment variable {ALLOW_LARGE_ENV}=1"
        )
    return n
