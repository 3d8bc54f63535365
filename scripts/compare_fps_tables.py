"""Compare two ``fedspectral pca-bench --only tables`` runs that differ only in the FPS
solver (the default, accelerated with the certified stop, and the plain ADMM forced by
``scripts/pca_tables_plain_fps.py``): the same seeds give the same noisy matrices, so the
Algorithm 2 errors differ only by where each solver stops.

Usage::

    fedspectral pca-bench --only tables --out docs/results/pca/tables_fps/default
    python scripts/pca_tables_plain_fps.py docs/results/pca/tables_fps/plain
    python scripts/compare_fps_tables.py docs/results/pca/tables_fps \
        > docs/results/pca/tables_fps/comparison.md
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def _alg2(path: Path) -> dict[tuple[str, ...], dict[str, str]]:
    with path.open() as fh:
        return {
            (r["s"], r["n"], r["eps"], r["rep"], r["method"]): r
            for r in csv.DictReader(fh)
            if r["method"].startswith("alg2")
        }


def main(folder: str) -> None:
    base = Path(folder)
    d, q = _alg2(base / "default" / "tables.csv"), _alg2(base / "plain" / "tables.csv")
    if d.keys() != q.keys():
        raise SystemExit("the two runs have different Algorithm 2 solves")
    cells: dict[tuple[str, ...], list[list[float]]] = defaultdict(lambda: [[], []])
    diffs, its_d, its_q = [], [], []
    for key in sorted(d):
        a, b = float(d[key]["error"]), float(q[key]["error"])
        diffs.append(a - b)
        cells[key[:3] + key[4:]][0].append(a)
        cells[key[:3] + key[4:]][1].append(b)
        its_d.append(int(d[key]["fps_iterations"]))
        its_q.append(int(q[key]["fps_iterations"]))
    conv = sum(r["fps_converged"] == "True" for r in d.values())
    conv_q = sum(r["fps_converged"] == "True" for r in q.values())
    print("# Tables 1-2: Algorithm 2's error, default FPS solver against the plain ADMM\n")
    print(f"{len(diffs)} FPS solves on identical noisy matrices; converged {conv} | {conv_q}.")
    print(
        f"Error, default - plain: mean {statistics.mean(diffs):+.4f}, "
        f"min {min(diffs):+.4f}, max {max(diffs):+.4f}; "
        f"lower with the default in {sum(x < 0 for x in diffs)} solves, "
        f"higher in {sum(x > 0 for x in diffs)}."
    )
    print(
        f"Iterations, default | plain: total {sum(its_d)} | {sum(its_q)}, "
        f"median {statistics.median(its_d):g} | {statistics.median(its_q):g}, "
        f"max {max(its_d)} | {max(its_q)}.\n"
    )
    print("| s | n | ε | method | default | plain | difference |")
    print("|---|---|---|---|---|---|---|")
    means = {key: (statistics.mean(a), statistics.mean(b)) for key, (a, b) in cells.items()}
    for key, (ma, mb) in sorted(means.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        s, n, eps, method = key
        print(f"| {s} | {float(n):.0e} | {eps} | {method} | {ma:.3f} | {mb:.3f} | {ma - mb:+.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
