"""The grid: the runs of a reproduction and their validated configs
(:func:`build_plan`)."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedspectral.checks import check_size
from fedspectral.config import apply_overrides, from_dict, read_config_file
from fedspectral.experiments.reproduce.paper import CENTRAL, METHOD_LABELS, METHOD_ORDER
from fedspectral.experiments.reproduce.scales import (  # re-exported: the plan's vocabulary
    SCALES,
    Scale,
    Setting,
)
from fedspectral.experiments.reproduce.tiers import TIER_DEFS
from fedspectral.fed.methods import is_baseline, method_class, ssl_methods
from fedspectral.fed.validation import validate
from fedspectral.inputs import check_nonempty_path, check_output_path

EXPERIMENTS = ("fedsc",)
#: ``core``/``full``: the paper's Table 2 grid; the others test FedSC's mechanism where its
#: theory says it works (:mod:`~fedspectral.experiments.reproduce.tiers`)
TIERS = ("core", "full", *TIER_DEFS)
#: the methods of the core tier (the paper's central comparison and its upper bound)
CORE_METHODS = ("central_sc", "fedavg_sc", "fedsc")
#: the Table 2 row of FedSC with its stability options (docs/fedsc_tuning.md, "Stability":
#: the only setting of the grid whose global SC objective never rose by more than 0.1
#: between evaluations at lr 0.05-0.2 and alpha q_j or 1 -> 0.2); run beside the paper's
#: FedSC, paired by seed
STABLE = "fedsc_stable"
#: its overrides of FedSC's parameters, and its ``variant`` in ``summary.json``
STABLE_OVERRIDES = ("method.params.cross_term=tracked", "method.params.server_lr=0.5")
STABLE_VARIANT = "tracked+server_lr0.5"


#: seeds of the core tier by default: enough for a paired t interval to decide a
#: 1.5-point effect with the seed-to-seed spread of the CPU protocol (``--seeds 3`` for
#: quick runs)
CORE_SEEDS = 10

#: keys the grid sets itself; ``--set`` may not touch them
GRID_KEYS = (
    "name",
    "partition.scheme",
    "partition.num_clients",
    "partition.classes_per_client",
    "partition.dirichlet_alpha",
    "method.name",
    "method.clients_per_round",
    "run.seed",
    "run.out",
    "dp.enabled",
    "dp.sigma",
    "dp.epsilon",
    "dp.delta",
    "dp.plan",
    "dp.accountant",
    "method.params.share_start",
    "eval.linear_probe",
    "eval.initial",
)


@dataclass
class RunSpec:
    """One run of the grid: a validated config and where it fits in the tables."""

    name: str
    method: str
    setting: Setting
    seed: int
    config: Any
    base: Path
    dp: tuple[float, float] | None = None  # (epsilon, delta)
    tables: list[str] = field(default_factory=list)
    late: bool = False  # FedSC without noise, sharing from the DP runs' start round
    #: noise-free comparator with the DP runs' normalisation (GroupNorm) and the
    #: method's own schedule (FedSC sharing from its usual round; FedAvg+SC)
    gn: bool = False
    #: FedSC with its stability options (:data:`STABLE_OVERRIDES`), the row :data:`STABLE`
    stable: bool = False

    @property
    def row(self) -> str:
        """The Table 2 row the run belongs to: its method, or :data:`STABLE`."""
        return STABLE if self.stable else self.method

    @property
    def variant_name(self) -> str:
        """The run's ``variant`` in ``summary.json``: ``"dp"``, ``"late_start"`` (the
        noise-free control sharing from the DP runs' round), ``"groupnorm"`` (the DP
        runs' normalisation, no noise), :data:`STABLE_VARIANT` (FedSC with its stability
        options) or ``"main"`` (the Table 2 run)."""
        if self.dp is not None:
            return "dp"
        if self.stable:
            return STABLE_VARIANT
        return "late_start" if self.late else ("groupnorm" if self.gn else "main")

    @property
    def variant(self) -> tuple[float, float] | str | None:
        """``(epsilon, delta)`` of a DP run, ``"late"``, ``"gn"``, or ``None`` (a Table 2 run)."""
        if self.dp is not None:
            return self.dp
        return "late" if self.late else ("gn" if self.gn else None)

    @property
    def label(self) -> str:
        lab = METHOD_LABELS.get(self.method, self.method)
        if self.dp is not None:
            lab += f" (eps={self.dp[0]:g}, delta={self.dp[1]:g})"
        elif self.late:
            lab += " (no noise, late sharing)"
        elif self.gn:
            lab += " (GroupNorm like the DP runs, no noise)"
        elif self.stable:
            lab = METHOD_LABELS[STABLE]
        return lab


@dataclass
class Plan:
    """The runs of a reproduction, in execution order, and where they go."""

    experiment: str
    scale: Scale
    runs: list[RunSpec]
    out: Path
    methods: list[str]
    excluded: list[str]
    seeds: list[int]
    overrides: list[str]
    tier: str = "full"

    @property
    def rows(self) -> list[str]:
        """The Table 2 rows: the methods run, with :data:`STABLE` after FedSC when the
        plan has its runs."""
        out = []
        for m in self.methods:
            out.append(m)
            if m == "fedsc" and any(r.stable for r in self.runs):
                out.append(STABLE)
        return out

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out / "runs" / spec.name

    @property
    def report_out(self) -> Path:
        """Where the report goes: ``out`` for the Table 2 tiers, ``out/<tier>`` for the
        mechanism tiers (which share ``out/runs``, so a run two tiers need trains once)."""
        return self.out if self.tier in ("core", "full") else self.out / self.tier


#: most seeds a plan takes (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts it)
MAX_SEEDS = 100


def _configs_dir(configs: str | os.PathLike | None) -> Path:
    if configs is not None:
        if not str(configs).strip():
            raise ValueError(
                "--configs '' is empty: give the folder of the base configs "
                "(or leave --configs out for ./configs)"
            )
        p = Path(configs)
        if not p.is_dir():
            raise ValueError(f"--configs {str(p)!r} is not a folder")
        return p
    here = Path("configs")
    if here.is_dir():
        return here
    repo = Path(__file__).resolve().parents[4] / "configs"
    return repo


def resolve_base_config(scale: Scale, prefix: str, method: str, configs_dir: Path) -> Path:
    """The first existing base config of ``scale.config_patterns`` for ``prefix`` and
    ``method``; ``FileNotFoundError`` naming every file looked for."""
    tried = []
    for pat in scale.config_patterns:
        p = configs_dir / pat.format(prefix=prefix, method=method)
        if p.is_file():
            return p
        tried.append(str(p))
    raise FileNotFoundError(
        f"no base config for {prefix!r}/{method!r} at scale {scale.name!r}; "
        f"looked for {tried} (the folder of --configs: {str(configs_dir)!r})"
    )


def _load_base(path: Path, method: str) -> Any:
    """The config of ``path`` turned into a config of ``method``: the method's own
    ``method.params`` if the file is the method's, else only the keys it declares."""
    d = read_config_file(path)  # a broken file: ValueError naming it and the line
    try:
        cfg = from_dict(d)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"base config {str(path)!r}: {exc}") from exc
    if cfg.method.name != method:
        cls = method_class(method)
        known = cls.default_params
        cfg.method.params = {k: v for k, v in cfg.method.params.items() if k in known}
        cfg.method.name = method
        if is_baseline(method):
            cfg.method.views = 1  # the baselines train on one pair of views per sample
    return cfg


def _check_overrides(overrides: Sequence[str]) -> None:
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"an override must look like section.key=value, got {item!r}")
        key = item.split("=", 1)[0].strip()
        if key in GRID_KEYS or key.startswith("dp."):
            raise ValueError(
                f"--set {key}=...: the reproduction grid sets {key!r} itself "
                f"(grid keys: {list(GRID_KEYS)})"
            )


def _grid_config(
    base: Any,
    scale: Scale,
    overrides: Sequence[str],
    setting: Setting,
    method: str,
    seed: int,
    name: str,
    out: Path,
    dp: tuple[float, float] | None,
    late: bool = False,
    gn: bool = False,
    stable: bool = False,
) -> Any:
    cfg = apply_overrides(
        base,
        [
            *setting.overrides_for(method),
            *scale.reductions,
            *overrides,
            *(STABLE_OVERRIDES if stable else ()),
        ],
    )
    cfg.name = name
    cfg.partition.scheme = "class" if setting.tier is None else setting.tier.scheme
    if setting.tier is not None and setting.tier.dirichlet_alpha is not None:
        cfg.partition.dirichlet_alpha = setting.tier.dirichlet_alpha
    cfg.partition.num_clients = setting.num_clients
    cfg.partition.classes_per_client = setting.classes_per_client
    cfg.method.name = method
    cfg.method.clients_per_round = None if setting.full else setting.clients_per_round
    cfg.run.seed = seed
    cfg.run.out = str(out)
    cfg.eval.linear_probe = True
    cfg.eval.initial = True  # the untrained network of this architecture and seed
    cfg.dp.enabled = False
    cfg.dp.sigma = None
    cfg.dp.epsilon = None
    if dp is not None:
        eps, delta = dp
        cfg.dp.enabled = True
        cfg.dp.epsilon = float(eps)
        cfg.dp.delta = float(delta)
        cfg.dp.accountant = "rdp"
        cfg.dp.plan = "worst_case"
    if dp is not None or late or gn:
        # batch statistics break DP-CalR's per-sample sensitivity (config.validate
        # refuses them with DP, in the backbone and in the projector); the DP runs, their
        # noise-free late-start control and the GroupNorm comparators use GroupNorm, so
        # that they differ only by the noise (late) or only by the noise and the sharing
        # schedule (gn)
        if cfg.model.norm == "batch":
            cfg.model.norm = "group"
        if cfg.model.projector_norm == "batch":
            cfg.model.projector_norm = "group"
    if dp is not None or late:
        cfg.method.params = dict(cfg.method.params)
        cfg.method.params["share_start"] = cfg.method.rounds // 2 + 1
    try:
        return validate(cfg)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"run {name!r}: {exc}") from exc


def _dp_name(setting: Setting, eps: float, delta: float, seed: int) -> str:
    return f"{setting.key}__fedsc-dp-eps{eps:g}-delta{delta:g}__s{seed}"


def _late_name(setting: Setting, seed: int) -> str:
    return f"{setting.key}__fedsc-late__s{seed}"


def _gn_name(setting: Setting, method: str, seed: int) -> str:
    return f"{setting.key}__{method}-gn__s{seed}"


def _stable_name(setting: Setting, seed: int) -> str:
    return f"{setting.key}__fedsc-stable__s{seed}"


def _run_name(setting: Setting, method: str, seed: int) -> str:
    return f"{setting.key}__{method}__s{seed}"


def build_plan(
    experiment: str = "fedsc",
    scale: str = "cpu",
    *,
    quick: bool = False,
    tier: str = "core",
    seeds: int | None = None,
    methods: Sequence[str] | None = None,
    configs: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    out: str | os.PathLike | None = None,
) -> Plan:
    """Build and validate every run of the reproduction (no training, no file written).

    Parameters
    ----------
    experiment : {"fedsc"}
    scale : {"cpu", "paper"}
    quick : bool
        The smoke-run scale (only with ``scale="cpu"``).
    tier : {"core", "full"}
        ``core``: centralized SC, FedAvg+SC and FedSC on the 10 x 1 settings, no DP;
        ``full``: every registered method, every setting and the DP tables.
    seeds : int, optional
        Number of seeds (0, 1, ...); default :data:`CORE_SEEDS` (10) for the core tier,
        else the scale's (3; quick: 1).
    methods : sequence of str, optional
        Registered method names to run (default: all of them).  ``fedsc`` is
        needed for the DP tables and the convergence figure, ``fedavg_sc`` for
        the comparisons; leaving them out drops those parts (said in the report).
    configs : path, optional
        Folder of the base configs (default ``./configs`` or the repository's).
    overrides : sequence of ``key=value``
        Applied to every run after the scale's reductions (grid keys refused).
    out : path, optional
        Default ``results/reproduce/<scale>``.

    Raises
    ------
    ValueError
        Unknown experiment, scale, method; incompatible options; a config that
        does not validate (the message names the run and the key).
    FileNotFoundError
        A base config is missing.
    """
    sc = _plan_scale(experiment, scale, quick, tier)
    if seeds is None:
        if tier in TIER_DEFS:
            seeds = 1 if quick else TIER_DEFS[tier].seeds
        else:
            seeds = CORE_SEEDS if tier == "core" and not quick else sc.seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"--seeds must be an integer >= 1, got {seeds!r}")
    check_size(
        "--seeds",
        seeds,
        MAX_SEEDS,
        why="every seed adds a full set of runs: 100 "
        "seeds of the core tier are 900 runs, days of CPU",
    )
    registered, chosen = _chosen_methods(methods, tier)
    _check_overrides(overrides)
    order = [m for m in METHOD_ORDER if m in chosen] + [m for m in chosen if m not in METHOD_ORDER]
    excluded = [m for m in registered if m not in chosen]
    if out is not None:
        check_nonempty_path(out, "--out")
    out_path = Path(out) if out is not None else Path("results") / "reproduce" / sc.name
    check_output_path(out_path, "--out")  # no dangling symlink or loop on the way
    if out_path.exists() and not out_path.is_dir():
        raise ValueError(
            f"--out {str(out_path)!r} exists and is not a folder (a file or a "
            "device): give a folder for the runs"
        )
    grid = _Grid(sc, overrides, out_path, _configs_dir(configs))
    seed_list = list(range(seeds))
    for seed in seed_list:
        _add_table2_runs(grid, seed, order)
        if "fedsc" in chosen:
            _add_dp_runs(grid, seed, chosen)
    # FedSC with its stability options, paired by seed with the Table 2 runs: planned
    # last, so that a grid stopped early holds complete seeds of the paper's comparison
    stable = tier not in TIER_DEFS or TIER_DEFS[tier].stable
    for seed in seed_list if "fedsc" in chosen and stable else ():
        for setting in grid.scale.settings:
            grid.add(setting, "fedsc", seed, "table2", stable=True)
    return Plan(
        experiment,
        sc,
        list(grid.runs.values()),
        out_path,
        order,
        excluded,
        seed_list,
        list(overrides),
        tier,
    )


def _plan_scale(experiment: str, scale: str, quick: bool, tier: str) -> Scale:
    """The scale of the plan (``tier="core"``: its 10 x 1 settings and no DP tables)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; known: {list(EXPERIMENTS)}")
    if scale not in ("cpu", "paper"):
        raise ValueError(f"--scale must be 'cpu' or 'paper', got {scale!r}")
    if quick and scale != "cpu":
        raise ValueError(
            f"--quick is the CPU smoke run; it cannot be combined with --scale {scale}"
        )
    if tier not in TIERS:
        raise ValueError(f"--tier must be one of {list(TIERS)}, got {tier!r}")
    sc = SCALES["quick" if quick else scale]
    if tier in TIER_DEFS:
        if scale != "cpu":
            raise ValueError(
                f"--tier {tier} is a CPU tier (Fashion-MNIST); it has no --scale {scale} plan"
            )
        t = TIER_DEFS[tier]
        prefix = sc.settings[0].prefix
        settings = tuple(
            Setting(
                ts.key,
                prefix,
                ts.num_clients,
                ts.classes_per_client,
                None,
                ("CIFAR-10", "10/10") if ts.num_clients == 10 else ("SVHN", "5/5"),
                ts,
            )
            for ts in t.settings
        )
        return dataclasses.replace(sc, settings=settings, dp=t.dp, description=t.description)
    if tier == "core":
        keep = (
            tuple(s for s in sc.settings if s.num_clients == 10 and s.classes_per_client == 1)
            or sc.settings
        )
        sc = dataclasses.replace(sc, settings=keep, dp=())
    return sc


def _chosen_methods(methods: Sequence[str] | None, tier: str) -> tuple[list[str], list[str]]:
    """``(registered, chosen)``: every registered method and those the plan runs."""
    registered = list(ssl_methods())  # the FedSC reproduction: the SSL pillar's methods
    if tier in TIER_DEFS:
        tier_methods = [m for m in registered if m in TIER_DEFS[tier].methods]
    else:
        tier_methods = (
            registered if tier == "full" else [m for m in registered if m in CORE_METHODS]
        )
    if methods is None:
        chosen = tier_methods
    else:
        chosen = list(dict.fromkeys(methods))
        bad = [m for m in chosen if m not in registered]
        if not chosen:
            raise ValueError(
                f"--methods names no method; give registered methods separated "
                f"by commas: {registered}"
            )
        if bad:
            raise ValueError(f"--methods: unknown method(s) {bad!r}; registered: {registered}")
        outside = [m for m in chosen if m not in tier_methods]
        if outside:
            raise ValueError(
                f"method(s) {outside} are not in the {tier} tier ({tier_methods}); add --tier full"
            )
    for m in chosen:  # a registered method that cannot be imported stops the plan
        method_class(m)
    return registered, chosen


class _Grid:
    """The runs of a plan being built, in order: each base config is loaded once, and a
    run needed by several tables is planned once and lists them all."""

    def __init__(
        self, scale: Scale, overrides: Sequence[str], out: Path, configs_dir: Path
    ) -> None:
        self.scale, self.overrides, self.out, self.configs_dir = (
            scale,
            overrides,
            out,
            configs_dir,
        )
        self.settings = {s.key: s for s in scale.settings}
        self.bases: dict[tuple[str, str], tuple[Path, Any]] = {}
        self.runs: dict[str, RunSpec] = {}

    def base_of(self, prefix: str, method: str) -> tuple[Path, Any]:
        if (prefix, method) not in self.bases:
            path = resolve_base_config(self.scale, prefix, method, self.configs_dir)
            self.bases[(prefix, method)] = (path, _load_base(path, method))
        return self.bases[(prefix, method)]

    def add(
        self,
        setting: Setting,
        method: str,
        seed: int,
        table: str,
        dp: tuple[float, float] | None = None,
        late: bool = False,
        gn: bool = False,
        stable: bool = False,
    ) -> None:
        name = (
            _dp_name(setting, dp[0], dp[1], seed)
            if dp is not None
            else _late_name(setting, seed)
            if late
            else _gn_name(setting, method, seed)
            if gn
            else _stable_name(setting, seed)
            if stable
            else _run_name(setting, method, seed)
        )
        if name in self.runs:
            if table not in self.runs[name].tables:
                self.runs[name].tables.append(table)
            return
        path, base = self.base_of(setting.prefix, method)
        cfg = _grid_config(
            copy.deepcopy(base),
            self.scale,
            self.overrides,
            setting,
            method,
            seed,
            name,
            self.out / "runs" / name,
            dp,
            late,
            gn,
            stable,
        )
        self.runs[name] = RunSpec(
            name, method, setting, seed, cfg, path, dp, [table], late, gn, stable
        )


def _add_table2_runs(grid: _Grid, seed: int, order: Sequence[str]) -> None:
    """The Table 2 runs of one seed: every method on every setting; centralized SC once
    per dataset (pooled data), with the first full-participation setting."""
    central_done: set[str] = set()
    for setting in grid.scale.settings:
        for m in order:
            if m == CENTRAL:
                if not setting.full or setting.prefix in central_done:
                    continue
                central_done.add(setting.prefix)
            grid.add(setting, m, seed, "table2")


def _add_dp_runs(grid: _Grid, seed: int, chosen: Sequence[str]) -> None:
    """The DP tables' runs of one seed: FedSC at each ε, its noise-free late-sharing
    control, ε = ∞ (the Table 2 run), FedAvg+SC, and noise-free GroupNorm comparators
    where the Table 2 runs use batch statistics."""
    for delta, epsilons, keys in grid.scale.dp:
        table = f"dp{delta:g}"
        for key in keys:
            setting = grid.settings[key]
            for eps in epsilons:
                grid.add(setting, "fedsc", seed, table, (eps, delta))
            grid.add(setting, "fedsc", seed, table, late=True)  # no noise, late
            grid.add(setting, "fedsc", seed, table)  # epsilon = inf
            if "fedavg_sc" in chosen:
                grid.add(setting, "fedavg_sc", seed, table)
            # the Table 2 runs use batch statistics, which DP-CalR cannot: noise-free
            # comparators with the DP runs' GroupNorm
            t2 = grid.runs.get(_run_name(setting, "fedsc", seed))
            if t2 is not None and "batch" in (t2.config.model.norm, t2.config.model.projector_norm):
                grid.add(setting, "fedsc", seed, table, gn=True)
                if "fedavg_sc" in chosen:
                    grid.add(setting, "fedavg_sc", seed, table, gn=True)


def _dp_groups(scale: Scale) -> dict[float, dict[str, list[float]]]:
    """``{delta: {setting key: [epsilons]}}`` of the scale's DP tables."""
    out: dict[float, dict[str, list[float]]] = {}
    for delta, eps, keys in scale.dp:
        g = out.setdefault(delta, {})
        for k in keys:
            g.setdefault(k, [])
            g[k].extend(e for e in eps if e not in g[k])
    return out
