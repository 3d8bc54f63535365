r"""Self-supervised losses, one family per module.

* :mod:`~fedspectral.fed.losses.spectral` -- the spectral contrastive (SC) loss,
  FedSC's local loss (the FedSC paper, Eq. 2 and 6) and the row norm clipping they share;
* :mod:`~fedspectral.fed.losses.byol` -- BYOL's regression loss, plain and symmetric;
* :mod:`~fedspectral.fed.losses.contrastive` -- SimCLR's NT-Xent, plain and with
  extra negatives (FedCA's dictionary);
* :mod:`~fedspectral.fed.losses.relational` -- FedX's relational Jensen-Shannon loss.

Every name is importable from this package.  Rules that belong to one method only
(FedX's combined objective, FedCA's alignment term) live in that method's module
under :mod:`fedspectral.fed.methods`; :func:`check_2d`, the losses' check of a (B, d)
tensor, is public for them.
"""

from __future__ import annotations

from fedspectral.fed.losses._tensors import check_2d
from fedspectral.fed.losses.byol import BYOLLoss, byol_loss, byol_symmetric_loss
from fedspectral.fed.losses.contrastive import NTXentLoss, nt_xent, nt_xent_with_negatives
from fedspectral.fed.losses.relational import RELATIONAL_FORMS, relational_js_loss
from fedspectral.fed.losses.spectral import (
    PAIRINGS,
    FedSCLocalLoss,
    SpectralContrastiveLoss,
    clip_norm,
    correlation,
    fedsc_local_loss,
    positive_correlation,
    sc_correlations,
    spectral_contrastive_loss,
)

__all__ = [
    "PAIRINGS",
    "RELATIONAL_FORMS",
    "BYOLLoss",
    "FedSCLocalLoss",
    "NTXentLoss",
    "SpectralContrastiveLoss",
    "byol_loss",
    "byol_symmetric_loss",
    "check_2d",
    "clip_norm",
    "correlation",
    "fedsc_local_loss",
    "nt_xent",
    "nt_xent_with_negatives",
    "positive_correlation",
    "relational_js_loss",
    "sc_correlations",
    "spectral_contrastive_loss",
]
