r"""BYOL's regression loss (Grill et al., NeurIPS 2020).

:math:`\ell(p, z) = \frac1B\sum_i \big(2 - 2\cos(p_i, z_i)\big)` between the online
network's predictions :math:`p` and the target network's projections :math:`z`
(constants), and the symmetric loss of two views
:math:`\ell(p_1, z_2) + \ell(p_2, z_1)` that FedAvg+BYOL, FedU and FedEMA train.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.fed.losses._tensors import check_2d, check_alike, check_same_shape, finite_loss

__all__ = ["BYOLLoss", "byol_loss", "byol_symmetric_loss"]


def byol_loss(p: Tensor, z: Tensor) -> Tensor:
    r"""BYOL regression loss :math:`\frac1B\sum_i \big(2 - 2\cos(p_i, z_i)\big)`
    (Grill et al. 2020), i.e. the mean squared distance of the L2-normalised rows.

    Parameters
    ----------
    p : Tensor, shape (B, d)
        Online predictions.
    z : Tensor, shape (B, d)
        Target projections; detached here (the target receives no gradient).

    Returns
    -------
    Tensor, scalar.  The symmetric BYOL loss is ``byol_loss(p1, z2) + byol_loss(p2, z1)``.
    """
    check_2d("p", p)
    check_2d("z", z)
    check_same_shape(("p", "z"), p, z)
    check_alike(["p", "z"], [p, z])
    loss = (2.0 - 2.0 * F.cosine_similarity(p, z.detach(), dim=1)).mean()
    return finite_loss(loss, {"p": p, "z": z})


def byol_symmetric_loss(
    online: Callable[[Tensor], Tensor],
    predictor: Callable[[Tensor], Tensor],
    target: Callable[[Tensor], Tensor],
    x1: Tensor,
    x2: Tensor,
) -> Tensor:
    r"""Symmetric BYOL loss of one batch of two views (Grill et al. 2020, Eq. 2-3).

    .. math::

        \mathcal L = \ell\big(q(f_\theta(x_1)), f_\xi(x_2)\big)
                   + \ell\big(q(f_\theta(x_2)), f_\xi(x_1)\big),\qquad
        \ell(p, z) = \frac1B\sum_i 2 - 2\cos(p_i, z_i),

    :math:`f_\theta` the online encoder+projector, :math:`q` the predictor,
    :math:`f_\xi` the target (evaluated without gradient).

    Parameters
    ----------
    online, predictor, target : callables mapping a batch to (B, d)
    x1, x2 : Tensor
        The two augmented views of the same batch (row i of both = sample i).

    Returns
    -------
    Tensor, scalar
    """
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        raise TypeError(
            f"x1 and x2 must be tensors, got {type(x1).__name__} and {type(x2).__name__}"
        )
    check_same_shape(("x1", "x2"), x1, x2)
    p = predictor(online(torch.cat([x1, x2], dim=0)))
    with torch.no_grad():
        z = target(torch.cat([x1, x2], dim=0))
    b = x1.shape[0]
    p1, p2 = p[:b], p[b:]
    z1, z2 = z[:b], z[b:]
    return byol_loss(p1, z2) + byol_loss(p2, z1)


class BYOLLoss(nn.Module):
    r"""Symmetric BYOL loss :math:`\ell(p_1, z_2) + \ell(p_2, z_1)`,
    :math:`\ell(p, z) = \frac1B\sum_i(2 - 2\cos(p_i, z_i))`, targets detached.

    Shapes
    ------
    forward(p1, p2, z1, z2): each (B, d); returns a scalar.
    """

    def forward(self, p1: Tensor, p2: Tensor, z1: Tensor, z2: Tensor) -> Tensor:
        return byol_loss(p1, z2) + byol_loss(p2, z1)
