"""``fedspectral pca-bench --only tables`` with the plain ADMM as FPS solver
(``anderson=0`` made the default of ``fps_admm`` for this process), for
``scripts/compare_fps_tables.py``.

Usage: ``python scripts/pca_tables_plain_fps.py OUT_FOLDER``
"""

import sys

import fedspectral.pca.fps as fps
from fedspectral.cli import main

if __name__ == "__main__":
    assert fps.fps_admm.__kwdefaults__ is not None
    fps.fps_admm.__kwdefaults__["anderson"] = 0
    sys.exit(main(["pca-bench", "--only", "tables", "--out", sys.argv[1], "--no-progress"]))
