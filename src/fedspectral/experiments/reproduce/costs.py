"""The cost model of the plan (for ``--dry-run`` and the report): single-thread CPU
seconds predicted per run (docs/reproduce.md, "Time")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from fedspectral.experiments.reproduce.paper import CENTRAL
from fedspectral.experiments.reproduce.plan import Plan, RunSpec, _grid_config, _load_base
from fedspectral.kinds import PhaseKind

#: seconds of one CPU thread (the small CNN of the CPU configs, width 4, on 28x28 images),
#: fitted by ``scripts/fit_costs.py`` to the full CPU tier of 2026-12-02 (111 runs,
#: ``--jobs 2`` on this 2-core machine, one thread each; docs/reproduce.md "Time"): the
#: median over rounds, then over runs, of each phase's seconds per training sample and
#: local epoch (all its views), per sample and sharing view (FedSC's DP-CalR pass), per
#: image of a KNN evaluation (bank + test); per bank image and probe epoch and per run
#: (start-up) are not in the rounds' timings and are estimates. With these (rounded)
#: constants the model puts the 111 runs at 8 354 s against 8 414 s of measured rounds;
#: the constants of the earlier width-8 BatchNorm protocol were 5-13x these.
COSTS: dict[str, Any] = {
    "train_sample": {
        "fedsc": 2.6e-4,
        "fedavg_sc": 2.6e-4,
        "central_sc": 2.9e-4,
        "fedavg_byol": 3.3e-4,
        "fedu": 3.2e-4,
        "fedema": 3.3e-4,
        "fedx": 4.7e-4,
        "fedca": 4.6e-4,
    },
    "train_sample_default": 4.7e-4,
    # FedCA's server-side base model: per public image and SimCLR epoch (not timed per
    # round; the earlier constant scaled by the training constants' ratio, 0.15)
    "fedca_base_sample": 2.8e-4,
    "share_view_sample": 4.6e-5,
    "eval_image": 1.1e-4,
    "probe_image_epoch": 1.0e-6,
    "run_overhead": 4.0,
    "reference_pixels": 28 * 28,
}


def _client_size(cfg: Any) -> float:
    from fedspectral.data import dataset_info  # lazy: pulls in torch

    info = dataset_info(cfg.data.dataset)
    n = cfg.data.max_train or info.train_size
    n = n * (1.0 - cfg.data.val_fraction)
    if cfg.partition.samples_per_client is not None:
        return float(
            min(
                cfg.partition.samples_per_client,
                n * cfg.partition.classes_per_client / info.num_classes,
            )
        )
    return n * cfg.partition.classes_per_client / info.num_classes


#: methods that train on the pooled data of every client in each round (not K of J)
POOLED_METHODS = frozenset({CENTRAL})


def _fedsc_share_seconds(cfg: Any, c: Mapping[str, Any], nj: float) -> float:
    """FedSC's correlation sharing (DP-CalR passes): every client uploads in the first
    sharing round, the sampled ones in each later one."""
    from fedspectral.fed.methods.fedsc import share_rounds  # lazy: pulls in torch and dp-accounting

    J = cfg.partition.num_clients
    K = cfg.method.clients_per_round or J
    p = cfg.method.params
    s = len(share_rounds(cfg.method.rounds, p["share_start"], p["share_every"]))
    uploads = (J + (s - 1) * min(K, J)) if s else 0
    return uploads * nj * p["share_views"] * c["share_view_sample"]


def _fedca_base_seconds(cfg: Any, c: Mapping[str, Any], nj: float) -> float:
    """FedCA's server-side base model (SimCLR on the public split), when it aligns."""
    from fedspectral.fed.methods.fedca import FedCA  # lazy: pulls in torch and dp-accounting

    p = {**FedCA.default_params, **(cfg.method.params or {})}
    if p["align_weight"] > 0:
        return p["base_epochs"] * p["public_size"] * c["fedca_base_sample"]
    return 0.0


#: the work of a method besides local training, per method: ``fn(config, costs, |D_j|)``
#: in seconds (before the image-area scaling); other methods have none
EXTRA_WORK: dict[str, Callable[[Any, Mapping[str, Any], float], float]] = {
    "fedsc": _fedsc_share_seconds,
    "fedca": _fedca_base_seconds,
}


def _training_clients(cfg: Any, method: str, sampled: int) -> int:
    """Clients whose data one round trains on: all of them for a pooled method."""
    return cfg.partition.num_clients if method in POOLED_METHODS else sampled


def _bank_size(cfg: Any, nj: float) -> float:
    """Images of the KNN / probe bank: the clients' data, or ``eval.bank_size`` of it."""
    J = cfg.partition.num_clients
    return J * nj if cfg.eval.bank_size is None else min(cfg.eval.bank_size, J * nj)


def _eval_images(cfg: Any, nj: float) -> float:
    """Images of one KNN evaluation: the bank plus the evaluation split (capped at
    ``eval.test_size``)."""
    from fedspectral.data import dataset_info  # lazy: pulls in torch

    info = dataset_info(cfg.data.dataset)
    test = (
        info.test_size
        if cfg.data.eval_split == "test"
        else (cfg.data.max_train or info.train_size) * cfg.data.val_fraction
    )
    if cfg.eval.test_size is not None:
        test = min(test, cfg.eval.test_size)
    return _bank_size(cfg, nj) + test


def estimate_run_seconds(spec: RunSpec, costs: Mapping[str, Any] | None = None) -> float:
    """Predicted single-thread seconds of a run from :data:`COSTS` (a linear model in
    the samples processed: training, FedSC sharing, evaluations, linear probe;
    scaled by image area relative to 28 x 28).  A planning aid, not a measurement:
    the report quotes the measured times."""
    from fedspectral.data import dataset_info  # lazy: pulls in torch

    c = dict(COSTS if costs is None else costs)
    cfg = spec.config
    info = dataset_info(cfg.data.dataset)
    area = info.size * info.size / c["reference_pixels"]
    J = cfg.partition.num_clients
    K = cfg.method.clients_per_round or J
    T, E = cfg.method.rounds, cfg.method.local_epochs
    nj = _client_size(cfg)
    views = max(1, cfg.method.views)
    per_sample = c["train_sample"].get(spec.method, c["train_sample_default"]) * views
    clients = _training_clients(cfg, spec.method, min(K, J))
    train = T * E * clients * nj * per_sample
    extra = EXTRA_WORK.get(spec.method)
    share = extra(cfg, c, nj) if extra is not None else 0.0
    evals = len([t for t in range(1, T + 1) if t % cfg.eval.every == 0 or t == T])
    ev = evals * _eval_images(cfg, nj) * c["eval_image"]
    bank = _bank_size(cfg, nj)
    # the L-BFGS probe's cost is its features: a few hundred full-batch passes of a
    # d x classes product, negligible beside them (counted as one Adam epoch)
    epochs = cfg.eval.probe_epochs if cfg.eval.probe_solver == "adam" else 1
    probe = epochs * bank * c["probe_image_epoch"] if cfg.eval.linear_probe else 0
    return float(area * (train + share + ev + probe) + c["run_overhead"])


def unreduced_estimate_seconds(plan: Plan) -> float | None:
    """:func:`estimate_run_seconds` summed over the plan's runs built *without* the
    scale's reductions (what the base configs as they are would cost); ``None``
    when the scale has no reductions."""
    if not plan.scale.reductions:
        return None
    bare = dataclasses.replace(plan.scale, reductions=())
    total = 0.0
    for spec in plan.runs:
        cfg = _grid_config(
            _load_base(spec.base, spec.method),
            bare,
            plan.overrides,
            spec.setting,
            spec.method,
            spec.seed,
            spec.name,
            plan.run_dir(spec),
            spec.dp,
            spec.late,
            spec.gn,
        )
        total += estimate_run_seconds(dataclasses.replace(spec, config=cfg))
    return total


def run_unit_seconds(results: Mapping[str, Any], cfg: Any) -> dict[str, float | None]:
    """The seconds per unit of :data:`COSTS` that one finished run measured, each the
    median over its rounds: ``train`` per training sample, local epoch and pair of
    views (the train phase), ``share`` per sample and sharing view (FedSC's share
    phase), ``eval`` per image of a KNN evaluation; ``None`` where the run has no such
    round. Medians, because a run that shares its core with others has slow rounds
    whenever the machine is busy. ``results`` is the run's ``results.json``."""
    import statistics

    nj = _client_size(cfg)
    views = max(1, cfg.method.views)
    train, share, evals = [], [], []
    for r in results["records"]:
        # the training phase, and the correlations' query (or secure sum): by kind
        kinds = {ph.get("kind"): ph for ph in reversed(list(r["phases"].values()))}
        tr = kinds.get(PhaseKind.TRAIN)
        if tr and tr["participants"]:
            clients = _training_clients(cfg, results["method"], len(tr["participants"]))
            train.append(tr["seconds"] / (clients * nj * cfg.method.local_epochs * views))
        sh = kinds.get(PhaseKind.QUERY) or kinds.get(PhaseKind.SECURE_SUM)
        if sh and sh["participants"]:
            share.append(
                sh["seconds"] / (len(sh["participants"]) * nj * cfg.method.params["share_views"])
            )
        if "seconds_eval" in r:
            evals.append(r["seconds_eval"] / _eval_images(cfg, nj))
    med = [statistics.median(v) if v else None for v in (train, share, evals)]
    return dict(zip(("train", "share", "eval"), med, strict=True))


def fit_costs(
    runs: list[tuple[str, Mapping[str, Any], Any]], costs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """:data:`COSTS` (or ``costs``) with the constants that finished runs measure
    replaced by the median over runs of :func:`run_unit_seconds`: ``train_sample`` per
    method, ``share_view_sample`` and ``eval_image``. ``runs`` holds ``(method,
    results, config)`` per run. The per-run constants (start-up), the probe's and
    FedCA's base model's are not in the rounds' timings and are kept."""
    import statistics

    base = COSTS if costs is None else costs
    fitted = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    units = [(m, run_unit_seconds(res, cfg)) for m, res, cfg in runs]
    for m in sorted({m for m, _ in units}):
        vals = [u["train"] for mm, u in units if mm == m and u["train"] is not None]
        if vals:
            fitted["train_sample"][m] = statistics.median(vals)
    for key, field in (("share_view_sample", "share"), ("eval_image", "eval")):
        vals = [v for _, u in units if (v := u[field]) is not None]
        if vals:
            fitted[key] = statistics.median(vals)
    return fitted
