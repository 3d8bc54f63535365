r"""The Flower app's run configuration -> an :class:`~fedspectral.config.ExperimentConfig`.

``flower/pyproject.toml`` declares the training hyper-parameters as Flower run-config
keys (``[tool.flwr.app.config]``), overridden per run with ``flwr run flower/
--run-config "num-server-rounds=2 lr=0.05"``.  Each key maps to one field of the
experiment configuration (:data:`KEYS`).  The experiment is built in three layers:

1. the **base**: the YAML file named by ``config`` (a path; read by the ServerApp
   process, so relative paths resolve against the SuperLink's working directory), or,
   when ``config`` is empty, :data:`BASE` (FedSC on scikit-learn's digits, a small
   network: runs anywhere in a minute, no download);
2. the **run-config keys**: without a YAML file every key of :data:`KEYS` applies (the
   values in ``pyproject.toml``, or those given on the command line); with a YAML file
   only the keys given explicitly with ``--run-config`` apply, so the file's own values
   are not replaced by the app's defaults;
3. ``set``: ``;``-separated ``section.key=value`` overrides for any other field (e.g.
   ``"model.width=16;eval.every=2"``), applied last.

The app's default ``dp = true`` applies only to the methods whose releases ``dp``
protects (:func:`fedspectral.fed.methods.dp_methods`, read from the method classes), and
with ``dp = false`` the default ``dp-epsilon``/``dp-sigma`` are dropped (given explicitly
with it, they are refused).  A ``method`` other than the base's starts from that method's
default parameters.
Zero means "not set" for :data:`ZERO_IS_UNSET` (``clients-per-round = 0``: every
client; ``dp-epsilon = 0`` or ``dp-sigma = 0``: the other one decides).  The result is
validated (:func:`fedspectral.fed.validation.validate`); a bad value is refused with the
run-config key that set it, before anything runs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from fedspectral.checks import describe
from fedspectral.config import ConfigError, ExperimentConfig, apply_overrides, from_dict, to_dict
from fedspectral.config_checks import MAX_SEED, check_unique_overrides
from fedspectral.fed.methods import dp_methods
from fedspectral.fed.validation import load_config, validate
from fedspectral.pca.flower.task import PCA_DEFAULTS

__all__ = [
    "APP_KEYS",
    "BASE",
    "DEFAULTS",
    "KEYS",
    "TYPES",
    "ZERO_IS_UNSET",
    "check_keys",
    "experiment_config",
    "run_value",
]

#: run-config key -> the experiment-config field it sets
KEYS: dict[str, str] = {
    "num-server-rounds": "method.rounds",
    "method": "method.name",
    "dataset": "data.dataset",
    "num-clients": "partition.num_clients",
    "partition": "partition.scheme",
    "classes-per-client": "partition.classes_per_client",
    "clients-per-round": "method.clients_per_round",
    "local-epochs": "method.local_epochs",
    "lr": "optim.lr",
    "batch-size": "optim.batch_size",
    "dp": "dp.enabled",
    "dp-epsilon": "dp.epsilon",
    "dp-sigma": "dp.sigma",
    "dp-delta": "dp.delta",
    "dp-accountant": "dp.accountant",
    "eval-every": "eval.every",
    "seed": "run.seed",
}

#: keys whose value 0 means "not set" (``None`` in the experiment config)
ZERO_IS_UNSET = frozenset({"clients-per-round", "dp-epsilon", "dp-sigma"})

#: the app's other run-config keys (read by the ServerApp itself, not the experiment)
APP_KEYS = frozenset(
    {
        "task",
        "debug",
        "config",
        "set",
        "out-dir",
        "resume",
        "round-timeout",
        "node-wait",
        "dp-clip",
        "dp-noise-multiplier",
        "dp-seed",
        "dp-placement",
        "min-nodes",
        "pca-p",
        "pca-k",
        "pca-epsilon",
        "pca-delta",
        "pca-calibration",
        "pca-vectorisation",
        "pca-norm-policy",
        "pca-users",
        "pca-seed",
        "pca-spike",
        "pca-model",
        "pca-min-contributors",
        "pca-max-users",
    }
)

#: every run-config key of the app and its default (``flower/pyproject.toml``'s
#: ``[tool.flwr.app.config]``, which a test keeps equal to this): the type of the default
#: is the key's type (:func:`run_value`); an int default also accepts no float
DEFAULTS: dict[str, Any] = {
    "task": "train",
    "num-server-rounds": 3,
    "method": "fedsc",
    "dataset": "digits",
    "num-clients": 2,
    "partition": "dirichlet",
    "classes-per-client": 2,
    "clients-per-round": 0,
    "local-epochs": 1,
    "lr": 0.05,
    "batch-size": 64,
    "dp": True,
    "dp-epsilon": 3.0,
    "dp-sigma": 0.0,
    "dp-delta": 1e-5,
    "dp-accountant": "rdp",
    "eval-every": 1,
    "seed": 0,
    "debug": False,
    "config": "",
    "set": "",
    "out-dir": "",
    "resume": False,
    "round-timeout": 600.0,
    "node-wait": 120.0,
    "dp-clip": 0.0,
    "dp-noise-multiplier": 0.0,
    "dp-seed": -1,
    "dp-placement": "server",
    "min-nodes": 1,
    **PCA_DEFAULTS,  # the LDP-PCA app's query (pca/flower/task.py: one definition)
    "pca-model": "local",
    "pca-min-contributors": 0,
    "pca-max-users": 1000000,
}

#: run-config key -> the type its value must have (``"int"``, ``"float"``: an int or a
#: float, ``"bool"``, ``"str"``), from :data:`DEFAULTS`
TYPES: dict[str, str] = {k: type(v).__name__ for k, v in DEFAULTS.items()}

#: keys whose value has a floor beyond its type (checked by :func:`run_value`): ``(low,
#: strictly above)``; ``dp-noise-multiplier < 0`` is refused rather than read as "off"
#: (a privacy setting fails closed), and so is a ``dp-clip`` of 0 with noise on
#: (:func:`client_dp_options`)
LOWER: dict[str, tuple[float, bool]] = {
    "round-timeout": (0.0, True),
    "node-wait": (0.0, True),
    "dp-clip": (0.0, False),
    "dp-noise-multiplier": (0.0, False),
    "dp-seed": (-1, False),
    "min-nodes": (0, False),
    "pca-p": (1, False),
    "pca-k": (1, False),
    "pca-users": (1, False),
    "pca-min-contributors": (0, False),
    "pca-max-users": (1, False),
}

#: keys whose value has a ceiling: the seeds, signed 64-bit integers (a larger one would be
#: reduced or wrapped further down; ``seed`` becomes ``run.seed``, which has the same bound)
UPPER: dict[str, int] = {"seed": MAX_SEED, "dp-seed": MAX_SEED, "pca-seed": MAX_SEED}


#: float keys that may be ``inf``: no deadline, or ``pca-epsilon = inf`` (the un-noised
#: sum, which each node's own policy decides on: refused unless it allows non-private)
ALLOW_INF = frozenset({"round-timeout", "node-wait", "pca-epsilon"})


def _refuse(key: str, value: Any, why: str) -> ValueError:
    return ValueError(f"run config {key}={describe(value)}: {why}")


def run_value(run_config: Mapping[str, Any], key: str) -> Any:
    """The value of run-config ``key`` (its :data:`DEFAULTS` entry when absent), checked
    against the key's type: an integer key refuses ``1.5`` (never truncated), a float key
    takes an integer as that float, a boolean key takes only ``true``/``false`` (the string
    ``"false"`` is refused, not read as true).

    Raises
    ------
    ValueError
        naming the key and the value (``run config dp-seed=1.5: ...``).
    """
    import math
    import numbers

    if key not in DEFAULTS:
        raise KeyError(f"{key!r} is not a run-config key of the app (known: {sorted(DEFAULTS)})")
    value = run_config.get(key, DEFAULTS[key])
    kind = TYPES[key]
    if kind == "bool":
        if not isinstance(value, bool):
            raise _refuse(key, value, "must be true or false (unquoted: resume=true)")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _refuse(key, value, "must be an integer (nothing is rounded)")
        value = int(value)
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _refuse(key, value, "must be a number")
        value = float(value)
        if math.isnan(value) or (math.isinf(value) and key not in ALLOW_INF):
            raise _refuse(key, value, "must be finite")
    elif not isinstance(value, str):
        raise _refuse(key, value, 'must be a string (quoted: key="value")')
    if key in LOWER:
        low, strict = LOWER[key]
        if value < low or (strict and value == low):
            raise _refuse(key, value, f"must be {'>' if strict else '>='} {low:g}")
    if key in UPPER and value > UPPER[key]:
        raise _refuse(key, value, "must be <= 2**63 - 1 (a signed 64-bit seed)")
    return value


def check_keys(run_config: Mapping[str, Any], known: Collection[str] = ()) -> None:
    """Refuse a run-config key the app does not declare, naming it and the keys that exist.

    ``flwr run`` against a SuperLink refuses such a key itself before the app starts
    (``[code: 15] Invalid run configuration.``, without the key's name): this check is
    for the run configurations that reach the app without that filter (a ServerApp
    driven in process, another app reusing this one's body).  ``known`` adds keys.
    """
    import difflib

    every = sorted(set(DEFAULTS) | set(known))
    unknown = sorted(set(run_config) - set(every))
    if unknown:
        named = []
        for key in unknown:
            close = difflib.get_close_matches(key, every, n=1)
            named.append(f"{key} (did you mean {close[0]}?)" if close else key)
        raise ValueError(
            f"run config key{'s' if len(unknown) > 1 else ''} {', '.join(named)} "
            f"not declared by the app (flower/pyproject.toml); the keys are: {', '.join(every)}"
        )


def client_dp_options(run_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Client-level DP's options from the run config, or ``None`` when
    ``dp-noise-multiplier`` is 0 (off): ``clipping_norm`` (``dp-clip``, > 0 when on),
    ``noise_multiplier``, ``seed`` (``dp-seed``) and ``placement`` (``dp-placement``),
    each refused naming its run-config key."""
    z = run_value(run_config, "dp-noise-multiplier")
    clip = run_value(run_config, "dp-clip")
    seed = run_value(run_config, "dp-seed")
    placement = run_value(run_config, "dp-placement")
    if placement not in ("server", "client"):
        raise _refuse("dp-placement", placement, 'must be "server" or "client"')
    if z == 0:  # off: a client-level DP option given alone would have no effect
        for key, value in (("dp-clip", clip), ("dp-seed", seed), ("dp-placement", placement)):
            if value != DEFAULTS[key]:
                raise _refuse(
                    key, value, "has no effect without client-level DP (dp-noise-multiplier > 0)"
                )
        return None
    if clip == 0:
        raise _refuse(
            "dp-clip",
            clip,
            f"client-level DP (dp-noise-multiplier={z:g}) needs a clipping norm > 0",
        )
    return {"clipping_norm": clip, "noise_multiplier": z, "seed": seed, "placement": placement}


#: the base experiment when ``config`` is empty: FedSC on digits with a small network
#: (``configs/digits_smoke.yaml``'s model and evaluation); the run-config keys set the rest
BASE: dict[str, Any] = {
    "name": "flower_app",
    "data": {"dataset": "digits"},
    "model": {
        "backbone": "small_cnn",
        "norm": "group",
        "width": 8,
        "projector_hidden": 64,
        "projector_out": 32,
    },
    # DP-CalR calibrated under replace-one, the relation a node accounts it under by default
    "method": {"name": "fedsc", "views": 1, "params": {"neighbouring": "replace_one"}},
    "optim": {"batch_size": 64},
    "eval": {"every": 1, "knn_k": 20, "test_size": None},
    "run": {"progress": False},
}


def _value(key: str, value: Any) -> Any:
    if key in ZERO_IS_UNSET and not isinstance(value, bool) and value == 0:
        return None
    return value


def _check_set_once(
    run_config: Mapping[str, Any],
    chosen: Collection[str],
    explicit: Collection[str] | None,
    sets: list[str],
) -> None:
    """No config key is set twice: by two ``set`` items, or by a ``set`` item and the
    run-config key given for it (``seed=3`` and ``set="run.seed=5"``); the last would
    silently win.  ``ValueError`` naming both."""
    check_unique_overrides(sets, "run config set")
    given = {
        KEYS[k]: k
        for k in chosen
        if (k in explicit if explicit is not None else run_config[k] != DEFAULTS.get(k))
    }
    for item in sets:
        key = item.split("=", 1)[0].strip()
        if key in given:
            raise ValueError(
                f"run config {given[key]}={describe(run_config[given[key]])} and set item "
                f"{item!r} both set {key}: give it once (the last would silently win)"
            )


def experiment_config(
    run_config: Mapping[str, Any], explicit: Collection[str] | None = None
) -> ExperimentConfig:
    """The experiment a run configuration describes (see the module docstring).

    Parameters
    ----------
    run_config : mapping
        The run's configuration (``context.run_config``: the app's defaults fused with
        the ``--run-config`` overrides).
    explicit : collection of str, optional
        The keys given explicitly for this run (``grid.run.override_config``); with a
        YAML base only these of :data:`KEYS` apply.  ``None``: every key given applies.

    Raises
    ------
    ValueError
        An unknown ``config`` file, a bad ``set`` item, or a value the experiment
        configuration refuses (the message names the run-config key).
    """
    path = run_value(run_config, "config")
    if path:
        try:
            base: ExperimentConfig = load_config(path)
        except (ValueError, TypeError) as exc:  # the file's own message names it
            raise ValueError(f"run config config={path!r}: {exc}") from None
        chosen = [k for k in KEYS if k in run_config and (explicit is None or k in explicit)]
    else:
        base = from_dict(BASE)
        chosen = [k for k in KEYS if k in run_config]
    d = to_dict(base)
    for key in chosen:
        section, name = KEYS[key].split(".")
        d[section][name] = _value(key, run_value(run_config, key))

    def default(key: str) -> bool:  # the app's default, not given for this run
        return key in chosen and explicit is not None and key not in explicit

    if default("dp") and d["method"]["name"] not in dp_methods():
        d["dp"]["enabled"] = False
    if d["dp"]["enabled"] is False:  # the app's default noise target is moot
        for key in ("dp-epsilon", "dp-sigma"):
            if default(key):
                d["dp"][KEYS[key].split(".")[1]] = None
    if d["method"]["name"] != base.method.name:
        d["method"]["params"] = {}  # the base's were another method's (``set`` gives new ones)
    sets = [s.strip() for s in run_value(run_config, "set").split(";") if s.strip()]
    _check_set_once(run_config, chosen, explicit, sets)
    try:
        cfg = from_dict(d)
        if sets:
            cfg = apply_overrides(cfg, sets)
        return validate(cfg)
    except ConfigError as exc:
        # the run-config key that set the refused key, else one that set a key it involves
        named = next(
            (
                hits
                for key in exc.keys
                if (
                    hits := [
                        f"{k}={run_config[k]!r} (sets {key})" for k in chosen if KEYS[k] == key
                    ]
                )
            ),
            [],
        )
        if not named:
            raise
        raise exc.reworded(f"run config {', '.join(named)}: {exc}") from None
