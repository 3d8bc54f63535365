"""Draw the mechanism tiers' figure from their committed ``summary.json`` files.

    python scripts/fedsc_tiers_figure.py docs/results/fedsc_tiers

reads ``<folder>/{lowdrift,drift,hetero}/summary.json`` (a tier not run yet leaves its
panel with a note) and writes ``<folder>/tiers.png``
(:func:`fedspectral.experiments.reproduce.tiers_figure.draw_tiers`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedspectral.experiments.reproduce.tiers_figure import draw_tiers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the folder holding lowdrift/, drift/ and hetero/")
    ap.add_argument("--out", default=None, help="the PNG to write (default FOLDER/tiers.png)")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        ap.error(f"folder {str(folder)!r} does not exist")
    if not any((folder / t / "summary.json").is_file() for t in ("lowdrift", "drift", "hetero")):
        ap.error(f"{str(folder)!r} holds no lowdrift/, drift/ or hetero/ summary.json")
    print(draw_tiers(folder, None if args.out is None else Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
