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
  (:func:`fedspectral.fed.baselines.fedu_update_predictor`); at its first
  participation a client takes the global predictor;
* after local training the client measures
  :math:`d = \frac1L\sum_l\|W_l^{\text{start}} - W_l^{\text{end}}\|_2` over the
  convolution weights of the online encoder it started from (the global one) and
  the one it ends with (:func:`~fedspectral.fed.baselines.model_divergence`) and
  keeps it for its next round;
* it uploads online encoder and predictor; the server averages both, weighted by
  :math:`|D_j|`.

Communication per participation: encoder + predictor down and up.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from fedspectral.fed.baselines import (
    DIVERGENCE_LAYERS,
    fedu_update_predictor,
    model_divergence,
)
from fedspectral.fed.methods.byol import (
    BaselineMethod,
    BaselineNet,
    as_aux,
    byol_step,
    encoder_part,
    load_part,
    part,
    restore_local,
    save_local,
    state_scalar,
    target_ema,
)
from fedspectral.fed.protocol import ClientRuntime, Payload, net_to_arrays

__all__ = ["FedU"]

DIVERGENCE_KEY = "fedu.divergence"


class FedU(BaselineMethod):
    """FedU (see the module docstring).

    Parameters (``method.params``)
    -------------------------------
    ema : float in [0, 1]
        Target momentum (0.99).
    threshold : float > 0
        Divergence threshold of the predictor update (0.4).
    divergence_layers : {"conv", "weights", "all"}
        Entries the divergence is measured on (``conv``: convolution weights).
    """

    name = "fedu"
    predictor = True
    aux_name = "target"
    default_params: ClassVar[dict[str, Any]] = {"ema": 0.99, "threshold": 0.4,
                                                "divergence_layers": "conv"}
    reported_metrics = ("divergence", "predictor_updated")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        cls._unit("ema", params["ema"])
        cls._positive("threshold", params["threshold"])
        if params["divergence_layers"] not in DIVERGENCE_LAYERS:
            raise ValueError(f"config method.params.divergence_layers="
                             f"{params['divergence_layers']!r}: must be one of "
                             f"{DIVERGENCE_LAYERS}")

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        extra = self.extra_prefixes()
        glob = payload.weights()
        start = encoder_part(glob, extra)
        load_part(net, start)  # online encoder <- global, every round

        local_pred = restore_local(rt, "predictor.")
        d_prev = state_scalar(rt, DIVERGENCE_KEY)
        take_global = not local_pred or d_prev is None or \
            fedu_update_predictor(d_prev, self.params["threshold"])
        load_part(net, part(glob, "predictor.") if take_global else local_pred)
        load_part(net, restore_local(rt, "target.") or as_aux(start, "target"))

        stats = self.sgd(rt, payload, byol_step(net), target_ema(net, self.params["ema"]))
        out = net_to_arrays(net)
        end = encoder_part(out, extra)
        d = model_divergence(start, end, layers=self.params["divergence_layers"])
        save_local(rt, part(out, "predictor."))
        save_local(rt, part(out, "target."))
        rt.state[DIVERGENCE_KEY] = np.array(d, dtype=np.float64)
        reply = {**end, **part(out, "predictor.")}
        stats.update({"divergence": d, "predictor_updated": float(take_global)})
        return Payload.with_weights(reply, metrics=stats)
