"""Privacy checks of the methods that release (FedSC's DP-CalR): warnings on the run's δ."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["delta_warnings"]


def delta_warnings(config: Any, client_sizes: Mapping[str, int]) -> list[str]:
    """Warn (and return the messages) where the run's δ >= 1/|D_j|: such a δ allows
    releasing one sample of the client outright with probability δ."""
    dp = getattr(config, "dp", None)
    if dp is None or not dp.enabled or not client_sizes:
        return []
    small = {c: int(n) for c, n in client_sizes.items() if dp.delta >= 1.0 / int(n)}
    if not small:
        return []
    n_min = min(small.values())
    msg = (
        f"dp.delta={dp.delta:g} >= 1/|D_j| for {len(small)} of {len(client_sizes)} "
        f"clients (smallest |D_j| = {n_min}, 1/|D_j| = {1.0 / n_min:.3g}): a mechanism may "
        f"then reveal one of their samples outright with probability delta; choose "
        f"delta < 1/|D_j|"
    )
    warnings.warn(msg, UserWarning, stacklevel=3)
    return [msg]
