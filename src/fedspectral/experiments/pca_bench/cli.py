"""The command line of ``fedspectral pca-bench``: its options, running the bench and
writing its outputs, and ``--reanalyse``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedspectral.atomic import atomic_batch
from fedspectral.experiments.pca_bench.analysis import analyse_fig1, analyse_real, analyse_tables
from fedspectral.experiments.pca_bench.config import EXPERIMENTS, LABELS, BenchConfig, validate
from fedspectral.experiments.pca_bench.plots import _plot_fig1, _plot_real, _plot_tables
from fedspectral.experiments.pca_bench.tables import markdown_tables, summary_text
from fedspectral.experiments.pca_bench.tasks import OPENDP_AMAX, _run_tasks, _tasks
from fedspectral.inputs import check_input_file
from fedspectral.results import versions, write_csv, write_json, write_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fedspectral pca-bench``."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small version (what `make demo` runs; well under 2 minutes)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats per Figure-1 point (default 20; quick 3; at most 1000)",
    )
    parser.add_argument(
        "--sparse-repeats",
        type=int,
        default=None,
        help="repeats per Tables 1-2 cell (default 3; quick 2; at most 100; "
        "FEDSPECTRAL_ALLOW_LARGE=1 lifts the bounds)",
    )
    parser.add_argument("--out", default="results/pca", help="output folder (results/pca)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes (default 1; each uses one BLAS thread)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=EXPERIMENTS,
        default=None,
        help="run only this experiment (repeatable): fig1, tables, real",
    )
    parser.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--reanalyse",
        action="store_true",
        help="only redo analysis, figures and tables of the finished run in "
        "--out from its CSVs and JSON (no experiment is re-run: the options that set "
        "up a run are refused with it)",
    )


def _given(value: Any) -> bool:
    """An option the command line set (the defaults are None, or False for a flag)."""
    return value is not None and value is not False


def _flag(dest: str, value: Any) -> str:
    """``--only fig1 real``: an option as the command line gave it."""
    flag = "--" + dest.replace("_", "-")
    if value is True:
        return flag
    return f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    kw: dict[str, Any] = {
        "out": str(args.out),
        "jobs": 1 if args.jobs is None else args.jobs,
        "seed": 0 if args.seed is None else args.seed,
    }
    if args.only:
        kw["only"] = tuple(dict.fromkeys(args.only))
    if args.repeats is not None:
        kw["repeats"] = args.repeats
        kw["real_repeats"] = args.repeats
    if args.sparse_repeats is not None:
        kw["sparse_repeats"] = args.sparse_repeats
    cfg = BenchConfig.quick_config(**kw) if args.quick else BenchConfig(**kw)
    if args.repeats is not None:
        cfg.opendp_repeats = min(cfg.opendp_repeats, cfg.repeats)
        cfg.real_opendp_repeats = min(cfg.real_opendp_repeats, cfg.repeats)
    return cfg


def run_bench(cfg: BenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the experiments of ``cfg``, write every output, return the JSON payload."""
    validate(cfg)
    out = Path(cfg.out)
    t0 = time.perf_counter()
    tasks = _tasks(cfg)
    raw = _run_tasks(cfg, tasks, progress)
    t_run = time.perf_counter() - t0
    try:
        analyse_raw(cfg, raw)
    except Exception:  # the raw errors survive a failure of the analysis
        for exp in EXPERIMENTS:
            if exp in cfg.only and raw.get(exp):
                write_csv(out / f"{exp}.csv", raw[exp])
        raise
    # every file of the run lands together, or none (a full disk on the last figure
    # leaves no tables.csv behind): see fedspectral.atomic.atomic_batch
    with atomic_batch():
        for exp in EXPERIMENTS:
            if exp in cfg.only and raw.get(exp):
                write_csv(out / f"{exp}.csv", raw[exp])
        timings = {"tasks_seconds": t_run, "tasks": len(tasks)}
        payload = write_outputs(cfg, raw, timings)
        payload["timings"]["total_seconds"] = time.perf_counter() - t0
        write_json(out / "pca_bench.json", payload)
    return payload


def write_outputs(
    cfg: BenchConfig, raw: dict[str, list[dict]], timings: dict[str, Any]
) -> dict[str, Any]:
    """Analyse raw errors, write figures, ``README_table.md`` and ``pca_bench.json``
    (together, or none of them: :func:`fedspectral.atomic.atomic_batch`)."""
    with atomic_batch():
        out = Path(cfg.out)
        plotters = {"fig1": _plot_fig1, "tables": _plot_tables, "real": _plot_real}
        results = analyse_raw(cfg, raw)  # all of it before any file is written
        files: list[Path] = [out / f"{exp}.csv" for exp in EXPERIMENTS if raw.get(exp)]
        for exp in results:
            files.extend(plotters[exp](cfg, results[exp], out))
        files.append(write_text(out / "README_table.md", markdown_tables(cfg, results)))
        payload = {
            "command": "fedspectral pca-bench" + (" --quick" if cfg.quick else ""),
            "config": dataclasses.asdict(cfg),
            "versions": versions(),
            "timings": dict(timings),
            "notes": {
                "fig1_sampling": f"rows up to n={max(cfg.n_rows)}, exact Wishart draw of "
                "X^T X/n beyond",
                "ldp_noise_mode": "aggregate (same distribution of S_hat as per-user noise)",
                "opendp": "central pure eps-DP at replace-one eps; centres the data; "
                f"{cfg.opendp_repeats} repeats, n <= {cfg.opendp_max_n}; not seedable; "
                f"points with a_max > {OPENDP_AMAX} skipped (sampler infeasible)",
            },
            "results": results,
            "files": [str(f) for f in files] + [str(out / "pca_bench.json")],
        }
        write_json(out / "pca_bench.json", payload)
        return payload


def analyse_raw(cfg: BenchConfig, raw: dict[str, list[dict]]) -> dict[str, Any]:
    """The aggregated results of each experiment of ``cfg.only`` that has raw rows (no
    file is written)."""
    analysers = {"fig1": analyse_fig1, "tables": analyse_tables, "real": analyse_real}
    results: dict[str, Any] = {}
    for exp in EXPERIMENTS:
        if exp in cfg.only and raw.get(exp):
            results[exp] = analysers[exp](cfg, raw[exp])
            st = [r["opendp_status"] for r in raw[exp] if r.get("opendp_status")]
            if st:
                results[exp]["opendp_status_counts"] = {x: st.count(x) for x in sorted(set(st))}
    return results


def _parse_cell(v: str) -> Any:
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f


def reanalyse(out: str | Path) -> dict[str, Any]:
    """Redo the analysis, figures and tables of a finished run from its raw CSVs and the
    config stored in its ``pca_bench.json`` (no experiment is re-run).

    Nothing is written unless every result can be rebuilt: a raw-error CSV that
    ``pca_bench.json`` has results for and that is missing or empty, or CSVs of other
    columns, are a ``ValueError`` before any write."""
    import json

    out = Path(out)
    path = out / "pca_bench.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{str(path)!r} is not valid JSON ({exc}); rerun the bench without --reanalyse"
        ) from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"{str(path)!r} is not a pca-bench result (no 'config' mapping)"
        )
    try:
        cfg = config_from_payload(meta)
        cfg.out = str(out)
        validate(cfg)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{str(path)!r} holds an invalid config: {exc}") from exc
    results = meta.get("results")
    stored = results if isinstance(results, dict) else {}
    raw = {
        exp: rows
        for exp in cfg.only
        if (rows := _read_raw(out / f"{exp}.csv", exp in stored)) is not None
    }
    for exp, rows in raw.items():
        _check_raw_grid(out / f"{exp}.csv", rows, cfg)
    try:
        analyse_raw(cfg, raw)  # a CSV of other columns fails here, before any write
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        which = ", ".join(repr(str(out / f"{e}.csv")) for e in raw)
        raise ValueError(
            f"--reanalyse: the CSVs in {str(out)!r} ({which}) are not the raw "
            f"errors of this run ({type(exc).__name__}: {exc}); nothing was "
            f"written"
        ) from exc
    return write_outputs(cfg, raw, meta.get("timings", {}))


def _read_raw(f: Path, stored: bool) -> list[dict] | None:
    """The rows of the raw-error CSV ``f`` (``None`` when it is absent and no stored result
    needs it); ``ValueError`` when a result stored in ``pca_bench.json`` would be lost."""
    import csv

    if not (f.exists() or f.is_symlink()):
        if stored:
            raise ValueError(
                f"--reanalyse: {str(f)!r} is missing, and pca_bench.json holds "
                f"results of {f.stem!r} that cannot be rebuilt without it; "
                f"nothing was written (restore the CSV, or rerun the bench "
                f"without --reanalyse)"
            )
        return None
    check_input_file(f, "--reanalyse: raw-error CSV")
    try:
        with f.open(newline="", encoding="utf-8") as fh:
            rows = [
                {k: _parse_cell(v) for k, v in r.items() if v != ""} for r in csv.DictReader(fh)
            ]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(
            f"--reanalyse: {str(f)!r} is not a CSV of raw errors ({exc}); nothing was written"
        ) from exc
    if stored and not rows:
        raise ValueError(
            f"--reanalyse: {str(f)!r} holds no rows, and pca_bench.json holds "
            f"results of {f.stem!r} that cannot be rebuilt without them; "
            f"nothing was written"
        )
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        _check_raw_row(f, line, row)
    return rows


def _check_raw_row(f: Path, line: int, row: Mapping[str, Any]) -> None:
    """A raw-error row the bench could have written: a known method, and an error that is
    a subspace distance (finite, in ``[0, sqrt(2k)]``), or NaN only where
    ``opendp_status`` says why the method was skipped; else a ``ValueError`` naming the
    file, line and value."""
    import math

    where = f"--reanalyse: {str(f)!r} line {line}"
    method = row.get("method")
    if method is not None and method not in LABELS:
        raise ValueError(
            f"{where}: unknown method {method!r} (known: {sorted(LABELS)}); nothing was written"
        )
    if "error" not in row:
        raise ValueError(f"{where}: no error; nothing was written")
    err = row["error"]
    if isinstance(err, bool) or not isinstance(err, int | float):
        raise ValueError(f"{where}: error {err!r} is not a number; nothing was written")
    if math.isnan(err) and row.get("opendp_status"):
        return  # a skipped OpenDP point, with its reason
    if not (math.isfinite(err) and err >= 0):
        raise ValueError(
            f"{where}: error {err!r} is not a subspace distance (a finite number >= 0)"
            + ("" if not math.isnan(err) else " and no opendp_status says why")
            + "; nothing was written"
        )
    k = row.get("k")
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1 and err > math.sqrt(2 * k) + 1e-9:
        raise ValueError(
            f"{where}: error {err!r} exceeds sqrt(2k) = {math.sqrt(2 * k):.4g}, the largest "
            f"distance of two {k}-dimensional subspaces; nothing was written"
        )


#: the columns that tell the rows of a raw-error CSV apart (its writer's sort key)
ROW_KEY = ("panel", "p", "k", "s", "n", "rep", "eps", "method", "sampling")


def _run_grid(cfg: BenchConfig, exp: str) -> dict[str, set[Any]]:
    """The values each key column of ``exp``'s raw errors takes in the run of ``cfg``
    (the real data's ``n`` and ``p`` are the data set's own: not listed)."""
    inf = float("inf")
    if exp == "fig1":
        return {
            "panel": {"k", "p"},
            "p": {cfg.fig1_p, *cfg.p_values},
            "k": {*cfg.fig1_k, cfg.p_k},
            "n": {*cfg.n_rows, *cfg.n_wishart},
            "eps": {*cfg.fig1_eps, cfg.p_eps, inf},
            "rep": set(range(cfg.repeats)),
        }
    if exp == "tables":
        return {
            "p": {cfg.sparse_p},
            "k": {cfg.sparse_k},
            "s": set(cfg.sparse_s),
            "n": {cfg.sparse_n, cfg.sparse_n_large},
            "eps": {*cfg.sparse_eps, inf},
            "rep": set(range(cfg.sparse_repeats)),
        }
    return {"k": {cfg.real_k}, "eps": {*cfg.real_eps, inf}, "rep": set(range(cfg.real_repeats))}


def _check_raw_grid(f: Path, rows: list[dict], cfg: BenchConfig) -> None:
    """The rows of ``f`` are the raw errors of the run of ``cfg``: each of its experiment,
    on the run's grid (every key column one of the run's values), no row twice, and every
    point of one method with the same repeats ``0..m-1`` (a row edited, dropped or
    repeated would make the tables' means over fewer or other repeats than they say);
    else a ``ValueError`` naming the file and the line, before any write."""
    from collections import defaultdict

    grid = _run_grid(cfg, f.stem)
    seen: dict[tuple, int] = {}
    reps: dict[tuple, set[Any]] = defaultdict(set)
    for line, row in enumerate(rows, start=2):
        where = f"--reanalyse: {str(f)!r} line {line}"
        if row.get("experiment") != f.stem:
            raise ValueError(
                f"{where}: experiment {row.get('experiment')!r} in the CSV of {f.stem!r}; "
                "nothing was written"
            )
        for col, allowed in grid.items():
            v = row.get(col)
            if isinstance(v, bool) or v not in allowed:
                known = ", ".join(map(str, sorted(allowed, key=str)))
                raise ValueError(
                    f"{where}: {col} {v!r} is not one of the run's ({known}); nothing was written"
                )
        key = tuple(row.get(c) for c in ROW_KEY)
        if key in seen:
            raise ValueError(
                f"{where} repeats line {seen[key]} (the same point, repeat and method); "
                "nothing was written"
            )
        seen[key] = line
        reps[tuple(v for c, v in zip(ROW_KEY, key, strict=True) if c != "rep")].add(row["rep"])
    by_method: dict[Any, set[frozenset]] = defaultdict(set)
    for point, rs in reps.items():
        by_method[point[ROW_KEY.index("method") - 1]].add(frozenset(rs))
    for method, sets in by_method.items():
        if len(sets) > 1 or any(s != set(range(len(s))) for s in sets):
            counts = sorted(len(s) for s in sets)
            raise ValueError(
                f"--reanalyse: {str(f)!r}: the points of method {method!r} hold different "
                f"or missing repeats ({counts[0]} to {counts[-1]} per point): a row was "
                "dropped, edited or repeated; nothing was written"
            )


def config_from_payload(payload: dict[str, Any]) -> BenchConfig:
    """The :class:`BenchConfig` stored in a run's JSON (infinite ε were written as "inf")."""

    def conv(v: Any) -> Any:
        if isinstance(v, list):
            return tuple(conv(x) for x in v)
        return float(v) if v in ("inf", "Infinity") else v

    names = {f.name for f in dataclasses.fields(BenchConfig)}
    return BenchConfig(**{k: conv(v) for k, v in payload["config"].items() if k in names})


#: the options that set up a run: ``--reanalyse`` redoes the analysis of a finished run
#: with that run's own settings (its pca_bench.json), so none of them acts there
RUN_OPTIONS = ("quick", "repeats", "sparse_repeats", "jobs", "only", "seed")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fedspectral pca-bench``."""
    if args.reanalyse:
        given = [o for o in RUN_OPTIONS if _given(getattr(args, o, None))]
        if given:
            flags = ", ".join(_flag(o, getattr(args, o)) for o in given)
            raise ValueError(
                f"{flags}: no effect with --reanalyse, which redoes the analysis of the run "
                f"in --out with that run's own settings (its pca_bench.json)"
            )
    cfg = config_from_args(args)
    validate(cfg)  # errors are reported by fedspectral.cli (no traceback)
    if args.reanalyse:
        if not (Path(cfg.out) / "pca_bench.json").is_file():
            print(
                f"fedspectral pca-bench: error: --reanalyse needs a finished run in "
                f"{cfg.out!r} (pca_bench.json missing)",
                file=sys.stderr,
            )
            return 2
        payload = reanalyse(cfg.out)
        cfg = config_from_payload(payload)
        cfg.out = str(args.out)
        print(summary_text(cfg, payload))
        return 0
    payload = run_bench(cfg, progress=not args.no_progress)
    print(summary_text(cfg, payload))
    print(
        f"\nwrote {len(payload['files'])} files to {cfg.out} in "
        f"{payload['timings']['total_seconds']:.0f} s"
    )
    return 0
