"""Aggregation of the finished runs: the tables (mean ± std over seeds), the privacy
accounting, the timings (:func:`summarize`) and ``summary.json``
(:func:`protocol_summary`)."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fedspectral.experiments.reproduce.claims import observations
from fedspectral.experiments.reproduce.costs import estimate_run_seconds
from fedspectral.experiments.reproduce.execute import COST_FILE, _load_json, run_status
from fedspectral.experiments.reproduce.paper import CENTRAL, METRICS, UNTRAINED
from fedspectral.experiments.reproduce.plan import Plan, RunSpec, Setting, _dp_groups
from fedspectral.experiments.reproduce.stats import as_number, paired_diff, seed_cell
from fedspectral.experiments.reproduce.tiers import TIER_DEFS
from fedspectral.experiments.reproduce.verdicts import verdict_positive


def collect_results(plan: Plan) -> dict[str, dict[str, Any]]:
    """The results of every *finished* run of ``plan`` (``{name: results dict}``)."""
    out = {}
    for spec in plan.runs:
        if run_status(plan, spec) == "done":
            res = _load_json(plan.run_dir(spec) / "results.json")
            if res is not None:
                out[spec.name] = res
    return out


def _variant_key(v: Any) -> str:
    if v is None:
        return ""
    if v in ("late", "gn"):
        return str(v)
    return f"{v[0]:g},{v[1]:g}"


def summarize(plan: Plan, results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Tables (mean ± std over seeds, in %), privacy accounting, timings and the
    observations, from the results of ``plan``'s finished runs."""
    sc = plan.scale
    missing = [r.name for r in plan.runs if r.name not in results]
    values, curves, untrained_seen = _seed_values(plan, results)
    rows2 = plan.rows + ([UNTRAINED] if untrained_seen else [])
    table2 = {
        metric: {
            m: {s.key: seed_cell(values[metric].get((m, s.key, None), [])) for s in sc.settings}
            for m in rows2
        }
        for metric in METRICS
    }
    summary = {
        "experiment": plan.experiment,
        "scale": sc.name,
        "tier": plan.tier,
        "description": sc.description,
        "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs_planned": len(plan.runs),
        "runs_finished": len(plan.runs) - len(missing),
        "missing": missing,
        "methods": plan.methods,
        "rows": plan.rows,
        "excluded_methods": plan.excluded,
        "seeds": plan.seeds,
        "reductions": list(sc.reductions),
        "overrides": plan.overrides,
        "settings": [
            {
                "key": s.key,
                "label": s.label,
                "paper": list(s.paper),
                "participation": s.participation,
                "full": s.full,
                "prefix": s.prefix,
                "num_clients": s.num_clients,
                "classes_per_client": s.classes_per_client,
            }
            for s in sc.settings
        ],
        "table2": table2,
        "dp": _dp_tables(plan, values),
        "privacy": [
            _privacy_entry(spec, results.get(spec.name))
            for spec in plan.runs
            if spec.dp is not None
        ],
        "timing": _timing(plan, results),
        "estimated_seconds": sum(estimate_run_seconds(r) for r in plan.runs),
    }
    summary["curves"] = {f"{m}|{k}|{_variant_key(dp)}": v for (m, k, dp), v in curves.items()}
    summary["tier_verdicts"] = tier_verdicts(plan, summary)
    summary["observations"] = observations(summary)
    return summary


#: the metrics a mechanism tier's verdicts decide on
TIER_METRICS = ("knn_backbone", "linear_probe")


def tier_verdicts(plan: Plan, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A mechanism tier's paired comparisons (:attr:`Tier.comparisons`), per setting and
    metric (KNN on h, linear probe): ``a - b`` over the seeds both rows have, with its
    95 % paired t interval and the verdict of :data:`~.verdicts.RULE` (empty for the
    Table 2 tiers)."""
    tier = TIER_DEFS.get(plan.tier)
    if tier is None:
        return []
    out: list[dict[str, Any]] = []
    for s in plan.scale.settings:
        for a, b in tier.comparisons:
            for metric in TIER_METRICS:
                tab = summary["table2"][metric]
                d = paired_diff(tab.get(a, {}).get(s.key), tab.get(b, {}).get(s.key))
                out.append(
                    {
                        "setting": s.key,
                        "label": s.label,
                        "local_steps": None if s.tier is None else s.tier.local_steps,
                        "a": a,
                        "b": b,
                        "metric": metric,
                        "diff": d,
                        "verdict": verdict_positive(d),
                    }
                )
    return out


#: ``values[metric][(method, setting key, variant)] = [(seed, value %)]``
Values = dict[str, dict[tuple, list[tuple[int, float]]]]


def _seed_values(
    plan: Plan,
    results: Mapping[str, Mapping[str, Any]],
) -> tuple[Values, dict[tuple, list[dict[str, Any]]], set[tuple[str, int]]]:
    """Every finished run's final accuracies (%) and KNN curve under its table keys,
    and the untrained network's accuracies once per (setting, seed); ``(values,
    curves, (setting, seed) pairs with an untrained row)``."""
    values: Values = {m: {} for m in METRICS}
    curves: dict[tuple, list[dict[str, Any]]] = {}
    untrained_seen: set[tuple[str, int]] = set()
    for spec in plan.runs:
        res = results.get(spec.name)
        if res is None:
            continue
        init = res.get("initial")
        if init and (spec.setting.key, spec.seed) not in untrained_seen:
            untrained_seen.add((spec.setting.key, spec.seed))
            for metric in METRICS:
                if metric in init:
                    values[metric].setdefault((UNTRAINED, spec.setting.key, None), []).append(
                        (spec.seed, 100.0 * as_number(init[metric]))
                    )
        final = res.get("final", {})
        keys = [(spec.row, spec.setting.key, spec.variant)]
        if spec.method == CENTRAL:  # pooled data: shown in every full column of the dataset
            keys = [
                (spec.method, s.key, None)
                for s in plan.scale.settings
                if s.full and s.prefix == spec.setting.prefix
            ]
        for metric in METRICS:
            if metric in final:
                for k in keys:
                    values[metric].setdefault(k, []).append(
                        (spec.seed, 100.0 * as_number(final[metric]))
                    )
        for k in keys:
            curves.setdefault(k, []).append(_curve(spec.seed, res))
    return values, curves, untrained_seen


def _curve(seed: int, res: Mapping[str, Any]) -> dict[str, Any]:
    """The KNN accuracies (%) of a run at the rounds it evaluated them."""
    records = [r for r in res.get("records", []) if "knn_backbone" in r]
    return {
        "seed": seed,
        "rounds": [int(r["round"]) for r in records],
        "knn_backbone": [100.0 * as_number(r["knn_backbone"]) for r in records],
        "knn_projector": [100.0 * as_number(r["knn_projector"]) for r in records],
    }


def _dp_tables(plan: Plan, values: Values) -> list[dict[str, Any]]:
    """One table per δ of the scale's DP tables (none without FedSC): its rows
    (:func:`_dp_row_keys`) and their cells per setting."""
    tables = []
    for delta, group in _dp_groups(plan.scale).items() if "fedsc" in plan.methods else ():
        table = {
            "delta": delta,
            "settings": list(group),
            "rows": [
                _dp_row(method, eps, delta, group, values)
                for method, eps in _dp_row_keys(plan, group)
            ],
        }
        tables.append(table)
    return tables


def _dp_row_keys(plan: Plan, group: Mapping[str, Sequence[float]]) -> list[tuple[str, Any]]:
    """``(method, ε or "late" / "gn")`` of a DP table's rows, in display order."""
    eps_all = sorted({e for es in group.values() for e in es})
    has_gn = any(r.gn for r in plan.runs)
    rows: list[tuple[str, Any]] = []
    if "fedavg_sc" in plan.methods:
        rows.append(("fedavg_sc", None))
        if has_gn:
            rows.append(("fedavg_sc", "gn"))
    rows += [("fedsc", e) for e in eps_all] + [("fedsc", "late")]
    rows += [("fedsc", "gn")] if has_gn else []
    rows += [("fedsc", math.inf)]
    return rows


def _dp_row(
    method: str, eps: Any, delta: float, group: Mapping[str, Sequence[float]], values: Values
) -> dict[str, Any]:
    """A DP table's row: its cells per setting (``None`` where the setting has no run at
    this ε)."""
    late, gn = eps == "late", eps == "gn"
    row = {
        "method": method,
        "epsilon": math.inf if (late or gn) else eps,
        "late": late,
        "gn": gn,
        "cells": {},
    }
    for key, es in group.items():
        if (
            method == "fedsc"
            and not (late or gn)
            and eps is not None
            and math.isfinite(eps)
            and eps not in es
        ):
            row["cells"][key] = None
            continue
        dp: Any = (
            "late"
            if late
            else "gn"
            if gn
            else (eps, delta)
            if (eps is not None and math.isfinite(eps))
            else None
        )
        row["cells"][key] = {
            metric: seed_cell(values[metric].get((method, key, dp), [])) for metric in METRICS
        }
    return row


def _privacy_entry(spec: RunSpec, res: Mapping[str, Any] | None) -> dict[str, Any]:
    """The privacy accounting of a DP run: as planned, and as its ledger recorded it."""
    # lazy: pulls in torch and dp-accounting
    from fedspectral.fed.methods.fedsc import planned_releases

    if spec.dp is None:
        raise ValueError(f"run {spec.name!r} is not a DP run: it has no privacy entry")
    cfg = spec.config
    p = cfg.method.params
    entry: dict[str, Any] = {
        "run": spec.name,
        "setting": spec.setting.key,
        "seed": spec.seed,
        "epsilon_target": spec.dp[0],
        "delta": spec.dp[1],
        "accountant": cfg.dp.accountant,
        "plan": cfg.dp.plan,
        "share_start": p["share_start"],
        "rounds": cfg.method.rounds,
        "planned_releases": planned_releases(
            cfg.method.rounds,
            p["share_start"],
            p["share_every"],
            cfg.partition.num_clients,
            cfg.method.clients_per_round,
            cfg.dp.plan,
        ),
        "finished": res is not None,
    }
    if res is not None:
        priv = res.get("privacy", {})
        counts: dict[str, int] = {}
        for r in priv.get("ledger", {}).get("releases", []):
            counts[r["party"]] = counts.get(r["party"], 0) + int(r.get("count", 1))
        sig = [float(v) for v in priv.get("sigma", {}).values()]
        entry.update(
            {
                "releases_per_client": sorted(counts.values()),
                "releases_max": max(counts.values()) if counts else 0,
                "sigma_min": min(sig) if sig else None,
                "sigma_max": max(sig) if sig else None,
                "epsilon_rdp": as_number(priv["epsilon_rdp"]) if "epsilon_rdp" in priv else None,
                "epsilon_pld": as_number(priv["epsilon_pld"]) if "epsilon_pld" in priv else None,
                "client_sizes": res.get("data", {}).get("client_sizes", {}),
                "warnings": list(priv.get("warnings", [])),
            }
        )
    return entry


def _timing(plan: Plan, results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Measured seconds (training, evaluation and the linear probe) over the finished
    runs, in all and per method."""
    timing: dict[str, Any] = {
        "measured_seconds": 0.0,
        "runs": 0,
        "per_method": {},
        "cpu_seconds": 0.0,
        "cpu_runs": 0,
    }
    for spec in plan.runs:
        res = results.get(spec.name)
        if res is None:
            continue
        cost = _load_json(plan.run_dir(spec) / COST_FILE)
        if isinstance(cost, dict) and isinstance(cost.get("cpu_seconds"), int | float):
            timing["cpu_seconds"] += float(cost["cpu_seconds"])
            timing["cpu_runs"] += 1
        t = float(res.get("timings", {}).get("total_seconds", 0.0))
        t += float(res.get("final", {}).get("seconds_probe", 0.0))
        timing["measured_seconds"] += t
        timing["runs"] += 1
        timing["per_method"].setdefault(spec.method, []).append(t)
    timing["per_method"] = {
        m: {"runs": len(v), "mean_seconds": sum(v) / len(v)}
        for m, v in timing["per_method"].items()
    }
    return timing


def _setting_id(s: Setting) -> str:
    """``"10x1-10/10"``, ``"5x2-2/5"``: class split and participation; a mechanism tier's
    setting by its key (``"10x1-lowdrift"``, ``"dir0.1"``, ...)."""
    if s.tier is not None:
        return s.key
    return f"{s.num_clients}x{s.classes_per_client}-{s.participation}"


def _protocol(plan: Plan) -> dict[str, Any]:
    """The settings every run shares (read from a FedSC run's config when there is one)."""
    specs = [r for r in plan.runs if r.method == "fedsc"] or plan.runs
    c = specs[0].config if specs else None
    out: dict[str, Any] = {
        "scale": plan.scale.name,
        "tier": plan.tier,
        "reductions": list(plan.scale.reductions),
        "overrides": list(plan.overrides),
        "seeds": list(plan.seeds),
        "methods": list(plan.methods),
        "settings": [_setting_id(s) for s in plan.scale.settings],
        "base_configs": sorted({str(r.base) for r in plan.runs}),
    }
    if c is not None:
        out.update(
            {
                "dataset": c.data.dataset,
                "max_train": c.data.max_train,
                "model": {
                    "backbone": c.model.backbone,
                    "norm": c.model.norm,
                    "projector_norm": c.model.projector_norm,
                    "width": c.model.width,
                    "projector_hidden": c.model.projector_hidden,
                    "projector_out": c.model.projector_out,
                },
                "rounds": c.method.rounds,
                "local_epochs": c.method.local_epochs,
                "views": c.method.views,
                "optim": {
                    "lr": c.optim.lr,
                    "batch_size": c.optim.batch_size,
                    "momentum": c.optim.momentum,
                    "weight_decay": c.optim.weight_decay,
                    "grad_clip": c.optim.grad_clip,
                    "schedule": c.optim.schedule,
                },
                "fedsc": dict(c.method.params) if c.method.name == "fedsc" else None,
                "eval": {
                    "every": c.eval.every,
                    "knn_k": c.eval.knn_k,
                    "knn_t": c.eval.knn_t,
                    "test_size": c.eval.test_size,
                    "split": c.data.eval_split,
                    "probe": _probe_settings(c.eval),
                },
            }
        )
    return out


def _probe_settings(ev: Any) -> dict[str, Any]:
    if ev.probe_solver == "lbfgs":
        return {
            "solver": "lbfgs",
            "features": "standardised",
            "c": ev.probe_c,
            "max_iter": ev.probe_max_iter,
        }
    return {"solver": "adam", "features": "raw", "lr": ev.probe_lr, "epochs": ev.probe_epochs}


def protocol_summary(plan: Plan, results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``summary.json``: ``{"protocol": {...}, "runs": [...]}``, one entry per finished
    run (``setting``, ``method``, ``variant``, ``seed``, ``dp``, ``final``, ``curve``;
    accuracies as fractions; ``variant`` is :attr:`RunSpec.variant_name`, so that
    (setting, method, variant, seed, dp) names one run) plus one ``"untrained"`` entry
    per (setting, seed), from the runs' ``initial`` evaluations."""
    runs: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    finals = ("knn_backbone", "knn_projector", "linear_probe")
    for spec in plan.runs:
        res = results.get(spec.name)
        if res is None:
            continue
        sid = _setting_id(spec.setting)
        curve = [
            {
                "round": int(r["round"]),
                "knn_backbone": float(r["knn_backbone"]),
                "knn_projector": float(r["knn_projector"]),
                "sc_objective": (
                    None if r.get("sc_objective") is None else float(r["sc_objective"])
                ),
            }
            for r in res.get("records", [])
            if "knn_backbone" in r
        ]
        final = {k: float(v) for k, v in res.get("final", {}).items() if k in finals}
        entry: dict[str, Any] = {
            "setting": sid,
            "method": spec.method,
            "seed": spec.seed,
            "dp": None
            if spec.dp is None
            else {"epsilon": float(spec.dp[0]), "delta": float(spec.dp[1])},
            "variant": spec.variant_name,
            "final": final,
            "curve": curve,
        }
        runs.append(entry)
        init = res.get("initial")
        if init and (sid, spec.seed) not in seen:
            seen.add((sid, spec.seed))
            runs.append(
                {
                    "setting": sid,
                    "method": UNTRAINED,
                    "seed": spec.seed,
                    "dp": None,
                    "variant": "main",
                    "final": {k: float(v) for k, v in init.items() if k in finals},
                    "curve": [
                        {
                            "round": 0,
                            "knn_backbone": float(init["knn_backbone"]),
                            "knn_projector": float(init["knn_projector"]),
                            "sc_objective": (
                                None
                                if init.get("sc_objective") is None
                                else float(init["sc_objective"])
                            ),
                        }
                    ],
                }
            )
    return {"protocol": _protocol(plan), "runs": runs}
