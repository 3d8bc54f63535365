"""Centralized SC: the upper bound of the federated methods.

One party holds the union of all clients' data and minimises the global SC
objective :math:`\\mathcal L(\\theta;\\mathcal D)` (the FedSC paper Eq. 2) directly.  It runs
through the same round loop as the federated methods, with a single "client"
(``central``): a round is ``method.local_epochs`` epochs, so ``rounds`` x
``local_epochs`` epochs in all, and evaluation every ``eval.every`` rounds as for
the others.  Nothing leaves the party; no privacy is spent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedspectral.fed.manifest import Manifests
from fedspectral.fed.methods.sc import SCMethod

__all__ = ["CentralSC"]


class CentralSC(SCMethod):
    """Centralized spectral contrastive learning on the pooled client data."""

    name = "central_sc"

    @classmethod
    def reply_manifests(cls) -> Manifests:
        """None: one party holding every client's data is no node's reply."""
        return {}

    def layout_clients(self, parts: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One client holding the union of the partition (same data as the federation)."""
        if not parts:
            raise ValueError("no clients to pool")
        return [np.sort(np.concatenate([np.asarray(p) for p in parts])).astype(np.int64)]
