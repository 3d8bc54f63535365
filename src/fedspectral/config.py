"""Experiment configuration: dataclasses <-> YAML, ``--set key=value`` overrides and the
checks of its sections.

This module sits at the bottom of the package (with :mod:`fedspectral.results`): the
federated code (``fedspectral.fed``) and the command-line layer are built on this schema
and import it from here.

A run is described by one :class:`ExperimentConfig` with eight sections::

    name: fmnist_fedsc
    data:      {dataset, root, download, max_train, val_fraction, eval_split, ...}
    partition: {scheme: class|dirichlet|iid, num_clients, classes_per_client, ...}
    model:     {backbone, norm, width, projector_hidden, projector_out, ...}
    method:    {name, rounds, clients_per_round, local_epochs, views, weighted, params}
    optim:     {lr, momentum, weight_decay, batch_size, grad_clip, schedule}
    dp:        {enabled, sigma, epsilon, delta, accountant, plan, noise_seed, vectorisation}
    eval:      {every, knn_k, knn_t, test_size, bank_size, linear_probe, ...}
    run:       {seed, threads, device, out, checkpoint, progress}

``method.params`` holds the method's own hyper-parameters; each method declares them,
typed, with defaults and constraints (``Method.Params``), and an unknown key -- e.g. a
BYOL parameter given to FedSC -- is rejected.  :func:`check_sections` checks everything
that can be checked without loading data (and the partition against the dataset's known
class count) in the one dialect of :mod:`fedspectral.config_checks`, raising
:class:`ValueError` naming the offending key and value, before any training or file I/O;
the names of datasets, models and methods are passed in (:class:`Registries`).
:func:`fedspectral.fed.validation.validate` runs it with the registries and the method's
parameters and returns a :class:`ValidConfig`; loading a file
(:func:`fedspectral.fed.validation.load_config`) and the config's fingerprint live there.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from fedspectral.checks import did_you_mean
from fedspectral.config_checks import (  # the size bounds (MAX_ROUNDS, ...) live there
    ConfigError,
    bad,
    check_eval_sizes,
    check_seed,
    check_step_sizes,
    pos_float,
    pos_int,
    type_name,
    type_ok,
    yaml_exponent_float,
)
from fedspectral.config_frozen import Frozen, frozen_value, register, thawed
from fedspectral.inputs import check_run_name as check_name
from fedspectral.inputs import load_yaml, read_yaml_file, short
from fedspectral.kinds import RDP, REPORTED
from fedspectral.results import write_text

__all__ = [
    "ConfigError",
    "DPConfig",
    "DataConfig",
    "EvalConfig",
    "ExperimentConfig",
    "MethodConfig",
    "ModelConfig",
    "OptimConfig",
    "PartitionConfig",
    "Registries",
    "RunConfig",
    "ValidConfig",
    "apply_overrides",
    "check_device_name",
    "check_name",
    "check_sections",
    "from_dict",
    "is_valid",
    "mark_valid",
    "read_config_file",
    "save_config",
    "thaw",
    "to_dict",
    "yaml_exponent_float",
]


#: the largest ``dp.sigma`` accepted: far beyond any useful noise level, and far enough
#: from float64's range that sums of noisy correlations over clients cannot overflow
MAX_SIGMA = 1e100


@dataclass
class DataConfig:
    """Which data.  ``max_train`` keeps a stratified random subset of the train split
    (before partitioning) to fit CPU budgets; ``val_fraction > 0`` holds out a
    stratified validation part of the train split, and ``eval_split: val`` then
    evaluates on it (choose settings there, never on the test split).
    ``color_jitter`` adds colour jitter to the crop + flip views (one-channel data:
    brightness and contrast only)."""

    dataset: str = "fashion_mnist"
    root: str | None = None
    download: bool = False
    max_train: int | None = None
    val_fraction: float = 0.0
    eval_split: str = "test"
    color_jitter: bool = True


@dataclass
class PartitionConfig:
    """How the train split is divided among clients (the FedSC paper: by class)."""

    scheme: str = "class"
    num_clients: int = 10
    classes_per_client: int = 1
    dirichlet_alpha: float = 0.5
    samples_per_client: int | None = None


@dataclass
class ModelConfig:
    """Backbone + projector (``fedspectral.models``).  ``input_normalize`` standardises
    images with the dataset's channel statistics inside the network; the projector
    has no normalisation by default (as the official FedSC code)."""

    backbone: str = "small_cnn"
    norm: str = "group"
    width: int | None = None
    projector_hidden: int = 512
    projector_out: int = 128
    projector_norm: str | None = None
    input_normalize: bool = True
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodConfig:
    """The federated method.  ``clients_per_round: null`` means all clients;
    ``views`` is the paper's :math:`V` (each training batch is augmented into
    :math:`2V` views); ``weighted`` averages weights by :math:`|D_j|` instead of the
    seed's plain mean."""

    name: str = "fedsc"
    rounds: int = 15
    clients_per_round: int | None = None
    local_epochs: int = 1
    views: int = 1
    weighted: bool = False
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimConfig:
    """Local SGD.  ``schedule: cosine`` anneals the learning rate over rounds
    (constant within a round), as the official FedSC code does."""

    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 128
    grad_clip: float | None = 3.0
    schedule: str = "cosine"
    min_lr: float = 0.0


@dataclass
class DPConfig:
    """DP correlation sharing (FedSC's DP-CalR, the FedSC paper Algorithm 2).

    Either ``sigma`` (the same noise standard deviation for every client, as in the
    seed's Table 5) or a target ``epsilon`` (σ of each client calibrated over its
    planned number of releases, sensitivity ``μ/|D_j|``).  ``plan: worst_case`` plans a
    release in every sharing round (a guarantee whatever the sampling);
    ``expected`` plans the expected number under uniform sampling (the paper's
    "σ changed by the participation ratio"; the ledger reports the ε actually
    spent; a client whose next release would pass a target ``epsilon`` stops
    sharing).  ``noise_seed``: ``derive`` (from the run seed: reproducible), an
    integer (seeded numpy), or ``null``/``secure`` (the secure source a device runs:
    OS entropy, a discrete Gaussian on a grid: floating-point safe).  ``vectorisation``:
    ``isometric`` (default: the off-diagonal entries of R_j enter the noised vector
    times √2, so the same σ and ε give half the off-diagonal noise variance) or
    ``upper`` (plain upper triangle)."""

    enabled: bool = False
    sigma: float | None = None
    epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = RDP
    plan: str = "worst_case"
    noise_seed: Any = "derive"
    vectorisation: str = "isometric"


@dataclass
class EvalConfig:
    """Monitoring: KNN (k, t, cosine, bank = un-augmented train images) every
    ``every`` rounds (and after the last) on backbone and projector features;
    optional linear probe at the end; ``sc_objective`` also reports the global SC
    objective on the pooled training data (SC methods).  ``initial`` also evaluates the
    initial weights before round 1 (the untrained network of the same architecture and
    seed; ``results["initial"]``, round 0 of the convergence figure): on unless ``false``.
    Unset (``None``) is on; it is hashed in :func:`config_fingerprint` as ``false``, the
    default before it was on, since the evaluation leaves the training as it was (a config
    that does not set it keeps its fingerprint; :data:`EVAL_UNSET_AS`).
    ``test_size``/``bank_size`` cap the evaluation sets (stratified subsets) to fit CPU
    budgets.

    The linear probe trains on the bank's backbone features: ``probe_solver: lbfgs`` is
    L2-penalised logistic regression on standardised features solved to tolerance
    (:func:`fedspectral.eval.logistic_probe`, ``probe_c``, ``probe_max_iter``); ``adam``
    is the authors' probe, ``probe_epochs`` of Adam at ``probe_lr`` on raw features
    (:func:`fedspectral.eval.linear_probe`), unconverged on small banks.  ``adam`` is the
    default only so that configs written before ``probe_solver`` existed keep their
    meaning and fingerprint; the shipped configs say which they use."""

    every: int = 5
    knn_k: int = 200
    knn_t: float = 0.1
    test_size: int | None = 2000
    bank_size: int | None = None
    linear_probe: bool = False
    sc_objective: bool = True
    initial: bool | None = None  # None: on (evaluates_initial), hashed as false
    probe_epochs: int = 100
    probe_lr: float = 3e-3
    probe_solver: str = "adam"
    probe_c: float = 1.0
    probe_max_iter: int = 1000
    batch_size: int = 512


#: ``eval`` keys added after results were recorded, with the value that reproduces the
#: computation from before they existed: left out of the fingerprint at that value
EVAL_NEUTRAL = {"probe_solver": "adam", "probe_c": 1.0, "probe_max_iter": 1000}
#: ``eval`` keys whose default changed after results were recorded: unset (``None``, the
#: new default) is hashed as the old default, so configs that do not set them keep their
#: fingerprint.  ``initial`` turned on: evaluating the initial weights changes no weight
#: of the run (``tests/fed/test_simulation.py``), it adds round 0 to the results.
EVAL_UNSET_AS = {"initial": False}


def evaluates_initial(ev: EvalConfig) -> bool:
    """Whether a run evaluates its initial weights (``eval.initial``: unset is on)."""
    return ev.initial is not False


PROBE_SOLVERS = ("lbfgs", "adam")  # fedspectral.eval.linear_probe.SOLVERS (pinned by a test)


@dataclass
class RunConfig:
    """Execution: seed, CPU threads, device, output folder, checkpointing."""

    seed: int = 0
    threads: int | None = None
    device: str = "cpu"
    out: str | None = None
    checkpoint: bool = True
    progress: bool = True


@dataclass
class ExperimentConfig:
    """One experiment (see the module docstring)."""

    name: str = "experiment"
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    dp: DPConfig = field(default_factory=DPConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def out_dir(self) -> Path:
        """``run.out`` or ``results/<name>``."""
        return Path(self.run.out) if self.run.out else Path("results") / self.name


SECTIONS = ("data", "partition", "model", "method", "optim", "dp", "eval", "run")


# --------------------------------------------------------------------------------------
# dict / YAML conversion with type checking
# --------------------------------------------------------------------------------------
def _section_from_dict(cls: type, d: Any, where: str) -> Any:
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise TypeError(f"config section {where!r} must be a mapping, got {d!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}",
            d[unknown[0]],
            "unknown key",
            message=f"unknown config key(s) {[f'{where}.{k}' for k in unknown]}; "
            f"known in {where!r}: {sorted(names)}",
            also=tuple(f"{where}.{k}" for k in unknown[1:]),
        )
    kwargs = {}
    for k, v in d.items():
        ok, v2 = type_ok(v, hints[k])
        if not ok:
            raise ConfigError(
                f"{where}.{k}",
                v,
                f"must be {type_name(hints[k])}",
                message=f"config key {where}.{k} must be {type_name(hints[k])}, got {short(v)}",
            )
        kwargs[k] = copy.deepcopy(v2)
    return cls(**kwargs)


def from_dict(d: dict[str, Any]) -> ExperimentConfig:
    """Build an :class:`ExperimentConfig` from nested dicts (type-checked)."""
    if not isinstance(d, dict):
        raise TypeError(f"a config must be a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - set(SECTIONS) - {"name"})
    if unknown:
        raise ValueError(f"unknown config section(s) {unknown}; known: {['name', *SECTIONS]}")
    try:
        name = check_name(d.get("name", "experiment"))
    except ValueError as exc:
        raise ConfigError("name", d.get("name"), "not a run name", message=str(exc)) from None
    hints = typing.get_type_hints(ExperimentConfig)
    sections = {s: _section_from_dict(hints[s], d.get(s), s) for s in SECTIONS}
    return ExperimentConfig(name=name, **sections)


def to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """Nested plain dicts (YAML/JSON-able)."""
    return dataclasses.asdict(cfg)


#: the repository's ``configs/`` folder (a source or editable install runs from it)
REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def resolve_config_path(path: str | Path) -> Path:
    """``path`` as given when it exists (or is absolute); a relative ``configs/NAME`` that
    does not exist from the working directory is the repository's ``configs/NAME``
    (:data:`REPO_CONFIGS`), so that the README's examples run from any directory."""
    p = Path(path)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] != "configs":
        return p
    repo = REPO_CONFIGS.joinpath(*p.parts[1:])
    return repo if repo.is_file() else p


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of sections in the YAML file ``path``, before type checks
    (:func:`fedspectral.inputs.read_yaml_file`: a ``ValueError`` naming the file, and the
    line, when it is not a regular file, too large, not UTF-8, not YAML -- duplicate keys
    and alias bombs included -- empty or not a mapping).  A relative ``configs/NAME``
    missing from the working directory is read from the repository
    (:func:`resolve_config_path`)."""
    return read_yaml_file(
        resolve_config_path(path),
        "config file",
        empty_hint="give at least a name and the sections to change, see configs/",
    )


def save_config(cfg: ExperimentConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML."""
    write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def apply_overrides(cfg: ExperimentConfig, overrides: list[str]) -> ExperimentConfig:
    """A copy of ``cfg`` with ``section.key=value`` (YAML-typed values) applied.

    ``method.params.<key>=value`` sets a method hyper-parameter.  Types are
    checked against the dataclass annotations: ``--set optim.lr=abc`` raises
    ``ValueError`` naming ``optim.lr`` and ``'abc'``.
    """
    d = to_dict(cfg)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"an override must look like section.key=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        value = load_yaml(raw, f"override {short(item)}: the value") if raw.strip() != "" else None
        parts = key.split(".")
        if parts == ["name"]:
            if raw.strip() == "":
                raise ValueError(f"override {short(item)}: name must be a non-empty string")
            d["name"] = raw.strip() if not isinstance(value, str) else value
            continue
        if len(parts) < 2 or parts[0] not in SECTIONS:
            raise ValueError(
                f"override {short(item)}: key {key!r} must be name or "
                f"<section>.<key> with section in {list(SECTIONS)}"
            )
        node = d[parts[0]]
        if len(parts) == 2:
            if parts[1] not in node:
                raise ValueError(
                    f"unknown config key {key!r}; known in {parts[0]!r}: {sorted(node)}"
                )
            node[parts[1]] = value
        elif parts[1] in ("params", "kwargs") and len(parts) == 3:
            node[parts[1]][parts[2]] = value
        else:
            raise ValueError(f"override key {key!r} is too deep")
    return from_dict(d)


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------
#: Largest width accepted for ``model.width`` and the projector's sizes (the network is also
#: built on PyTorch's "meta" device before any data is loaded and its size checked:
#: :func:`fedspectral.experiments.preflight.check_model`).
MAX_WIDTH = 1 << 16


def _validate_model(mc: ModelConfig, reg: Registries) -> None:
    BACKBONES, NORMS = reg.backbones, reg.norms
    if mc.backbone not in BACKBONES:
        raise bad("model.backbone", mc.backbone, f"unknown backbone; known: {list(BACKBONES)}")
    if mc.backbone == "fixup_resnet20":
        if mc.norm not in ("none",):
            raise bad("model.norm", mc.norm, "fixup_resnet20 is normalisation-free: use none")
    elif mc.norm not in NORMS:
        raise bad("model.norm", mc.norm, f"unknown normalisation; known: {list(NORMS)}")
    if mc.projector_norm is not None and mc.projector_norm not in NORMS:
        raise bad(
            "model.projector_norm",
            mc.projector_norm,
            f"unknown normalisation; known: {list(NORMS)} or null",
        )
    for key in ("width", "projector_hidden", "projector_out"):
        v = getattr(mc, key)
        if key == "width" and v is None:
            continue
        pos_int(f"model.{key}", v)
        if v > MAX_WIDTH:
            raise bad(f"model.{key}", v, f"must be <= {MAX_WIDTH}")
    if mc.width is not None and mc.backbone in ("resnet18", "resnet50"):
        raise bad("model.width", mc.width, f"{mc.backbone} has a fixed width: use null")


def _validate_data(cfg: ExperimentConfig, reg: Registries) -> None:
    d, p = cfg.data, cfg.partition
    if d.dataset not in reg.datasets:
        raise bad("data.dataset", d.dataset, f"unknown dataset; known: {list(reg.datasets)}")
    info = reg.dataset_info(d.dataset)
    pos_int("data.max_train", d.max_train, allow_none=True)
    if not (0 <= d.val_fraction < 1):
        raise bad("data.val_fraction", d.val_fraction, "must lie in [0, 1)")
    if d.eval_split not in ("test", "val"):
        raise bad("data.eval_split", d.eval_split, "must be 'test' or 'val'")
    if d.eval_split == "val" and d.val_fraction == 0:
        raise bad("data.eval_split", d.eval_split, "needs data.val_fraction > 0")

    if p.scheme not in ("class", "dirichlet", "iid"):
        raise bad("partition.scheme", p.scheme, "must be 'class', 'dirichlet' or 'iid'")
    pos_int("partition.num_clients", p.num_clients)
    pos_int("partition.classes_per_client", p.classes_per_client)
    pos_int("partition.samples_per_client", p.samples_per_client, allow_none=True)
    if p.scheme == "class" and p.num_clients * p.classes_per_client > info.num_classes:
        raise bad(
            "partition.num_clients",
            p.num_clients,
            f"{p.num_clients} clients x {p.classes_per_client} classes per client "
            f"exceeds the {info.num_classes} classes of {d.dataset}",
        )
    if p.scheme == "dirichlet":
        pos_float("partition.dirichlet_alpha", p.dirichlet_alpha)
    n_train = d.max_train or info.train_size
    if p.num_clients > n_train:
        raise bad(
            "partition.num_clients",
            p.num_clients,
            f"more clients than the {n_train} training images: a client would be empty",
        )


def _validate_method_optim(cfg: ExperimentConfig, reg: Registries) -> None:
    m, o = cfg.method, cfg.optim
    if m.name not in reg.methods:
        raise bad(
            "method.name",
            m.name,
            f"unknown method{did_you_mean(m.name, reg.methods)}; known: {sorted(reg.methods)}",
        )
    pos_int("method.rounds", m.rounds)
    pos_int("method.clients_per_round", m.clients_per_round, allow_none=True)
    if m.clients_per_round is not None and m.clients_per_round > cfg.partition.num_clients:
        raise bad(
            "method.clients_per_round",
            m.clients_per_round,
            f"exceeds partition.num_clients={cfg.partition.num_clients}",
        )
    pos_int("method.local_epochs", m.local_epochs)
    pos_int("method.views", m.views)
    pos_int("optim.batch_size", o.batch_size)
    check_step_sizes(m, o, cfg.eval)

    pos_float("optim.lr", o.lr)
    if not (0 <= o.momentum < 1):
        raise bad("optim.momentum", o.momentum, "must lie in [0, 1)")
    pos_float("optim.weight_decay", o.weight_decay, allow_zero=True)
    if o.lr * o.weight_decay >= 1:
        raise ConfigError(
            "optim.lr",
            o.lr,
            "lr x weight_decay >= 1",
            also=("optim.weight_decay",),
            message=f"config optim.lr={o.lr!r}, optim.weight_decay={o.weight_decay!r}: "
            f"lr x weight_decay = {o.lr * o.weight_decay:.3g} >= 1: each SGD step "
            f"multiplies the weights by 1 - lr x weight_decay <= 0 before the "
            f"gradient acts, which flips or zeroes them instead of decaying them; "
            f"use lr x weight_decay < 1 (typically about 1e-5)",
        )
    if o.grad_clip is not None:
        pos_float("optim.grad_clip", o.grad_clip)
    if o.schedule not in ("cosine", "constant"):
        raise bad("optim.schedule", o.schedule, "must be 'cosine' or 'constant'")
    pos_float("optim.min_lr", o.min_lr, allow_zero=True)
    if o.min_lr > o.lr:
        raise bad(
            "optim.min_lr",
            o.min_lr,
            f"must be <= optim.lr={o.lr!r} (the schedule anneals from lr down to min_lr)",
        )


def _validate_dp(cfg: ExperimentConfig) -> None:
    dp = cfg.dp
    if not (0 < dp.delta < 1):
        raise bad("dp.delta", dp.delta, "must lie in (0, 1)")
    if dp.accountant not in REPORTED:
        names = f"{', '.join(map(repr, REPORTED[:-1]))} or {REPORTED[-1]!r}"
        raise bad("dp.accountant", dp.accountant, f"must be {names}")
    if dp.vectorisation not in ("isometric", "upper"):
        raise bad("dp.vectorisation", dp.vectorisation, "must be 'isometric' or 'upper'")
    if dp.plan not in ("worst_case", "expected"):
        raise bad("dp.plan", dp.plan, "must be 'worst_case' or 'expected'")
    if dp.epsilon is not None and not (dp.epsilon > 0 and math.isfinite(dp.epsilon)):
        raise bad(
            "dp.epsilon",
            dp.epsilon,
            "must be a finite number > 0 (a DP run with "
            "epsilon = inf would add no noise; for no DP: dp=false on the Flower app, "
            "--set dp.enabled=false on the CLI, dp.enabled: false in a config)",
        )
    if dp.sigma is not None and not (dp.sigma > 0 and math.isfinite(dp.sigma)):
        raise bad("dp.sigma", dp.sigma, "must be a finite number > 0")
    if dp.sigma is not None and dp.sigma > MAX_SIGMA:
        raise bad(
            "dp.sigma",
            dp.sigma,
            f"must be <= {MAX_SIGMA:g}: the noise would drown "
            f"any correlation (entries lie in [-mu, mu]) and overflow the server's sums",
        )
    if not (
        dp.noise_seed is None
        or dp.noise_seed in ("derive", "secure")
        or (isinstance(dp.noise_seed, int) and not isinstance(dp.noise_seed, bool))
    ):
        raise bad("dp.noise_seed", dp.noise_seed, "must be 'derive', an integer, 'secure' or null")
    if isinstance(dp.noise_seed, int):
        check_seed("dp.noise_seed", dp.noise_seed)
    if dp.enabled:
        # every normalisation of the encoder that produces the shared representations
        # (backbone and projector; dp_correlation also probes the network at run time)
        for key, value in (
            ("model.norm", cfg.model.norm),
            ("model.projector_norm", cfg.model.projector_norm),
        ):
            if value == "batch":
                raise bad(
                    key,
                    "batch",
                    "cannot be used with dp.enabled: it normalises with the statistics "
                    "of the current batch (also in eval mode), so one sample moves the "
                    "other samples' representations and DP-CalR's per-sample "
                    f"sensitivity does not hold; use {key}=group, batch_running or none",
                )
        if (dp.sigma is None) == (dp.epsilon is None):
            raise bad(
                "dp.enabled",
                True,
                f"give exactly one of dp.sigma and dp.epsilon "
                f"(got sigma={dp.sigma!r}, epsilon={dp.epsilon!r})",
            )
    elif dp.sigma is not None or dp.epsilon is not None:
        raise bad("dp.enabled", False, "dp.sigma/dp.epsilon given but dp.enabled is false")


def check_device_name(device: Any) -> None:
    """``run.device`` names a kind of device: ``cpu``, ``cuda[:i]`` or ``mps`` (whether it
    exists on this machine: :func:`fedspectral.experiments.preflight.check_device`)."""
    if not isinstance(device, str) or not (
        device == "cpu" or device.startswith("cuda") or device == "mps"
    ):
        raise bad("run.device", device, "must be 'cpu', 'cuda[:i]' or 'mps'")


def _validate_eval_run(cfg: ExperimentConfig) -> None:
    ev, r = cfg.eval, cfg.run
    pos_int("eval.every", ev.every)
    pos_int("eval.knn_k", ev.knn_k)
    pos_float("eval.knn_t", ev.knn_t)
    pos_int("eval.test_size", ev.test_size, allow_none=True)
    pos_int("eval.bank_size", ev.bank_size, allow_none=True)
    pos_int("eval.probe_epochs", ev.probe_epochs)
    pos_float("eval.probe_lr", ev.probe_lr)
    if ev.probe_solver not in PROBE_SOLVERS:
        raise bad("eval.probe_solver", ev.probe_solver, f"must be one of {PROBE_SOLVERS}")
    pos_float("eval.probe_c", ev.probe_c)
    pos_int("eval.probe_max_iter", ev.probe_max_iter)
    pos_int("eval.batch_size", ev.batch_size)

    check_seed("run.seed", r.seed)
    pos_int("run.threads", r.threads, allow_none=True)
    check_eval_sizes(ev, r.threads)
    check_device_name(r.device)


@dataclass(frozen=True)
class Registries:
    """The names a config may use, from the layers that own them: datasets (and
    ``dataset_info(name)``, its class count and train size), backbones and normalisations,
    methods.  :func:`fedspectral.fed.validation.validate` passes them in; this module
    imports none of them."""

    datasets: Sequence[str]
    dataset_info: Callable[[str], Any]
    backbones: Sequence[str]
    norms: Sequence[str]
    methods: Sequence[str]


def check_sections(cfg: ExperimentConfig, reg: Registries) -> None:
    """Check every section of ``cfg`` in order (data and partition, model, method and
    optim, dp, eval and run) against the registries ``reg``; raise ``ValueError`` naming
    the offending key and value.  The method's own parameters are checked by its
    :attr:`~fedspectral.fed.protocol.Method.Params`
    (:func:`fedspectral.fed.validation.validate`)."""
    _validate_data(cfg, reg)
    _validate_model(cfg.model, reg)
    _validate_method_optim(cfg, reg)
    _validate_dp(cfg)
    _validate_eval_run(cfg)
    _check_knn_bank(cfg, reg)


def _check_knn_bank(cfg: ExperimentConfig, reg: Registries) -> None:
    """``eval.knn_k`` is at most the number of images a KNN bank can hold (the training
    images, or ``eval.bank_size``): more neighbours than that is a vote over every image,
    not the KNN accuracy asked for."""
    d, ev = cfg.data, cfg.eval
    n_train = d.max_train or reg.dataset_info(d.dataset).train_size
    bank = min(n_train, ev.bank_size) if ev.bank_size is not None else n_train
    if ev.knn_k > bank:
        raise bad(
            "eval.knn_k",
            ev.knn_k,
            f"more neighbours than the {bank} images of the KNN bank (the training images"
            f"{', eval.bank_size' if ev.bank_size is not None else ''}): a vote over every "
            f"image, not a k-NN accuracy",
        )


def thaw(cfg: ExperimentConfig) -> ExperimentConfig:
    """An editable deep copy of ``cfg`` (a :class:`ValidConfig` too), to change and check."""
    return typing.cast(ExperimentConfig, thawed(cfg))


class ValidConfig(Frozen, ExperimentConfig):
    """An :class:`ExperimentConfig` :func:`fedspectral.fed.validation.validate` checked and
    completed (``method.params`` hold every parameter), frozen: an assignment to it, its
    sections or mappings raises :class:`dataclasses.FrozenInstanceError` naming the field.
    Later layers take it as it is (:func:`is_valid`); a change is a new config (:func:`thaw`
    or :func:`dataclasses.replace`: a plain :class:`ExperimentConfig`), validated again."""


register(ExperimentConfig, ValidConfig)


def mark_valid(cfg: ExperimentConfig) -> ValidConfig:
    """A frozen copy of ``cfg`` (just checked): only the validator calls this."""
    return typing.cast(ValidConfig, frozen_value(cfg))


def is_valid(cfg: Any) -> TypeGuard[ValidConfig]:
    """Whether ``cfg`` is a :class:`ValidConfig` (frozen: as it was checked)."""
    return isinstance(cfg, ValidConfig)
