"""The one dialect of configuration checks (bottom layer, no project imports but
:mod:`fedspectral.inputs` and :mod:`fedspectral.checks`).

Every value of an experiment configuration -- a section key (``optim.lr``) or a method
parameter (``method.params.mu``) -- is checked here, and every refusal is a
:class:`ConfigError` (a ``ValueError``) that names the key and shows the value::

    config optim.lr=-1.0: must be a finite number > 0
    config key method.rounds must be int, got 'ten'

and carries them (``key``, ``value``, ``why``): a caller that points at the offending key
(the line of a YAML file, the Flower run-config key that set it) reads ``key``, never the
message.

A method's parameters are a frozen dataclass, a subclass of :class:`MethodParams`: each
field declares its type (the annotation) and its constraint (:func:`param`), as
scikit-learn's ``_parameter_constraints`` and pfl-research's ``AlgorithmHyperParams``
declare theirs; :meth:`MethodParams.from_mapping` builds one from the ``method.params``
mapping of a configuration (unknown keys, types, declared ranges and choices, then the
class's own :meth:`MethodParams.check` against the whole configuration).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from fedspectral.checks import check_size
from fedspectral.inputs import short

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_LOCAL_EPOCHS",
    "MAX_PROBE_EPOCHS",
    "MAX_PROBE_ITER",
    "MAX_ROUNDS",
    "MAX_THREADS",
    "MAX_VIEWS",
    "MAX_VIEW_IMAGES",
    "MIN_TEMPERATURE",
    "TEMPERATURE_WHY",
    "ConfigError",
    "MethodParams",
    "Rule",
    "MAX_SEED",
    "bad",
    "check_eval_sizes",
    "check_seed",
    "check_unique_overrides",
    "check_step_sizes",
    "param",
    "pos_float",
    "pos_int",
    "type_name",
    "type_ok",
    "yaml_exponent_float",
]


class ConfigError(ValueError):
    """A configuration value refused: the dotted ``key`` (``optim.lr``,
    ``method.params.mu``), the ``value`` and ``why``.  The message is
    ``config <key>=<value>: <why>`` unless ``message`` gives another wording; ``also``
    names the other keys a check of several values involves (``keys`` holds them all)."""

    def __init__(
        self,
        key: str,
        value: Any,
        why: str,
        *,
        message: str | None = None,
        also: tuple[str, ...] = (),
    ) -> None:
        self.key, self.value, self.why, self.also = key, value, why, tuple(also)
        self.message = message if message is not None else f"config {key}={short(value)}: {why}"
        super().__init__(self.message)

    @property
    def keys(self) -> tuple[str, ...]:
        """The key refused, then the others the check involved."""
        return (self.key, *self.also)

    def reworded(self, message: str) -> ConfigError:
        """The same refusal with another message (a file's name or a line added)."""
        return ConfigError(self.key, self.value, self.why, message=message, also=self.also)

    def __reduce__(self) -> Any:  # pickled across processes (Ray, a spawned worker)
        return (_config_error, (self.key, self.value, self.why, self.message, self.also))


def _config_error(
    key: str, value: Any, why: str, message: str, also: tuple[str, ...]
) -> ConfigError:
    return ConfigError(key, value, why, message=message, also=also)


def bad(key: str, value: Any, why: str) -> ConfigError:
    """The error of a bad configuration value: ``config <key>=<value>: <why>``."""
    return ConfigError(key, value, why)


def check_size_of(
    key: str,
    value: Any,
    bound: int,
    *,
    low: int = 1,
    why: str = "",
    name: str | None = None,
    also: tuple[str, ...] = (),
) -> None:
    """:func:`fedspectral.checks.check_size` of config ``key`` (``name``: what the message
    calls the value, default the key), refused as a :class:`ConfigError`."""
    try:
        check_size(f"config {name or key}", value, bound, low=low, why=why)
    except ValueError as exc:
        raise ConfigError(key, value, why or str(exc), message=str(exc), also=also) from None


def pos_int(key: str, v: Any, allow_none: bool = False) -> None:
    """``v`` is an integer >= 1 (or ``None`` with ``allow_none``)."""
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad(key, v, "must be an integer >= 1")


#: largest seed a config takes: a signed 64-bit integer (numpy's, torch's and Flower's
#: config records'); a larger one would be reduced, wrapped or refused further down
MAX_SEED = 2**63 - 1


def check_seed(key: str, v: Any) -> None:
    """``v`` is an integer seed in ``[0, MAX_SEED]`` (``ConfigError`` naming ``key``)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
        raise bad(key, v, "must be an integer in [0, 2**63 - 1] (a signed 64-bit seed)")


def check_unique_overrides(overrides: Any, what: str) -> None:
    """No key of the ``key=value`` items ``overrides`` (what a user gave as ``what``:
    ``--set``, ``run config set``) is set twice, and none inside another one's value
    (``method.params`` and ``method.params.mu``): ``ValueError`` naming the key.  Given
    twice, the last would win and the first be silently dropped.  (Layered overrides of
    a program's own, such as the reproduction grid's, are not checked: there the later
    layer is meant to win.)"""
    seen: dict[str, str] = {}
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            continue  # apply_overrides says what is wrong with it
        key = item.split("=", 1)[0].strip()
        for other, first in seen.items():
            if key == other or key.startswith(other + ".") or other.startswith(key + "."):
                twice = f"key {key!r} is set twice" if key == other else "keys overlap"
                raise ValueError(
                    f"{what}: {twice} ({short(first)}, then {short(item)}); give each "
                    f"key once (the last would silently win)"
                )
        seen[key] = item


def pos_float(key: str, v: Any, allow_zero: bool = False) -> None:
    """``v`` is a finite number > 0 (>= 0 with ``allow_zero``)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, int | float)
        or math.isnan(v)
        or not (v >= 0 if allow_zero else v > 0)
        or math.isinf(v)
    ):
        raise bad(key, v, "must be a finite number " + (">= 0" if allow_zero else "> 0"))


# --------------------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------------------
#: what PyYAML (YAML 1.1) leaves as a string although it is a float: no dot (``1e-3``, ``4E2``)
_YAML_EXP_FLOAT = re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$")


def yaml_exponent_float(value: object) -> float | None:
    """The float of an exponent number that PyYAML read as text (``"1e-3"``, ``"4E2"``:
    YAML 1.1 wants a dot), else ``None``.  The one place this reading is undone: config
    keys and method parameters (:func:`type_ok`)."""
    if isinstance(value, str) and _YAML_EXP_FLOAT.match(value):
        return float(value)
    return None


def type_ok(value: Any, tp: Any) -> tuple[bool, Any]:
    """Is ``value`` acceptable for annotation ``tp``?  Returns (ok, coerced value): a
    ``float`` takes an int (made a float) or a YAML exponent text; ``int`` and ``float``
    never take a bool."""
    if tp is Any:
        return True, value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            ok, v = type_ok(value, a)
            if ok:
                return True, v
        return False, value
    if tp is type(None):
        return value is None, value
    if origin is dict or tp is dict:
        return isinstance(value, dict), value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, int | float):
            return True, float(value)
        x = yaml_exponent_float(value)
        return (True, x) if x is not None else (False, value)
    if tp is str:
        return isinstance(value, str), value
    return isinstance(value, tp), value


def type_name(tp: Any) -> str:
    """``float``, ``int or null``, ...: an annotation as an error message says it."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


# --------------------------------------------------------------------------------------
# declared constraints
# --------------------------------------------------------------------------------------
def _num(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Rule:
    """The constraint of one value: an interval (``low``/``high``, open or closed, always
    finite) or a set of ``choices``; ``None`` passes when the field's type allows it.
    ``size``: the value is a size (an epoch count, a number of views) with this stated
    upper bound, which ``FEDSPECTRAL_ALLOW_LARGE=1`` lifts
    (:func:`fedspectral.checks.check_size`).  ``why`` is added to the message."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    size: int | None = None
    why: str = ""

    def check(self, key: str, value: Any) -> None:
        """Raise :func:`bad` naming ``key`` when ``value`` breaks the rule."""
        if value is None:
            return
        if self.choices is not None:
            if value not in self.choices:
                raise bad(key, value, self._say(f"must be one of {self.choices}"))
            return
        lo, hi = self.low, self.high
        ok = math.isfinite(value)
        ok = ok and (lo is None or (value > lo if self.low_open else value >= lo))
        ok = ok and (hi is None or (value < hi if self.high_open else value <= hi))
        if ok:
            if self.size is not None:
                check_size_of(key, value, self.size, low=int(lo or 0), why=self.why)
            return
        if isinstance(value, int) and hi is None and lo is not None and not self.low_open:
            raise bad(key, value, self._say(f"must be an integer >= {_num(lo)}"))
        if hi is None and lo is not None:
            op = ">" if self.low_open else ">="
            raise bad(key, value, self._say(f"must be a finite number {op} {_num(lo)}"))
        if hi is None:  # no bounds: the value is not finite
            raise bad(key, value, self._say("must be a finite number"))
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        span = f"{left}{_num(lo if lo is not None else -math.inf)}, {_num(hi)}{right}"
        raise bad(key, value, self._say(f"must lie in {span}"))

    def _say(self, text: str) -> str:
        return f"{text} ({self.why})" if self.why else text


#: Bounds on the sizes of a training step (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts them).  A
#: local step augments ``optim.batch_size`` images into ``2 x method.views`` views and keeps
#: every view's activations for the backward pass: at :data:`MAX_VIEW_IMAGES` views of 32 x
#: 32 x 3 images the small CNN's first block alone (32 channels, float32) holds 8.6 GB.
MAX_VIEWS = 64
MAX_BATCH_SIZE = 16_384
MAX_VIEW_IMAGES = 65_536
#: rounds and local epochs: time linear in them (and one record per round kept in the
#: checkpoint); the paper's longest runs are 200 rounds
MAX_ROUNDS = 100_000
MAX_LOCAL_EPOCHS = 10_000
#: the linear probe's epochs (Adam) and iterations (L-BFGS): time linear in them; the
#: defaults are 100 and 1000
MAX_PROBE_EPOCHS = 10_000
MAX_PROBE_ITER = 100_000
#: CPU threads of a run: PyTorch creates them all, and an OS refuses (or a machine
#: thrashes on) tens of thousands
MAX_THREADS = 256


def check_step_sizes(m: Any, o: Any, ev: Any) -> None:
    """The sizes of a training step and of a run (``method.rounds``, ``local_epochs``,
    ``views``, ``optim.batch_size``, ``eval.batch_size`` and views x batch) are within
    their bounds (:func:`fedspectral.checks.check_size`)."""
    why = "a step's views and their activations must fit in memory"
    check_size_of(
        "method.rounds",
        m.rounds,
        MAX_ROUNDS,
        why="time grows linearly with the rounds; the paper runs 200",
    )
    check_size_of(
        "method.local_epochs",
        m.local_epochs,
        MAX_LOCAL_EPOCHS,
        why="time grows linearly with the local epochs",
    )
    check_size_of("method.views", m.views, MAX_VIEWS, why=why)
    check_size_of("optim.batch_size", o.batch_size, MAX_BATCH_SIZE, why=why)
    check_size_of(
        "eval.batch_size",
        ev.batch_size,
        MAX_BATCH_SIZE,
        why="an evaluation batch's activations must fit in memory",
    )
    check_size_of(
        "method.views",
        2 * m.views * o.batch_size,
        MAX_VIEW_IMAGES,
        why=f"method.views={m.views}, optim.batch_size={o.batch_size}: {why}",
        name="2 x method.views x optim.batch_size",
        also=("optim.batch_size",),
    )


def check_eval_sizes(ev: Any, threads: int | None) -> None:
    """The linear probe's epochs and iterations and ``run.threads`` are within their
    bounds (:func:`fedspectral.checks.check_size`)."""
    check_size_of(
        "eval.probe_epochs",
        ev.probe_epochs,
        MAX_PROBE_EPOCHS,
        why="the linear probe's time grows linearly with its epochs; the default is 100",
    )
    check_size_of(
        "eval.probe_max_iter",
        ev.probe_max_iter,
        MAX_PROBE_ITER,
        why="the L-BFGS probe's time grows linearly with its iterations",
    )
    if threads is not None:
        check_size_of(
            "run.threads",
            threads,
            MAX_THREADS,
            why="PyTorch starts every thread; tens of thousands fail or thrash",
        )


#: smallest contrastive temperature a method parameter takes: the logits are cosine
#: similarities divided by it, so below it they pass 1000 and a float32 loss overflows or
#: its gradients explode -- a divergence that would be blamed on the learning rate
MIN_TEMPERATURE = 1e-3
TEMPERATURE_WHY = (
    "the logits are cosine similarities / temperature: below 1e-3 they pass 1000 and "
    "the float32 loss overflows; the papers use 0.05 to 0.5"
)


def param(default: Any, **rule: Any) -> Any:
    """A :class:`MethodParams` field with its default and its :class:`Rule`
    (``low``, ``high``, ``low_open``, ``high_open``, ``choices``, ``why``)."""
    return field(default=default, metadata={"rule": Rule(**rule)})


@dataclass(frozen=True)
class MethodParams:
    """Base of a method's typed hyper-parameters (``method.params`` of a configuration).

    Subclasses are frozen dataclasses whose fields declare type (annotation), default and
    constraint (:func:`param`); :meth:`check` adds what one field alone cannot say
    (checks against the rest of the configuration).  :attr:`renamed_values`: parameter
    values that were renamed, ``{param: {new: old}}`` (the old spelling is read as the
    new one).
    """

    renamed_values: ClassVar[dict[str, dict[Any, Any]]] = {}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every parameter's default, by name (declaration order)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    @classmethod
    def from_mapping(cls, params: Any, config: Any = None, method: str = "") -> Self:
        """The parameters of the mapping ``params`` (completed with the defaults), checked:
        an unknown key, a value of the wrong type or outside its declared constraint, and
        (with ``config``, the whole configuration) what :meth:`check` refuses raise
        ``ValueError`` naming the key (``TypeError`` when ``params`` is not a mapping)."""
        if not isinstance(params, Mapping):
            raise TypeError(f"method.params must be a mapping, got {params!r}")
        names = list(cls.defaults())
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ConfigError(
                f"method.params.{unknown[0]}",
                params[unknown[0]],
                "no such parameter",
                message=f"method {method!r} has no parameter(s) {unknown}; "
                f"its parameters: {sorted(names)}",
            )
        hints = typing.get_type_hints(cls)
        values = {}
        for k, v in params.items():
            old_names = {o: n for n, o in cls.renamed_values.get(k, {}).items()}
            v = old_names.get(v, v) if isinstance(v, str) else v
            ok, values[k] = type_ok(v, hints[k])
            if not ok:
                raise ConfigError(
                    f"method.params.{k}",
                    v,
                    f"must be {type_name(hints[k])}",
                    message=f"config key method.params.{k} must be {type_name(hints[k])}, "
                    f"got {short(v)}",
                )
        out = cls(**values)
        for f in dataclasses.fields(cls):
            if "rule" in f.metadata:
                f.metadata["rule"].check(f"method.params.{f.name}", getattr(out, f.name))
        out.check_values()
        if config is not None:
            out.check(config, method)
        return out

    def check_values(self) -> None:
        """Checks that involve more than one field's declared rule (default: none); raise
        ``ValueError`` naming the key."""

    def check(self, config: Any, method: str) -> None:
        """Checks of these parameters against the whole configuration ``config`` of
        method ``method`` (default: none); raise ``ValueError`` naming the key."""

    def to_dict(self) -> dict[str, Any]:
        """The parameters as the plain mapping a configuration holds."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
