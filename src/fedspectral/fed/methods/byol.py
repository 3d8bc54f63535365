r"""FedAvg+BYOL, and the plumbing shared by the self-supervised baselines.

FedAvg+BYOL (the seed's "FedAvg + BYOL", Table 2): each sampled client trains BYOL
(Grill et al., NeurIPS 2020) on its own data for ``local_epochs`` epochs and the
server averages the returned weights, weighted by the clients' data sizes
:math:`|D_j|`.  Per step, for two views :math:`x_1, x_2` of a batch,

.. math::

    \mathcal L = \ell\big(q(f_\theta(x_1)), f_\xi(x_2)\big)
               + \ell\big(q(f_\theta(x_2)), f_\xi(x_1)\big), \qquad
    \ell(p, z) = 2 - 2\cos(p, z),

then :math:`\xi \leftarrow m\xi + (1-m)\theta` with :math:`m` = ``ema`` (0.99)
(:func:`fedspectral.fed.baselines.byol_symmetric_loss`,
:func:`~fedspectral.fed.baselines.ema_update_`).  With ``share_target: true``
(default) the whole BYOL model -- online encoder, predictor and target -- is
averaged (FedAvg applied to BYOL); with ``false`` the target stays on the client
(in its persistent state) and only the online encoder and the predictor travel.

Shared plumbing (used by ``fedu``, ``fedema``, ``fedx``, ``fedca``):
:class:`BaselineNet` (backbone + projector, optional predictor, optional frozen copy
of the encoder: the BYOL target or FedX's global model), :class:`BaselineMethod`
(one ``train`` phase, payloads restricted to what the method really sends,
|D_j|-weighted averaging of what came back, the baselines' option checks), and
:func:`train_two_views` (the local SGD loop, same batching as FedSC's
:func:`~fedspectral.fed.methods.fedavg.local_train`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from fedspectral.fed.baselines import byol_symmetric_loss, ema_update_
from fedspectral.fed.methods._local import sgd_epochs
from fedspectral.fed.methods.fedavg import build_ssl_net, cosine_lr
from fedspectral.fed.protocol import (
    ClientRuntime,
    Method,
    Payload,
    ServerState,
    mean_arrays,
    net_to_arrays,
)
from fedspectral.models import Predictor, SSLNet

__all__ = [
    "BaselineMethod",
    "BaselineNet",
    "FedAvgBYOL",
    "as_aux",
    "byol_step",
    "encoder_part",
    "from_aux",
    "load_part",
    "part",
    "restore_local",
    "save_local",
    "target_ema",
    "train_two_views",
]


# --------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------
class BaselineNet(SSLNet):
    """An :class:`~fedspectral.models.SSLNet` (backbone + projector: what is evaluated)
    with the extra parts a baseline needs.

    Parameters
    ----------
    encoder : SSLNet
        Backbone + projector (+ input normalisation); its modules are reused.
    predictor : nn.Module, optional
        Head on top of the projector (BYOL's :math:`q`, FedX's prediction head);
        state-dict names ``predictor.*``.
    aux_name : str, optional
        Name of a frozen copy of the encoder (``"target"``: BYOL's target network;
        ``"frozen"``: FedX's global model); state-dict names ``<aux_name>.*``.  Its
        parameters do not require gradients.
    """

    def __init__(self, encoder: SSLNet, predictor: nn.Module | None = None,
                 aux_name: str | None = None) -> None:
        super().__init__(encoder.backbone, encoder.projector, encoder.input_norm)
        self.predictor = predictor
        self.aux_name = aux_name
        if aux_name is not None:
            if aux_name in ("backbone", "projector", "input_norm", "predictor"):
                raise ValueError(f"aux_name {aux_name!r} clashes with a part of the network")
            aux = copy.deepcopy(SSLNet(encoder.backbone, encoder.projector, encoder.input_norm))
            for p in aux.parameters():
                p.requires_grad_(False)
            self.add_module(aux_name, aux)

    @property
    def aux(self) -> SSLNet:
        if self.aux_name is None:
            raise AttributeError("this network has no auxiliary copy")
        return getattr(self, self.aux_name)

    def encoder_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters of backbone, projector and predictor."""
        mods = [self.input_norm, self.backbone, self.projector]
        if self.predictor is not None:
            mods.append(self.predictor)
        return [p for m in mods for p in m.parameters() if p.requires_grad]


# --------------------------------------------------------------------------------------
# weight-dict helpers
# --------------------------------------------------------------------------------------
def part(weights: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The entries whose name starts with ``prefix`` (``""`` would be everything)."""
    return {k: v for k, v in weights.items() if k.startswith(prefix)}


def encoder_part(weights: Mapping[str, np.ndarray], extra: Sequence[str]) -> dict[str, np.ndarray]:
    """Backbone, projector and input normalisation: every entry not under one of the
    ``extra`` prefixes (``"predictor."``, ``"target."``, ...)."""
    return {k: v for k, v in weights.items() if not any(k.startswith(e) for e in extra)}


def as_aux(encoder: Mapping[str, np.ndarray], aux_name: str) -> dict[str, np.ndarray]:
    """Encoder weights renamed for the auxiliary copy (``backbone.x -> target.backbone.x``)."""
    return {f"{aux_name}.{k}": np.array(v, copy=True) for k, v in encoder.items()}


def from_aux(weights: Mapping[str, np.ndarray], aux_name: str) -> dict[str, np.ndarray]:
    """The auxiliary copy's weights renamed as encoder weights."""
    n = len(aux_name) + 1
    return {k[n:]: v for k, v in weights.items() if k.startswith(aux_name + ".")}


def load_part(net: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Load a subset of a network's weights in place (names must exist, shapes match)."""
    sd = net.state_dict()
    unknown = sorted(set(weights) - set(sd))
    if unknown:
        raise ValueError(f"weights do not match the model: unexpected {unknown[:5]}")
    with torch.no_grad():
        for k, v in weights.items():
            src = torch.from_numpy(np.asarray(v))
            if src.shape != sd[k].shape:
                raise ValueError(f"weight {k!r} has shape {tuple(src.shape)}, model expects "
                                 f"{tuple(sd[k].shape)}")
            sd[k].copy_(src)


LOCAL = "local."


def save_local(rt: ClientRuntime, weights: Mapping[str, np.ndarray]) -> None:
    """Keep network weights in the client's persistent state (under ``local.<name>``)."""
    for k, v in weights.items():
        rt.state[LOCAL + k] = np.array(v, copy=True)


def restore_local(rt: ClientRuntime, prefix: str) -> dict[str, np.ndarray]:
    """The client's kept weights whose network name starts with ``prefix``
    (empty when the client has none yet)."""
    n = len(LOCAL)
    return {k[n:]: v for k, v in rt.state.items() if k.startswith(LOCAL + prefix)}


def state_scalar(rt: ClientRuntime, key: str) -> float | None:
    """A number kept in the client's state (``None`` when absent)."""
    v = rt.state.get(key)
    return None if v is None else float(np.asarray(v))


# --------------------------------------------------------------------------------------
# local training
# --------------------------------------------------------------------------------------
def train_two_views(
    rt: ClientRuntime,
    params: Sequence[nn.Parameter],
    step_loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    grad_clip: float | None = None,
    after_step: Callable[[], None] | None = None,
) -> dict[str, float]:
    r"""Local SGD of a two-view self-supervised loss in ``rt.net``.

    Batching as :func:`fedspectral.fed.methods.fedavg.local_train` (a random
    permutation per epoch, batches of :math:`B`, the incomplete last batch dropped
    unless the client has fewer than :math:`B` samples); each step augments the batch
    into two views ``x1, x2``, calls ``step_loss(x1, x2, idx)`` (``idx`` the batch's
    sample indices), takes an SGD step (fresh optimizer: momentum does not cross
    rounds; optional gradient-norm clipping) and then ``after_step()`` (BYOL's target
    update).  Randomness: ``rt.generator`` only.

    Returns
    -------
    dict
        ``loss`` (mean over steps), ``steps``, ``num-examples``.
    """
    g = rt.generator

    def batch_loss(xb: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        x1 = rt.augment(xb, g)
        x2 = rt.augment(xb, g)
        return step_loss(x1, x2, idx)

    return sgd_epochs(rt, params, batch_loss, lr=lr, epochs=epochs, batch_size=batch_size,
                      momentum=momentum, weight_decay=weight_decay, grad_clip=grad_clip,
                      after_step=after_step, check_finite=True)


# --------------------------------------------------------------------------------------
# the base class
# --------------------------------------------------------------------------------------
class BaselineMethod(Method):
    """One ``train`` phase; the server sends :meth:`down_keys` of the global weights
    and averages, weighted by :math:`|D_j|`, whatever entries the clients send back.

    Subclasses set :attr:`predictor` / :attr:`aux_name` (the network's extra parts)
    and implement :meth:`client_train`.  Checks common to the baselines: exactly two
    views per sample (``method.views: 1``) and no DP (they share nothing that
    DP-CalR protects).
    """

    phases = ("train",)
    default_params: ClassVar[dict[str, Any]] = {}
    #: whether the network has a predictor head
    predictor: ClassVar[bool] = False
    #: name of the frozen encoder copy (None: none)
    aux_name: ClassVar[str | None] = None

    @classmethod
    def validate_params(cls, params: Mapping[str, Any], config: Any = None) -> dict[str, Any]:
        out = super().validate_params(params, config)
        cls.check_params(out)
        if config is not None:
            views = getattr(getattr(config, "method", None), "views", 1)
            if views != 1:
                raise ValueError(f"config method.views={views!r}: method {cls.name!r} trains "
                                 f"on two views per sample; set method.views=1")
            dp = getattr(config, "dp", None)
            if dp is not None and dp.enabled:
                raise ValueError(f"config dp.enabled=True: method {cls.name!r} shares nothing "
                                 f"that DP-CalR protects (only fedsc does)")
        return out

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """Range checks of the method's own parameters (raise ValueError)."""

    @staticmethod
    def _unit(name: str, v: Any, open_low: bool = False, open_high: bool = False) -> None:
        lo_ok = v > 0 if open_low else v >= 0
        hi_ok = v < 1 if open_high else v <= 1
        if not (isinstance(v, float) and math.isfinite(v) and lo_ok and hi_ok):
            raise ValueError(f"config method.params.{name}={v!r}: must lie in "
                             f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}")

    @staticmethod
    def _positive(name: str, v: Any) -> None:
        if not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0):
            raise ValueError(f"config method.params.{name}={v!r}: must be a finite number > 0")

    # -- model ------------------------------------------------------------------------
    def build_net(self) -> BaselineNet:
        enc = build_ssl_net(self.config)
        pred = self.make_predictor(enc.projector.out_dim) if self.predictor else None
        return BaselineNet(enc, pred, self.aux_name)

    def make_predictor(self, dim: int) -> nn.Module:
        """BYOL's predictor ``Linear(d, hidden) - BatchNorm - ReLU - Linear(hidden, d)``,
        ``hidden = model.projector_hidden``."""
        return Predictor(dim, self.config.model.projector_hidden, dim)

    def extra_prefixes(self) -> list[str]:
        out = []
        if self.predictor:
            out.append("predictor.")
        if self.aux_name is not None:
            out.append(self.aux_name + ".")
        return out

    # -- server -----------------------------------------------------------------------
    def lr(self, rnd: int) -> float:
        o = self.config.optim
        return cosine_lr(o.lr, rnd, self.config.method.rounds, o.schedule, o.min_lr)

    def down_keys(self, state: ServerState) -> list[str]:
        """Names of the global weights sent to a client (default: encoder + predictor)."""
        aux = None if self.aux_name is None else self.aux_name + "."
        return [k for k in state.weights if aux is None or not k.startswith(aux)]

    def extra_down(self, rnd: int, state: ServerState, cid: str) -> dict[str, np.ndarray]:
        """Arrays besides weights sent to client ``cid`` (FedCA: the dictionary)."""
        return {}

    def configure(self, phase: str, rnd: int, state: ServerState,
                  cids: Sequence[str]) -> dict[str, Payload]:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        keys = self.down_keys(state)
        w = {k: state.weights[k] for k in keys}
        return {c: Payload.with_weights(w, arrays=self.extra_down(rnd, state, c),
                                        config={"lr": self.lr(rnd)}) for c in cids}

    def aggregate(self, phase: str, rnd: int, state: ServerState,
                  replies: Mapping[str, Payload]) -> dict[str, float]:
        if not replies:
            return {"clients": 0.0}
        sizes = [float(r.metrics["num-examples"]) for r in replies.values()]
        ws = [r.weights() for r in replies.values()]
        keys = set(ws[0])
        if any(set(w) != keys for w in ws):
            raise ValueError(f"{self.name}: clients sent different weight sets")
        state.weights.update(mean_arrays(ws, sizes))
        self.aggregate_extra(rnd, state, replies)
        out = {"clients": float(len(replies)),
               "train_loss": float(np.average([float(r.metrics["loss"])
                                               for r in replies.values()], weights=sizes)),
               "lr": self.lr(rnd)}
        for k in self.reported_metrics:
            vals = [float(r.metrics[k]) for r in replies.values() if k in r.metrics]
            if vals:
                out[k] = float(np.mean(vals))
        return out

    #: client metrics averaged into the round's metrics
    reported_metrics: ClassVar[tuple[str, ...]] = ()

    def aggregate_extra(self, rnd: int, state: ServerState,
                        replies: Mapping[str, Payload]) -> None:
        """Fold non-weight arrays of the replies into ``state`` (FedCA)."""

    # -- client -----------------------------------------------------------------------
    def client_phase(self, phase: str, rnd: int, payload: Payload,
                     rt: ClientRuntime) -> Payload:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        return self.client_train(rnd, payload, rt)

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        raise NotImplementedError

    def sgd(self, rt: ClientRuntime, payload: Payload | None,
            step_loss: Callable[..., torch.Tensor],
            after_step: Callable[[], None] | None = None, *, lr: float | None = None,
            epochs: int | None = None) -> dict[str, float]:
        """:func:`train_two_views` with the experiment's optimiser settings (learning rate
        from ``payload``, epochs ``method.local_epochs``, unless given)."""
        o = self.config.optim
        net: BaselineNet = rt.net
        return train_two_views(
            rt, net.encoder_parameters(), step_loss,
            lr=float(payload.config["lr"]) if lr is None else float(lr),
            epochs=self.config.method.local_epochs if epochs is None else int(epochs),
            batch_size=o.batch_size,
            momentum=o.momentum, weight_decay=o.weight_decay, grad_clip=o.grad_clip,
            after_step=after_step)


# --------------------------------------------------------------------------------------
# BYOL-family helpers
# --------------------------------------------------------------------------------------
def byol_step(net: BaselineNet) -> Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]:
    """The symmetric BYOL loss of one step in ``net`` (online = ``net``, target = ``net.target``)."""
    pred = net.predictor
    if pred is None:
        raise ValueError("BYOL needs a predictor")
    target = net.aux

    def step(x1: torch.Tensor, x2: torch.Tensor, idx: Any) -> torch.Tensor:
        return byol_symmetric_loss(net, pred, target, x1, x2)

    return step


def target_ema(net: BaselineNet, momentum: float) -> Callable[[], None]:
    """``after_step`` hook: :math:`\\xi \\leftarrow m\\xi + (1-m)\\theta`."""
    online = SSLNet(net.backbone, net.projector, net.input_norm)
    target = net.aux

    def hook() -> None:
        ema_update_(target, online, momentum)

    return hook


class FedAvgBYOL(BaselineMethod):
    """FedAvg+BYOL (see the module docstring).

    Parameters (``method.params``)
    -------------------------------
    ema : float in [0, 1]
        Target momentum :math:`m` (0.99).
    share_target : bool
        Average the target network too (True) or keep it on each client (False).
    """

    name = "fedavg_byol"
    predictor = True
    aux_name = "target"
    default_params: ClassVar[dict[str, Any]] = {"ema": 0.99, "share_target": True}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        cls._unit("ema", params["ema"])

    def down_keys(self, state: ServerState) -> list[str]:
        if self.params["share_target"]:
            return list(state.weights)
        return super().down_keys(state)

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        glob = payload.weights()
        load_part(net, glob)
        enc = encoder_part(glob, self.extra_prefixes())
        if not self.params["share_target"]:
            local_target = restore_local(rt, "target.")
            load_part(net, local_target or as_aux(enc, "target"))
        stats = self.sgd(rt, payload, byol_step(net), target_ema(net, self.params["ema"]))
        out = net_to_arrays(net)
        if not self.params["share_target"]:
            save_local(rt, part(out, "target."))
            out = {k: v for k, v in out.items() if not k.startswith("target.")}
        return Payload.with_weights(out, metrics=stats)

