"""An experiment configuration checked once, against the registries of the layers that
own them: :func:`validate` returns a :class:`~fedspectral.config.ValidConfig`, and every
entry point (the command line, :class:`~fedspectral.fed.simulation.Simulation`, the Flower
engine and ClientApp, a method's constructor) takes one as it is (:func:`ensure_valid`).

:mod:`fedspectral.config` (the bottom layer) holds the schema and the checks of its
sections; it imports no dataset, model or method: the names they may take
(:class:`~fedspectral.config.Registries`) are passed in from here, and a method's own
parameters are checked by its :attr:`~fedspectral.fed.protocol.Method.Params`.  The
config's fingerprint, which hashes a method parameter at its neutral value as if it were
absent, lives here for the same reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedspectral.config import (
    EVAL_NEUTRAL,
    EVAL_UNSET_AS,
    ConfigError,
    ExperimentConfig,
    Registries,
    RunConfig,
    ValidConfig,
    apply_overrides,
    check_sections,
    from_dict,
    is_valid,
    mark_valid,
    read_config_file,
    resolve_config_path,
    thaw,
)
from fedspectral.config_checks import type_name, type_ok
from fedspectral.fed.methods import METHODS, method_class
from fedspectral.inputs import key_lines

__all__ = [
    "OUTPUT_KEYS",
    "config_fingerprint",
    "ensure_valid",
    "load_config",
    "registries",
    "validate",
    "with_output",
]


def registries() -> Registries:
    """The datasets, backbones, normalisations and methods a config may name."""
    from fedspectral.data import DATASETS, dataset_info  # lazy: pulls in torch
    from fedspectral.models import BACKBONES, NORMS  # lazy: pulls in torch

    return Registries(
        datasets=tuple(DATASETS),
        dataset_info=dataset_info,
        backbones=tuple(BACKBONES),
        norms=tuple(NORMS),
        methods=tuple(METHODS),
    )


def validate(cfg: ExperimentConfig) -> ValidConfig:
    """Check ``cfg`` and return a completed copy, a :class:`~fedspectral.config.ValidConfig`;
    raise ``ValueError`` naming the offending key and value.

    The sections are checked in order (data and partition, model, method and optim, dp,
    eval and run: :func:`fedspectral.config.check_sections`), then the method's
    parameters: the copy's ``method.params`` holds the method's defaults for keys not
    given, checked by the method's own :attr:`~fedspectral.fed.protocol.Method.Params`;
    ``cfg`` itself is left as it was.
    """
    cfg = thaw(cfg)  # an editable copy: ``cfg`` (perhaps a frozen ValidConfig) is left as it was
    check_sections(cfg, registries())
    cls = method_class(cfg.method.name)
    cfg.method.params = cls.validate_params(cfg.method.params, cfg)
    return mark_valid(cfg)


def ensure_valid(cfg: ExperimentConfig) -> ValidConfig:
    """``cfg`` itself when it is valid already (:func:`~fedspectral.config.is_valid`: a
    frozen :class:`~fedspectral.config.ValidConfig`, not checked again), else
    :func:`validate` of it."""
    return cfg if is_valid(cfg) else validate(cfg)


#: the ``run`` keys that no check reads and the fingerprint leaves out: where a run writes
#: and whether it shows a progress bar
OUTPUT_KEYS = ("out", "progress")


def with_output(cfg: ExperimentConfig, **changes: Any) -> ValidConfig:
    """``cfg`` with the :data:`OUTPUT_KEYS` of its ``run`` section changed (``out=``,
    ``progress=``; each value checked against its type), valid: a
    :class:`~fedspectral.config.ValidConfig` is not checked again (no check reads these
    keys), any other config is :func:`validate`-d.  The command line's ``--out`` and
    ``--quiet`` set them on a config loaded (and validated) from a file."""
    unknown = sorted(set(changes) - set(OUTPUT_KEYS))
    if unknown:
        raise TypeError(f"with_output() changes only run.{OUTPUT_KEYS}, got {unknown}")
    hints = typing.get_type_hints(RunConfig)
    for key, value in changes.items():
        ok, _ = type_ok(value, hints[key])
        if not ok:
            raise ConfigError(f"run.{key}", value, f"must be {type_name(hints[key])}")
    new = thaw(cfg)
    new.run = dataclasses.replace(new.run, **changes)
    return mark_valid(new) if is_valid(cfg) else validate(new)


def load_config(path: str | Path, overrides: list[str] | None = None) -> ValidConfig:
    """Read a YAML config (:func:`~fedspectral.config.read_config_file`), apply
    ``key=value`` overrides, validate; an error in a value the file gives names the file
    and the key's line."""
    d = read_config_file(path)
    try:
        cfg = from_dict(d)
    except ConfigError as exc:
        raise exc.reworded(f"config file {str(path)!r}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"config file {str(path)!r}: {exc}") from exc
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    try:
        return validate(cfg)
    except ConfigError as exc:
        # the line of the refused key (or of its section: method.params.mu -> method.params)
        # when the file gives it, not an override
        given = {o.split("=", 1)[0].strip() for o in overrides or () if isinstance(o, str)}
        lines = key_lines(resolve_config_path(path).read_text(encoding="utf-8"))
        line = next(
            (
                lines[k]
                for key in exc.keys
                if key not in given
                for k in _and_sections(key)
                if k in lines
            ),
            None,
        )
        if line is None:
            raise
        raise exc.reworded(f"{exc} (config file {str(path)!r}, line {line})") from exc


def _and_sections(key: str) -> list[str]:
    """``key`` and the keys it lies under, innermost first (``a.b.c``, ``a.b``)."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 1, -1)] or [key]


def config_fingerprint(cfg_dict: Mapping[str, Any]) -> str:
    """Hash of the parts of a config that determine the result (not ``run.out``,
    ``run.progress``, ``run.threads``, ``run.checkpoint``, nor an ``eval`` key at its
    :data:`~fedspectral.config.EVAL_NEUTRAL` value (an unset key of
    :data:`~fedspectral.config.EVAL_UNSET_AS` is hashed at its old default) or a method
    parameter at
    its :attr:`~fedspectral.fed.protocol.Method.neutral_params` value: a switch added
    later that, off, leaves the computation as it was, so finished runs and
    checkpoints written before it existed stay valid; a renamed parameter value,
    :attr:`~fedspectral.fed.protocol.Method.renamed_values`, is hashed under its old
    name for the same reason)."""
    d = json.loads(json.dumps(cfg_dict, default=str))
    for k in ("out", "progress", "threads", "checkpoint"):
        d.get("run", {}).pop(k, None)
    ev = d.get("eval", {})
    for k, v in EVAL_NEUTRAL.items():
        if k in ev and ev[k] == v:
            del ev[k]
    for k, v in EVAL_UNSET_AS.items():
        if k in ev and ev[k] is None:
            ev[k] = v
    method = d.get("method", {})
    params = method.get("params")
    if isinstance(params, dict) and method.get("name") in METHODS:
        cls = method_class(method["name"])
        for k, v in cls.neutral_params.items():
            if k in params and params[k] == v:
                del params[k]
        for k, names in cls.renamed_values.items():
            if isinstance(params.get(k), str) and params[k] in names:
                params[k] = names[params[k]]
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
