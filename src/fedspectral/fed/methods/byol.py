r"""FedAvg+BYOL: federated averaging of local BYOL training.

The paper's "FedAvg + BYOL" (Table 2): each sampled client trains BYOL (Grill et al.,
NeurIPS 2020) on its own data for ``local_epochs`` epochs and the server averages the
returned weights, weighted by the clients' data sizes :math:`|D_j|`.  Per step, for
two views :math:`x_1, x_2` of a batch,

.. math::

    \mathcal L = \ell\big(q(f_\theta(x_1)), f_\xi(x_2)\big)
               + \ell\big(q(f_\theta(x_2)), f_\xi(x_1)\big), \qquad
    \ell(p, z) = 2 - 2\cos(p, z),

then :math:`\xi \leftarrow m\xi + (1-m)\theta` with :math:`m` = ``ema`` (0.99)
(:func:`fedspectral.fed.losses.byol_symmetric_loss`,
:func:`fedspectral.fed.methods.baseline.ema_update_`).  With ``share_target: true``
(default) the whole BYOL model -- online encoder, predictor and target -- is
averaged (FedAvg applied to BYOL); with ``false`` the target stays on the client
(in its persistent state) and only the online encoder and the predictor travel.

What the baselines share (network, base classes, local SGD loop, weight helpers)
is in :mod:`fedspectral.fed.methods.baseline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedspectral.config_checks import MethodParams
from fedspectral.fed.methods.baseline import (
    BaselineNet,
    BYOLMethod,
    EMAParams,
    as_aux,
    encoder_part,
    load_part,
    part,
    restore_local,
    save_local,
)
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState

__all__ = ["FedAvgBYOL"]


@dataclass(frozen=True)
class FedAvgBYOLParams(EMAParams):
    """FedAvg+BYOL's parameters: ``ema`` and ``share_target`` (whether the server
    averages and sends the target encoder too)."""

    share_target: bool = True


class FedAvgBYOL(BYOLMethod):
    """FedAvg+BYOL (see the module docstring).

    Parameters (method.params)
    --------------------------
    ema : float in [0, 1]
        Target momentum :math:`m` (0.99).
    share_target : bool
        Average the target network too (True) or keep it on each client (False).
    """

    name = "fedavg_byol"
    Params: ClassVar[type[MethodParams]] = FedAvgBYOLParams
    params: FedAvgBYOLParams

    def down_keys(self, state: ServerState) -> list[str]:
        if self.params.share_target:
            return list(state.weights)
        return super().down_keys(state)

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        glob = payload.weights()
        load_part(net, glob)
        enc = encoder_part(glob, self.extra_prefixes())
        if not self.params.share_target:
            local_target = restore_local(rt, "target.")
            load_part(net, local_target or as_aux(enc, "target"))
        stats, out = self.train_byol(rt, payload)
        if not self.params.share_target:
            save_local(rt, part(out, "target."))
            out = {k: v for k, v in out.items() if not k.startswith("target.")}
        return Payload.with_weights(out, metrics=stats)
