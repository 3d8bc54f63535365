r"""What the self-supervised baselines share.

In :mod:`fedspectral.fed` a *baseline* is one of the five federated self-supervised
methods FedSC is compared with (``fedavg_byol``, ``fedu``, ``fedema``, ``fedx``,
``fedca``; ``docs/baselines.md``).  They share:

* :class:`BaselineNet` -- backbone + projector, an optional predictor and an optional
  frozen copy of the encoder (the BYOL target or FedX's global model);
* :class:`BaselineMethod` -- one ``train`` phase, payloads restricted to what the
  method really sends, the baselines' option checks; the learning-rate schedule
  and the :math:`|D_j|`-weighted average of what came back are
  :class:`~fedspectral.fed.methods._averaging.AveragingMethod`'s;
* :class:`BYOLMethod` -- the base of the BYOL family (FedAvg+BYOL, FedU, FedEMA):
  local BYOL with the target updated by EMA after every step
  (:func:`byol_step`, :func:`target_ema`, :func:`ema_update_`);
* :func:`train_two_views` -- the local SGD loop (same batching as FedSC's
  :func:`~fedspectral.fed.methods.sc.local_train`);
* the weight-dict helpers (:func:`part`, :func:`encoder_part`, :func:`as_aux`,
  :func:`load_part`, the client-state helpers) and FedU's and FedEMA's weight
  divergence (:func:`model_divergence` over :func:`select_layers`).

Weights are passed as mappings ``name -> array`` (``numpy.ndarray`` or
``torch.Tensor``); the rules never modify their inputs except :func:`ema_update_`,
whose trailing underscore says so.  Each rule is tested against a direct formula in
``tests/fed/test_baselines.py``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from fedspectral.checks import check_choice, check_real
from fedspectral.config_checks import MethodParams, bad, param
from fedspectral.fed.losses import byol_symmetric_loss
from fedspectral.fed.methods._averaging import AveragingMethod
from fedspectral.fed.methods._local import sgd_epochs
from fedspectral.fed.methods.sc import build_ssl_net
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState
from fedspectral.fed.weights import net_to_arrays
from fedspectral.models import Predictor, SSLNet, module_dim

__all__ = [
    "DIVERGENCE_LAYERS",
    "DIVERGENCE_REDUCTIONS",
    "ArrayLike",
    "BYOLMethod",
    "BaselineMethod",
    "BaselineNet",
    "BaselineParams",
    "EMAParams",
    "as_aux",
    "byol_step",
    "check_same_keys",
    "ema_update_",
    "encoder_part",
    "from_aux",
    "is_float",
    "keep_local",
    "load_part",
    "model_divergence",
    "part",
    "restore_local",
    "save_local",
    "select_layers",
    "state_scalar",
    "target_ema",
    "to_f64",
    "train_two_views",
]

DIVERGENCE_LAYERS = ("conv", "weights", "all")
DIVERGENCE_REDUCTIONS = ("layer_mean", "global")

ArrayLike = np.ndarray | Tensor


# --------------------------------------------------------------------------------------
# weight checks and conversions
# --------------------------------------------------------------------------------------
def check_same_keys(a: Mapping[str, Any], b: Mapping[str, Any], what: str) -> None:
    if set(a) != set(b):
        only_a = sorted(set(a) - set(b))[:5]
        only_b = sorted(set(b) - set(a))[:5]
        raise ValueError(
            f"{what}: the two weight sets have different names "
            f"(only in the first: {only_a}, only in the second: {only_b})"
        )
    for k in a:
        if tuple(a[k].shape) != tuple(b[k].shape):
            raise ValueError(
                f"{what}: shapes differ for {k!r}: {tuple(a[k].shape)} vs {tuple(b[k].shape)}"
            )


def is_float(x: ArrayLike) -> bool:
    if isinstance(x, Tensor):
        return x.is_floating_point()
    return np.issubdtype(np.asarray(x).dtype, np.floating)


def to_f64(x: ArrayLike) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


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

    def __init__(
        self, encoder: SSLNet, predictor: nn.Module | None = None, aux_name: str | None = None
    ) -> None:
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


def load_part(net: nn.Module, weights: Mapping[str, ArrayLike]) -> None:
    """Load a subset of a network's weights in place (names must exist, shapes match)."""
    sd = net.state_dict()
    unknown = sorted(set(weights) - set(sd))
    if unknown:
        raise ValueError(f"weights do not match the model: unexpected {unknown[:5]}")
    with torch.no_grad():
        for k, v in weights.items():
            src = torch.from_numpy(np.asarray(v))
            if src.shape != sd[k].shape:
                raise ValueError(
                    f"weight {k!r} has shape {tuple(src.shape)}, model expects {tuple(sd[k].shape)}"
                )
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

    Batching as :func:`fedspectral.fed.methods.sc.local_train` (a random
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

    return sgd_epochs(
        rt,
        params,
        batch_loss,
        lr=lr,
        epochs=epochs,
        batch_size=batch_size,
        momentum=momentum,
        weight_decay=weight_decay,
        grad_clip=grad_clip,
        after_step=after_step,
        check_finite=True,
    )


@dataclass(frozen=True)
class BaselineParams(MethodParams):
    """Base of the baselines' parameters: what every baseline asks of the configuration
    (exactly two views per sample, ``method.views: 1``; no DP: they share nothing that
    DP-CalR protects)."""

    def check(self, config: Any, method: str) -> None:
        views = getattr(getattr(config, "method", None), "views", 1)
        if views != 1:
            raise bad(
                "method.views",
                views,
                f"method {method!r} trains on two views per sample; set method.views=1",
            )
        dp = getattr(config, "dp", None)
        if dp is not None and dp.enabled:
            raise bad(
                "dp.enabled",
                True,
                f"method {method!r} shares nothing that DP-CalR protects (only fedsc does)",
            )


@dataclass(frozen=True)
class EMAParams(BaselineParams):
    """The BYOL family's parameter: ``ema``, the momentum of the target encoder."""

    ema: float = param(0.99, low=0.0, high=1.0)


# --------------------------------------------------------------------------------------
# the base class
# --------------------------------------------------------------------------------------
class BaselineMethod(AveragingMethod):
    """One ``train`` phase; the server sends :meth:`down_keys` of the global weights
    and averages, weighted by :math:`|D_j|`, whatever entries the clients send back.

    Subclasses set :attr:`predictor` / :attr:`aux_name` (the network's extra parts)
    and implement :meth:`client_train`.  Checks common to the baselines: exactly two
    views per sample (``method.views: 1``) and no DP (they share nothing that
    DP-CalR protects).
    """

    Params: ClassVar[type[MethodParams]] = BaselineParams
    #: a baseline (:func:`fedspectral.fed.methods.is_baseline` reads it)
    baseline: ClassVar[bool] = True
    #: whether the network has a predictor head
    predictor: ClassVar[bool] = False
    #: name of the frozen encoder copy (None: none)
    aux_name: ClassVar[str | None] = None

    # -- model ------------------------------------------------------------------------
    def build_net(self) -> BaselineNet:
        enc = build_ssl_net(self.config)
        pred = self.make_predictor(module_dim(enc.projector, "out_dim")) if self.predictor else None
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
    def down_keys(self, state: ServerState) -> list[str]:
        """Names of the global weights sent to a client (default: encoder + predictor)."""
        aux = None if self.aux_name is None else self.aux_name + "."
        return [k for k in state.weights if aux is None or not k.startswith(aux)]

    def extra_down(self, rnd: int, state: ServerState, cid: str) -> dict[str, np.ndarray]:
        """Arrays besides weights sent to client ``cid`` (FedCA: the dictionary)."""
        return {}

    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        keys = self.down_keys(state)
        w = {k: state.weights[k] for k in keys}
        return {
            c: Payload.with_weights(
                w, arrays=self.extra_down(rnd, state, c), config={"lr": self.lr(rnd)}
            )
            for c in cids
        }

    # -- client -----------------------------------------------------------------------
    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        if phase != "train":
            raise ValueError(f"{self.name} has no phase {phase!r}")
        return self.client_train(rnd, payload, rt)

    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        raise NotImplementedError

    def sgd(
        self,
        rt: ClientRuntime,
        payload: Payload | None,
        step_loss: Callable[..., torch.Tensor],
        after_step: Callable[[], None] | None = None,
        *,
        lr: float | None = None,
        epochs: int | None = None,
    ) -> dict[str, float]:
        """:func:`train_two_views` with the experiment's optimiser settings (learning rate
        from ``payload``, epochs ``method.local_epochs``, unless given)."""
        o = self.config.optim
        net: BaselineNet = rt.net
        if lr is None:
            if payload is None:
                raise ValueError("sgd takes the learning rate from the payload or from lr")
            lr = float(payload.config["lr"])
        return train_two_views(
            rt,
            net.encoder_parameters(),
            step_loss,
            lr=float(lr),
            epochs=self.config.method.local_epochs if epochs is None else int(epochs),
            batch_size=o.batch_size,
            momentum=o.momentum,
            weight_decay=o.weight_decay,
            grad_clip=o.grad_clip,
            after_step=after_step,
        )


# --------------------------------------------------------------------------------------
# BYOL-family helpers
# --------------------------------------------------------------------------------------
def byol_step(net: BaselineNet) -> Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]:
    """The symmetric BYOL loss of one step in ``net`` (online = ``net``, target =
    ``net.target``)."""
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


@torch.no_grad()
def ema_update_(target: nn.Module, online: nn.Module, momentum: float = 0.99) -> nn.Module:
    r"""BYOL's target update in place: :math:`\xi \leftarrow m\,\xi + (1-m)\,\theta`.

    Applied to every floating-point parameter and buffer (BatchNorm statistics
    included, so the target's normalisation follows the online network); integer
    buffers are copied (Grill et al. 2020, Sec. 3.1, with :math:`\tau = m = 0.99`).

    Parameters
    ----------
    target, online : nn.Module
        Same architecture (same ``state_dict`` names and shapes).
    momentum : float in [0, 1]
        :math:`m`; 1 freezes the target, 0 copies the online network.

    Returns
    -------
    nn.Module
        ``target`` (modified in place).
    """
    m = check_real("momentum", momentum, low=0.0, high=1.0)
    t_state = target.state_dict(keep_vars=True)
    o_state = online.state_dict(keep_vars=True)
    check_same_keys(t_state, o_state, "ema_update_")
    for k, t in t_state.items():
        o = o_state[k]
        if t.is_floating_point():
            t.mul_(m).add_(o.detach(), alpha=1.0 - m)
        else:
            t.copy_(o)
    return target


def keep_local(rt: ClientRuntime, weights: Mapping[str, np.ndarray], *prefixes: str) -> None:
    """:func:`save_local` the entries of ``weights`` under each prefix, in that order."""
    for prefix in prefixes:
        save_local(rt, part(weights, prefix))


class BYOLMethod(BaselineMethod):
    """Base of the BYOL family (FedAvg+BYOL, FedU, FedEMA): the network has a predictor
    and a target (``target.*``), and local training is BYOL with the target updated
    by EMA with momentum ``ema`` after every step.  Subclasses declare ``ema`` in
    their :attr:`default_params`."""

    predictor = True
    aux_name = "target"

    Params: ClassVar[type[MethodParams]] = EMAParams
    params: EMAParams

    def train_byol(
        self, rt: ClientRuntime, payload: Payload
    ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """Local BYOL from the weights loaded in ``rt.net``: ``(stats, weights after)``."""
        net: BaselineNet = rt.net
        stats = self.sgd(rt, payload, byol_step(net), target_ema(net, self.params.ema))
        return stats, net_to_arrays(net)


# --------------------------------------------------------------------------------------
# FedU / FedEMA: weight divergence
# --------------------------------------------------------------------------------------
def select_layers(state: Mapping[str, ArrayLike], layers: str = "conv") -> list[str]:
    r"""Names of the entries a divergence is measured on.

    Parameters
    ----------
    state : mapping name -> array
    layers : {"conv", "weights", "all"}
        ``"conv"``: convolution kernels (4-D floating entries whose name ends in
        ``weight``, EasyFL's choice for FedU/FedEMA); ``"weights"``: every floating
        entry named ``*weight`` with at least 2 dimensions (conv and linear layers);
        ``"all"``: every floating entry.

    Returns
    -------
    list of str, in the mapping's order
    """
    check_choice("layers", layers, DIVERGENCE_LAYERS)
    names = []
    for k, v in state.items():
        if not is_float(v):
            continue
        wanted_ndim = v.ndim == 4 if layers == "conv" else v.ndim >= 2
        if layers == "all" or (k.endswith("weight") and wanted_ndim):
            names.append(k)
    return names


def model_divergence(
    old: Mapping[str, ArrayLike],
    new: Mapping[str, ArrayLike],
    layers: str = "conv",
    reduction: str = "layer_mean",
) -> float:
    r"""Weight divergence between two models (FedU, FedEMA).

    .. math::

        d_{\text{layer\_mean}} = \frac1L\sum_{l=1}^{L}\|W^{\text{old}}_l - W^{\text{new}}_l\|_2,
        \qquad
        d_{\text{global}} =
        \Big(\sum_{l=1}^{L}\|W^{\text{old}}_l - W^{\text{new}}_l\|_2^2\Big)^{1/2},

    over the :math:`L` entries chosen by :func:`select_layers` (:math:`\|\cdot\|_2` the
    Euclidean norm of the flattened tensor).  ``layer_mean`` over convolution weights is
    the rule of the reference implementation (EasyFL ``applications/fedssl``) with
    FedU's threshold 0.4; ``global`` is the norm :math:`\|W_g - W_k\|` written in the
    FedEMA paper.

    Parameters
    ----------
    old, new : mapping name -> array, same names and shapes
    layers : {"conv", "weights", "all"}
    reduction : {"layer_mean", "global"}

    Returns
    -------
    float >= 0
    """
    check_choice("reduction", reduction, DIVERGENCE_REDUCTIONS)
    names = select_layers(new, layers)
    if not names:
        raise ValueError(
            f"no layers of kind {layers!r} to measure a divergence on (names: "
            f"{list(new)[:8]}); use layers='weights' for networks without convolutions"
        )
    missing = [k for k in names if k not in old]
    if missing:
        raise ValueError(f"model_divergence: {missing[:5]} missing from the old weights")
    dists = []
    for k in names:
        a, b = to_f64(old[k]), to_f64(new[k])
        if a.shape != b.shape:
            raise ValueError(f"model_divergence: shapes differ for {k!r}: {a.shape} vs {b.shape}")
        dists.append(float(np.linalg.norm((a - b).ravel())))
    if reduction == "layer_mean":
        return float(np.mean(dists))
    return float(math.sqrt(sum(x * x for x in dists)))
