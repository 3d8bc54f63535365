r"""FedX's relational loss (Han et al., ECCV 2022): the Jensen-Shannon divergence
between two views' similarity distributions over a batch of anchor samples.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedspectral.checks import check_choice, check_real
from fedspectral.fed.losses._tensors import check_2d, check_same_shape

__all__ = ["RELATIONAL_FORMS", "relational_js_loss"]

RELATIONAL_FORMS = ("js", "fedx_code")


def relational_js_loss(
    x1: Tensor,
    x2: Tensor,
    anchors: Tensor,
    temperature: float = 0.1,
    target_temperature: float | None = None,
    form: str = "js",
) -> Tensor:
    r"""FedX's relational loss between two views, relative to anchor samples.

    With :math:`s_v = \hat x_v \hat a^\top` (rows L2-normalised, shape (B, K)) and
    :math:`P_v = \operatorname{softmax}(s_v/t)` row-wise, the relation of each sample to
    the :math:`K` anchors,

    ``form="js"`` (the Jensen-Shannon divergence named in Han et al. 2022, Eq. 3):

    .. math::

        \frac1B\sum_i \tfrac12\operatorname{KL}(P_{1,i}\|M_i)
        + \tfrac12\operatorname{KL}(P_{2,i}\|M_i),\qquad M = \tfrac12(P_1+P_2);

    ``form="fedx_code"`` (what the authors' code computes): with
    :math:`Q_v = \operatorname{softmax}(s_v/t')`, :math:`t'` = ``target_temperature``,
    :math:`M' = \tfrac12(Q_1+Q_2)`,

    .. math::

        \frac1B\sum_i \tfrac12\operatorname{KL}(M'_i\|P_{1,i})
        + \tfrac12\operatorname{KL}(M'_i\|P_{2,i}).

    Gradients flow through every argument (the caller detaches what must be constant).

    Parameters
    ----------
    x1, x2 : Tensor, shape (B, d)
        Two views' embeddings.
    anchors : Tensor, shape (K, d)
        Embeddings of random other samples.
    temperature : float > 0
        :math:`t` (0.1 in FedX).
    target_temperature : float > 0 or None
        :math:`t'` for ``form="fedx_code"`` (default: ``temperature``).
    form : {"js", "fedx_code"}

    Returns
    -------
    Tensor, scalar >= 0
    """
    check_2d("x1", x1)
    check_2d("x2", x2)
    check_2d("anchors", anchors)
    check_same_shape(("x1", "x2"), x1, x2)
    if anchors.shape[1] != x1.shape[1]:
        raise ValueError(
            f"anchors must have {x1.shape[1]} columns, got shape {tuple(anchors.shape)}"
        )
    t = check_real("temperature", temperature, low=0.0, low_open=True)
    t2 = (
        t
        if target_temperature is None
        else check_real("target_temperature", target_temperature, low=0.0, low_open=True)
    )
    check_choice("form", form, RELATIONAL_FORMS)
    a = F.normalize(anchors, dim=1)
    s1 = F.normalize(x1, dim=1) @ a.T
    s2 = F.normalize(x2, dim=1) @ a.T
    logp1 = F.log_softmax(s1 / t, dim=1)
    logp2 = F.log_softmax(s2 / t, dim=1)
    if form == "js":
        m = 0.5 * (logp1.exp() + logp2.exp())
        logm = m.log()
        kl1 = (logp1.exp() * (logp1 - logm)).sum(dim=1)
        kl2 = (logp2.exp() * (logp2 - logm)).sum(dim=1)
    else:
        m = 0.5 * (F.softmax(s1 / t2, dim=1) + F.softmax(s2 / t2, dim=1))
        logm = m.clamp_min(torch.finfo(m.dtype).tiny).log()
        kl1 = (m * (logm - logp1)).sum(dim=1)
        kl2 = (m * (logm - logp2)).sum(dim=1)
    return 0.5 * (kl1 + kl2).mean()
