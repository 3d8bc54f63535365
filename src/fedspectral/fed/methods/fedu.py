r"""FedU: divergence-aware predictor update (Zhuang et al., ICCV 2021).

"Collaborative unsupervised visual representation learning from decentralized
data".  Each client trains BYOL locally (online encoder :math:`f_\theta`, predictor
:math:`q`, target :math:`f_\xi` updated by EMA :math:`m` = ``ema``); per round:

* the online encoder (backbone + projector) is replaced by the global one;
* the target network never leaves the client (persistent client state; a client's
  first target is a copy of the first online encoder it receives);
* the predictor is replaced by the global predictor only if the divergence of the
  client's *previous* local training was small,
  :math:`d < \text{threshold}` (0.4), else the client keeps its own
  (:func:`fedu_update_predictor`); at its first
  participation a client takes the global predictor;
* after local training the client measures
  :math:`d = \frac1L\sum_l\|W_l^{\text{start}} - W_l^{\text{end}}\|_2` over the
  convolution weights of the online encoder it started from (the global one) and
  the one it ends with (:func:`~fedspectral.fed.methods._baseline.model_divergence`) and
  keeps it for its next round;
* it uploads online encoder and predictor; the server averages both, weighted by
  :math:`|D_j|`.

Communication per participation: encoder + predictor down and up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedspectral.checks import check_real
from fedspectral.config_checks import MethodParams, param
from fedspectral.fed.methods._baseline import (
    DIVERGENCE_LAYERS,
    BaselineNet,
    BYOLMethod,
    EMAParams,
    as_aux,
    encoder_part,
    keep_local,
    load_part,
    model_divergence,
    part,
    restore_local,
    state_scalar,
)
from fedspectral.fed.protocol import ClientRuntime, Payload

__all__ = ["FedU", "fedu_update_predictor"]

DIVERGENCE_KEY = "fedu.divergence"


def fedu_update_predictor(divergence: float, threshold: float = 0.4) -> bool:
    r"""FedU's divergence-aware predictor update: take the global predictor iff
    :math:`d < \text{threshold}` (Zhuang et al. 2021, Sec. 3.3; threshold 0.4 as in
    EasyFL).  Otherwise the client keeps its own (local) predictor.

    Parameters
    ----------
    divergence : float >= 0
        :func:`model_divergence` of the client's last local training.
    threshold : float > 0

    Returns
    -------
    bool
    """
    thr = check_real("threshold", threshold, low=0.0, low_open=True)
    return check_real("divergence", divergence, low=0.0, allow_inf=True) < thr


@dataclass(frozen=True)
class FedUParams(EMAParams):
    """FedU's parameters: ``ema``, the divergence ``threshold`` below which a client
    takes the global predictor, and the layers the divergence is measured on."""

    threshold: float = param(0.4, low=0.0, low_open=True)
    divergence_layers: str = param("conv", choices=DIVERGENCE_LAYERS)


class FedU(BYOLMethod):
    """FedU (see the module docstring).

    Parameters (method.params)
    --------------------------
    ema : float in [0, 1]
        Target momentum (0.99).
    threshold : float > 0
        Divergence threshold of the predictor update (0.4).
    divergence_layers : {"conv", "weights", "all"}
        Entries the divergence is measured on (``conv``: convolution weights).
    """

    name = "fedu"
    Params: ClassVar[type[MethodParams]] = FedUParams
    params: FedUParams
    reported_metrics = ("divergence", "predictor_updated")

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        extra = self.extra_prefixes()
        glob = payload.weights()
        start = encoder_part(glob, extra)
        load_part(net, start)  # online encoder <- global, every round

        local_pred = restore_local(rt, "predictor.")
        d_prev = state_scalar(rt, DIVERGENCE_KEY)
        take_global = (
            not local_pred or d_prev is None or fedu_update_predictor(d_prev, self.params.threshold)
        )
        load_part(net, part(glob, "predictor.") if take_global else local_pred)
        load_part(net, restore_local(rt, "target.") or as_aux(start, "target"))

        stats, out = self.train_byol(rt, payload)
        end = encoder_part(out, extra)
        d = model_divergence(start, end, layers=self.params.divergence_layers)
        keep_local(rt, out, "predictor.", "target.")
        rt.state[DIVERGENCE_KEY] = np.array(d, dtype=np.float64)
        reply = {**end, **part(out, "predictor.")}
        stats.update({"divergence": d, "predictor_updated": float(take_global)})
        return Payload.with_weights(reply, metrics=stats)
