"""``fedspectral train``: one federated SSL run from a YAML config.

::

    fedspectral train --config configs/fmnist_fedsc.yaml [--set key=value ...]
                      [--out DIR] [--resume] [--engine inprocess|flower]
                      [--log tensorboard]

Writes under ``--out`` (default ``results/<name>``): ``results.json`` (config,
per-round records, final metrics, privacy ledger and ε report, timings,
versions), ``rounds.csv`` (one row per round), ``convergence.png`` (KNN, training loss
and, with DP, ε vs round) and ``config.yaml``; the in-process engine also keeps
``checkpoint.pt`` (each round) for ``--resume``; ``--log tensorboard`` adds TensorBoard
event files in ``tensorboard/`` (:mod:`fedspectral.fed.tensorboard`).  ``results.json``
is written last: a folder whose ``results.json`` is this run's holds all its files.

Before any data is loaded (:mod:`fedspectral.experiments.preflight`): the output folder
and every file the run writes there are checked, a ``results.json`` or ``checkpoint.pt``
of another config (another fingerprint) is never written over (the error says what is
there and how to keep it), ``--resume`` without a checkpoint is an error, and the disk
must have room for the checkpoint and the result files.

:func:`run_experiment` is the same thing as a function, for the demo and the
reproduction scripts.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from fedspectral.config_checks import check_unique_overrides
from fedspectral.experiments.preflight import preflight
from fedspectral.fed.methods import build_method
from fedspectral.fed.validation import ensure_valid, load_config, with_output
from fedspectral.inputs import check_nonempty_path
from fedspectral.results import write_results

__all__ = ["ENGINES", "LOGGERS", "add_arguments", "run", "run_experiment", "write_results"]

ENGINES = ("inprocess", "flower")
#: ``--log`` destinations
LOGGERS = ("tensorboard",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML experiment config")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set method.rounds=5 "
        "--set method.params.mu=2 (repeatable)",
    )
    parser.add_argument("--out", default=None, help="output folder (default results/<name>)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the checkpoint in the output folder (an error when there is none)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="inprocess",
        help="in-process simulation (default) or Flower",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--log",
        choices=LOGGERS,
        action="append",
        default=[],
        help="also log each round's metrics and epsilon: 'tensorboard' "
        "writes event files to OUT/tensorboard (needs the extra: "
        "pip install tensorboard, or pip install -e '.[tensorboard]' in a "
        "checkout); live with the "
        "in-process engine, after the run with --engine flower",
    )


def run_experiment(
    config: Any,
    *,
    resume: bool = False,
    engine: str = "inprocess",
    out_dir: str | os.PathLike | None = None,
    write: bool = True,
    log: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    """Train ``config`` (an :class:`ExperimentConfig`, validated here unless it is valid
    already) and return the results dict; with ``write`` also write the results files to
    ``out_dir`` (default
    ``config.run.out`` or ``results/<name>``).  ``log``: extra destinations of the
    per-round metrics (:data:`LOGGERS`; ``"tensorboard"``: ``<out>/tensorboard``, see
    :mod:`fedspectral.fed.tensorboard`)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    bad = [x for x in log if x not in LOGGERS]
    if bad:
        raise ValueError(f"log must hold only {LOGGERS}, got {bad[0]!r}")
    cfg = ensure_valid(config)  # a config from load_config is not checked again
    method = build_method(cfg)  # once: the checks and the engine take this one
    if out_dir is not None:
        check_nonempty_path(out_dir, "the output folder")
    out = Path(out_dir) if out_dir is not None else cfg.out_dir()

    preflight(cfg, out if write else None, resume, method=method)  # before any data is loaded
    lock = lock_output(out) if write else None  # one run at a time in a folder
    try:
        return _train(cfg, out, resume, engine, write, log, method)
    finally:
        if lock is not None:
            os.close(lock)


def lock_output(out: Path) -> int:
    """Hold an exclusive lock on the output folder ``out`` (made if missing) for as long
    as the returned descriptor is open; a ``ValueError`` when another run holds it (two
    runs into one folder would mix their checkpoints and results).  The lock is on the
    folder itself (``flock``; no file is added) and ends with the process."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"another run is writing to {str(out)!r} (it holds the folder's lock); wait "
            "for it to finish or give another output folder"
        ) from None
    return fd


def _train(
    cfg: Any,
    out: Path,
    resume: bool,
    engine: str,
    write: bool,
    log: tuple[str, ...] | list[str],
    method: Any = None,
) -> dict[str, Any]:
    callbacks = []
    if "tensorboard" in log:
        # lazy: pulls in dp-accounting and SciPy
        from fedspectral.fed.tensorboard import TensorBoardCallback, check_tensorboard

        check_tensorboard()  # the extra is installed: checked before training
        callbacks.append(TensorBoardCallback(out / "tensorboard"))
    if engine == "flower":
        from fedspectral.fed.flower.apps.engine import run_flower_simulation  # flwr: a dependency

        results = run_flower_simulation(
            cfg, out_dir=out if write else None, resume=resume, method=method
        )
        if callbacks:  # Flower runs the rounds in its own process: logged from the results
            from fedspectral.fed.tensorboard import write_tensorboard

            write_tensorboard(results, out / "tensorboard")
    else:
        from fedspectral.fed.simulation import Simulation  # lazy: pulls in torch and dp-accounting

        results = Simulation(
            cfg, out_dir=out if write else None, callbacks=callbacks, method=method
        ).run(resume=resume)
    if write:
        write_results(results, out)
    return results


def _summary(results: dict[str, Any], shown: set[str] | frozenset[str] = frozenset()) -> str:
    """The run in a few lines; privacy warnings whose text is in ``shown`` (already
    printed while the run went) are not repeated."""
    lines = [
        (
            f"{results['name']} [{results['method']}, {results.get('engine', '?')}]: "
            f"{results['rounds_done']} rounds in {results['timings']['total_seconds']:.1f} s"
        )
    ]
    fin = results.get("final", {})
    for k in ("knn_backbone", "knn_projector", "linear_probe"):
        if k in fin:
            lines.append(f"  {k:<14} {100 * fin[k]:.2f} %")
    if "eigenvalues" in fin:  # a PCA method
        vals = ", ".join(f"{v:.4g}" for v in fin["eigenvalues"])
        lines.append(f"  eigenvalues    [{vals}] from {int(fin.get('users', 0))} users")
    if "subspace_error" in fin:
        lines.append(f"  subspace error {fin['subspace_error']:.4f} (synthetic users)")
    priv = results.get("privacy", {})

    def g(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    eps = priv.get("epsilon_rdp")
    if priv.get("releases") and isinstance(eps, float) and math.isinf(eps):
        lines.append(
            f"  privacy (sample level): no DP -- {priv['releases']} releases without noise "
            "(epsilon = inf)"
        )
    elif priv.get("releases"):
        lines.append(
            f"  privacy (sample level): {priv['releases']} releases, max over clients "
            f"eps_rdp={g(priv.get('epsilon_rdp'))}, "
            f"eps_pld={g(priv.get('epsilon_pld'))} (delta={priv['delta']:g})"
        )
        for th, e in (priv.get("threat_models") or {}).items():
            lines.append(
                f"    under the {th} threat model: eps_rdp={g(e.get('epsilon_rdp'))}, "
                f"eps_pld={g(e.get('epsilon_pld'))}"
            )
        if "target_epsilon" in priv:
            lines.append(
                f"  target eps={priv['target_epsilon']:g} ({priv['target_accountant']}); "
                f"releases withheld to stay within it: {priv.get('budget_stops', 0)}"
            )
    if "client_level" in priv:
        cl = priv["client_level"]
        lines.append(
            f"  privacy (client level, not composed with the above): {cl['releases']} "
            f"releases, eps_rdp={g(cl.get('epsilon_rdp'))}"
        )
    for w in priv.get("warnings", []):
        if " ".join(str(w).split()) not in shown:
            lines.append(f"  warning: {w}")
    t = results["timings"]
    if "mean_bytes_up_per_round" in t:
        lines.append(
            f"  bytes per round: up {t['mean_bytes_up_per_round'] / 1e6:.2f} MB, "
            f"down {t['mean_bytes_down_per_round'] / 1e6:.2f} MB"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    check_unique_overrides(args.overrides, "--set")
    cfg = load_config(args.config, args.overrides)  # errors are reported by fedspectral.cli
    if args.out is not None:
        check_nonempty_path(args.out, "--out")
        cfg = with_output(cfg, out=args.out)  # valid still: not checked again
    if args.quiet:
        cfg = with_output(cfg, progress=False)
    results = run_experiment(
        cfg, resume=args.resume, engine=args.engine, log=tuple(dict.fromkeys(args.log))
    )
    print(_summary(results, getattr(args, "shown_warnings", frozenset())))
    print(f"results in {cfg.out_dir()}")
    return 0
