"""Running the plan: which runs are finished (:func:`run_status`) and training the
others, in this process or in ``fedspectral train`` subprocesses (:func:`execute_plan`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedspectral.config import save_config, thaw, to_dict
from fedspectral.experiments.preflight import preflight
from fedspectral.experiments.reproduce.plan import Plan, RunSpec
from fedspectral.fed.validation import config_fingerprint, ensure_valid, with_output
from fedspectral.results import read_results, write_json


def _fingerprint(cfg_dict: Mapping[str, Any]) -> str:
    return config_fingerprint(cfg_dict)


def run_status(plan: Plan, spec: RunSpec) -> str:
    """``"done"`` (its ``results.json`` holds this config and all its rounds),
    ``"resume"`` (a checkpoint of this config), ``"new"``, or ``"stale"`` (files
    written by a different config, or a ``results.json`` that is not a run's results:
    nothing is written over either)."""
    d = plan.run_dir(spec)
    fp = _fingerprint(to_dict(spec.config))
    res = d / "results.json"
    if res.exists() or res.is_symlink():
        try:
            r = read_results(res)
            found = _fingerprint(r["config"])
        except (ValueError, TypeError, AttributeError):
            return "stale"
        if found != fp:
            return "stale"
        final = r.get("final")
        if (
            r.get("rounds_done") == spec.config.method.rounds
            and isinstance(final, dict)
            and "linear_probe" in final
        ):
            return "done"
    ck = d / "checkpoint.pt"
    if ck.is_file():
        # lazy: pulls in torch
        from fedspectral.fed.checkpoint import CheckpointError, read_fingerprint

        try:
            found = read_fingerprint(ck)  # weights_only: nothing in the file is executed
        except CheckpointError:  # an unreadable checkpoint is restarted
            return "new"
        return "resume" if found == fp else "stale"
    return "new"


def _final_line(spec: RunSpec, res: Mapping[str, Any] | None) -> str:
    if not res:
        return ""
    f = res.get("final", {})
    parts = [
        f"{k}={100 * f[k]:.1f}%"
        for k in ("linear_probe", "knn_backbone", "knn_projector")
        if k in f
    ]
    priv = res.get("privacy", {})
    if spec.dp is not None and "epsilon_rdp" in priv:
        parts.extend(
            f"eps_{a}="
            + ("n/a" if priv.get(f"epsilon_{a}") is None else f"{priv[f'epsilon_{a}']:.2f}")
            for a in ("rdp", "pld")
        )
    return " ".join(parts)


def _worker_command(cfg_path: Path, run_dir: Path, resume: bool) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "fedspectral.cli",
        "train",
        "--config",
        str(cfg_path),
        "--out",
        str(run_dir),
        "--quiet",
    ]
    if resume:
        cmd.append("--resume")
    return cmd


def execute_plan(
    plan: Plan, *, jobs: int = 1, progress: bool = True, echo: Callable[[str], None] | None = None
) -> dict[str, str]:
    """Run every run of ``plan`` that is not finished; returns ``{name: outcome}`` with
    outcome ``skipped`` (finished before), ``done``, ``resumed`` or ``failed: <why>``.

    ``jobs == 1`` runs in this process (with the per-round progress bar);
    ``jobs > 1`` runs that many ``fedspectral train`` subprocesses at a time, each
    with ``cpu_count // jobs`` threads and its output in ``<run>/run.log``.
    Stale folders (another config) stop everything before any run.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs must be an integer >= 1, got {jobs!r}")
    status = {r.name: run_status(plan, r) for r in plan.runs}
    stale = [n for n, s in status.items() if s == "stale"]
    if stale:
        raise ValueError(
            f"{len(stale)} run folder(s) under {str(plan.out / 'runs')!r} hold "
            f"files of a different config or a results.json that is not a run's "
            f"(e.g. {stale[:3]}); remove them or choose another --out"
        )
    todo = [spec for spec in plan.runs if status[spec.name] != "done"]
    _check_runs(plan, todo, status)  # every run that will train, before any trains
    log = _RunLog(plan, echo or _echo, progress)
    for spec in plan.runs:
        if status[spec.name] == "done":
            log.finished(spec, "skipped", 0.0)
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    def prepare(spec: RunSpec) -> tuple[Any, Path, bool]:
        return _prepare(plan, spec, status[spec.name] == "resume", threads, progress)

    if jobs == 1:
        _run_in_process(todo, prepare, log)
    else:
        _run_in_subprocesses(todo, prepare, log, jobs)
    log.close()
    return log.outcomes


def _check_runs(plan: Plan, todo: Sequence[RunSpec], status: Mapping[str, str]) -> None:
    """The checks ``fedspectral train`` makes before training
    (:func:`fedspectral.experiments.preflight.preflight`: model, device, privacy
    calibration and accounting, output folder), for every run of ``todo`` before any
    of them trains; the first failure names its run."""
    for spec in todo:
        try:
            preflight(ensure_valid(spec.config), plan.run_dir(spec), status[spec.name] == "resume")
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"run {spec.name}: {exc}") from exc


class _RunLog:
    """The outcomes of the runs as they finish: one line per run (above the progress
    bar when there is one) and the closing count."""

    def __init__(self, plan: Plan, say: Callable[[str], None], progress: bool) -> None:
        self.plan, self.say = plan, say
        self.total = len(plan.runs)
        self.outcomes: dict[str, str] = {}
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc="reproduce", unit="run", position=0, leave=True)
        self.t_all = time.perf_counter()

    def finished(self, spec: RunSpec, outcome: str, secs: float) -> None:
        self.outcomes[spec.name] = outcome
        res = None
        if not outcome.startswith("failed"):
            res = _load_json(self.plan.run_dir(spec) / "results.json")
        line = (
            f"[{len(self.outcomes):>3}/{self.total}] {outcome:<8} {spec.name:<44} "
            f"{secs:7.1f} s  {_final_line(spec, res)}"
        )
        if self.bar is not None:
            self.bar.write(line)
            self.bar.update(1)
        else:
            self.say(line)

    def interrupted(self, spec: RunSpec) -> None:
        if self.bar is not None:
            self.bar.close()
        self.say(f"interrupted during {spec.name}; run the same command again to resume")

    def interrupted_all(self, pending: Sequence[RunSpec]) -> None:
        if self.bar is not None:
            self.bar.close()
        self.say(
            f"interrupted: running runs stopped at their last checkpoint, {len(pending)} "
            "not finished; run the same command again to resume"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        outcomes = self.outcomes.values()
        self.say(
            f"{sum(1 for o in outcomes if o in ('done', 'resumed'))} run(s) trained, "
            f"{sum(1 for o in outcomes if o == 'skipped')} already finished, "
            f"{sum(1 for o in outcomes if o.startswith('failed'))} failed, "
            f"in {time.perf_counter() - self.t_all:.1f} s"
        )


def _prepare(
    plan: Plan, spec: RunSpec, resume: bool, threads: int | None, progress: bool
) -> tuple[Any, Path, bool]:
    """The config a run trains with (its threads and progress bar set), written to
    ``<run>/planned.yaml``; ``(config, run folder, resume)``."""
    d = plan.run_dir(spec)
    d.mkdir(parents=True, exist_ok=True)
    if threads is not None:  # checked again (eval sizes depend on the threads)
        cfg = thaw(spec.config)
        cfg.run.threads = threads
        cfg.run.progress = False
    else:
        cfg = with_output(spec.config, progress=progress)
    save_config(cfg, d / "planned.yaml")
    return cfg, d, resume


def _run_in_process(
    todo: Sequence[RunSpec], prepare: Callable[[RunSpec], tuple[Any, Path, bool]], log: _RunLog
) -> None:
    """The runs one after the other in this process; a failed run does not stop the
    others, an interrupt stops everything."""
    import resource

    # per call: tests replace train.run_experiment
    from fedspectral.experiments.train import run_experiment

    for spec in todo:
        cfg, d, resume = prepare(spec)
        t0 = time.perf_counter()
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        try:
            run_experiment(cfg, resume=resume, out_dir=d)
            outcome = "resumed" if resume else "done"
        except KeyboardInterrupt:
            log.interrupted(spec)
            raise
        except Exception as exc:  # noqa: BLE001 - one failed run must not stop the grid
            outcome = f"failed: {type(exc).__name__}: {exc}"
        finally:
            u1 = resource.getrusage(resource.RUSAGE_SELF)
            add_cpu_seconds(d, u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime)
        log.finished(spec, outcome, time.perf_counter() - t0)


def _run_in_subprocesses(
    todo: Sequence[RunSpec],
    prepare: Callable[[RunSpec], tuple[Any, Path, bool]],
    log: _RunLog,
    jobs: int,
) -> None:
    """``jobs`` runs at a time, each a ``fedspectral train`` subprocess logging to
    ``<run>/run.log``.  An interrupt (Ctrl-C, or ``SIGTERM`` turned into one by the CLI)
    starts no further run and stops the running ones with ``SIGTERM``, which they answer
    by checkpointing: the same command resumes them."""
    import threading
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    running: set[subprocess.Popen] = set()
    lock = threading.Lock()
    stopping = threading.Event()

    def work(spec: RunSpec) -> tuple[str, float]:
        _, d, resume = prepare(spec)
        t0 = time.perf_counter()
        with open(d / "run.log", "ab") as fh:
            with lock:
                if stopping.is_set():
                    return "not started", 0.0
                proc = subprocess.Popen(
                    _worker_command(d / "planned.yaml", d, resume),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
                running.add(proc)
            _, wstatus, usage = os.wait4(proc.pid, 0)  # the run's own CPU time
            proc.returncode = rc = os.waitstatus_to_exitcode(wstatus)
            with lock:
                running.discard(proc)
        add_cpu_seconds(d, usage.ru_utime + usage.ru_stime)
        secs = time.perf_counter() - t0
        if rc != 0:
            return f"failed: exit status {rc} (see {d / 'run.log'})", secs
        return ("resumed" if resume else "done"), secs

    pool = ThreadPoolExecutor(max_workers=jobs)
    futs = {pool.submit(work, spec): spec for spec in todo}
    try:
        pending = set(futs)
        while pending:  # woken twice a second, so that an interrupt is seen at once
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in done:
                outcome, secs = fut.result()
                log.finished(futs[fut], outcome, secs)
    except BaseException:
        with lock:
            stopping.set()
            for proc in running:
                proc.terminate()  # the run checkpoints and exits
        pool.shutdown(wait=True, cancel_futures=True)
        log.interrupted_all([s for s in todo if s.name not in log.outcomes])
        raise
    pool.shutdown(wait=True)


#: a run's CPU seconds (user + system, every attempt summed), beside its results
COST_FILE = "cost.json"


def add_cpu_seconds(run_dir: Path, seconds: float) -> None:
    """Add one attempt's CPU seconds to ``<run>/cost.json`` (``cpu_seconds``,
    ``attempts``)."""
    old = _load_json(run_dir / COST_FILE) or {}
    cpu = float(old.get("cpu_seconds", 0.0)) if isinstance(old, dict) else 0.0
    n = int(old.get("attempts", 0)) if isinstance(old, dict) else 0
    write_json(run_dir / COST_FILE, {"cpu_seconds": cpu + float(seconds), "attempts": n + 1})


def _echo(line: str) -> None:
    print(line, flush=True)


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None
