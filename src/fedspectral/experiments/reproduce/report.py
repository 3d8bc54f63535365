"""The report: ``REPORT.md``, ``summary.json``, ``tables.json``, the CSV tables and the
convergence figure (:func:`write_report`), and the plan as text (:func:`describe_plan`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedspectral.atomic import atomic_batch
from fedspectral.experiments.reproduce.costs import (
    _client_size,
    estimate_run_seconds,
    unreduced_estimate_seconds,
)
from fedspectral.experiments.reproduce.figure import _mean_curve_from_zero  # noqa: F401
from fedspectral.experiments.reproduce.figure import (
    plot_convergence_grid as _plot_convergence_grid,
)
from fedspectral.experiments.reproduce.paper import (
    CENTRAL,
    METHOD_LABELS,
    METHOD_ORDER,
    METRICS,
    PAPER_DP,
    PAPER_SETUP,
    PAPER_TABLE2,
    UNTRAINED,
)
from fedspectral.experiments.reproduce.plan import Plan, Setting, _dp_groups
from fedspectral.experiments.reproduce.stats import as_number
from fedspectral.experiments.reproduce.summary import protocol_summary
from fedspectral.experiments.reproduce.verdicts import RULE, fmt_diff, short_label
from fedspectral.results import write_csv, write_json, write_text


def _fmt_cell(c: Mapping[str, Any] | None, n_seeds: int) -> str:
    if c is None:
        return "·"
    if not c.get("n"):
        return "pending"
    s = f"{c['mean']:.2f} ± {c['std']:.2f}" if c["n"] > 1 else f"{c['mean']:.2f}"
    if c["n"] < n_seeds:
        s += f" ({c['n']}/{n_seeds} seeds)"
    return s


def _fmt_paper(v: tuple[float, float] | None) -> str:
    return "–" if v is None else f"{v[0]:.2f} ± {v[1]:.2f}"


def _scale_rows(plan: Plan, results: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(aspect, ours) of the runs actually configured (the first FedSC run)."""
    spec = next((r for r in plan.runs if r.method == "fedsc" and r.variant is None), plan.runs[0])
    c = spec.config
    sizes = sorted({round(_client_size(r.config)) for r in plan.runs if r.method != CENTRAL})
    res = results.get(spec.name, {})
    if res.get("data", {}).get("client_sizes"):
        sizes = sorted(set(res["data"]["client_sizes"].values()))
    width = c.model.width if c.model.width is not None else "default"
    rows = [
        (
            "data",
            (
                f"{c.data.dataset} (train subset {c.data.max_train or 'all'}), "
                f"|D_j| = {', '.join(str(s) for s in sizes)} images per client"
            ),
        ),
        (
            "model",
            (
                f"{c.model.backbone} (width {width}, norm {c.model.norm}), projector "
                f"{c.model.projector_hidden}-{c.model.projector_out}"
            ),
        ),
        (
            "training",
            (
                f"T = {c.method.rounds} rounds, E = {c.method.local_epochs}, "
                f"B = {c.optim.batch_size}, V = {c.method.views} (2V views per batch), "
                f"{c.method.params.get('share_views', '–')} for sharing, SGD lr "
                f"{c.optim.lr:g} ({c.optim.schedule}), mu = "
                f"{c.method.params.get('mu', '–')}"
            ),
        ),
        (
            "DP",
            (
                "sharing from round floor(T/2)+1 = "
                f"{c.method.rounds // 2 + 1}, sigma calibrated (RDP) for the worst-case number "
                "of releases"
            ),
        ),
        (
            "evaluation",
            (
                f"linear probe ({_probe_words(c.eval)}), "
                f"KNN k = {c.eval.knn_k} on {c.eval.test_size or 'all'} "
                f"{c.data.eval_split} images, every {c.eval.every} rounds"
            ),
        ),
        ("seeds", f"{len(plan.seeds)} ({', '.join(map(str, plan.seeds))})"),
    ]
    return rows


def _probe_words(ev: Any) -> str:
    if ev.probe_solver == "lbfgs":
        return (
            f"logistic regression on standardised features, L-BFGS to tolerance, C = {ev.probe_c:g}"
        )
    return f"Adam {ev.probe_lr:g}, {ev.probe_epochs} epochs, raw features"


def _scale_note(plan: Plan) -> str:
    if plan.scale.name == "quick":
        return (
            "**Smoke run.** Two rounds on 8x8 digits with one seed exercise every method, "
            "the DP accounting and the report end to end; the numbers mean nothing about "
            "the paper's claims."
        )
    if plan.scale.name == "paper":
        return (
            "Paper scale: the paper's datasets, splits and participations; levels are "
            "comparable with the paper's where the configs match its setup (see the "
            "table above for what differs)."
        )
    ds = sorted({r.config.data.dataset for r in plan.runs})
    return (
        f"The numbers are **not** comparable in level with the paper's: another dataset "
        f"({', '.join(ds)}; grey 28x28 images, an easier 10-class task than CIFAR), a much "
        "smaller model, fewer rounds and less data per client. What can be compared is the "
        "*ordering* of the methods and the size of the effects (FedSC − FedAvg+SC, the cost "
        "of DP, the loss under partial participation). Our 10 clients x 1 class split "
        "mirrors the paper's CIFAR-10 split and 5 x 2 its SVHN split; the paper's column "
        "shown beside each of ours is that mirror."
    )


#: the report's section of the convergence figure (when there are curves to draw)
_FIGURE_LINES = (
    "## Convergence (paper Figure 2 analogue)",
    "",
    (
        "![KNN accuracy vs round, final linear probe and paired differences, FedSC vs "
        "FedAvg+SC](convergence.png)"
    ),
    "",
    (
        "Drawn from the results files, one column per setting. Rows 1-2: KNN accuracy "
        "against the round (backbone features h, projector outputs z), mean over the n "
        "seeds named in the legend with a band of ± 1 standard deviation over the seeds; "
        "round 0 is the untrained network of each seed (dashed: its mean). Row 3: the final "
        "linear probe (the metric the verdicts rest on), each seed and mean ± 1 std. Row 4: "
        "the paired differences the verdicts below decide with, mean over seeds and its "
        "95 % paired t interval, on the probe and both KNN."
    ),
    "",
)


def write_report(
    plan: Plan,
    summary: Mapping[str, Any],
    results: Mapping[str, Mapping[str, Any]] | None = None,
    folder: Path | None = None,
) -> dict[str, Path]:
    """``REPORT.md``, ``summary.json`` (:func:`protocol_summary`), ``tables.json`` (the
    tables of ``summary``), ``table2.csv``, ``dp.csv`` and ``convergence.png`` in
    ``folder`` (default ``plan.out``; see :func:`report_folder`) from results files
    only, all together or none
    (:func:`fedspectral.atomic.atomic_batch`)."""
    with atomic_batch():
        return _write_report(plan, summary, results, plan.report_out if folder is None else folder)


def _write_report(
    plan: Plan,
    summary: Mapping[str, Any],
    results: Mapping[str, Mapping[str, Any]] | None,
    out: Path,
) -> dict[str, Path]:
    results = results or {}
    paths: dict[str, Path] = {}
    L = _head_lines(plan, summary)
    L += _scale_lines(plan, summary, results)
    L += _tier_lines(plan, summary)
    L += _table2_lines(plan, summary)
    L += _dp_lines(plan, summary)
    L += _privacy_lines(summary)
    fig = _plot_convergence_grid(summary, plan.scale.settings, out / "convergence.png")
    if fig is not None:
        paths["figure"] = fig
        L += _FIGURE_LINES
    L += _observation_lines(summary)
    L += _time_lines(summary)
    paths["report"] = write_text(out / "REPORT.md", "\n".join(L))
    paths["summary"] = write_json(out / "summary.json", protocol_summary(plan, results))
    paths["tables"] = write_json(out / "tables.json", summary)
    paths["table2"] = write_csv(out / "table2.csv", _table2_csv_rows(plan, summary))
    paths["dp"] = write_csv(out / "dp.csv", _dp_csv_rows(summary))
    return paths


def _head_lines(plan: Plan, summary: Mapping[str, Any]) -> list[str]:
    """The title, what the report was generated from, and what is missing."""
    L: list[str] = []
    L.append(f"# FedSC reproduction — scale `{plan.scale.name}`")
    L.append("")
    cmd = "fedspectral reproduce fedsc " + (
        "--quick" if plan.scale.name == "quick" else f"--scale {plan.scale.name}"
    )
    cmd += f" --tier {plan.tier}"
    L.append(
        f"Generated by `{cmd}` on {summary['generated']} from "
        f"{summary['runs_finished']} of {summary['runs_planned']} planned runs "
        f"({plan.scale.description}). Every number below is computed from the runs' "
        f"`results.json` files under `runs/`; the paper's numbers are the FedSC paper's "
        f"(Jing et al., ICML 2024), linear evaluation, %."
    )
    L.append("")
    if summary["missing"]:
        L.append(
            f"**Incomplete:** {len(summary['missing'])} planned run(s) have no finished "
            f"results yet (cells marked `pending`): "
            + ", ".join(f"`{m}`" for m in summary["missing"][:12])
            + (" ..." if len(summary["missing"]) > 12 else "")
            + "."
        )
        L.append("")
    if summary["excluded_methods"]:
        L.append(
            f"**Methods not run** (tier `{plan.tier}`"
            + ("; `--tier full` runs every registered method" if plan.tier == "core" else "")
            + ", or left out by `--methods`): "
            + ", ".join(f"`{m}`" for m in summary["excluded_methods"])
            + "."
        )
        L.append("")
    return L


def _scale_lines(
    plan: Plan, summary: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """This reproduction's scale beside the paper's, its reductions and overrides."""
    L: list[str] = []
    L.append("## Scale: this reproduction vs the paper")
    L.append("")
    L.append("| | this reproduction | paper |")
    L.append("|---|---|---|")
    for aspect, ours in _scale_rows(plan, results):
        paper = PAPER_SETUP.get(aspect, "–")
        L.append(f"| {aspect} | {_md(ours)} | {_md(paper)} |")
    L.append("")
    L.append(_scale_note(plan))
    if plan.scale.reductions:
        L.append("")
        bare = unreduced_estimate_seconds(plan)
        L.append(
            "Reduced for the time budget (applied on top of the base configs "
            "`"
            + "`, `".join(sorted({str(r.base) for r in plan.runs}))
            + "`): "
            + ", ".join(f"`{r}`" for r in plan.scale.reductions)
            + ". Planning "
            f"estimate of the whole grid: {summary['estimated_seconds'] / 60:.0f} "
            f"single-thread CPU-minutes with them, {(bare or 0) / 60:.0f} without "
            '(docs/reproduce.md, "Time").'
        )
    if plan.overrides:
        L.append("")
        L.append("Command-line overrides: " + ", ".join(f"`{o}`" for o in plan.overrides) + ".")
    L.append("")
    return L


def _tier_lines(plan: Plan, summary: Mapping[str, Any]) -> list[str]:
    """A mechanism tier's verdicts: each paired comparison with its interval."""
    rows = summary.get("tier_verdicts") or []
    if not rows:
        return []
    L = [
        f"## Verdicts of the `{plan.tier}` tier (paired by seed, percentage points)",
        "",
        f"Rule: {RULE}. KNN on backbone features h and the linear probe, on the "
        "whole test split; the untrained network is each run's own initial weights.",
        "",
        "| setting | comparison | KNN h: mean [95 % CI] (n) | verdict | probe: mean [95 % CI] (n) "
        "| verdict |",
        "|---|---|---|---|---|---|",
    ]
    by: dict[tuple[str, str, str, str], Mapping[str, Any]] = {}
    for r in rows:
        by[(r["setting"], r["a"], r["b"], r["metric"])] = r
    seen: list[tuple[str, str, str, str]] = []
    for r in rows:
        k = (r["setting"], r["label"], r["a"], r["b"])
        if k not in seen:
            seen.append(k)
    for key, label, a, b in seen:
        cells = []
        for metric in ("knn_backbone", "linear_probe"):
            r = by.get((key, a, b, metric))
            cells += [fmt_diff(r["diff"]) if r else "n/a", r["verdict"] if r else "n/a"]
        comp = f"{short_label(a)} − {short_label(b)}"
        L.append(f"| {_md(label)} | {_md(comp)} | " + " | ".join(cells) + " |")
    L.append("")
    return L


def _table2_lines(plan: Plan, summary: Mapping[str, Any]) -> list[str]:
    """The Table 2 analogue, one table per metric, the paper's numbers beside ours."""
    n_seeds = len(plan.seeds)
    settings = plan.scale.settings
    L: list[str] = []
    for metric, what in METRICS.items():
        tab = summary["table2"][metric]
        if metric == "linear_probe":
            L.append("## Table 2 analogue: linear probe (%), mean ± std over seeds")
        else:
            L.append(f"### Table 2 analogue: {what} (%)")
        L.append("")
        head = ["method"]
        for s in settings:
            head.append(f"ours {s.label}")
            if metric == "linear_probe":
                head.append(f"paper {s.paper[0]} {s.paper[1]}")
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---|" * len(head))
        for m in plan.rows + ([UNTRAINED] if UNTRAINED in tab else []):
            row = [METHOD_LABELS.get(m, m)]
            for s in settings:
                c = tab.get(m, {}).get(s.key)
                cell = None if (m == CENTRAL and not s.full) else c
                row.append(_fmt_cell(cell, n_seeds))
                if metric == "linear_probe":
                    row.append(_fmt_paper(PAPER_TABLE2.get(m, {}).get(s.paper)))
            L.append("| " + " | ".join(row) + " |")
        L.append("")
    if plan.scale.name != "paper":
        L.append(
            "The paper's CIFAR-100 column (20 clients x 5 classes, no analogue here): "
            + "; ".join(
                f"{METHOD_LABELS[m]} "
                f"{_fmt_paper(PAPER_TABLE2[m].get(('CIFAR-100', '20/20')))} / "
                f"{_fmt_paper(PAPER_TABLE2[m].get(('CIFAR-100', '4/20')))}"
                for m in METHOD_ORDER
            )
            + " (20/20 / 4/20)."
        )
        L.append("")
    return L


def _dp_lines(plan: Plan, summary: Mapping[str, Any]) -> list[str]:
    """The DP tables, one per delta, the paper's numbers beside ours."""
    n_seeds = len(plan.seeds)
    settings = plan.scale.settings
    L: list[str] = []
    set_by_key = {s.key: s for s in settings}
    for table in summary["dp"]:
        delta = table["delta"]
        L.append(f"## DP: FedSC with DP-CalR, delta = {delta:g} (linear probe %, mean ± std)")
        L.append("")
        head = ["row"]
        for k in table["settings"]:
            s = set_by_key[k]
            head += [f"ours {s.label}", f"paper {s.paper[0]} {s.paper[1]}"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---|" * len(head))
        for r in table["rows"]:
            row = [_dp_row_name(r)]
            for k in table["settings"]:
                c = r["cells"].get(k)
                row.append(_fmt_cell(None if c is None else c["linear_probe"], n_seeds))
                row.append(_fmt_paper(_dp_paper_value(r, delta, set_by_key[k])))
            L.append("| " + " | ".join(row) + " |")
        L.append("")
    return L


def _dp_row_name(r: Mapping[str, Any]) -> str:
    """The first column of a DP table's row."""
    eps = r["epsilon"]
    return (
        "FedAvg+SC, GroupNorm like the DP runs (ours only)"
        if r["method"] == "fedavg_sc" and r.get("gn")
        else "FedAvg+SC"
        if r["method"] == "fedavg_sc"
        else "eps = inf, no noise, sharing from round floor(T/2)+1 (ours only)"
        if r.get("late")
        else "eps = inf, no noise, GroupNorm like the DP runs (ours only)"
        if r.get("gn")
        else "eps = inf (FedSC, Table 2 run)"
        if not math.isfinite(as_number(eps))
        else f"eps = {as_number(eps):g}"
    )


def _dp_paper_value(r: Mapping[str, Any], delta: float, s: Setting) -> tuple[float, float] | None:
    """The paper's number beside a DP table's cell (none for our own control rows)."""
    if r.get("late") or r.get("gn"):
        return None
    if r["method"] == "fedavg_sc":
        return PAPER_TABLE2["fedavg_sc"].get(s.paper)
    return PAPER_DP.get(delta, {}).get(as_number(r["epsilon"]), {}).get(s.paper)


def _privacy_lines(summary: Mapping[str, Any]) -> list[str]:
    """The privacy accounting of every DP run (planned and spent)."""
    L: list[str] = []
    if summary["privacy"]:
        L.append("### Privacy accounting of the DP runs")
        L.append("")
        L.append(
            "sigma_j is calibrated by the privacy core (RDP accountant, zero-out "
            "neighbouring: one sample replaced by a null sample, |D_j| fixed, "
            "sensitivity mu/|D_j|) for the **planned worst case**: one "
            "release in every sharing round (rounds floor(T/2)+1 ... T). Under partial "
            "participation a client releases only in the first sharing round and when "
            "sampled, so it spends less; the columns below are read from each run's "
            "ledger (max over clients)."
        )
        L.append("")
        L.append(
            "| run | target eps, delta | planned releases | releases (max over clients)"
            " | sigma | eps RDP | eps PLD |"
        )
        L.append("|---|---|---|---|---|---|---|")
        for e in summary["privacy"]:
            if not e["finished"]:
                L.append(
                    f"| `{e['run']}` | {e['epsilon_target']:g}, {e['delta']:g} | "
                    f"{e['planned_releases']} | pending | | | |"
                )
                continue
            sig = (
                "–"
                if e["sigma_min"] is None
                else f"{e['sigma_min']:.3g}"
                + ("" if e["sigma_max"] == e["sigma_min"] else f"–{e['sigma_max']:.3g}")
            )
            L.append(
                f"| `{e['run']}` | {e['epsilon_target']:g}, {e['delta']:g} | "
                f"{e['planned_releases']} | {e['releases_max']} | {sig} | "
                f"{_fmtf(e['epsilon_rdp'])} | {_fmtf(e['epsilon_pld'])} |"
            )
        L.append("")
        warned = [e for e in summary["privacy"] if e.get("warnings")]
        if warned:
            deltas = ", ".join(sorted({f"delta={e['delta']:g}" for e in warned}))
            L.append(
                f"**Warning: delta >= 1/|D_j|** in {len(warned)} DP run(s) "
                f"({deltas}): such "
                "a delta allows a mechanism to reveal one sample of a client outright with "
                "probability delta (the FedSC paper does the same, 1e-2 > 1/5000). "
                f"{warned[0]['warnings'][0]}"
            )
            L.append("")
    return L


def _observation_lines(summary: Mapping[str, Any]) -> list[str]:
    """The paper's observations, each with its rule, evidence and verdict."""
    L: list[str] = []
    L.append("## Which of the paper's observations hold here")
    L.append("")
    L.append(f"Decision rule: {RULE}.")
    L.append("")
    for o in summary["observations"]:
        L.append(f"- **{o['claim']}** — **{o['verdict']}**  ")
        L.append(f"  rule: {o['rule']}")
        for line in o["evidence"]:
            L.append(f"  - {line}")
    L.append("")
    return L


def _time_lines(summary: Mapping[str, Any]) -> list[str]:
    """Measured and estimated time."""
    L: list[str] = []
    tm = summary["timing"]
    L.append("## Time")
    L.append("")
    L.append(
        f"Measured: {tm['measured_seconds'] / 60:.1f} min of training and evaluation over "
        f"{tm['runs']} finished run(s) (sum of the runs' own timings; with `--jobs 2` the "
        f"wall time is lower). Planning estimate for the whole plan: "
        f"{summary['estimated_seconds'] / 60:.1f} min single-threaded."
    )
    if tm.get("cpu_runs"):
        L.append("")
        L.append(
            f"CPU: {tm['cpu_seconds'] / 60:.1f} min (user + system, every attempt) over the "
            f"{tm['cpu_runs']} finished run(s) whose `cost.json` records it "
            f"(of {tm['runs']})."
        )
    if tm["per_method"]:
        L.append("")
        L.append("| method | runs | mean seconds per run |")
        L.append("|---|---|---|")
        for m, v in tm["per_method"].items():
            L.append(f"| {METHOD_LABELS.get(m, m)} | {v['runs']} | {v['mean_seconds']:.1f} |")
    L.append("")
    return L


def _table2_csv_rows(plan: Plan, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``table2.csv``: one per metric, method and setting."""
    rows = []
    for metric in METRICS:
        for m in plan.rows:
            for s in plan.scale.settings:
                c = summary["table2"][metric][m][s.key]
                p = PAPER_TABLE2.get(m, {}).get(s.paper) if metric == "linear_probe" else None
                rows.append(
                    {
                        "metric": metric,
                        "method": m,
                        "setting": s.key,
                        "n": c["n"],
                        "mean": c["mean"],
                        "std": c["std"],
                        "paper_mean": p[0] if p else None,
                        "paper_std": p[1] if p else None,
                    }
                )
    return rows


def _dp_csv_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``dp.csv``: one per DP table, row and setting with a cell."""
    rows = []
    for table in summary["dp"]:
        for r in table["rows"]:
            for k, c in r["cells"].items():
                if c is None:
                    continue
                rows.append(
                    {
                        "delta": table["delta"],
                        "method": r["method"],
                        "epsilon": r["epsilon"],
                        "late": r.get("late", False),
                        "gn": r.get("gn", False),
                        "setting": k,
                        **{f"{m}_{x}": c[m][x] for m in METRICS for x in ("n", "mean", "std")},
                    }
                )
    return rows


def _md(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _fmtf(x: Any) -> str:
    if x is None:
        return "–"
    x = as_number(x)
    return "inf" if math.isinf(x) else f"{x:.3g}"


def describe_plan(plan: Plan, runs: bool = True) -> str:
    """The plan as text: settings, runs per table, (each run,) estimated time."""
    lines = [
        f"reproduce {plan.experiment}, scale {plan.scale.name}: {plan.scale.description}",
        f"  output: {plan.out}",
        f"  methods: {', '.join(plan.methods)}"
        + (f" (left out by --methods: {', '.join(plan.excluded)})" if plan.excluded else ""),
        f"  seeds: {plan.seeds}",
        "  settings: "
        + "; ".join(
            f"{s.key} ({s.label}, mirrors {s.paper[0]} {s.paper[1]})" for s in plan.scale.settings
        ),
    ]
    if plan.scale.reductions:
        lines.append(f"  reductions on top of the base configs: {list(plan.scale.reductions)}")
    if plan.overrides:
        lines.append(f"  --set: {plan.overrides}")
    for delta, group in _dp_groups(plan.scale).items():
        lines.append(
            f"  DP delta={delta:g}: "
            + "; ".join(
                f"{k}: eps {', '.join(f'{e:g}' for e in es)}, inf" for k, es in group.items()
            )
        )
    by_table: dict[str, int] = {}
    for r in plan.runs:
        for t in r.tables:
            by_table[t] = by_table.get(t, 0) + 1
    lines.append(
        f"  runs: {len(plan.runs)} distinct (per table, shared runs counted in each: "
        + ", ".join(f"{t} {n}" for t, n in by_table.items())
        + ")"
    )
    total = 0.0
    if runs:
        lines.append(f"  {'run':<46} {'method':<12} {'base config':<28} {'est. s':>7}")
    for r in plan.runs:
        est = estimate_run_seconds(r)
        total += est
        if not runs:
            continue
        extra = ""
        if r.dp is not None:
            # lazy: pulls in torch and dp-accounting
            from fedspectral.fed.methods.fedsc import planned_releases

            p, c = r.config.method.params, r.config
            n_rel = planned_releases(
                c.method.rounds,
                p["share_start"],
                p["share_every"],
                c.partition.num_clients,
                c.method.clients_per_round,
                c.dp.plan,
            )
            extra = f"  share from round {p['share_start']}, planned releases {n_rel}"
        elif r.late:
            extra = f"  share from round {r.config.method.params['share_start']}, no noise"
        elif r.gn:
            extra = "  GroupNorm like the DP runs, no noise"
        lines.append(f"  {r.name:<46} {r.method:<12} {r.base.name:<28} {est:7.0f}{extra}")
    if plan.scale.name == "paper":
        lines.append(
            "  estimated total: not available -- the cost model (docs/reproduce.md) "
            "is of the small CNN on this CPU; the paper-scale configs run ResNets on "
            "a GPU (the per-run column above is that CPU model, for relative sizes "
            "only)"
        )
    else:
        lines.append(
            f"  estimated total: {total / 60:.1f} min single-threaded "
            f"(~{total / 60 / 2:.1f} min with --jobs 2 on two idle cores); "
            "cost model in docs/reproduce.md"
        )
        bare = unreduced_estimate_seconds(plan)
        if bare is not None:
            lines.append(
                f"  without the reductions (base configs as they are): "
                f"{bare / 60:.1f} min single-threaded"
            )
    return "\n".join(lines)
