"""Result files: written atomically (temp file in the same folder, then rename).

A run's JSON holds its config, metrics, privacy ledger, timings and the versions
of the libraries used, so that the run can be understood and reproduced later.
:func:`write_results` writes a training run's files (``results.json``,
``rounds.csv``, ``config.yaml``, ``convergence.png``); :func:`round_row` flattens
one round record into a CSV row.

Bottom layer: the federated engines (``fedspectral.fed``) and the command-line
layer (``fedspectral.experiments``) both write through this module.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedspectral.atomic import atomic_batch, atomic_write_bytes
from fedspectral.inputs import check_input_file
from fedspectral.kinds import PhaseKind
from fedspectral.plots import plot_convergence

__all__ = [
    "read_results",
    "round_row",
    "versions",
    "write_csv",
    "write_json",
    "write_results",
    "write_text",
]


def _jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and arrays, dataclasses and paths to JSON values."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)  # "inf", "nan": valid JSON
    if hasattr(obj, "tolist"):  # numpy / torch
        return _jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return _jsonable(obj.item())
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, strict JSON (no ``NaN``/``Infinity`` tokens: a
    non-finite float is written as the string ``"nan"``/``"inf"``), atomically."""
    text = json.dumps(_jsonable(obj), indent=2, sort_keys=False, allow_nan=False)
    return atomic_write_bytes(path, (text + "\n").encode())


def _first_nan(obj: Any, where: str = "") -> str | None:
    """The path (``records[0].knn_projector``) of the first NaN in ``obj``, or ``None``."""
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        obj = obj.tolist()
    if isinstance(obj, float) and math.isnan(obj):
        return where or "the value"
    if isinstance(obj, Mapping):
        items: Iterable[tuple[Any, Any]] = obj.items()
        return next(
            (w for k, v in items if (w := _first_nan(v, f"{where}.{k}" if where else str(k)))),
            None,
        )
    if isinstance(obj, list | tuple):
        return next((w for i, v in enumerate(obj) if (w := _first_nan(v, f"{where}[{i}]"))), None)
    return None


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write text atomically."""
    return atomic_write_bytes(path, text.encode())


def write_csv(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write a list of flat dicts as CSV (columns = union of keys, first-seen order)."""
    rows = [dict(r) for r in rows]
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: _jsonable(v) for k, v in r.items()})
    return atomic_write_bytes(path, buf.getvalue().encode())


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries results depend on."""
    from importlib import metadata

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in (
        "fedspectral",
        "numpy",
        "scipy",
        "scikit-learn",
        "dp-accounting",
        "torch",
        "torchvision",
        "flwr",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return out


def _count(key: str, value: Any) -> Any:
    """A count metric (``clients``, ``*_clients``, ``n_*``) aggregated as a float, as an
    int (``2``, not ``2.0``); any other value unchanged."""
    is_count = key == "clients" or key.endswith("_clients") or key.startswith("n_")
    if is_count and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def round_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A flat CSV row of one round record."""
    row: dict[str, Any] = {"round": rec["round"], "clients": len(rec["sampled"])}
    for phase, ph in rec["phases"].items():
        trains = ph.get("kind") == PhaseKind.TRAIN  # a training phase's metrics: unprefixed
        for k, v in ph["metrics"].items():
            row[k if trains else f"{phase}_{k}"] = _count(k, v)
        row[f"seconds_{phase}"] = ph["seconds"]
        row[f"failures_{phase}"] = len(ph["failures"])
    for k in (
        "knn_backbone",
        "knn_projector",
        "sc_objective",
        "linear_probe",
        "subspace_error",
        "epsilon_rdp",
        "epsilon_pld",
        "seconds_eval",
        "seconds_round",
    ):
        if k in rec:
            row[k] = rec[k]
    row.update({k: v for k, v in rec.items() if k.startswith("eigenvalue_")})  # PCA
    row["bytes_up"] = rec["bytes_up_total"]
    row["bytes_down"] = rec["bytes_down_total"]
    return row


def write_results(results: dict[str, Any], out: str | os.PathLike) -> dict[str, Path]:
    """``rounds.csv``, ``config.yaml``, ``convergence.png`` and ``results.json`` in
    ``out``, as one write (:func:`~fedspectral.atomic.atomic_batch`): a failed write -- a
    full disk, a folder made read-only -- leaves every file of the folder as it was and no
    temporary file, never a run marked finished without its figure nor a new table
    beside an old ``results.json``."""
    import yaml

    nan = _first_nan(results)
    if nan is not None:  # a result is a measurement: a NaN would be written as one
        raise ValueError(
            f"the results of run {results.get('name')!r} hold NaN at {nan}; nothing is "
            f"written to {str(out)!r}"
        )
    out = Path(out)
    with atomic_batch():  # all four files land together, or none does (a full disk)
        paths = {
            "csv": write_csv(out / "rounds.csv", [round_row(r) for r in results["records"]]),
            "config": write_text(
                out / "config.yaml", yaml.safe_dump(results["config"], sort_keys=False)
            ),
        }
        if any("knn_projector" in r for r in results["records"]):
            paths["figure"] = plot_convergence([results], out / "convergence.png")
        paths["json"] = write_json(out / "results.json", results)
    return paths


#: largest ``results.json`` read back (a 1000-round run's is a few MB)
MAX_RESULTS_BYTES = 1 << 28


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """The results dict of a run's ``results.json`` (as :func:`write_results` wrote it):
    ``ValueError`` saying why when the file is not one (not a regular file, not JSON,
    not a mapping, no ``config`` mapping), so that callers refuse to write over it or
    to count it as a finished run."""
    import json

    p = check_input_file(path, "results file")
    if p.stat().st_size > MAX_RESULTS_BYTES:
        raise ValueError(
            f"results file {str(p)!r} is larger than {MAX_RESULTS_BYTES} bytes: "
            f"not a fedspectral results.json"
        )
    try:
        r = json.loads(p.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"results file {str(p)!r} is not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(
            f"results file {str(p)!r} is nested too deeply to be a fedspectral results.json"
        ) from None
    if not isinstance(r, dict) or not isinstance(r.get("config"), dict):
        found = (
            f"a {type(r).__name__}"
            if not isinstance(r, dict)
            else f"'config': {type(r.get('config')).__name__}"
        )
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"results file {str(p)!r} is not a fedspectral results.json (found {found}, "
            f"expected a mapping with a 'config' mapping)"
        )
    return r
