"""Validation sweep for the CPU FedSC protocol (docs/fedsc_tuning.md).

Every run uses the validation split (``data.val_fraction=0.2``, ``data.eval_split=val``),
never the test split.  Runs are resumable: a run whose ``results.json`` exists is
skipped, an interrupted one resumes from its checkpoint.  ``--jobs`` runs in parallel,
each on one thread, under ``nice -n 10``.

    python scripts/fedsc_sweep.py --out /work/sweep --jobs 2          # run / resume
    python scripts/fedsc_sweep.py --out /work/sweep --summarise FILE  # collected results
    python scripts/fedsc_sweep.py --out /work/sweep --plot FILE.png     # curves per point
    python scripts/fedsc_sweep.py --from-summary docs/results/fedsc_sweep/sweep.json \
        --plot docs/results/fedsc_sweep/curves.png                    # from the summary
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CONFIG = {
    "fedsc": "configs/fmnist_fedsc.yaml",
    "fedavg_sc": "configs/fmnist_fedavg_sc.yaml",
    "central_sc": "configs/fmnist_central_sc.yaml",
}

# the protocol candidate all points start from (overrides of configs/fmnist_*.yaml; the
# probe recorded in the runs is the authors' Adam probe, the converged one is computed
# afterwards from the checkpoints by scripts/probe_convergence.py)
BASE = [
    "data.max_train=3750",
    "data.val_fraction=0.2",
    "data.eval_split=val",
    "eval.test_size=null",
    "model.norm=group",
    "model.width=8",
    "model.projector_hidden=256",
    "model.projector_out=64",
    "optim.batch_size=64",
    "optim.lr=0.1",
    "method.params.mu=4",
    "method.rounds=100",
    "eval.every=10",
    "eval.initial=true",
    "eval.linear_probe=true",
    "eval.probe_solver=adam",
    "eval.probe_epochs=100",
    "run.threads=1",
    "run.progress=false",
]

# (name, methods, extra overrides), in the order they run
POINTS: list[tuple[str, tuple[str, ...], list[str]]] = [
    ("w8-lr0.1", ("fedsc", "fedavg_sc", "central_sc"), []),
    ("w16-lr0.1", ("fedsc", "fedavg_sc", "central_sc"), ["model.width=16"]),
    ("w8-lr0.1-alphaq", ("fedsc",), ["method.params.alpha=q"]),
    ("w8-lr0.05", ("fedsc", "fedavg_sc"), ["optim.lr=0.05"]),
    ("w4-lr0.1", ("fedsc", "fedavg_sc", "central_sc"), ["model.width=4"]),
    ("w16-lr0.1-alphaend0.6", ("fedsc",), ["model.width=16", "method.params.alpha_end=0.6"]),
    ("w16-lr0.05", ("fedsc", "fedavg_sc"), ["model.width=16", "optim.lr=0.05"]),
    ("w8-lr0.1-mu2", ("fedsc", "fedavg_sc"), ["method.params.mu=2"]),
    ("w8-lr0.02", ("fedsc", "fedavg_sc"), ["optim.lr=0.02"]),
    ("w8-lr0.1-E3", ("fedsc", "fedavg_sc"), ["method.local_epochs=3"]),
    ("w4-lr0.1-mu2", ("fedsc", "fedavg_sc"), ["model.width=4", "method.params.mu=2"]),
]


# the stability grid (docs/fedsc_tuning.md, "Stability"): the chosen protocol as
# configs/fmnist_*.yaml hold it (width 4, mu 2), on the validation split; plain FedSC
# against its stability options at lr in {0.05, 0.1, 0.2} x alpha in {q_j, linear 1 -> 0.2}.
# Shortened to fit a shared 2-core machine: 30 rounds (the cosine schedule and the alpha
# decay compressed into them), evaluation every 5 rounds, no linear probe
STABILITY_BASE = [
    "data.max_train=3750",
    "data.val_fraction=0.2",
    "data.eval_split=val",
    "eval.test_size=null",
    "method.rounds=30",
    "eval.every=5",
    "eval.initial=true",
    "eval.linear_probe=false",
    "run.threads=1",
    "run.progress=false",
]
STABILITY_OPTIONS = {
    "plain": [],
    "server_lr0.5": ["method.params.server_lr=0.5"],
    "tracked": ["method.params.cross_term=tracked"],
    "tracked+server_lr0.5": ["method.params.cross_term=tracked", "method.params.server_lr=0.5"],
}
#: in the order they run (the most informative first: the protocol's lr 0.1)
STABILITY_ORDER = [
    ("0.1", "q", "plain"),
    ("0.1", "q", "server_lr0.5"),
    ("0.1", "q", "tracked"),
    ("0.1", "linear", "tracked"),
    ("0.1", "linear", "plain"),
    ("0.1", "linear", "server_lr0.5"),
    ("0.2", "q", "plain"),
    ("0.2", "q", "tracked"),
    ("0.2", "linear", "plain"),
    ("0.2", "linear", "tracked"),
    ("0.05", "q", "plain"),
    ("0.05", "q", "tracked"),
    ("0.05", "linear", "plain"),
    ("0.05", "linear", "tracked"),
    ("0.2", "q", "tracked+server_lr0.5"),
    ("0.1", "q", "tracked+server_lr0.5"),
    ("0.1", "linear", "tracked+server_lr0.5"),
    ("0.05", "q", "tracked+server_lr0.5"),
    ("0.05", "linear", "tracked+server_lr0.5"),
    ("0.2", "linear", "tracked+server_lr0.5"),
]
STABILITY_POINTS: list[tuple[str, tuple[str, ...], list[str]]] = [
    (
        f"lr{lr}-alpha{al}-{opt}",
        ("fedsc",),
        [f"optim.lr={lr}", f"method.params.alpha={al}", *STABILITY_OPTIONS[opt]],
    )
    for lr, al, opt in STABILITY_ORDER
] + [("lr0.1-reference", ("fedavg_sc", "central_sc"), ["optim.lr=0.1"])]

# the data grid (issue 36, docs/results/fedsc_data_sweep/): the protocol of
# configs/fmnist_*.yaml (width 4, mu 2, lr 0.1, GroupNorm, converged probe) on the
# validation split, moving what the protocol sweep did not: images per client, local
# steps per round (batch size / local epochs), participation, width.  Every point
# evaluates its own initial weights (the untrained network of the same architecture and
# seed).  KNN bank and probe training set: a stratified 6 000 of the clients' images
# (all of them below that), evaluation: a stratified 2 000 of the validation part, so
# the points differ in training data only.  ``dN``: N images per client.
DATA_BASE = [
    "data.eval_split=val",
    "eval.test_size=2000",
    "eval.bank_size=6000",
    "eval.every=10",
    "eval.initial=true",
    "eval.linear_probe=true",
    "eval.probe_solver=lbfgs",
    "run.threads=1",
    "run.progress=false",
]
D300 = ["data.max_train=3750", "data.val_fraction=0.2"]  # 300 a client, 750 validation
D1200 = ["data.max_train=15000", "data.val_fraction=0.2"]  # 1 200 a client, 3 000 val.
D5400 = ["data.max_train=null", "data.val_fraction=0.1"]  # all: 5 400 a client, 6 000 val.
D5400_T30 = [*D5400, "method.rounds=30", "eval.every=5"]
#: in the order they run: the cheapest informative first (d1200 FedAvg+SC first: the data
#: axis at the protocol's 100 rounds; then the ratio of local steps to data, all of the
#: data (30 rounds, then 60 and 120: at 30 and 60 its KNN was still rising when the
#: cosine schedule ended), the centralized bound, FedSC's cross term, participation)
DATA_POINTS: list[tuple[str, tuple[str, ...], list[str]]] = [
    ("d1200", ("fedavg_sc",), D1200),
    ("d1200-B256", ("fedavg_sc",), [*D1200, "optim.batch_size=256"]),
    ("d5400-T30", ("fedavg_sc",), D5400_T30),
    ("d5400-T60", ("fedavg_sc",), [*D5400, "method.rounds=60", "eval.every=10"]),
    ("d1200", ("central_sc",), D1200),
    # all of the data for longer: FedAvg+SC ended -2.6 / -2.9 (KNN h / probe) below its
    # untrained network at 30 rounds and -0.5 / -0.9 at 60, still rising
    ("d5400-T120", ("fedavg_sc", "central_sc"), [*D5400, "method.rounds=120", "eval.every=10"]),
    ("d1200", ("fedsc",), D1200),
    ("d1200-C5", ("fedavg_sc",), [*D1200, "method.clients_per_round=5"]),
    ("d300", ("fedavg_sc", "central_sc"), D300),
    ("d5400-T30-B512", ("fedavg_sc",), [*D5400_T30, "optim.batch_size=512"]),
    ("d5400-T30", ("central_sc", "fedsc"), D5400_T30),
    ("d1200-w8", ("fedavg_sc", "central_sc"), [*D1200, "model.width=8"]),
    # the width axis with the data (run on a GPU, `--device cuda`, many at once): the
    # representation h has 4 x width dimensions (16 at the protocol's width 4)
    ("d5400-T60-w16", ("fedavg_sc",), [*D5400, "method.rounds=60", "model.width=16"]),
    ("d5400-T30-w16", ("fedavg_sc", "central_sc"), [*D5400_T30, "model.width=16"]),
    ("d5400-T30-w32", ("fedavg_sc", "central_sc"), [*D5400_T30, "model.width=32"]),
    ("d1200-w16", ("fedavg_sc", "central_sc", "fedsc"), [*D1200, "model.width=16"]),
    ("d1200-w32", ("fedavg_sc", "central_sc"), [*D1200, "model.width=32"]),
]
GRIDS = {
    "protocol": (BASE, POINTS),
    "stability": (STABILITY_BASE, STABILITY_POINTS),
    "data": (DATA_BASE, DATA_POINTS),
}
GRID = "protocol"


#: ``--device``: where every run computes (``run.device``; not part of a run's key)
DEVICE: str | None = None
#: ``--points``: run only these points (all when empty)
ONLY: tuple[str, ...] = ()


def runs() -> list[tuple[str, str, list[str]]]:
    base, points = GRIDS[GRID]
    out = []
    for name, methods, extra in points:
        for m in methods:
            if ONLY and name not in ONLY and f"{name}/{m}" not in ONLY:
                continue
            over = list(base) + list(extra) + ([f"run.device={DEVICE}"] if DEVICE else [])
            if m != "fedsc":
                over = [o for o in over if not o.startswith("method.params.alpha")]
            out.append((f"{name}/{m}", m, over))
    return out


NICE = 10
#: the training process running now (so that a SIGTERM to the sweep stops it too)
_CHILD: list[subprocess.Popen] = []


def _stop(signum: int, _frame: object) -> None:
    """SIGTERM: terminate the running training process (its checkpoint stays: a re-run
    resumes it) and stop the sweep; with ``--jobs 1`` the run's CPU seconds so far are
    still added to its ``cost.json``."""
    for proc in _CHILD:
        proc.terminate()
    raise SystemExit(128 + signum)


def _add_cost(path: Path, usage: object, wall: float) -> None:
    """Add one attempt's CPU seconds (user + system) and wall seconds to ``path``."""
    cost = json.loads(path.read_text()) if path.is_file() else {}
    cost = {
        "cpu_seconds": cost.get("cpu_seconds", 0.0) + usage.ru_utime + usage.ru_stime,
        "wall_seconds": cost.get("wall_seconds", 0.0) + wall,
        "attempts": cost.get("attempts", 0) + 1,
    }
    path.write_text(json.dumps(cost))


def run_one(root: Path, key: str, method: str, over: list[str]) -> str:
    """Run (or resume) one point's method in ``root/key``, at ``nice -n NICE`` with one
    thread; the CPU seconds it took (user + system, summed over resumes) go to
    ``cost.json`` beside its results."""
    out = root / key
    if (out / "results.json").is_file():
        return f"skip {key}"
    cmd = [
        "nice",
        "-n",
        str(NICE),
        sys.executable,
        "-m",
        "fedspectral.cli",
        "train",
        "--config",
        CONFIG[method],
        "--out",
        str(out),
        "--quiet",
    ]
    if (out / "checkpoint.pt").is_file():
        cmd.append("--resume")
    for o in over:
        cmd += ["--set", o]
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    t0 = time.time()
    with open(out / "log.txt", "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        _CHILD.append(proc)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except SystemExit:  # SIGTERM (_stop) while waiting: reap it, count its cost
            proc.terminate()
            _, status, usage = os.wait4(proc.pid, 0)
            _add_cost(out / "cost.json", usage, time.time() - t0)
            raise
        finally:
            _CHILD.remove(proc)
    rc = os.waitstatus_to_exitcode(status)
    _add_cost(out / "cost.json", usage, time.time() - t0)
    return f"{'done' if rc == 0 else f'FAILED rc={rc}'} {key}"


def _setup(r: dict) -> dict:
    """The axes of the data grid a finished run used, from its ``results.json``."""
    c, d = r["config"], r["data"]
    sizes = list(d["client_sizes"].values())
    per_client = min(sizes) if sizes else 0
    # as fed/methods/_local.py runs them: floor(n / min(B, n)) steps an epoch (the last
    # partial batch is dropped)
    batch = min(c["optim"]["batch_size"], per_client) if per_client else 1
    steps = (per_client // batch) * c["method"]["local_epochs"]
    return {
        "images_per_client": per_client,
        "clients": len(sizes),
        "clients_per_round": c["method"]["clients_per_round"] or len(sizes),
        "batch_size": c["optim"]["batch_size"],
        "local_epochs": c["method"]["local_epochs"],
        "local_steps_per_round": steps,
        "rounds": c["method"]["rounds"],
        "width": c["model"]["width"],
        "eval_split": d["eval_split"],
        "eval_size": d["eval_size"],
        "bank_size": d["bank_size"],
        "device": c["run"].get("device", "cpu"),
    }


def summarise(root: Path, keep: Path | None = None) -> dict:
    """Every finished run of the grid under ``root``; with ``keep`` (an earlier
    ``--summarise`` JSON), also the runs it holds that ``root`` lacks (a sweep resumed on
    another machine), in the grid's order."""
    kept = {r["run"]: r for r in json.loads(keep.read_text())["runs"]} if keep else {}
    table = []
    for key, method, over in runs():
        f = root / key / "results.json"
        if not f.is_file():
            if key in kept:
                table.append(kept[key])
            continue
        r = json.loads(f.read_text())
        cost_file = root / key / "cost.json"
        cost = json.loads(cost_file.read_text()) if cost_file.is_file() else None
        curve = [
            {
                "round": rec["round"],
                "knn_backbone": rec["knn_backbone"],
                "knn_projector": rec["knn_projector"],
                "sc_objective": rec.get("sc_objective"),
            }
            for rec in r["records"]
            if "knn_backbone" in rec
        ]
        table.append(
            {
                "run": key,
                "method": method,
                "overrides": over,
                "initial": r.get("initial"),
                "final": r["final"],
                "curve": curve,
                "seconds": r["timings"]["total_seconds"],
                "cost": cost,
                "setup": _setup(r),
            }
        )
    return {"base": GRIDS[GRID][0], "runs": table}


def partial_runs(root: Path) -> list[dict]:
    """The grid's runs under ``root`` that stopped before their last round (a checkpoint,
    no ``results.json``): the round reached of those planned, the untrained network's
    figures and the KNN curve so far, from the checkpoint (the project's checked reader,
    :func:`fedspectral.fed.checkpoint.load_checkpoint`), and the cost of the attempts so
    far."""
    from fedspectral.fed.checkpoint import load_checkpoint

    out = []
    for key, method, over in runs():
        d = root / key
        if (d / "results.json").is_file() or not (d / "checkpoint.pt").is_file():
            continue
        meta = load_checkpoint(d / "checkpoint.pt")
        planned = next(
            (int(o.split("=", 1)[1]) for o in reversed(over) if o.startswith("method.rounds=")),
            100,
        )
        cost = json.loads((d / "cost.json").read_text()) if (d / "cost.json").is_file() else None
        out.append(
            {
                "run": key,
                "method": method,
                "overrides": over,
                "round": meta["round"],
                "rounds": planned,
                "initial": meta.get("initial"),
                "curve": [
                    {"round": r["round"], "knn_backbone": r["knn_backbone"]}
                    for r in meta["records"]
                    if "knn_backbone" in r
                ],
                "cost": cost,
            }
        )
    return out


def partial_table(data: list[dict]) -> str:
    """Markdown: per unfinished run, the round reached of those planned, the untrained
    network's KNN h and the last evaluated KNN h (%, validation split)."""
    rows = [
        "| point | method | round reached / planned | untrained KNN h | KNN h at the last "
        "evaluation (round) | last − untrained |",
        "|---|---|---|---|---|---|",
    ]
    for r in data:
        point, method = r["run"].split("/")
        ini = 100 * (r["initial"] or {}).get("knn_backbone", float("nan"))
        if r["curve"]:
            last = r["curve"][-1]
            knn = 100 * last["knn_backbone"]
            cell, delta = f"{knn:.1f} ({last['round']})", f"{knn - ini:+.1f}"
        else:
            cell, delta = "— (none yet)", "—"
        rows.append(
            f"| {point} | {method} | {r['round']} / {r['rounds']} | {ini:.1f} | {cell} | {delta} |"
        )
    return "\n".join(rows) + "\n"


def table(root: Path) -> str:
    """Markdown table of the finished runs: untrained / final KNN (backbone, projector),
    linear probe, the KNN change over the second half and the largest rise of the global
    SC objective between evaluations (an instability signal), in % and raw units."""
    rows = [
        (
            "| point | method | untrained KNN h / z / probe | final KNN h / z | final probe "
            "| KNN h: final − r50 | SC objective: final (largest rise) | minutes |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summarise(root)["runs"]:
        c, i, f = r["curve"], r["initial"] or {}, r["final"]
        if not c:
            continue
        mid = min(c, key=lambda x: abs(x["round"] - c[-1]["round"] / 2))
        objs = [i.get("sc_objective")] + [x["sc_objective"] for x in c]
        objs = [o for o in objs if o is not None]
        rise = max((b - a for a, b in itertools.pairwise(objs)), default=0.0)
        point, method = r["run"].split("/")
        rows.append(
            f"| {point} | {method} | {100 * i.get('knn_backbone', 0):.1f} / "
            f"{100 * i.get('knn_projector', 0):.1f} / {100 * i.get('linear_probe', 0):.1f} "
            f"| {100 * f['knn_backbone']:.1f} / {100 * f['knn_projector']:.1f} "
            f"| {100 * f.get('linear_probe', float('nan')):.1f} "
            f"| {100 * (c[-1]['knn_backbone'] - mid['knn_backbone']):+.1f} "
            f"| {objs[-1]:.2f} ({rise:+.2f}) | {r['seconds'] / 60:.0f} |"
        )
    return "\n".join(rows) + "\n"


#: the criterion of issue 36 at one point (percentage points over the untrained network of
#: the same architecture and seed, which each run evaluates before round 1)
CRITERION = {"fedavg_sc": {"knn_backbone": 3.0, "linear_probe": 2.0}, "central_sc": 5.0}


def data_rows(data: list[dict]) -> list[dict]:
    """Per finished run of the data grid: its setup, the untrained network's and the final
    KNN h / converged probe (%), their differences and the CPU seconds."""
    out = []
    for r in data:
        i, f, st = r["initial"] or {}, r["final"], r.get("setup") or {}
        row = {"run": r["run"], "method": r["method"], **st}
        for k in ("knn_backbone", "linear_probe"):
            row[f"untrained_{k}"] = 100 * i[k] if k in i else None
            row[f"final_{k}"] = 100 * f[k] if k in f else None
            row[f"delta_{k}"] = (
                row[f"final_{k}"] - row[f"untrained_{k}"]
                if row[f"final_{k}"] is not None and row[f"untrained_{k}"] is not None
                else None
            )
        row["cpu_seconds"] = (r.get("cost") or {}).get("cpu_seconds")
        row["wall_seconds"] = (r.get("cost") or {}).get("wall_seconds")
        out.append(row)
    return out


def criterion(data: list[dict]) -> dict[str, dict]:
    """Per point of the data grid: whether FedAvg+SC ends >= 3 KNN h and >= 2 probe points
    above its untrained network and centralized SC >= 5 above it (KNN h and probe);
    ``None`` where the point lacks the run that decides it."""
    rows = {r["run"]: r for r in data_rows(data)}
    points = dict.fromkeys(k.split("/")[0] for k in rows)
    out = {}
    for p in points:
        fa, ce = rows.get(f"{p}/fedavg_sc"), rows.get(f"{p}/central_sc")
        fed = None
        if fa is not None:
            fed = all(
                fa[f"delta_{k}"] is not None and fa[f"delta_{k}"] >= v
                for k, v in CRITERION["fedavg_sc"].items()
            )
        cen = None
        if ce is not None:
            cen = all(
                ce[f"delta_{k}"] is not None and ce[f"delta_{k}"] >= CRITERION["central_sc"]
                for k in ("knn_backbone", "linear_probe")
            )
        holds = False if fed is False or cen is False else (None if None in (fed, cen) else True)
        out[p] = {"fedavg_sc": fed, "central_sc": cen, "holds": holds}
    return out


def data_table(data: list[dict]) -> str:
    """Markdown table of the data grid: per run, images per client, local steps per round,
    rounds, participation, width; the untrained network's and the final KNN h / converged
    probe (%, validation split), final − untrained, the criterion and the CPU minutes."""
    crit = criterion(data)
    mark = {True: "yes", False: "no", None: "—"}
    rows = [
        (
            "| point | method | images / client | local steps / round | rounds | clients / round "
            "| width | untrained KNN h / probe | final KNN h / probe | final − untrained: KNN h / "
            "probe | criterion part | cost (min) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data_rows(data):
        p = r["run"].split("/")[0]
        part = crit[p].get(r["method"]) if r["method"] in CRITERION else None

        def pct(v: float | None) -> str:
            return "—" if v is None else f"{v:.1f}"

        def dlt(v: float | None) -> str:
            return "—" if v is None else f"{v:+.1f}"

        cpu, wall = r["cpu_seconds"], r["wall_seconds"]
        if str(r.get("device", "cpu")).startswith("cuda"):  # a GPU run: its wall time
            cost = "—" if wall is None else f"{wall / 60:.1f} GPU wall"
        else:
            cost = "—" if cpu is None else f"{cpu / 60:.1f} CPU"
        rows.append(
            f"| {p} | {r['method']} | {r.get('images_per_client', '—')} "
            f"| {r.get('local_steps_per_round', '—')} | {r.get('rounds', '—')} "
            f"| {r.get('clients_per_round', '—')}/{r.get('clients', '—')} | {r.get('width', '—')} "
            f"| {pct(r['untrained_knn_backbone'])} / {pct(r['untrained_linear_probe'])} "
            f"| {pct(r['final_knn_backbone'])} / {pct(r['final_linear_probe'])} "
            f"| {dlt(r['delta_knn_backbone'])} / {dlt(r['delta_linear_probe'])} "
            f"| {mark[part] if r['method'] in CRITERION else '(not in it)'} "
            f"| {cost} |"
        )
    rows.append("")
    rows.append("| point | FedAvg+SC part | centralized SC part | criterion |")
    rows.append("|---|---|---|---|")
    for p, c in crit.items():
        rows.append(
            f"| {p} | {mark[c['fedavg_sc']]} | {mark[c['central_sc']]} | "
            f"{'**holds**' if c['holds'] else mark[c['holds']]} |"
        )
    return "\n".join(rows) + "\n"


METHOD_STYLE = {
    "fedsc": ("C3", "FedSC"),
    "fedavg_sc": ("C0", "FedAvg+SC"),
    "central_sc": ("C2", "centralized SC"),
}
#: resolution of the figures (dots per inch)
FIG_DPI = 150
#: a sweep point's name, token by token, in words (``w16-lr0.1-alphaend0.6``)
_TOKEN_WORDS = (
    ("alphaend", "α falls to {}"),
    ("alpha", "α = {}"),
    ("lr", "lr {}"),
    ("mu", "clip norm √{}"),
    ("w", "width {}"),
    ("E", "{} local epochs"),
    ("d", "{} images per client"),
    ("T", "{} rounds"),
    ("B", "batch {}"),
    ("C", "{} clients per round"),
)
#: the figure's title per grid (what every point shares)
GRID_TITLES = {
    "protocol": (
        "FedSC protocol sweep, Fashion-MNIST (3 000 training images, 10 clients × 1 class; "
        "validation split), 100 rounds; each panel one setting. lr: SGD step size; α: weight "
        "of the shared correlation term (falling linearly from 1 to 0.2 unless named; "
        "α = client's data share: the client's fraction of all training images); clip "
        "norm: representations clipped to that norm (√4 unless named)."
    ),
    "data": (
        "FedSC data sweep, Fashion-MNIST (validation split): the repository's Fashion-MNIST "
        "protocol (network width 4, representations clipped to norm √2, SGD step size 0.1, "
        "10 clients × 1 class, 100 rounds) but for what each panel names; the points ran "
        "30 to 120 rounds, all drawn on one round axis."
    ),
}
#: the stability options in words
OPTION_WORDS = {
    "plain": "FedSC as published (frozen cross term)",
    "server_lr0.5": "server lr 0.5",
    "tracked": "tracked cross term",
    "tracked+server_lr0.5": "tracked cross term + server lr 0.5 (the stable FedSC)",
}


def point_words(name: str) -> str:
    """A sweep point's name in words: ``w16-lr0.1-alphaend0.6`` -> ``width 16, lr 0.1, α
    falls to 0.6``; a token it does not know is kept as it is."""
    words = []
    for tok in name.split("-"):
        for prefix, fmt in _TOKEN_WORDS:
            value = tok[len(prefix) :]
            if tok.startswith(prefix) and value and (len(prefix) > 1 or _is_number(value)):
                words.append(fmt.format("client's data share" if value == "q" else value))
                break
        else:
            words.append(tok)
    return ", ".join(words)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _seed_of(run: dict) -> int:
    """The run's seed: its ``run.seed`` override, else the configs' (0)."""
    for o in run.get("overrides") or []:
        if isinstance(o, str) and o.startswith("run.seed="):
            return int(o.split("=", 1)[1])
    return 0


def _group(runs_: list[dict], key) -> dict:
    """Runs with a curve grouped by ``key(run)`` (several seeds of one point and method
    form one group)."""
    out: dict = {}
    for r in runs_:
        if r["curve"]:
            out.setdefault(key(r), []).append(r)
    return out


def _draw_runs(ax_knn, ax_obj, group: list[dict], color: str, label: str) -> None:
    """One method at one point: KNN h (%) and the global SC objective against the round
    from the untrained network at round 0; mean ± 1 std band over seeds when there are
    several, the single run otherwise."""
    import numpy as np

    xs, objs, knns = [], [], []
    for r in group:
        x, obj, knn, _ = _rise(r)
        xs.append(x)
        objs.append([np.nan if v is None else v for v in obj])
        knns.append(knn)
    common = sorted(set.intersection(*[set(x) for x in xs]))
    for ax, ys in ((ax_knn, knns), (ax_obj, objs)):
        arr = np.asarray(
            [[dict(zip(x, y, strict=True))[t] for t in common] for x, y in zip(xs, ys, strict=True)]
        )
        mu = arr.mean(axis=0)
        ax.plot(common, mu, marker="o", ms=2.5, lw=1.2, color=color, label=label)
        if len(group) > 1:
            sd = arr.std(axis=0, ddof=1)
            ax.fill_between(common, mu - sd, mu + sd, color=color, alpha=0.2, lw=0)


def _plot_point(ax_knn, ax_obj, name: str, data: list[dict]) -> None:
    """One sweep point: KNN on backbone features (top) and the global SC objective
    (bottom) against the round, from the untrained network at round 0; the methods not
    run at this point named in the panel; the final linear probe in the title."""
    groups = _group([r for r in data if r["run"].startswith(name + "/")], lambda r: r["method"])
    probe = []
    for m, (color, label) in METHOD_STYLE.items():
        if m not in groups:
            continue
        n = len({_seed_of(r) for r in groups[m]})
        _draw_runs(ax_knn, ax_obj, groups[m], color, label if n == 1 else f"{label} (n = {n})")
        finals = [r["final"].get("linear_probe") for r in groups[m]]
        if all(f is not None for f in finals):
            short = "central SC" if m == "central_sc" else label
            # no-break spaces: a line never breaks a number from its label
            probe.append(f"{short} {100 * sum(finals) / len(finals):.1f}".replace(" ", "\u00a0"))
    init = next((r["initial"] for g in groups.values() for r in g if r["initial"]), None)
    if init:
        ax_knn.axhline(100 * init["knn_backbone"], color="0.5", ls="--", lw=0.8)
    missing = [METHOD_STYLE[m][1] for m in METHOD_STYLE if m not in groups]
    import textwrap

    lines = [
        point_words(name),
        *textwrap.wrap("final probe (%): " + (", ".join(probe) if probe else "not measured"), 44),
        *textwrap.wrap(f"not run at this point: {', '.join(missing)}" if missing else "", 44),
    ]
    ax_knn.set_title("\n".join(lines + [""] * (4 - len(lines))), fontsize=7)


def _rise(run: dict) -> tuple[list[int], list[float], list[float], float]:
    """Rounds, global SC objective, KNN h (%) of a run (round 0: the initial weights) and
    the largest rise of the objective between two evaluations."""
    init = run["initial"] or {}
    xs = [0] + [c["round"] for c in run["curve"]]
    obj = [init.get("sc_objective")] + [c["sc_objective"] for c in run["curve"]]
    knn = [100 * (init.get("knn_backbone") or float("nan"))] + [
        100 * c["knn_backbone"] for c in run["curve"]
    ]
    rise = max(
        (b - a for a, b in itertools.pairwise(obj) if a is not None and b is not None),
        default=float("nan"),
    )
    return xs, obj, knn, rise


def stability_table(data: list[dict]) -> str:
    """Markdown: per lr and alpha, each option's largest rise of the global SC objective
    between evaluations, its final objective and final KNN h (the stability grid)."""
    runs_ = {r["run"].split("/")[0]: r for r in data}
    opts = list(STABILITY_OPTIONS)
    rows = [
        "| lr | alpha | "
        + " | ".join(f"{o}: largest rise / final obj. / final KNN h" for o in opts)
        + " |",
        "|---|---|" + "---|" * len(opts),
    ]
    for lr in ("0.05", "0.1", "0.2"):
        for al in ("q", "linear"):
            cells = []
            for o in opts:
                r = runs_.get(f"lr{lr}-alpha{al}-{o}")
                if r is None or not r["curve"]:
                    cells.append("not run")
                    continue
                _, obj, knn, rise = _rise(r)
                mark = " **> 0.1**" if rise > 0.1 else ""
                cells.append(f"{rise:+.2f}{mark} / {obj[-1]:.2f} / {knn[-1]:.1f}")
            rows.append(
                f"| {lr} | {'q_j' if al == 'q' else '1 → 0.2'} | " + " | ".join(cells) + " |"
            )
    return "\n".join(rows) + "\n"


def stability_plot(data: list[dict], path: Path) -> None:
    """Global SC objective (top) and KNN h (bottom) vs round, one column per (lr, alpha),
    one line per option (one run each: seed 0); an option not run at a column is named
    in its panel.  Rows share their y-axis."""
    fig = stability_figure(data)
    _save(fig, path)


def stability_figure(data: list[dict]):
    """The figure of :func:`stability_plot` (a matplotlib ``Figure``, not saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs_ = _group(data, lambda r: r["run"].split("/")[0])
    cols = [
        (lr, al)
        for lr in ("0.05", "0.1", "0.2")
        for al in ("q", "linear")
        if any(f"lr{lr}-alpha{al}-{o}" in runs_ for o in STABILITY_OPTIONS)
    ]
    fig, axes = plt.subplots(
        2,
        len(cols),
        figsize=(2.35 * len(cols) + 0.8, 5.4),
        squeeze=False,
        sharex=True,
        sharey="row",
        layout="constrained",
        dpi=FIG_DPI,
    )
    seeds = set()
    for j, (lr, al) in enumerate(cols):
        missing = []
        for i, o in enumerate(STABILITY_OPTIONS):
            group = runs_.get(f"lr{lr}-alpha{al}-{o}")
            if group is None:
                missing.append(OPTION_WORDS[o])
                continue
            seeds |= {_seed_of(r) for r in group}
            _draw_runs(axes[1][j], axes[0][j], group, f"C{i}", OPTION_WORDS[o])
        alpha = "α = client's data share" if al == "q" else "α linear 1 → 0.2"
        not_run = f"\nnot run at this setting:\n{', '.join(missing)}" if missing else "\n\n"
        axes[0][j].set_title(f"lr {lr}, {alpha}{not_run}", fontsize=8)
        axes[1][j].set_xlabel("round", fontsize=8)
        for i in (0, 1):
            axes[i][j].grid(alpha=0.3)
            axes[i][j].tick_params(labelsize=7)
    axes[0][0].set_ylabel(
        "global SC objective, training data\n(lower is better; should only fall)", fontsize=8
    )
    axes[1][0].set_ylabel(
        "KNN accuracy (%) on backbone\nfeatures h, validation split\n(higher is better)",
        fontsize=8,
    )
    seen: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    order = [OPTION_WORDS[o] for o in STABILITY_OPTIONS if OPTION_WORDS[o] in seen]
    fig.legend(
        [seen[lab] for lab in order], order, loc="outside lower center", ncols=2,
        fontsize=7.5, frameon=False,
    )  # fmt: skip
    import textwrap

    title = (
        "FedSC stability grid, Fashion-MNIST (validation split), 30 rounds; each column one "
        "SGD step size (lr) and schedule of α, the weight of the shared correlation term "
        "(α = client's data share: the client's fraction of all training images). "
        f"{_one_seed(seeds)}"
    )
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 13)), fontsize=8.5)
    return fig


def _one_seed(seeds: set) -> str:
    if len(seeds) <= 1:
        seed = next(iter(seeds), 0)
        return (
            f"ONE SEED (seed {seed}): every line is a single run, no error bars; "
            f"the claims resting on it are single-seed claims"
        )
    return f"seeds {sorted(seeds)}: mean, band ± 1 std over the seeds"


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)


def plot(data: list[dict], path: Path, ncols: int = 4) -> None:
    """KNN backbone (validation split) and global SC objective vs round, one cell per
    sweep point, in a grid of ``ncols`` columns; one legend below.  Every KNN panel
    shares one y-axis, every objective panel another."""
    _save(sweep_figure(data, ncols), path)


def sweep_figure(data: list[dict], ncols: int = 4):
    """The figure of :func:`plot` (a matplotlib ``Figure``, not saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    names = dict.fromkeys(name for name, _, _ in GRIDS[GRID][1])
    points = [name for name in names if any(r["run"].startswith(name + "/") for r in data)]
    nrows = -(-len(points) // ncols)
    fig = plt.figure(figsize=(2.9 * ncols + 0.6, 3.5 * nrows + 0.9), layout="constrained",
                     dpi=FIG_DPI)  # fmt: skip
    grid = fig.add_gridspec(2 * nrows, ncols, height_ratios=[3, 2] * nrows)
    first: list = [None, None]
    for i, name in enumerate(points):
        r, c = divmod(i, ncols)
        # one round axis for every point (the data grid's points ran 30 to 120 rounds)
        ax_knn = fig.add_subplot(grid[2 * r, c], sharex=first[0], sharey=first[0])
        ax_obj = fig.add_subplot(grid[2 * r + 1, c], sharex=ax_knn, sharey=first[1])
        first = [first[0] or ax_knn, first[1] or ax_obj]
        _plot_point(ax_knn, ax_obj, name, data)
        ax_knn.tick_params(labelbottom=False)
        ax_obj.set_xlabel("round", fontsize=7.5)
        if c == 0:
            ax_knn.set_ylabel("KNN accuracy (%) on h,\nvalidation (higher is better)", fontsize=7)
            ax_obj.set_ylabel("global SC objective\n(lower is better)", fontsize=7)
        else:
            ax_knn.tick_params(labelleft=False)
            ax_obj.tick_params(labelleft=False)
        for ax in (ax_knn, ax_obj):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
    methods = [m for m in METHOD_STYLE if any(r["method"] == m for r in data)]
    handles = [Line2D([], [], color=METHOD_STYLE[m][0], marker="o", ms=3) for m in methods]
    handles.append(Line2D([], [], color="0.5", ls="--", lw=0.8))
    fig.legend(
        handles,
        [METHOD_STYLE[m][1] for m in methods] + ["untrained network (round 0)"],
        loc="outside lower center",
        ncol=len(handles),
        fontsize=8.5,
        frameon=False,
    )
    import textwrap

    seeds = {_seed_of(r) for r in data}
    title = GRID_TITLES.get(GRID, f"FedSC sweep ({GRID} grid), Fashion-MNIST, validation split")
    fig.suptitle(
        textwrap.fill(title, int(fig.get_figwidth() * 12)) + "\n" + _one_seed(seeds),
        fontsize=9,
    )
    return fig


#: each action's option and the file suffix it writes
_ACTIONS = {"summarise": ".json", "table": ".md", "plot": ".png", "partial": ".json"}


def _check_args(ap: argparse.ArgumentParser, a: argparse.Namespace) -> str | None:
    """Every option checked before any work; the action asked for (``None``: run)."""
    global GRID, NICE, DEVICE, ONLY
    GRID, NICE, DEVICE, ONLY = a.grid, a.nice, a.device, tuple(a.points)
    known = {k for name, ms, _ in GRIDS[GRID][1] for k in (name, *(f"{name}/{m}" for m in ms))}
    unknown = set(ONLY) - known
    if unknown:
        ap.error(f"--points: no such point in the {GRID} grid: {sorted(unknown)}")
    asked = [k for k in _ACTIONS if getattr(a, k) is not None]
    if len(asked) > 1:
        ap.error(f"--{' and --'.join(asked)} exclude each other: give one")
    action = asked[0] if asked else None
    for k in asked:
        path = getattr(a, k)
        if path.suffix != _ACTIONS[k]:
            ap.error(
                f"--{k} {str(path)!r}: it writes a {_ACTIONS[k]} file, give a name ending in it"
            )
        if path.is_dir():
            ap.error(f"--{k} {str(path)!r} is a folder; give a file")
    if action is not None:  # the options of running the grid do nothing here
        for k in ("jobs", "nice", "device"):
            if getattr(a, k) is not None:
                ap.error(f"--{k} {getattr(a, k)!r} sets how runs run; --{action} runs none")
    a.jobs = 1 if a.jobs is None else a.jobs
    a.nice = 10 if a.nice is None else a.nice
    NICE = a.nice
    if not 1 <= a.jobs <= max(2, os.cpu_count() or 1):
        ap.error(f"--jobs must lie in [1, {max(2, os.cpu_count() or 1)}], got {a.jobs}")
    if not 0 <= a.nice <= 19:
        ap.error(f"--nice must lie in [0, 19], got {a.nice}")
    if a.device is not None:  # every run's run.device: checked once, before any run
        from fedspectral.experiments.preflight import check_device

        try:
            check_device(a.device)
        except ValueError as exc:
            ap.error(f"--device {a.device!r}: {exc}")
    if a.points and action is not None:
        ap.error(f"--points selects runs to run; --{action} reads every finished run")
    if a.keep is not None and action not in ("summarise", "table", "plot"):
        ap.error("--keep goes with --summarise, --table or --plot")
    if a.from_summary is not None and action != "plot":
        ap.error("--from-summary goes with --plot")
    if a.from_summary is not None and a.keep is not None:
        ap.error("--keep adds runs to a run folder's; --from-summary reads no run folder")
    if a.from_summary is None and a.out is None:
        ap.error("--out is required (except for --plot with --from-summary)")
    if a.out is not None and a.out.exists() and not a.out.is_dir():
        ap.error(f"--out {str(a.out)!r} is not a folder")
    if action is not None and a.from_summary is None and not a.out.is_dir():
        ap.error(f"--out {str(a.out)!r} does not exist: nothing to --{action}")
    return action


def _summary_runs(path: Path, what: str) -> list:
    """The ``runs`` of a ``--summarise`` JSON, or a ``ValueError`` naming the file."""
    try:
        runs_ = json.loads(path.read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{what} {str(path)!r} is not a --summarise JSON ({exc})") from None
    if not isinstance(runs_, list):
        raise ValueError(f"{what} {str(path)!r} is not a --summarise JSON (no run list)")
    return runs_


def _finished(out: Path, keep: Path | None) -> dict:
    if keep is not None:
        _summary_runs(keep, "--keep")
    summ = summarise(out, keep)
    if not summ["runs"]:
        raise ValueError(f"no finished run of the {GRID} grid under {str(out)!r}: nothing to write")
    return summ


def _act(ap: argparse.ArgumentParser, a: argparse.Namespace) -> bool:
    """Do the action asked for (``True``), or nothing (``False``: run the grid)."""
    action = _check_args(ap, a)
    draw = stability_plot if GRID == "stability" else plot
    if action == "plot" and a.from_summary is not None:
        runs_ = _summary_runs(a.from_summary, "--from-summary")
        if not runs_:
            raise ValueError(f"--from-summary {str(a.from_summary)!r} holds no run")
        draw(runs_, a.plot)
    elif action == "plot":
        draw(_finished(a.out, a.keep)["runs"], a.plot)
    elif action == "table":
        runs_ = _finished(a.out, a.keep)["runs"]
        text = {"stability": stability_table, "data": data_table}.get(GRID)
        a.table.write_text(text(runs_) if text is not None else table(a.out))
    elif action == "partial":
        part = partial_runs(a.out)
        a.partial.write_text(json.dumps({"runs": part}, indent=1))
        a.partial.with_suffix(".md").write_text(partial_table(part))
    elif action == "summarise":
        a.summarise.write_text(json.dumps(_finished(a.out, a.keep), indent=1))
    return action is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the sweep's run folder (to run, resume, summarise, tabulate)",
    )
    ap.add_argument(
        "--from-summary",
        type=Path,
        default=None,
        help="with --plot: draw from a --summarise JSON (e.g. the committed "
        "docs/results/fedsc_sweep/sweep.json) instead of the run folder",
    )
    ap.add_argument("--jobs", type=int, default=None, help="runs at a time (default 1)")
    ap.add_argument(
        "--device",
        default=None,
        help="run.device of every run (e.g. cuda: several runs share one GPU; default: "
        "the configs' cpu)",
    )
    ap.add_argument(
        "--points",
        nargs="+",
        default=(),
        help="run only these points of the grid (NAME, or NAME/METHOD for one run)",
    )
    ap.add_argument(
        "--nice", type=int, default=None, help="niceness of each run (default 10; 19 = lowest)"
    )
    ap.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="protocol",
        help="which grid: the protocol sweep or the stability comparison",
    )
    ap.add_argument(
        "--summarise",
        type=Path,
        default=None,
        help="write the collected results (JSON) here instead of running",
    )
    ap.add_argument(
        "--table",
        type=Path,
        default=None,
        help="write the Markdown table of finished runs instead of running",
    )
    ap.add_argument(
        "--plot", type=Path, default=None, help="draw the curves (PNG) instead of running"
    )
    ap.add_argument(
        "--partial",
        type=Path,
        default=None,
        help="write the unfinished runs (round reached, curve so far; JSON) here and their "
        "table beside it (.md) instead of running",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="with --summarise/--table/--plot: an earlier --summarise JSON whose runs the "
        "run folder lacks are kept (a sweep continued on another machine)",
    )
    a = ap.parse_args()
    try:
        if _act(ap, a):
            return
    except (OSError, ValueError) as exc:  # bad files: one line, no traceback
        ap.exit(2, f"{ap.prog}: error: {exc}\n")
    signal.signal(signal.SIGTERM, _stop)
    if a.jobs == 1:  # in the main thread, so that SIGTERM reaches the wait
        for r in runs():
            print(run_one(a.out, *r), flush=True)
        return
    with ThreadPoolExecutor(a.jobs) as ex:
        for msg in ex.map(lambda r: run_one(a.out, *r), runs()):
            print(msg, flush=True)


if __name__ == "__main__":
    main()
