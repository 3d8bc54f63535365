"""Command-line interface: ``fedspectral <command> ...``.

Each command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only dispatches, so importing it is cheap and
``fedspectral --help`` does not load PyTorch.  Every command also takes ``--debug``:
an error is printed as ``fedspectral <command>: error: ...`` with exit status 2
(1 for an unexpected error), and its traceback is shown only with ``--debug``.  Ctrl-C
and ``SIGTERM`` unwind the command (its cleanup runs) and exit with 130 and 143.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from types import ModuleType
from typing import Any

from fedspectral import __version__

# (command, module, one-line help)
COMMANDS: list[tuple[str, str, str]] = [
    (
        "demo",
        "fedspectral.experiments.demo",
        "short tour: LDP-PCA reproduction and a FedSC vs FedAvg+SC comparison (minutes on an "
        "idle machine, up to half an hour on a loaded 2-core one; each stage says where it is)",
    ),
    (
        "pca-bench",
        "fedspectral.experiments.pca_bench",
        "reproduce the locally private PCA paper's experiments into results/pca/",
    ),
    (
        "pca-plan",
        "fedspectral.experiments.pca_plan",
        "how many users locally private PCA needs for a target subspace error",
    ),
    (
        "train",
        "fedspectral.experiments.train",
        "train one federated SSL method from a YAML config (in-process or on Flower)",
    ),
    (
        "reproduce",
        "fedspectral.experiments.reproduce",
        (
            "regenerate the FedSC tables and figures (core tier by default; --tier full: "
            "every method and the DP tables)"
        ),
    ),
    (
        "export",
        "fedspectral.experiments.export",
        "write a run's trained encoder as a plain PyTorch state_dict (+ the config to rebuild it)",
    ),
    (
        "status",
        "fedspectral.experiments.status",
        "whether a run (a Flower app run's folder, a train --out) completed; exit 1: it failed",
    ),
    (
        "audit",
        "fedspectral.experiments.audit",
        "empirical privacy audit of the LDP-PCA message or a DP-CalR release (exit 1: violation)",
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedspectral",
        description="Private spectral learning from distributed data: locally private PCA "
        "(Gaussian-perturbed second moments) and federated spectral contrastive learning "
        "(FedSC) with DP correlation sharing.",
    )

    parser.add_argument("--version", action="version", version=f"fedspectral {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, _module, help_ in COMMANDS:
        sub.add_parser(name, help=help_, description=help_)
    return parser


def command_parser(name: str) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The full parser of command ``name`` (its module's arguments and ``--debug``) and
    the module; the API reference renders each command's ``--help`` from it."""
    entry = next((c for c in COMMANDS if c[0] == name), None)
    if entry is None:
        raise ValueError(f"unknown command {name!r}; known: {[c[0] for c in COMMANDS]}")
    mod = importlib.import_module(entry[1])
    sub = argparse.ArgumentParser(prog=f"fedspectral {name}", description=entry[2])
    mod.add_arguments(sub)
    sub.add_argument("--debug", action="store_true", help="on an error, show the Python traceback")
    return sub, mod


#: Exit status of an error the user can fix (bad config, option, file, or a diverged run).
EXIT_ERROR = 2
#: Exit status of an unexpected error (a bug: rerun with --debug and report it).
EXIT_INTERNAL = 1


def _warning_printer(name: str, shown: set[str]) -> Any:
    """A ``warnings.showwarning`` that prints each warning once, as one line
    ``fedspectral <cmd>: warning: <message>`` (no source line; repeats of the same text
    are dropped); the texts shown go to ``shown``."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        text = " ".join(str(message).split())
        if text in shown:
            return
        shown.add(text)
        print(f"fedspectral {name}: warning: {text}", file=sys.stderr, flush=True)

    return show


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on ``SIGTERM`` while a command runs: it unwinds like
    Ctrl-C (every ``finally`` and context manager runs: a Flower run stops the processes
    it started and removes its temporary folders), and the command exits with 143."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _run_command(name: str, mod: ModuleType, args: argparse.Namespace) -> int:
    """Run a command; an exception becomes ``fedspectral <cmd>: error: ...`` on stderr and a
    non-zero exit (the traceback only with ``--debug``).  Warnings print once each, as one
    line (:func:`_warning_printer`); ``args.shown_warnings`` holds their texts, so that a
    command's summary does not repeat them.  ``SIGTERM`` is handled like Ctrl-C (cleanup
    runs), exit status 143 (130 for Ctrl-C)."""
    import signal
    import threading

    args.shown_warnings = set()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        with warnings.catch_warnings():
            if not args.debug:
                warnings.showwarning = _warning_printer(name, args.shown_warnings)
            return int(mod.run(args) or 0)
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        term = isinstance(exc, Terminated)
        print(f"fedspectral {name}: {'terminated' if term else 'interrupted'}", file=sys.stderr)
        return 143 if term else 130
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, ValueError | TypeError | OSError | ArithmeticError):
            print(f"fedspectral {name}: error: {_message(exc)}", file=sys.stderr)
            return EXIT_ERROR
        print(
            f"fedspectral {name}: error: unexpected {type(exc).__name__}: "
            f"{str(exc) or 'no message'} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _message(exc: BaseException) -> str:
    from fedspectral.atomic import write_failure  # no project import beyond the bottom layer

    failed = write_failure(exc)  # a full disk, a read-only folder: the file it could not write
    if failed is not None:
        return failed
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {str(exc.filename)!r}"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ValueError | TypeError) else f"{type(exc).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # first pass: find the command, then let its module add its own arguments
    if argv and not argv[0].startswith("-"):
        name = argv[0]
        if any(c[0] == name for c in COMMANDS):
            sub, mod = command_parser(name)
            args = sub.parse_args(argv[1:])
            return _run_command(name, mod, args)
    parser.parse_args(argv)  # --help, --version, or an unknown command (exits with usage)
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
