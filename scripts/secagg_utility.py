"""FedSC with DP correlation sharing: plain against secure aggregation with distributed
noise, side by side on the CPU protocol (``configs/fmnist_fedsc.yaml``, test split).

Each (ε, seed) pair runs twice with the same σ target: ``plain`` (every client sends
R̃_j in the clear, as in seed Algorithm 1) and ``secure``
(``method.params.secure_aggregation=true``: the server sees only sums, each of the
m contributors adds σ/√(m_min − 1); docs/fedsc.md §7).  Both share from round
⌊T/2⌋+1 (the seed's DP schedule, as ``reproduce`` does) and are calibrated for the
worst-case number of releases.  Runs are resumable: a run whose ``results.json``
exists is skipped, an interrupted one resumes from its checkpoint.

    python scripts/secagg_utility.py --out /work/secagg --jobs 2           # run / resume
    python scripts/secagg_utility.py --out /work/secagg --table FILE.md    # the table
    python scripts/secagg_utility.py --out /work/secagg --summarise FILE   # JSON

The table gives, per ε and mode, the final KNN (backbone, projector) and linear probe
(mean ± std over seeds), σ per client, and the expected Frobenius norm of the noise
in the R̃₋ⱼ a client contrasts against (from the recorded σ: with isometric noise a
d × d symmetric noise matrix of per-entry variance v on the diagonal and v/2 off it
has E‖N‖²_F = v·d(d+1)/2).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CONFIG = "configs/fmnist_fedsc.yaml"
EPSILONS = (3.0, 1.0)
SEEDS = (0, 1, 2)
DELTA = 1e-3  # below 1/|D_j| = 1/300
MODES = {"plain": [], "secure": ["method.params.secure_aggregation=true"]}
BASE = [
    "dp.enabled=true",
    f"dp.delta={DELTA}",
    "method.params.share_start=51",
    "dp.plan=worst_case",
    "run.threads=1",
    "run.progress=false",
]


def runs() -> list[tuple[str, float, int, str, list[str]]]:
    out = []  # seed-major: a first seed of every (epsilon, mode) before the next seed
    for seed in SEEDS:
        for eps in EPSILONS:
            for mode, extra in MODES.items():
                over = [*BASE, f"dp.epsilon={eps}", f"run.seed={seed}", *extra]
                out.append((f"eps{eps:g}/{mode}/s{seed}", eps, seed, mode, over))
    return out


def run_one(root: Path, key: str, over: list[str]) -> str:
    out = root / key
    if (out / "results.json").is_file():
        return f"skip {key}"
    cmd = [
        "nice",
        "-n",
        "10",
        sys.executable,
        "-m",
        "fedspectral.cli",
        "train",
        "--config",
        CONFIG,
        "--out",
        str(out),
        "--quiet",
    ]
    if (out / "checkpoint.pt").is_file():
        cmd.append("--resume")
    for o in over:
        cmd += ["--set", o]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "log.txt", "a") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    return f"{'done' if rc == 0 else f'FAILED rc={rc}'} {key}"


def _noise_norm(sigmas: dict[str, float], d: int) -> float:
    """Mean over clients j of the expected ‖noise of R̃₋ⱼ‖_F (equal weights q_k = 1/m):
    R̃₋ⱼ's noise is the mean of the other clients' noise terms."""
    cs = sorted(sigmas)
    m = len(cs)
    vals = []
    for j in cs:
        v = sum(sigmas[k] ** 2 for k in cs if k != j) / (m - 1) ** 2
        vals.append(math.sqrt(v * d * (d + 1) / 2))
    return statistics.fmean(vals)


def summarise(root: Path) -> list[dict]:
    rows = []
    for key, eps, seed, mode, _ in runs():
        f = root / key / "results.json"
        if not f.is_file():
            continue
        with open(f) as fh:
            r = json.load(fh)
        priv = r.get("privacy", {})
        sig = priv.get("sigma_distributed") if mode == "secure" else priv.get("sigma")
        d = int(r["config"]["model"]["projector_out"])
        row = {
            "epsilon": eps,
            "seed": seed,
            "mode": mode,
            "final": {
                k: r["final"][k]
                for k in ("knn_backbone", "knn_projector", "linear_probe")
                if k in r["final"]
            },
            "sigma": sig,
            "noise_fro_r_minus": _noise_norm(sig, d) if sig else None,
            "epsilon_rdp": priv.get("epsilon_rdp"),
            "epsilon_pld": priv.get("epsilon_pld"),
            "threat_models": priv.get("threat_models"),
            "mean_round_seconds": r["timings"].get("mean_round_seconds"),
            "mean_share_seconds": r["timings"].get("mean_share_seconds"),
        }
        rows.append(row)
    return rows


_METRICS = ("knn_backbone", "knn_projector", "linear_probe")


def _ms(xs: list[float], signed: bool = False) -> str:
    """Mean ± std (sample) of fractions, in percentage points."""
    if not xs:
        return "–"
    mean = f"{100 * statistics.fmean(xs):{'+' if signed else ''}.1f}"
    return mean if len(xs) == 1 else f"{mean} ± {100 * statistics.stdev(xs):.1f}"


def table(rows: list[dict]) -> str:
    """Accuracy per (ε, mode) and the paired difference secure − plain (by seed), the
    noise in R̃₋ⱼ; then ε per threat model.  Wall-clock seconds are left out: the runs
    share a loaded machine (``benchmarks/flower_overhead.py --secure`` times the phase)."""
    lines = [
        (
            "| ε (δ = 1e-3) | mode | seeds | KNN h | KNN z | linear probe | σ per client "
            "| E‖noise of R̃₋ⱼ‖_F |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for eps in EPSILONS:
        by_mode = {}
        for mode in MODES:
            sel = [r for r in rows if r["epsilon"] == eps and r["mode"] == mode]
            by_mode[mode] = {r["seed"]: r for r in sel}
            if not sel:
                continue
            sig = [statistics.fmean(r["sigma"].values()) for r in sel if r["sigma"]]
            noise = [r["noise_fro_r_minus"] for r in sel if r["noise_fro_r_minus"]]
            accs = " | ".join(
                _ms([r["final"][k] for r in sel if k in r["final"]]) for k in _METRICS
            )
            rest = (
                f"{statistics.fmean(sig):.4g} | {statistics.fmean(noise):.4g}"
                if sig and noise
                else "– | –"
            )
            lines.append(f"| {eps:g} | {mode} | {len(sel)} | {accs} | {rest} |")
        seeds = sorted(set(by_mode.get("plain", {})) & set(by_mode.get("secure", {})))
        if seeds:
            diffs = " | ".join(
                _ms(
                    [
                        by_mode["secure"][s]["final"][k] - by_mode["plain"][s]["final"][k]
                        for s in seeds
                    ],
                    signed=True,
                )
                for k in _METRICS
            )
            ratio = statistics.fmean(
                by_mode["plain"][s]["noise_fro_r_minus"] / by_mode["secure"][s]["noise_fro_r_minus"]
                for s in seeds
            )
            lines.append(
                f"| {eps:g} | secure − plain, paired | {len(seeds)} | {diffs} | | ÷ {ratio:.2f} |"
            )
    lines += [
        "",
        (
            "ε per client after the run (δ = 1e-3; RDP accountant, PLD in brackets; "
            "max over clients and seeds):"
        ),
        "",
        (
            "| target ε | plain | secure: secure aggregation holds | secure: it is broken "
            "(each release at its own σ_k) |"
        ),
        "|---|---|---|---|",
    ]
    for eps in EPSILONS:
        plain = [r for r in rows if r["epsilon"] == eps and r["mode"] == "plain"]
        sec = [
            r
            for r in rows
            if r["epsilon"] == eps and r["mode"] == "secure" and r.get("threat_models")
        ]
        if not plain and not sec:
            continue

        def cell(rs: list[dict], get: Any) -> str:
            vals = [get(r) for r in rs]
            vals = [v for v in vals if v is not None]
            if not vals:
                return "–"
            return f"{max(v[0] for v in vals):.3g} ({max(v[1] for v in vals):.3g})"

        lines.append(
            f"| {eps:g} | {cell(plain, lambda r: (r['epsilon_rdp'], r['epsilon_pld']))} | "
            + " | ".join(
                cell(
                    sec,
                    lambda r, t=t: (
                        r["threat_models"][t]["epsilon_rdp"],
                        r["threat_models"][t]["epsilon_pld"],
                    ),
                )
                for t in ("secagg", "fallback")
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--table")
    p.add_argument("--summarise")
    a = p.parse_args(argv)
    root = Path(a.out)
    if a.table or a.summarise:
        rows = summarise(root)
        if a.summarise:
            Path(a.summarise).write_text(json.dumps(rows, indent=1) + "\n")
        if a.table:
            Path(a.table).write_text(table(rows))
        return 0
    todo = runs()
    with ThreadPoolExecutor(max(1, a.jobs)) as ex:
        for line in ex.map(lambda r: run_one(root, r[0], r[4]), todo):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
