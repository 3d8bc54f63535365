"""Checks of a training run that need more than the config, done before any data is loaded.

:func:`preflight` is called by :func:`fedspectral.experiments.train.run_experiment` after
:func:`fedspectral.config.validate` and before the engine starts.  Each check
raises ``ValueError`` naming the config key (or path) and value:

* :func:`check_model` -- the network of ``model.*`` is built on PyTorch's ``"meta"``
  device (no memory, no data) and its parameter count bounded by :data:`MAX_PARAMETERS`;
* :func:`check_device` -- ``run.device`` exists on this machine;
* :func:`check_privacy` -- with ``dp.enabled``, the noise of a client of the expected size
  is calibrated and the planned releases are accounted by every accountant the run will
  report, with the privacy module's own functions (so an infeasible ε or an extreme σ
  fails now, not after training);
* :func:`check_output` -- the output folder is a folder (or can be created), writable,
  and none of the files a run writes there is a directory; with ``resume`` the checkpoint
  is read and checked (:mod:`fedspectral.fed.checkpoint`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MAX_PARAMETERS", "check_device", "check_model", "check_output", "check_privacy",
           "preflight"]

#: Largest network accepted (4 GB of float32 weights, 40 x ResNet-50).
MAX_PARAMETERS = 10**9
#: Files a training run writes into its output folder.
OUTPUT_FILES = ("results.json", "rounds.csv", "config.yaml", "convergence.png", "checkpoint.pt")


def check_model(cfg: Any) -> int:
    """Build the method's network on the meta device; return its parameter count."""
    import torch

    from fedspectral.fed.methods import build_method

    method = build_method(cfg)
    m = cfg.model
    what = (f"model (backbone={m.backbone!r}, norm={m.norm!r}, width={m.width!r}, "
            f"projector_hidden={m.projector_hidden!r}, projector_out={m.projector_out!r}, "
            f"kwargs={m.kwargs!r})")
    try:
        with torch.device("meta"):
            net = method.build_net()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"config {what} cannot be built: {exc}") from exc
    n = sum(p.numel() for p in net.parameters())
    if n > MAX_PARAMETERS:
        raise ValueError(f"config {what} has {n:.3g} parameters, more than the "
                         f"{MAX_PARAMETERS:.0e} accepted (MAX_PARAMETERS)")
    return int(n)


def check_device(device: str) -> None:
    """``run.device`` is usable here (``cpu``; ``cuda[:i]`` with a GPU ``i``; ``mps``)."""
    import torch

    if device == "cpu":
        return
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"config run.device={device!r}: no CUDA GPU is available on this "
                             f"machine (use run.device=cpu)")
        idx = device.partition(":")[2]
        if idx:
            if not idx.isdigit():
                raise ValueError(f"config run.device={device!r}: the GPU index must be an "
                                 f"integer")
            if int(idx) >= torch.cuda.device_count():
                raise ValueError(f"config run.device={device!r}: this machine has "
                                 f"{torch.cuda.device_count()} GPU(s)")
        return
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"config run.device={device!r}: Apple MPS is not available here")
        return
    raise ValueError(f"config run.device={device!r}: must be 'cpu', 'cuda[:i]' or 'mps'")


def _expected_client_size(cfg: Any) -> int:
    from fedspectral.data import dataset_info

    d, p = cfg.data, cfg.partition
    n_train = d.max_train or dataset_info(d.dataset).train_size
    n_train = int(n_train * (1 - d.val_fraction))
    n = max(1, n_train // p.num_clients)
    if p.samples_per_client is not None:
        n = min(n, p.samples_per_client)
    return n


def check_privacy(cfg: Any, accountants: tuple[str, ...] = ("rdp", "pld", "closed_form")) -> None:
    """Calibrate and account the planned releases of a client of the expected size, by
    each of ``accountants`` (those a run reports) that is defined at ``dp.delta`` (PLD
    only for delta >= 1e-15: below it a run reports PLD as not available, with the
    reason, instead of being refused)."""
    if not cfg.dp.enabled:
        return
    from fedspectral.fed.methods import build_method
    from fedspectral.privacy import PrivacyLedger

    method = build_method(cfg)
    dp = cfg.dp
    n = _expected_client_size(cfg)
    given = f"dp.sigma={dp.sigma!r}" if dp.sigma is not None else f"dp.epsilon={dp.epsilon!r}"
    plan = None
    try:
        plan = method.privacy_plan(n)  # calibrates sigma
        if plan is None or int(plan["releases"]) < 1:
            return
        ledger = PrivacyLedger()
        ledger.record("preflight", "preflight", sigma=float(plan["sigma"]),
                      sensitivity=float(plan["sensitivity"]), count=int(plan["releases"]),
                      neighbouring=plan["neighbouring"])
        from fedspectral.privacy.accounting import accountants_at

        for acc in accountants_at(dp.delta, accountants)[0]:  # PLD only where defined
            eps = ledger.epsilon(dp.delta, accountant=acc)
            if not (isinstance(eps, float | int) and not math.isnan(eps)):
                raise ValueError(f"the {acc} accountant gives epsilon={eps!r}")
    except (ValueError, TypeError, ArithmeticError, MemoryError) as exc:
        planned = (f"{int(plan['releases'])} planned release(s)" if plan is not None
                   else "the planned release(s)")
        raise ValueError(
            f"config {given} (dp.delta={dp.delta!r}, {planned} of a client "
            f"with about {n} samples) cannot be calibrated or accounted: "
            f"{type(exc).__name__}: {exc}") from exc


def check_output(out: str | os.PathLike, resume: bool = False, fingerprint: str | None = None,
                 checkpoint: bool = True) -> Path:
    """``out`` is (or can be made) a writable folder; nothing there blocks a result file."""
    text = os.fspath(out)
    if text.strip() == "":
        raise ValueError("the output folder must be a non-empty path, got ''")
    path = Path(text)
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
        raise ValueError(f"output folder {text!r} is not writable ({str(probe)!r} is "
                         f"read-only for this user)")
    for name in OUTPUT_FILES:
        f = path / name
        if f.is_dir():
            raise ValueError(f"{str(f)!r} is a directory; a run writes a file there")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"output folder {text!r} is not writable")
    if resume:
        ck = path / "checkpoint.pt"
        if not checkpoint:
            raise ValueError("--resume needs a checkpoint, but this config has "
                             "run.checkpoint=false (nothing to resume from)")
        if not (ck.exists() or ck.is_symlink()):
            raise ValueError(f"--resume: there is no checkpoint to resume from in {text!r} "
                             f"(no checkpoint.pt); run without --resume to start afresh")
        if fingerprint is not None:
            from fedspectral.fed.checkpoint import load_checkpoint

            load_checkpoint(ck, fingerprint)
    return path


def preflight(cfg: Any, out: str | os.PathLike | None, resume: bool = False) -> None:
    """Every check above, for a validated ``cfg`` writing to ``out`` (``None``: no files)."""
    check_model(cfg)
    check_device(cfg.run.device)
    check_privacy(cfg)
    if out is not None:
        from fedspectral.config import config_fingerprint, to_dict

        check_output(out, resume, config_fingerprint(to_dict(cfg)), cfg.run.checkpoint)
