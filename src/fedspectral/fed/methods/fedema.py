r"""FedEMA: divergence-aware EMA of the global model (Zhuang et al., ICLR 2022).

"Divergence-aware federated self-supervised learning".  Each client trains BYOL
locally (online encoder, predictor, target updated by EMA :math:`m` = ``ema``).
When client :math:`k` receives the global online encoder :math:`W_g^r` and predictor,

* at its first participation it simply takes them (it has no local model yet);
* afterwards it measures the divergence between the global and its own online
  encoder from its last round, :math:`d = \operatorname{div}(W_k^{r-1}, W_g^r)`
  (:func:`fedspectral.fed.methods._baseline.model_divergence`), sets
  :math:`\mu = \min(1, \lambda_k d)` (:func:`fedema_mu`)
  and updates, **as in the paper** (Eq. 3),

  .. math::

      W_k^r = \mu W_k^{r-1} + (1-\mu) W_g^r ,

  and the predictor likewise with the same :math:`\mu`
  (:func:`ema_mix`).  A client that drifted far from
  the global model keeps more of its own.  (The official FedSC repository mixes
  the other way round; that is not FedEMA as published.)
* the autoscaler :math:`\lambda_k = \tau / d` is computed once, at the client's
  first such update (:func:`fedema_autoscaler`), so that
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from fedspectral.checks import check_real
from fedspectral.config_checks import MethodParams, param
from fedspectral.fed.methods._baseline import (
    DIVERGENCE_LAYERS,
    DIVERGENCE_REDUCTIONS,
    ArrayLike,
    BaselineNet,
    BYOLMethod,
    EMAParams,
    as_aux,
    check_same_keys,
    encoder_part,
    is_float,
    keep_local,
    load_part,
    model_divergence,
    part,
    restore_local,
    save_local,
    state_scalar,
    to_f64,
)
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState

__all__ = ["FedEMA", "ema_mix", "fedema_autoscaler", "fedema_mu"]

SCALER_KEY = "fedema.scaler"
ONLINE = "online."


def ema_mix(
    old: Mapping[str, ArrayLike], new: Mapping[str, ArrayLike], decay: float
) -> dict[str, ArrayLike]:
    r"""Convex combination :math:`\text{decay}\cdot\text{old} + (1-\text{decay})\cdot\text{new}`.

    The one rule behind BYOL's target update (``old`` = target, ``new`` = online,
    decay :math:`m`) and FedEMA's model update (``old`` = the client's local model,
    ``new`` = the global model, decay :math:`\mu`; Zhuang et al. 2022, Eq. 3:
    :math:`W^r_k = \mu W^{r-1}_k + (1-\mu)W^r_g`).  Entries that are not floating point
    (e.g. BatchNorm's ``num_batches_tracked``) are taken from ``new``.

    Parameters
    ----------
    old, new : mapping name -> ndarray or Tensor
        Same names and shapes.
    decay : float in [0, 1]
        Weight of ``old``.

    Returns
    -------
    dict name -> array of the input's type (new objects; the inputs are unchanged).
    """
    d = check_real("decay", decay, low=0.0, high=1.0)
    check_same_keys(old, new, "ema_mix")
    out: dict[str, ArrayLike] = {}
    for k, n in new.items():
        o = old[k]
        if is_float(n) and is_float(o):
            if isinstance(o, Tensor):
                n_t = n if isinstance(n, Tensor) else torch.as_tensor(n)
                out[k] = d * o.detach() + (1.0 - d) * n_t.detach().to(o.dtype).to(o.device)
            else:
                out[k] = (d * np.asarray(o) + (1.0 - d) * to_f64(n)).astype(np.asarray(o).dtype)
        else:
            out[k] = n.clone() if isinstance(n, Tensor) else np.array(n, copy=True)
    return out


def fedema_autoscaler(tau: float, divergence: float) -> float:
    r"""FedEMA's personalised scaler :math:`\lambda_k = \tau / d_k`, computed once, at the
    client's first EMA update (Zhuang et al. 2022, Sec. 4.3), so that the first decay
    is :math:`\mu = \tau`.

    Parameters
    ----------
    tau : float in (0, 1]
        Target first decay (the paper uses 0.7).
    divergence : float > 0
        :math:`d_k` between the global model and the client's local model.

    Returns
    -------
    float > 0
    """
    t = check_real("tau", tau, low=0.0, high=1.0, low_open=True)
    divergence = check_real("divergence", divergence, allow_inf=True)
    if not (divergence > 0 and math.isfinite(divergence)):
        raise ValueError(
            f"the autoscaler needs a divergence > 0, got {divergence!r} (local model equal "
            f"to the global one: postpone the calibration to a later round)"
        )
    return t / float(divergence)


def fedema_mu(scaler: float, divergence: float) -> float:
    r"""FedEMA's decay :math:`\mu = \min(1, \lambda d)` (Zhuang et al. 2022, Eq. 4).

    :math:`\mu` weighs the *local* model in :func:`ema_mix`: a client whose local model
    diverged far from the global one keeps more of it.

    Parameters
    ----------
    scaler : float > 0
        :math:`\lambda` (:func:`fedema_autoscaler`).
    divergence : float >= 0

    Returns
    -------
    float in [0, 1]
    """
    lam = check_real("scaler", scaler, low=0.0, low_open=True)
    divergence = check_real("divergence", divergence, low=0.0)
    return min(1.0, lam * divergence)


@dataclass(frozen=True)
class FedEMAParams(EMAParams):
    """FedEMA's parameters: ``ema``, the autoscaler's target ``tau``, ``share_target``,
    and the layers and reduction of the weight divergence."""

    tau: float = param(0.7, low=0.0, low_open=True, high=1.0)
    share_target: bool = True
    divergence_layers: str = param("conv", choices=DIVERGENCE_LAYERS)
    divergence_reduction: str = param("layer_mean", choices=DIVERGENCE_REDUCTIONS)


class FedEMA(BYOLMethod):
    """FedEMA (see the module docstring).

    Parameters (method.params)
    --------------------------
    ema : float in [0, 1]
        Target momentum of local BYOL (0.99).
    tau : float in (0, 1]
        Autoscaler target :math:`\\tau` (0.7; the paper uses 0.7).
    share_target : bool
        Upload and average the targets (used to initialise new clients' targets).
    divergence_layers : {"conv", "weights", "all"}
        The layers whose weights enter the divergence.
    divergence_reduction : {"layer_mean", "global"}
        Mean of per-layer L2 distances (EasyFL) or one L2 norm over all of them (the
        paper's :math:`\\|W_g - W_k\\|`).
    """

    name = "fedema"
    Params: ClassVar[type[MethodParams]] = FedEMAParams
    params: FedEMAParams
    reported_metrics = ("mu", "divergence")

    # -- server -----------------------------------------------------------------------
    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        seen = set(state.method_state.get("fedema_seen", []))
        base = {k: state.weights[k] for k in self.down_keys(state)}
        out = {}
        for c in cids:
            w = dict(base)
            if self.params.share_target and c not in seen:
                w.update(part(state.weights, "target."))
            out[c] = Payload.with_weights(w, config={"lr": self.lr(rnd)})
        return out

    def aggregate_extra(self, rnd: int, state: ServerState, replies: Mapping[str, Payload]) -> None:
        seen = list(state.method_state.get("fedema_seen", []))
        seen += [c for c in replies if c not in seen]
        state.method_state["fedema_seen"] = seen

    # -- client -----------------------------------------------------------------------
    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        extra = self.extra_prefixes()
        glob = payload.weights()
        g_enc = encoder_part(glob, extra)
        g_pred = part(glob, "predictor.")
        l_enc = {k[len(ONLINE) :]: v for k, v in restore_local(rt, ONLINE).items()}
        metrics: dict[str, float] = {}
        enc: Mapping[str, ArrayLike]
        pred: Mapping[str, ArrayLike]
        if not l_enc:  # first participation: take the global model
            enc, pred = g_enc, g_pred
            target = part(glob, "target.") or as_aux(g_enc, "target")
        else:
            d = model_divergence(
                l_enc,
                g_enc,
                layers=self.params.divergence_layers,
                reduction=self.params.divergence_reduction,
            )
            lam = state_scalar(rt, SCALER_KEY)
            if lam is None and d > 0:
                lam = fedema_autoscaler(self.params.tau, d)
                rt.state[SCALER_KEY] = np.array(lam, dtype=np.float64)
            mu = fedema_mu(lam, d) if lam is not None else 0.0
            enc = ema_mix(l_enc, g_enc, mu)
            pred = ema_mix(restore_local(rt, "predictor."), g_pred, mu)
            target = restore_local(rt, "target.")
            metrics = {"mu": mu, "divergence": d}
        load_part(net, enc)
        load_part(net, pred)
        load_part(net, target)

        stats, out = self.train_byol(rt, payload)
        end = encoder_part(out, extra)
        save_local(rt, {ONLINE + k: v for k, v in end.items()})
        keep_local(rt, out, "predictor.", "target.")
        reply = {**end, **part(out, "predictor.")}
        if self.params.share_target:
            reply.update(part(out, "target."))
        stats.update(metrics)
        return Payload.with_weights(reply, metrics=stats)
