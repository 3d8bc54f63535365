"""Checks of a training run that need more than the config, done before any data is loaded.

:func:`preflight` is called by :func:`fedspectral.experiments.train.run_experiment` after
:func:`fedspectral.fed.validation.validate` and before the engine starts.  Each check
raises ``ValueError`` naming the config key (or path) and value:

* :func:`check_model` -- the network of ``model.*`` is built on PyTorch's ``"meta"``
  device (no memory, no data) and its parameter count bounded by :data:`MAX_PARAMETERS`;
* :func:`check_device` -- ``run.device`` exists on this machine;
* :func:`check_privacy` -- with ``dp.enabled``, the noise of a client of the expected size
  is calibrated and the planned releases are accounted by every accountant the run will
  report, with the privacy module's own functions (so an infeasible ε or an extreme σ
  fails now, not after training);
* :func:`check_output` -- the output folder is a folder (or can be created; no dangling
  symlink or loop on its path), writable, with room for two checkpoints and the result
  files; every file a run writes there that exists already is a regular file this user
  can replace; a ``results.json`` or ``checkpoint.pt`` there of another config (another
  fingerprint, or a ``results.json`` that is not a run's) is never written over; with
  ``resume`` the checkpoint must exist, and it is read and checked
  (:mod:`fedspectral.fed.checkpoint`).
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

from fedspectral.config import MAX_SIGMA, check_device_name, to_dict
from fedspectral.fed.methods import build_method
from fedspectral.fed.validation import config_fingerprint
from fedspectral.inputs import check_nonempty_path, check_output_path, file_kind
from fedspectral.kinds import REPORTED
from fedspectral.results import read_results

__all__ = [
    "MAX_PARAMETERS",
    "check_device",
    "check_model",
    "check_output",
    "check_privacy",
    "preflight",
]

#: Largest network accepted (4 GB of float32 weights, 40 x ResNet-50).
MAX_PARAMETERS = 10**9
#: Files a training run writes into its output folder.
OUTPUT_FILES = ("results.json", "rounds.csv", "config.yaml", "convergence.png", "checkpoint.pt")


def check_model(cfg: Any, method: Any = None) -> int:
    """Build the method's network on the meta device; return its parameter count (0 for a
    method that trains none: the PCA methods).  ``method``: the config's method, built
    already (default: built here)."""
    import torch

    method = build_method(cfg) if method is None else method
    m = cfg.model
    what = (
        f"model (backbone={m.backbone!r}, norm={m.norm!r}, width={m.width!r}, "
        f"projector_hidden={m.projector_hidden!r}, projector_out={m.projector_out!r}, "
        f"kwargs={m.kwargs!r})"
    )
    try:
        with torch.device("meta"):
            net = method.build_net()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"config {what} cannot be built: {exc}") from exc
    if net is None:
        return 0
    n = sum(p.numel() for p in net.parameters())
    if n > MAX_PARAMETERS:
        raise ValueError(
            f"config {what} has {n:.3g} parameters, more than the "
            f"{MAX_PARAMETERS:.0e} accepted (MAX_PARAMETERS)"
        )
    return int(n)


def check_device(device: str) -> None:
    """``run.device`` is usable here (``cpu``; ``cuda[:i]`` with a GPU ``i``; ``mps``)."""
    import torch

    check_device_name(device)
    if device == "cpu":
        return
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"config run.device={device!r}: no CUDA GPU is available on this "
                f"machine (use run.device=cpu)"
            )
        idx = device.partition(":")[2]
        if idx:
            if not idx.isdigit():
                raise ValueError(f"config run.device={device!r}: the GPU index must be an integer")
            if int(idx) >= torch.cuda.device_count():
                raise ValueError(
                    f"config run.device={device!r}: this machine has "
                    f"{torch.cuda.device_count()} GPU(s)"
                )
        return
    if not torch.backends.mps.is_available():  # mps
        raise ValueError(f"config run.device={device!r}: Apple MPS is not available here")


def _expected_client_size(cfg: Any) -> int:
    from fedspectral.data import dataset_info  # lazy: pulls in torch

    d, p = cfg.data, cfg.partition
    n_train = d.max_train or dataset_info(d.dataset).train_size
    n_train = int(n_train * (1 - d.val_fraction))
    n = max(1, n_train // p.num_clients)
    if p.samples_per_client is not None:
        n = min(n, p.samples_per_client)
    return n


def check_privacy(cfg: Any, accountants: tuple[str, ...] = REPORTED, method: Any = None) -> None:
    """Calibrate and account the planned releases of a client of the expected size, by
    each of ``accountants`` (those a run reports) that is defined at ``dp.delta`` (PLD
    only for delta >= 1e-15: below it a run reports PLD as not available, with the
    reason, instead of being refused).  ``method``: the config's method, built already
    (default: built here)."""
    if not cfg.dp.enabled:
        return
    from fedspectral.privacy import PrivacyLedger  # lazy: pulls in dp-accounting and SciPy

    method = build_method(cfg) if method is None else method
    dp = cfg.dp
    n = _expected_client_size(cfg)
    given = f"dp.sigma={dp.sigma!r}" if dp.sigma is not None else f"dp.epsilon={dp.epsilon!r}"
    plan = None
    try:
        plan = method.privacy_plan(n)  # calibrates sigma
        if plan is None or int(plan["releases"]) < 1:
            return
        if not float(plan["sigma"]) <= MAX_SIGMA:
            raise ValueError(
                f"the calibrated noise sigma={float(plan['sigma']):.3g} (for "
                f"sensitivity {float(plan['sensitivity']):.3g}) is above "
                f"{MAX_SIGMA:g}: it would drown any correlation and overflow the "
                f"sums (a smaller method.params.mu or a larger dp.epsilon "
                f"lowers it)"
            )
        ledger = PrivacyLedger()
        ledger.record(
            "preflight",
            "preflight",
            sigma=float(plan["sigma"]),
            sensitivity=float(plan["sensitivity"]),
            count=int(plan["releases"]),
            neighbouring=plan["neighbouring"],
        )
        # lazy: pulls in dp-accounting and SciPy
        from fedspectral.privacy.accounting import accountants_at

        for acc in accountants_at(dp.delta, accountants)[0]:  # PLD only where defined
            eps = ledger.epsilon(dp.delta, accountant=acc)
            if not (isinstance(eps, float | int) and not math.isnan(eps)):
                raise ValueError(f"the {acc} accountant gives epsilon={eps!r}")
    except (ValueError, TypeError, ArithmeticError, MemoryError) as exc:
        planned = (
            f"{int(plan['releases'])} planned release(s)"
            if plan is not None
            else "the planned release(s)"
        )
        raise ValueError(
            f"config {given} (dp.delta={dp.delta!r}, {planned} of a client "
            f"with about {n} samples) cannot be calibrated or accounted: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _existing_outputs(path: Path) -> None:
    """Every result file already in ``path`` is a regular file this user can replace."""
    for name in OUTPUT_FILES:
        f = path / name
        try:
            st = f.stat()
        except FileNotFoundError:
            if f.is_symlink():
                raise ValueError(
                    f"{str(f)!r} is a dangling symlink; a run writes a file there"
                ) from None
            continue
        except OSError as exc:
            raise ValueError(
                f"{str(f)!r} cannot be examined ({exc.strerror}); a run writes a file there"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{str(f)!r} is {file_kind(st.st_mode)}; a run writes a file there")
        if not os.access(f, os.R_OK | os.W_OK):
            raise ValueError(
                f"{str(f)!r} is read-only for this user: a run would replace "
                f"it; make it writable, or choose another --out to keep it"
            )


def _foreign_files(path: Path, fingerprint: str) -> None:
    """Nothing in ``path`` belongs to another config: ``results.json`` and ``checkpoint.pt``
    are this config's (same fingerprint) or absent; otherwise say what is there."""
    from fedspectral.fed.checkpoint import CheckpointError, read_fingerprint  # lazy: pulls in torch

    keep = "choose another --out to keep them, or remove the folder to replace them"
    res = path / "results.json"
    if res.exists():
        try:
            r = read_results(res)
            found = config_fingerprint(r["config"])
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"{exc}; a run would write over it: {keep}") from None
        if found != fingerprint:
            raise ValueError(
                f"{str(res)!r} holds the results of another config (name "
                f"{r['config'].get('name')!r}, {r.get('rounds_done', '?')} rounds, fingerprint "
                f"{found} != {fingerprint}): {keep}"
            )
    ck = path / "checkpoint.pt"
    if ck.exists():
        try:
            found = read_fingerprint(ck)
        except CheckpointError:
            return  # unreadable: no config of its own (a resume reports it)
        if found != fingerprint:
            raise ValueError(
                f"checkpoint {str(ck)!r} was written by a different config "
                f"(fingerprint {found[:16]} != {fingerprint}), which could still "
                f"resume from it: {keep}"
            )


#: room kept for ``results.json``, ``rounds.csv``, ``config.yaml`` and the figure
RESULT_FILES_BYTES = 16 << 20


def _free_space(path: Path, probe: Path, parameters: int, checkpoint: bool) -> None:
    """The disk holding ``path`` has room for two checkpoints (the old and the new while
    it is written: the float32 weights, a lower estimate) and the result files."""
    import shutil

    need = RESULT_FILES_BYTES + (2 * 4 * parameters if checkpoint else 0)
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # not knowable here
    if free < need:
        raise ValueError(
            f"output folder {str(path)!r}: {free / 2**20:.1f} MiB free on its disk, "
            f"less than the {need / 2**20:.1f} MiB a run needs at least (the "
            f"checkpoint of {parameters:,} float32 weights, twice while it is "
            f"replaced, and the result files); free some space or choose "
            f"another --out"
        )


def check_output(
    out: str | os.PathLike,
    resume: bool = False,
    fingerprint: str | None = None,
    checkpoint: bool = True,
    parameters: int = 0,
) -> Path:
    """``out`` is (or can be made) a writable folder with room for the run; every result
    file there is a regular file this user can replace; nothing there belongs to another
    config (``fingerprint`` given); with ``resume`` there is a checkpoint, and it is read
    and checked (:mod:`fedspectral.fed.checkpoint`)."""
    text = os.fspath(out)
    check_nonempty_path(text, "the output folder")
    path = check_output_path(text, "output folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"output folder {text!r} exists and is not a folder")
    probe = path
    while not probe.exists():
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if probe.exists() and not probe.is_dir():
        raise ValueError(f"output folder {text!r} cannot be created: {str(probe)!r} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(
            f"output folder {text!r} is not writable ({str(probe)!r} is read-only for this user)"
        )
    _existing_outputs(path)
    if fingerprint is not None:
        _foreign_files(path, fingerprint)
    _free_space(path, probe, parameters, checkpoint)
    if resume:
        ck = path / "checkpoint.pt"
        if not checkpoint:
            raise ValueError(
                "--resume needs a checkpoint, but this config has "
                "run.checkpoint=false (nothing to resume from)"
            )
        if not (ck.exists() or ck.is_symlink()):
            raise ValueError(
                f"--resume: there is no checkpoint to resume from in {text!r} "
                f"(no checkpoint.pt); run without --resume to start afresh"
            )
        if fingerprint is not None:
            from fedspectral.fed.checkpoint import load_checkpoint  # lazy: pulls in torch

            load_checkpoint(ck, fingerprint)
    return path


def preflight(
    cfg: Any, out: str | os.PathLike | None, resume: bool = False, *, method: Any = None
) -> None:
    """Every check above, for a validated ``cfg`` writing to ``out`` (``None``: no files);
    ``method``: the config's method, built already (default: built here, once)."""
    if method is None:
        method = build_method(cfg)
    parameters = check_model(cfg, method)
    check_device(cfg.run.device)
    check_privacy(cfg, method=method)
    if out is not None:
        check_output(out, resume, config_fingerprint(to_dict(cfg)), cfg.run.checkpoint, parameters)
