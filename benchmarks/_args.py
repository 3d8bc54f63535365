"""Argument checks shared by the benchmark scripts (``benchmarks/*.py``).

Every bad argument is an argparse error, before any work and before any file is written:
exit status 2 and one line naming the option and the value, e.g. ``noise_perf.py: error:
argument --repeats: must be an integer in [1, 1000], got '-1'``, never a traceback.  The
``type=`` functions here read a value as the option means it (an integer in ASCII digits,
never ``1_0``, ``1e3`` or ``nan``; a finite real in a stated range; a file or a folder that
can be written) and bound every size, so that no value runs for hours or fills the
memory.  :func:`given` tells which options the command line set, so that a script can
refuse an option where it does nothing (``--repeats`` with ``--redraw``) with
:func:`refuse`.

A script run as ``python benchmarks/x.py`` finds this module beside it; one loaded from
elsewhere (a test) puts ``benchmarks/`` on ``sys.path`` first, as each script does.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

_INT = re.compile(r"[+-]?[0-9]{1,30}")
_REAL = re.compile(r"[+-]?([0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})([eE][+-]?[0-9]{1,3})?")

#: a seed: what ``numpy.random.default_rng`` and every seed of the project take
SEED_MAX = 2**32 - 1


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def count(low: int = 1, high: int = 1000) -> Callable[[str], int]:
    """``type=`` for an integer in ``[low, high]`` written in ASCII digits."""

    def integer(text: str) -> int:
        t = text.strip()
        if not _INT.fullmatch(t) or not low <= int(t) <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer in [{low}, {high}], got {_shown(text)}"
            )
        return int(t)

    return integer


def seed(text: str) -> int:
    """``type=`` for a seed: an integer in ``[0, 2**32 - 1]``."""
    return count(0, SEED_MAX)(text)


def threads(text: str) -> int:
    """``type=`` for a thread count: an integer in ``[1, os.cpu_count()]`` (more threads
    than cores measure their contention, not the code)."""
    return count(1, max(1, os.cpu_count() or 1))(text)


def real(
    low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """``type=`` for a finite real in ``[low, high]`` (``(`` / ``)`` where open), written
    as a decimal number (never ``nan``, ``inf``, ``1_0`` or ``0x10``)."""
    lo, hi = "(" if low_open else "[", ")" if high_open else "]"

    def number(text: str) -> float:
        t = text.strip()
        x = float(t) if _REAL.fullmatch(t) else float("nan")
        inside = (low < x if low_open else low <= x) and (x < high if high_open else x <= high)
        if not inside:  # NaN is inside nothing
            raise argparse.ArgumentTypeError(
                f"must be a number in {lo}{low:g}, {high:g}{hi}, got {_shown(text)}"
            )
        return x

    return number


def _checked(check: Callable[[str, str], Any], text: str) -> str:
    try:
        check(text, "the path")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def out_file(text: str) -> str:
    """``type=`` for a file the script writes: a non-empty path whose folders resolve, not
    a folder or a device, writable (:func:`fedspectral.inputs.check_output_file`)."""
    from fedspectral.inputs import check_output_file

    return _checked(check_output_file, text)


def out_folder(text: str) -> str:
    """``type=`` for a folder the script writes into: a non-empty path whose existing
    part resolves, a folder where it exists, writable."""
    from fedspectral.inputs import check_output_path

    if text.strip() == "":
        raise argparse.ArgumentTypeError("must name a folder, got ''")
    _checked(check_output_path, text)
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    while not p.exists():
        p = p.parent
    if not os.access(p, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: the folder {str(p)!r} is not writable")
    return text


def in_file(text: str) -> str:
    """``type=`` for a file the script reads: a regular file that exists
    (:func:`fedspectral.inputs.check_input_file`)."""
    from fedspectral.inputs import check_input_file

    return _checked(check_input_file, text)


def override(text: str) -> str:
    """``type=`` for a config override ``KEY=VALUE`` (the value is checked with the
    config, by the script, before any run)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*=.*", text):
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE (a dotted key), got {_shown(text)}")
    return text


def unique(ap: argparse.ArgumentParser, option: str, values: Sequence[Any]) -> None:
    """A list option holds each value once (``--seeds 0 0`` would run one seed twice)."""
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        ap.error(f"argument {option}: {seen[0]!r} given twice")


class _Given(argparse.Namespace):
    """A namespace argparse fills with only what the command line gives: it sets an
    option's default only where the namespace lacks the attribute, and this one lacks
    none."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_unrecognized_args":
            raise AttributeError(name)
        return None


def given(ap: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The destinations (``repeats``, ``plan_repeats``) of the options the command line
    sets (call after ``ap.parse_args(argv)`` has succeeded)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return set(vars(ap.parse_args(args, namespace=_Given())))


def refuse(ap: argparse.ArgumentParser, set_: set[str], options: Iterable[str], why: str) -> None:
    """An argparse error when one of ``options`` (destinations) is set: it has no effect
    ``why`` (e.g. "with --redraw")."""
    for dest in options:
        if dest in set_:
            ap.error(f"argument --{dest.replace('_', '-')}: has no effect {why}")


def config_error(ap: argparse.ArgumentParser, what: str, check: Callable[[], Any]) -> None:
    """Run ``check`` (loading a config with the overrides given); its ``ValueError``,
    ``TypeError`` or ``OSError`` becomes an argparse error naming ``what``."""
    try:
        check()
    except (ValueError, TypeError, OSError) as exc:
        msg = " ".join(str(exc).split())
        ap.error(f"{what}: {msg[:500]}")
