r"""SimCLR's NT-Xent (Chen et al., ICML 2020), plain and with extra negatives.

:func:`nt_xent` is the contrastive loss of SimCLR over the :math:`2B` views of a
batch (FedX's local terms); :func:`nt_xent_with_negatives` adds constant negatives
to its denominator (FedCA's dictionary of the other clients' representations) and
equals :func:`nt_xent` when there are none.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.checks import check_real
from fedspectral.fed.losses._tensors import check_2d, check_alike, check_same_shape, finite_loss

__all__ = ["NTXentLoss", "nt_xent", "nt_xent_with_negatives"]


def nt_xent(z1: Tensor, z2: Tensor, temperature: float = 0.1) -> Tensor:
    r"""NT-Xent (SimCLR, Chen et al. 2020) over the :math:`2B` views of a batch.

    With :math:`u` the L2-normalised rows of :math:`[Z_1; Z_2]` and
    :math:`s_{ab} = u_a^\top u_b/\tau`, the loss is

    .. math::

        \frac{1}{2B}\sum_{a=1}^{2B} -\log
        \frac{\exp s_{a,p(a)}}{\sum_{b\ne a}\exp s_{ab}},

    :math:`p(a)` the other view of the same sample (cross-entropy over the
    :math:`2B-1` other rows).

    Parameters
    ----------
    z1, z2 : Tensor, shape (B, d)
        Two views; row ``i`` of both comes from sample ``i``.
    temperature : float > 0

    Returns
    -------
    Tensor, scalar
    """
    check_2d("z1", z1)
    check_2d("z2", z2)
    check_same_shape(("z1", "z2"), z1, z2)
    check_alike(["z1", "z2"], [z1, z2])
    temperature = check_real("temperature", temperature, low=0.0, low_open=True)
    b = z1.shape[0]
    u = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = u @ u.T / temperature
    sim = sim.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=sim.device), float("-inf"))
    target = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(sim.device)
    return finite_loss(F.cross_entropy(sim, target), {"z1": z1, "z2": z2})


def nt_xent_with_negatives(
    z1: Tensor, z2: Tensor, negatives: Tensor | None, temperature: float = 0.1
) -> Tensor:
    r"""NT-Xent with extra negatives (FedCA's dictionary module; Zhang et al. 2023).

    With :math:`u` the normalised rows of :math:`[Z_1; Z_2]` (2B rows), :math:`n_k` the
    normalised extra negatives (K rows, constants),

    .. math::

        \frac{1}{2B}\sum_{a=1}^{2B} -\log\frac{\exp(u_a^\top u_{p(a)}/\tau)}
        {\sum_{b\ne a}\exp(u_a^\top u_b/\tau) + \sum_{k=1}^{K}\exp(u_a^\top n_k/\tau)},

    :math:`p(a)` the other view of sample :math:`a`.  ``negatives=None`` or K = 0 gives
    :func:`~fedspectral.fed.losses.nt_xent` exactly.

    Parameters
    ----------
    z1, z2 : Tensor, shape (B, d)
    negatives : Tensor, shape (K, d), or None
        Detached here (the dictionary receives no gradient).
    temperature : float > 0

    Returns
    -------
    Tensor, scalar
    """
    check_2d("z1", z1)
    check_2d("z2", z2)
    check_same_shape(("z1", "z2"), z1, z2)
    t = check_real("temperature", temperature, low=0.0, low_open=True)
    if negatives is None or negatives.shape[0] == 0:
        return nt_xent(z1, z2, t)
    check_2d("negatives", negatives)
    if negatives.shape[1] != z1.shape[1]:
        raise ValueError(
            f"negatives must have {z1.shape[1]} columns, got shape {tuple(negatives.shape)}"
        )
    b = z1.shape[0]
    u = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    n = F.normalize(negatives.detach().to(u.dtype), dim=1)
    sim = u @ u.T / t
    sim = sim.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=sim.device), float("-inf"))
    logits = torch.cat([sim, u @ n.T / t], dim=1)
    target = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(sim.device)
    return F.cross_entropy(logits, target)


class NTXentLoss(nn.Module):
    r"""NT-Xent (SimCLR) loss, see :func:`nt_xent`.

    Shapes
    ------
    forward(z1, z2): each (B, d); returns a scalar.
    """

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        self.temperature = check_real("temperature", temperature, low=0.0, low_open=True)

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        return nt_xent(z1, z2, self.temperature)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}"
