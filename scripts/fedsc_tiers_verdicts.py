"""Print the mechanism tiers' verdict rows (markdown) from committed ``summary.json`` files.

    python scripts/fedsc_tiers_verdicts.py docs/results/fedsc_tiers

For each tier found (``lowdrift``, ``hetero``, ``drift``, ``lowdrift-dp``) and each of its
settings: the paired differences FedSC − FedAvg+SC, FedSC − untrained, FedAvg+SC −
untrained and centralized SC − FedSC on KNN (backbone features h) and the linear probe,
as ``mean [95 % paired t interval]`` over the seeds both rows have, the number of seeds,
and the CPU minutes of the tier's runs.  README.md and docs/overview.md quote these rows;
``tests/test_committed_tiers.py`` recomputes them with SciPy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedspectral.experiments.reproduce.tiers_figure import paired, per_seed

COMPARISONS = (
    (("fedsc", "main"), ("fedavg_sc", "main"), "FedSC − FedAvg+SC"),
    (("fedsc", "main"), ("untrained", "main"), "FedSC − untrained network"),
    (("fedavg_sc", "main"), ("untrained", "main"), "FedAvg+SC − untrained network"),
    (("central_sc", "main"), ("fedsc", "main"), "centralized SC (same steps) − FedSC"),
    (("fedsc", "tracked+server_lr0.5"), ("fedsc", "main"), "FedSC, server lr 0.5 − FedSC"),
)


def cell(d: tuple[float, float, int] | None) -> str:
    if d is None:
        return "–"
    m, h, _ = d
    return f"{m:+.2f} [{m - h:+.2f}, {m + h:+.2f}]".replace("-", "−")  # typeset minus


def rows(runs: list[dict], setting: str) -> list[str]:
    out = []
    for a, b, label in COMPARISONS:
        ds = [
            paired(per_seed(runs, setting, *a, metric), per_seed(runs, setting, *b, metric))
            for metric in ("knn_backbone", "linear_probe")
        ]
        if all(d is None for d in ds):
            continue
        n = max(d[2] for d in ds if d is not None)
        out.append(f"| {label} | {cell(ds[0])} | {cell(ds[1])} | {n} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the folder holding <tier>/summary.json")
    folder = Path(ap.parse_args(argv).folder)
    found = False
    for tier in ("lowdrift", "hetero", "drift", "lowdrift-dp"):
        path = folder / tier / "summary.json"
        if not path.is_file():
            continue
        found = True
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        for setting in dict.fromkeys(r["setting"] for r in runs):
            print(f"\n{tier} / {setting}\n")
            print("| difference (points) | KNN h | linear probe | seeds |")
            print("|---|---|---|---|")
            print("\n".join(rows(runs, setting)))
    if not found:
        ap.error(f"no <tier>/summary.json under {str(folder)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
