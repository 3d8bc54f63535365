"""The shared parameter checks: numpy scalars in, booleans out, messages name the value."""

import math

import numpy as np
import pytest

from fedspectral.checks import check_bool, check_choice, check_int, check_real


@pytest.mark.parametrize("v", [0.5, np.float32(0.5), np.float64(0.5), 1, np.int64(1)])
def test_real_accepts_python_and_numpy_scalars(v):
    assert check_real("x", v, low=0.0) == float(v)


@pytest.mark.parametrize("v", [True, np.bool_(False), "1", None, [1.0], np.ones(2)])
def test_real_refuses_non_numbers_with_type_error(v):
    with pytest.raises(TypeError, match="^x must be a real number"):
        check_real("x", v)


def test_real_bounds_and_specials():
    with pytest.raises(ValueError, match="x must be > 0.0, got 0.0"):
        check_real("x", 0.0, low=0.0, low_open=True)
    with pytest.raises(ValueError, match="x must be <= 1.0, got 2.0"):
        check_real("x", 2, high=1.0)
    with pytest.raises(ValueError, match="got nan"):
        check_real("x", math.nan, allow_inf=True)
    with pytest.raises(ValueError, match="must be finite, got inf"):
        check_real("x", math.inf)
    assert check_real("x", math.inf, low=0.0, allow_inf=True) == math.inf


def test_int_and_bool_and_choice():
    assert check_int("k", np.int32(3), low=1) == 3
    for bad in (True, 3.0, "3"):
        with pytest.raises(TypeError, match="^k must be an integer"):
            check_int("k", bad)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        check_int("k", 0, low=1)
    assert check_bool("b", np.bool_(True)) is True
    with pytest.raises(TypeError, match="b must be True or False, got 1"):
        check_bool("b", 1)
    with pytest.raises(ValueError, match="mode must be one of 'a', 'b'; got 'c'"):
        check_choice("mode", "c", ("a", "b"))


def test_non_finite_error_is_a_value_error():
    from fedspectral.checks import NonFiniteError

    assert issubclass(NonFiniteError, ValueError)
    with pytest.raises(ValueError, match="diverged"):
        raise NonFiniteError("diverged")
