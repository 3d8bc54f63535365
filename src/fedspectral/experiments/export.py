"""``fedspectral export``: a run's trained encoder as a plain PyTorch ``state_dict``.

::

    fedspectral export RUN_DIR --out encoder.pt

``RUN_DIR`` is a ``fedspectral train`` output folder (its ``config.yaml`` and
``checkpoint.pt``).  The file holds the encoder's ``state_dict`` (backbone, projector,
input normalisation) and the config that rebuilds the module; load it with
:func:`fedspectral.fed.export.load_encoder` (see :mod:`fedspectral.fed.export`).
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="a `fedspectral train` output folder (config.yaml, checkpoint.pt)",
    )
    parser.add_argument(
        "--out", required=True, metavar="FILE", help="where to write the encoder (e.g. encoder.pt)"
    )


def run(args: argparse.Namespace) -> int:
    # lazy: pulls in torch and PyYAML
    from fedspectral.fed.export import export_encoder, load_encoder

    path = export_encoder(args.run_dir, args.out)
    net = load_encoder(path)  # the file loads back as it is documented
    n = sum(p.numel() for p in net.parameters())
    print(f"encoder ({n} parameters, features {net.feature_dim}-d) written to {path}")
    return 0
