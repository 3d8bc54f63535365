r"""A trained encoder as a plain PyTorch ``state_dict``, for use outside fedspectral's runs.

A run's weights live in its checkpoint (:mod:`fedspectral.fed.checkpoint`: the whole
server state of the method, with integrity checks).  :func:`export_encoder` takes the
global weights of the run's last round out of it, keeps the *encoder* -- backbone,
projector and input normalisation, the :class:`~fedspectral.models.SSLNet` every method
evaluates; a baseline's predictor and target/frozen copies are left out -- and writes one
``torch.save`` file that ``torch.load(path, weights_only=True)`` reads::

    {"format": "fedspectral-encoder/1",
     "state_dict": {name: tensor},          # SSLNet.state_dict()
     "config": {"data": {"dataset": ...},   # what rebuilds the module: build_encoder(config)
                "model": {...}},            # the run's model section, as in its config.yaml
     "method": "fedsc", "round": 200, "fingerprint": "...", "fedspectral": "0.1.0"}

Loading it::

    from fedspectral.fed.export import load_encoder
    encoder = load_encoder("encoder.pt")       # SSLNet, eval mode, on the CPU
    h = encoder.features(x)                    # backbone representation (B x feature_dim)
    z = encoder(x)                             # projector output

or, by hand, ``blob = torch.load("encoder.pt", weights_only=True)``,
``net = build_encoder(blob["config"])``, ``net.load_state_dict(blob["state_dict"])``.
Images go in as the run's data loader gives them (``B x C x H x W`` floats in [0, 1]); the
input normalisation, when the run used one, is part of the module.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fedspectral import __version__
from fedspectral.atomic import atomic_write_bytes
from fedspectral.config import from_dict, to_dict
from fedspectral.fed.methods import build_method
from fedspectral.fed.validation import config_fingerprint, load_config
from fedspectral.fed.weights import arrays_to_net, check_weights, expected_shapes
from fedspectral.inputs import check_input_file, check_output_file, file_kind

__all__ = ["ENCODER_FORMAT", "build_encoder", "export_encoder", "load_encoder"]

ENCODER_FORMAT = "fedspectral-encoder/1"
#: the files of a run folder that ``export --out`` never writes over
RUN_FILES = ("config.yaml", "checkpoint.pt", "results.json", "rounds.csv", "convergence.png")


def build_encoder(config: Mapping[str, Any]) -> torch.nn.Module:
    """A freshly initialised :class:`~fedspectral.models.SSLNet` for ``config`` (a mapping
    with a ``model`` section and ``data.dataset``, as an exported file's ``config``; a whole
    experiment config works too)."""
    from fedspectral.fed.methods.sc import build_ssl_net  # lazy: pulls in dp-accounting and SciPy

    if (
        not isinstance(config, Mapping)
        or not isinstance(config.get("model"), Mapping)
        or not isinstance(config.get("data"), Mapping)
        or "dataset" not in config["data"]
    ):
        raise ValueError(
            "an encoder config needs a 'model' section and 'data.dataset', got "
            f"{sorted(config) if isinstance(config, Mapping) else config!r}"
        )
    cfg = from_dict(
        {"data": {"dataset": config["data"]["dataset"]}, "model": dict(config["model"])}
    )
    return build_ssl_net(cfg)


def _check_run_dir(run_dir: Path) -> None:
    """``run_dir`` is a folder holding ``config.yaml`` and ``checkpoint.pt`` as regular
    files; else ``ValueError`` saying which is missing, or what it is instead (a path
    that exists is never called missing)."""
    text = str(run_dir)
    if not run_dir.exists():
        if run_dir.is_symlink():
            raise ValueError(f"run folder {text!r} is a dangling symlink")
        raise ValueError(f"run folder {text!r} does not exist")
    if not run_dir.is_dir():
        kind = file_kind(run_dir.stat().st_mode)
        raise ValueError(f"run folder {text!r} is {kind}, not a folder")
    hints = {
        "config.yaml": "not a finished `fedspectral train` output folder",
        "checkpoint.pt": "where a run keeps its weights (was it trained with "
        "run.checkpoint=false?)",
    }
    for name, hint in hints.items():
        f = run_dir / name
        if not f.exists() and not f.is_symlink():
            raise ValueError(f"{text!r} holds no {name}, {hint}")
        check_input_file(f, f"the run's {name}")


def _run_encoder(run_dir: Path) -> tuple[torch.nn.Module, dict[str, Any], Any]:
    """The run's encoder with its last checkpointed global weights, the checkpoint's
    state and the run's config."""
    from fedspectral.fed.methods.sc import build_ssl_net  # lazy: pulls in dp-accounting and SciPy
    from fedspectral.fed.simulation import load_run_state  # lazy: pulls in dp-accounting and SciPy

    _check_run_dir(run_dir)
    ckpt = run_dir / "checkpoint.pt"
    cfg = load_config(run_dir / "config.yaml")
    method = build_method(cfg)
    run = load_run_state(
        ckpt,
        cfg,
        method,
        advice=(
            f"was {str(run_dir / 'config.yaml')!r} edited after the run? Restore it, or "
            f"export with the config the run was trained with"
        ),
    )
    net = method.build_net()
    arrays_to_net(net, method.global_weights(run.server))
    state = {"round": run.round}
    encoder = build_ssl_net(cfg)
    full = net.state_dict()
    encoder.load_state_dict({k: full[k] for k in encoder.state_dict()}, strict=True)
    return encoder, state, cfg


def export_encoder(run_dir: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the encoder of the run in ``run_dir`` (its ``config.yaml`` and
    ``checkpoint.pt``) to ``out`` in the format of the module docstring; returns ``out``.

    Raises
    ------
    ValueError
        ``run_dir`` is not a run folder, has no checkpoint, or its checkpoint does not
        belong to its config (:class:`~fedspectral.fed.checkpoint.CheckpointError`).
    """
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    out = check_output_file(
        out, "--out", protected=[run_dir / f for f in RUN_FILES], protected_what="a file of the run"
    )
    encoder, state, cfg = _run_encoder(run_dir)
    d = to_dict(cfg)
    blob = {
        "format": ENCODER_FORMAT,
        "state_dict": {k: v.detach().cpu().clone() for k, v in encoder.state_dict().items()},
        "config": {"data": {"dataset": d["data"]["dataset"]}, "model": d["model"]},
        "method": cfg.method.name,
        "round": int(state["round"]),
        "fingerprint": config_fingerprint(d),
        "fedspectral": __version__,
    }
    buf = io.BytesIO()
    torch.save(blob, buf)
    return atomic_write_bytes(out, buf.getvalue())


def load_encoder(path: str | os.PathLike) -> torch.nn.Module:
    """The encoder written by :func:`export_encoder`, rebuilt and loaded (strict), in eval
    mode on the CPU.  The file is read with ``torch.load(weights_only=True)``: tensors and
    plain containers only, never code."""
    path = Path(path)
    import pickle

    try:
        blob = torch.load(path, weights_only=True, map_location="cpu")
    except OSError as exc:
        raise ValueError(f"cannot read encoder file {str(path)!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - any bytes: the unpickler's error is the file's
        # (text read as a legacy pickle failed with KeyError: 101, others with
        # AttributeError, IndexError, UnicodeDecodeError, ...)
        kind = "" if isinstance(exc, pickle.UnpicklingError) else f"{type(exc).__name__}: "
        raise ValueError(
            f"cannot read encoder file {str(path)!r} (not a torch checkpoint of tensors: "
            f"{kind}{str(exc)[:200]})"
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != ENCODER_FORMAT:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise ValueError(f"{str(path)!r} is not a {ENCODER_FORMAT} file (found {found!r})")
    missing = [k for k in ("config", "state_dict") if k not in blob]
    if missing:
        raise ValueError(
            f"encoder file {str(path)!r} lacks {missing} (a {ENCODER_FORMAT} file holds "
            f"'state_dict' and 'config'); re-export it with `fedspectral export`"
        )
    source = f"encoder file {str(path)!r}"
    try:
        # shapes first, from a model built on the meta device: a file whose config asks
        # for a huge model is refused before anything of that size is allocated
        shapes = expected_shapes(lambda: build_encoder(blob["config"]))
        with torch.device("meta"):
            kinds = {k: v.dtype for k, v in build_encoder(blob["config"]).state_dict().items()}
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"{source} holds an invalid config: {exc!r}") from None
    check_weights(blob["state_dict"], shapes, source)
    for k, want in kinds.items():  # load_state_dict would cast integers into floats silently
        got = blob["state_dict"][k]
        if not isinstance(got, torch.Tensor) or got.is_floating_point() != want.is_floating_point:
            found = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
            raise ValueError(
                f"{source}: weight {k!r} is {found}, the model of its config holds {want}"
            )
    net = build_encoder(blob["config"])
    net.load_state_dict(blob["state_dict"], strict=True)
    return net.eval()
