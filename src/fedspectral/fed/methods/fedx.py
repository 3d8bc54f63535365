r"""FedX: cross knowledge distillation (Han et al., ECCV 2022).

"FedX: Unsupervised federated learning with cross knowledge distillation".  The
network is backbone → projector (:math:`z`) → prediction head (:math:`p`,
``Linear(d, d) - ReLU - Linear(d, d)`` as in the authors' code); the
whole of it is averaged by the server (weighted by :math:`|D_j|`), nothing else
is shared.  During local training the global network received at the start of the
round is kept frozen (:math:`g`: its projections) and, for two views
:math:`x_1, x_2` of a batch and an augmented batch :math:`x_a` of random anchor
samples from the client's data, the client minimises
(:func:`fedx_loss`)

.. math::

    \text{NTX}(z_1, z_2) + \text{JS}(z_1, z_2; z_a)
    + \text{NTX}(p_1, g_2) + \text{JS}(p_1, p_2; g_a),

NT-Xent with temperature ``temperature`` (0.1) and the relational Jensen-Shannon
loss with ``relational_temperature`` (0.1)
(:func:`fedspectral.fed.losses.relational_js_loss`; ``relational_form:
fedx_code`` uses the variant the authors' code computes).

Communication per participation: backbone + projector + prediction head, down and
up.  No per-client state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from fedspectral.checks import check_real
from fedspectral.config_checks import MIN_TEMPERATURE, TEMPERATURE_WHY, MethodParams, param
from fedspectral.fed.losses import RELATIONAL_FORMS, nt_xent, relational_js_loss
from fedspectral.fed.methods._baseline import (
    BaselineMethod,
    BaselineNet,
    BaselineParams,
    as_aux,
    encoder_part,
    load_part,
)
from fedspectral.fed.protocol import ClientRuntime, Payload
from fedspectral.fed.weights import net_to_arrays
from fedspectral.models import Predictor

__all__ = ["FedX", "fedx_loss"]


def fedx_loss(
    z1: Tensor,
    z2: Tensor,
    p1: Tensor,
    p2: Tensor,
    z_anchor: Tensor,
    g2: Tensor,
    g_anchor: Tensor,
    temperature: float = 0.1,
    relational_temperature: float = 0.1,
    form: str = "js",
) -> Tensor:
    r"""FedX's local objective (Han et al. 2022, Eq. 5-7; the authors' training loop).

    .. math::

        \mathcal L = \underbrace{\text{NTX}(z_1, z_2) + \text{JS}(z_1, z_2; z_a)}_{\text{local}}
                   + \underbrace{\text{NTX}(p_1, g_2) + \text{JS}(p_1, p_2; g_a)}_{\text{global}},

    :math:`z` the local projections, :math:`p` the local predictions, :math:`g` the frozen
    global model's projections (view 2 and anchors; detached here), NTX =
    :func:`~fedspectral.fed.losses.nt_xent` with ``temperature``, JS =
    :func:`~fedspectral.fed.losses.relational_js_loss` with ``relational_temperature`` and
    ``form``.  Index 1/2 are the two views of a batch, :math:`a` a batch of random anchor
    samples.

    Parameters
    ----------
    z1, z2, p1, p2, g2 : Tensor, shape (B, d)
    z_anchor, g_anchor : Tensor, shape (K, d)
    temperature, relational_temperature : float > 0
    form : {"js", "fedx_code"}

    Returns
    -------
    Tensor, scalar
    """
    g2 = g2.detach()
    g_anchor = g_anchor.detach()
    t = check_real("temperature", temperature, low=0.0, low_open=True)
    rt = check_real("relational_temperature", relational_temperature, low=0.0, low_open=True)
    local = nt_xent(z1, z2, t) + relational_js_loss(z1, z2, z_anchor, rt, form=form)
    glob = nt_xent(p1, g2, t) + relational_js_loss(p1, p2, g_anchor, rt, form=form)
    return local + glob


@dataclass(frozen=True)
class FedXParams(BaselineParams):
    """FedX's parameters: the contrastive and relational temperatures and the relational
    loss's form."""

    temperature: float = param(0.1, low=MIN_TEMPERATURE, why=TEMPERATURE_WHY)
    relational_temperature: float = param(0.1, low=MIN_TEMPERATURE, why=TEMPERATURE_WHY)
    relational_form: str = param("js", choices=RELATIONAL_FORMS)


class FedX(BaselineMethod):
    """FedX (see the module docstring).

    Parameters (method.params)
    --------------------------
    temperature : float > 0
        NT-Xent temperature (0.1).
    relational_temperature : float > 0
        Temperature of the relation distributions (0.1).
    relational_form : {"js", "fedx_code"}
        Jensen-Shannon divergence as defined, or the authors' code's variant.
    """

    name = "fedx"
    predictor = True
    aux_name = "frozen"
    Params: ClassVar[type[MethodParams]] = FedXParams
    params: FedXParams

    def make_predictor(self, dim: int) -> nn.Module:
        """FedX's prediction head ``Linear(d, d) - ReLU - Linear(d, d)`` (no normalisation,
        as in the authors' code)."""
        return Predictor(dim, dim, dim, norm="none")

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        extra = self.extra_prefixes()
        glob = payload.weights()
        load_part(net, glob)  # local model <- global (encoder + prediction head)
        load_part(net, as_aux(encoder_part(glob, extra), "frozen"))  # the frozen copy
        pred, frozen = net.predictor, net.aux
        if pred is None:  # build_net gives FedX's network its prediction head
            raise RuntimeError("FedX's network has no prediction head")
        images = rt.data.images
        dev = torch.device(rt.device)
        if images.device != dev:
            images = images.to(dev)
        n = images.shape[0]
        t, rt_, form = (
            self.params.temperature,
            self.params.relational_temperature,
            self.params.relational_form,
        )

        def step(x1: torch.Tensor, x2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            b = x1.shape[0]
            aidx = torch.randperm(n, generator=rt.generator)[:b]
            xa = rt.augment(
                images[aidx.to(dev)] if dev.type != "cpu" else images[aidx], rt.generator
            )
            z = net(torch.cat([x1, x2, xa], dim=0))
            p = pred(z)
            z1, z2, za = z.split([b, b, xa.shape[0]], dim=0)
            p1, p2, _ = p.split([b, b, xa.shape[0]], dim=0)
            frozen.eval()
            with torch.no_grad():
                g2, ga = frozen(torch.cat([x2, xa], dim=0)).split([b, xa.shape[0]], dim=0)
            return fedx_loss(z1, z2, p1, p2, za, g2, ga, t, rt_, form)

        stats = self.sgd(rt, payload, step)
        out = net_to_arrays(net)
        reply = {k: v for k, v in out.items() if not k.startswith("frozen.")}
        return Payload.with_weights(reply, metrics=stats)
