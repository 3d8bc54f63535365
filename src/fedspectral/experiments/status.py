"""``fedspectral status``: whether a run finished, from its folder alone.

::

    fedspectral status results/flower_app/run-<id>

``flwr run`` exits 0 even when the app's run fails (Flower's CLI reports no app status),
so a script that runs the Flower app reads the outcome here: a failed run's folder holds
a ``FAILED`` file with its one-line reason (exit status 1); a finished one its
``results.json`` (exit status 0); a folder with neither is still running or was stopped
(exit status 3).  Works on ``fedspectral train`` folders too.
"""

from __future__ import annotations

import argparse

from fedspectral.fed.flower.apps.outcome import run_status

__all__ = ["EXIT_FAILED", "EXIT_INCOMPLETE", "add_arguments", "run"]

#: exit status of a failed run, and of a run with no results yet
EXIT_FAILED = 1
EXIT_INCOMPLETE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_FOLDER",
        help="a run's folder (results/flower_app/run-<id>, a `fedspectral train` --out)",
    )


def run(args: argparse.Namespace) -> int:
    status, line = run_status(args.run_dir)
    if status == "missing":
        raise ValueError(line)
    if status == "failed":
        print(f"failed: {line}")
        return EXIT_FAILED
    if status == "incomplete":
        print(f"incomplete: {line}")
        return EXIT_INCOMPLETE
    print(line)
    return 0
