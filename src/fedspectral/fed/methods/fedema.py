r"""FedEMA: divergence-aware EMA of the global model (Zhuang et al., ICLR 2022).

"Divergence-aware federated self-supervised learning".  Each client trains BYOL
locally (online encoder, predictor, target updated by EMA :math:`m` = ``ema``).
When client :math:`k` receives the global online encoder :math:`W_g^r` and predictor,

* at its first participation it simply takes them (it has no local model yet);
* afterwards it measures the divergence between the global and its own online
  encoder from its last round, :math:`d = \operatorname{div}(W_k^{r-1}, W_g^r)`
  (:func:`fedspectral.fed.baselines.model_divergence`), sets
  :math:`\mu = \min(1, \lambda_k d)` (:func:`~fedspectral.fed.baselines.fedema_mu`)
  and updates, **as in the paper** (Eq. 3),

  .. math::

      W_k^r = \mu W_k^{r-1} + (1-\mu) W_g^r ,

  and the predictor likewise with the same :math:`\mu`
  (:func:`~fedspectral.fed.baselines.ema_mix`).  A client that drifted far from
  the global model keeps more of its own.  (The official FedSC repository mixes
  the other way round; that is not FedEMA as published.)
* the autoscaler :math:`\lambda_k = \tau / d` is computed once, at the client's
  first such update (:func:`~fedspectral.fed.baselines.fedema_autoscaler`), so that
  its first :math:`\mu` equals :math:`\tau` (``tau``, 0.7).  If that divergence is
  exactly 0 the calibration waits for a later round and :math:`\mu = 0`.
* the target network stays on the client.

The client uploads online encoder, predictor and target; the server averages all
three weighted by :math:`|D_j|` (EasyFL's aggregation).  The averaged target is
sent only to clients that have never participated, to initialise their target
(``share_target: false``: targets never travel and a new client's target is a
copy of the global online encoder).

Per-client state: the online encoder, predictor and target of its last round, the
autoscaler :math:`\lambda_k`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fedspectral.fed.baselines import (
    DIVERGENCE_LAYERS,
    DIVERGENCE_REDUCTIONS,
    ema_mix,
    fedema_autoscaler,
    fedema_mu,
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
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState, net_to_arrays

__all__ = ["FedEMA"]

SCALER_KEY = "fedema.scaler"
ONLINE = "online."


class FedEMA(BaselineMethod):
    """FedEMA (see the module docstring).

    Parameters (``method.params``)
    -------------------------------
    ema : float in [0, 1]
        Target momentum of local BYOL (0.99).
    tau : float in (0, 1]
        Autoscaler target :math:`\\tau` (0.7; the paper uses 0.7).
    share_target : bool
        Upload and average the targets (used to initialise new clients' targets).
    divergence_layers : {"conv", "weights", "all"}
    divergence_reduction : {"layer_mean", "global"}
        Mean of per-layer L2 distances (EasyFL) or one L2 norm over all of them (the
        paper's :math:`\\|W_g - W_k\\|`).
    """

    name = "fedema"
    predictor = True
    aux_name = "target"
    default_params: ClassVar[dict[str, Any]] = {
        "ema": 0.99, "tau": 0.7, "share_target": True,
        "divergence_layers": "conv", "divergence_reduction": "layer_mean"}
    reported_metrics = ("mu", "divergence")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        cls._unit("ema", params["ema"])
        cls._unit("tau", params["tau"], open_low=True)
        if params["divergence_layers"] not in DIVERGENCE_LAYERS:
            raise ValueError(f"config method.params.divergence_layers="
                             f"{params['divergence_layers']!r}: must be one of "
                             f"{DIVERGENCE_LAYERS}")
        if params["divergence_reduction"] not in DIVERGENCE_REDUCTIONS:
            raise ValueError(f"config method.params.divergence_reduction="
                             f"{params['divergence_reduction']!r}: must be one of "
                             f"{DIVERGENCE_REDUCTIONS}")

    # -- server -----------------------------------------------------------------------
    def configure(self, phase: str, rnd: int, state: ServerState,
                  cids: Sequence[str]) -> dict[str, Payload]:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        seen = set(state.info.get("fedema_seen", []))
        base = {k: state.weights[k] for k in self.down_keys(state)}
        out = {}
        for c in cids:
            w = dict(base)
            if self.params["share_target"] and c not in seen:
                w.update(part(state.weights, "target."))
            out[c] = Payload.with_weights(w, config={"lr": self.lr(rnd)})
        return out

    def aggregate_extra(self, rnd: int, state: ServerState,
                        replies: Mapping[str, Payload]) -> None:
        seen = list(state.info.get("fedema_seen", []))
        seen += [c for c in replies if c not in seen]
        state.info["fedema_seen"] = seen

    # -- client -----------------------------------------------------------------------
    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        extra = self.extra_prefixes()
        glob = payload.weights()
        g_enc = encoder_part(glob, extra)
        g_pred = part(glob, "predictor.")
        l_enc = {k[len(ONLINE):]: v for k, v in restore_local(rt, ONLINE).items()}
        metrics: dict[str, float] = {}
        if not l_enc:  # first participation: take the global model
            enc, pred = g_enc, g_pred
            target = part(glob, "target.") or as_aux(g_enc, "target")
        else:
            d = model_divergence(l_enc, g_enc, layers=self.params["divergence_layers"],
                                 reduction=self.params["divergence_reduction"])
            lam = state_scalar(rt, SCALER_KEY)
            if lam is None and d > 0:
                lam = fedema_autoscaler(self.params["tau"], d)
                rt.state[SCALER_KEY] = np.array(lam, dtype=np.float64)
            mu = fedema_mu(lam, d) if lam is not None else 0.0
            enc = ema_mix(l_enc, g_enc, mu)
            pred = ema_mix(restore_local(rt, "predictor."), g_pred, mu)
            target = restore_local(rt, "target.")
            metrics = {"mu": mu, "divergence": d}
        load_part(net, enc)
        load_part(net, pred)
        load_part(net, target)

        stats = self.sgd(rt, payload, byol_step(net), target_ema(net, self.params["ema"]))
        out = net_to_arrays(net)
        end = encoder_part(out, extra)
        save_local(rt, {ONLINE + k: v for k, v in end.items()})
        save_local(rt, part(out, "predictor."))
        save_local(rt, part(out, "target."))
        reply = {**end, **part(out, "predictor.")}
        if self.params["share_target"]:
            reply.update(part(out, "target."))
        stats.update(metrics)
        return Payload.with_weights(reply, metrics=stats)
