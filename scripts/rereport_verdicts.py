"""Re-decide a finished reproduction's verdicts with the current rules, without retraining.

Reads ``DIR/tables.json`` (the report's tables: per-seed values of every cell), recomputes
the observations with :func:`fedspectral.experiments.reproduce.observations` (the 95 %
paired t intervals), rewrites the section "Which of the paper's observations hold here" of
``DIR/REPORT.md`` and ``tables.json``, and gives every run of ``DIR/summary.json`` its
``variant`` (``main``, ``late_start``, ``groupnorm``, ``dp``) when it has none.  Every
other part of the report is left as the run wrote it.

    python scripts/rereport_verdicts.py docs/results/fedsc_cpu
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from fedspectral.experiments.reproduce import observations
from fedspectral.experiments.reproduce.report import _observation_lines

#: the section's heading (reports written before the wording change say "seed's")
HEADERS = (
    "## Which of the paper's observations hold here",
    "## Which of the seed's observations hold here",
)
OLD_VARIANTS = {None: "main", "late": "late_start", "gn": "groupnorm"}


def rereport(folder: Path) -> None:
    tables = json.loads((folder / "tables.json").read_text())
    tables["observations"] = observations(tables)
    report = (folder / "REPORT.md").read_text().splitlines()
    start = next((report.index(h) for h in HEADERS if h in report), None)
    if start is None:
        raise SystemExit(f"{folder / 'REPORT.md'}: no section {HEADERS[0]!r}")
    end = next(i for i in range(start + 1, len(report)) if report[i].startswith("## "))
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    note = [
        (
            f"Verdicts re-decided on {when} from the same runs (`tables.json`) with the "
            "rule below (`scripts/rereport_verdicts.py`); they replace the 2-SE screen of "
            "the first report."
        ),
        "",
    ]
    lines = _observation_lines(tables)
    report[start:end] = lines[:2] + note + lines[2:]
    (folder / "REPORT.md").write_text("\n".join(report) + "\n")
    (folder / "tables.json").write_text(json.dumps(tables, indent=2) + "\n")
    summ_path = folder / "summary.json"
    summ = json.loads(summ_path.read_text())
    for r in summ["runs"]:
        if "variant" not in r or r["variant"] in OLD_VARIANTS:
            r["variant"] = "dp" if r.get("dp") else OLD_VARIANTS[r.get("variant")]
    summ_path.write_text(json.dumps(summ, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    rereport(ap.parse_args().folder)


if __name__ == "__main__":
    main()
