"""The name ``fedspectral train --engine flower`` looks up.

``run_flower(config, out_dir=None, resume=False)`` is
:func:`fedspectral.fed.flower.engine.run_flower_simulation`.
"""

from __future__ import annotations

import os
from typing import Any

from fedspectral.fed.flower.engine import run_flower_simulation

__all__ = ["run_flower", "run_flower_simulation"]


def run_flower(config: Any, out_dir: str | os.PathLike | None = None,
               resume: bool = False, **kwargs: Any) -> dict[str, Any]:
    """Train ``config`` on Flower's simulation engine (checkpoint in ``out_dir``);
    the caller writes the result files."""
    return run_flower_simulation(config, out_dir=out_dir, resume=resume, **kwargs)
