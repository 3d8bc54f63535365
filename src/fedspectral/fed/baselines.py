r"""Defining rules of the federated self-supervised baselines, as pure tensor functions.

The methods in :mod:`fedspectral.fed.methods` (``byol``, ``fedu``, ``fedema``, ``fedx``,
``fedca``) are thin wiring around these rules; each rule here is tested in isolation
against a direct formula (``tests/fed/test_baselines.py``).  Weights are passed as
mappings ``name -> array`` (``numpy.ndarray`` or ``torch.Tensor``, e.g. a
``state_dict()`` or a :class:`~fedspectral.fed.protocol.Payload`'s arrays); the rules
never modify their inputs except :func:`ema_update_`, whose trailing underscore says so.

Rules (see ``docs/baselines.md`` for the sources and the deviations):

BYOL (Grill et al. 2020), FedAvg+BYOL
    target :math:`\xi \leftarrow m\,\xi + (1-m)\,\theta` after every step, :math:`m = 0.99`;
    loss :math:`\ell(p_1, \bar z_2) + \ell(p_2, \bar z_1)`,
    :math:`\ell(p, z) = 2 - 2\cos(p, z)`, :math:`\bar z` the target's projections
    (:func:`byol_symmetric_loss`).
FedU (Zhuang et al., ICCV 2021)
    divergence :math:`d = \frac1L\sum_{l=1}^{L}\|W^{\text{start}}_l - W^{\text{end}}_l\|_2`
    over the :math:`L` convolution weights (:func:`model_divergence`); at the next
    round the online encoder takes the global weights and the predictor takes the
    global predictor only if :math:`d < 0.4` (:func:`fedu_update_predictor`).
FedEMA (Zhuang et al., ICLR 2022)
    :math:`\mu = \min(1, \lambda d)` (:func:`fedema_mu`),
    :math:`\lambda = \tau / d` at the client's first update (:func:`fedema_autoscaler`),
    online :math:`\leftarrow \mu\cdot\text{local} + (1-\mu)\cdot\text{global}`
    (:func:`ema_mix`), predictor likewise.
FedX (Han et al., ECCV 2022)
    :func:`fedx_loss`: two NT-Xent terms and two relational Jensen-Shannon terms
    (:func:`relational_js_loss`) against random anchor samples.
FedCA (Zhang et al., 2023)
    SimCLR with a dictionary of other clients' per-sample representations as extra
    negatives (:func:`nt_xent_with_negatives`), the dictionary updated by an EMA
    (:func:`dictionary_ema`, decay 0.5), and the alignment term on public data
    (:func:`alignment_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.checks import check_real
from fedspectral.fed.losses import (
    RELATIONAL_FORMS,
    byol_symmetric_loss,
    nt_xent,
    nt_xent_with_negatives,
    relational_js_loss,
)
from fedspectral.fed.losses._tensors import check_2d as _check_2d

__all__ = [
    "DIVERGENCE_LAYERS",
    "DIVERGENCE_REDUCTIONS",
    "RELATIONAL_FORMS",
    "alignment_loss",
    "byol_symmetric_loss",
    "dictionary_ema",
    "ema_mix",
    "ema_update_",
    "fedema_autoscaler",
    "fedema_mu",
    "fedu_update_predictor",
    "fedx_loss",
    "model_divergence",
    "nt_xent_with_negatives",
    "relational_js_loss",
    "select_layers",
    "weighted_average",
]

DIVERGENCE_LAYERS = ("conv", "weights", "all")
DIVERGENCE_REDUCTIONS = ("layer_mean", "global")

ArrayLike = np.ndarray | Tensor


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------
def _check_unit(name: str, value: Any, *, open_low: bool = False) -> float:
    return check_real(name, value, low=0.0, high=1.0, low_open=open_low)


def _check_positive(name: str, value: Any) -> float:
    return check_real(name, value, low=0.0, low_open=True)


def _check_same_keys(a: Mapping[str, Any], b: Mapping[str, Any], what: str) -> None:
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


def _is_float(x: ArrayLike) -> bool:
    if isinstance(x, Tensor):
        return x.is_floating_point()
    return np.issubdtype(np.asarray(x).dtype, np.floating)


def _to_f64(x: ArrayLike) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------
# exponential moving averages and weighted averages
# ---------------------------------------------------------------------------
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
    d = _check_unit("decay", decay)
    _check_same_keys(old, new, "ema_mix")
    out: dict[str, ArrayLike] = {}
    for k, n in new.items():
        o = old[k]
        if _is_float(n) and _is_float(o):
            if isinstance(o, Tensor):
                n_t = n if isinstance(n, Tensor) else torch.as_tensor(n)
                out[k] = d * o.detach() + (1.0 - d) * n_t.detach().to(o.dtype).to(o.device)
            else:
                out[k] = (d * np.asarray(o) + (1.0 - d) * _to_f64(n)).astype(np.asarray(o).dtype)
        else:
            out[k] = n.clone() if isinstance(n, Tensor) else np.array(n, copy=True)
    return out


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
    m = _check_unit("momentum", momentum)
    t_state = target.state_dict(keep_vars=True)
    o_state = online.state_dict(keep_vars=True)
    _check_same_keys(t_state, o_state, "ema_update_")
    for k, t in t_state.items():
        o = o_state[k]
        if t.is_floating_point():
            t.mul_(m).add_(o.detach(), alpha=1.0 - m)
        else:
            t.copy_(o)
    return target


def weighted_average(
    states: Sequence[Mapping[str, ArrayLike]], weights: Sequence[float]
) -> dict[str, np.ndarray]:
    r"""FedAvg: :math:`\bar W = \sum_j w_j W_j / \sum_j w_j` entry by entry.

    Weights are typically the clients' data sizes :math:`|D_j|` (McMahan et al. 2017).
    Non-floating entries are taken from the first state.

    Parameters
    ----------
    states : sequence of mappings name -> array, same names and shapes
    weights : sequence of float >= 0, not all zero, one per state

    Returns
    -------
    dict name -> ndarray (float entries in the first state's dtype)
    """
    if len(states) == 0:
        raise ValueError("weighted_average needs at least one state, got none")
    if len(weights) != len(states):
        raise ValueError(f"need one weight per state, got {len(weights)} weights for "
                         f"{len(states)} states")
    w = np.asarray(weights, dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all 0, got {list(weights)!r}")
    for s in states[1:]:
        _check_same_keys(states[0], s, "weighted_average")
    w = w / w.sum()
    out: dict[str, np.ndarray] = {}
    for k, first in states[0].items():
        first_np = first.detach().cpu().numpy() if isinstance(first, Tensor) else np.asarray(first)
        if _is_float(first_np):
            acc = sum(wi * _to_f64(s[k]) for wi, s in zip(w, states, strict=True))
            out[k] = np.asarray(acc).astype(first_np.dtype)
        else:
            out[k] = np.array(first_np, copy=True)
    return out


# ---------------------------------------------------------------------------
# FedU / FedEMA: divergence, gate, autoscaler
# ---------------------------------------------------------------------------
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
    if layers not in DIVERGENCE_LAYERS:
        raise ValueError(f"layers must be one of {DIVERGENCE_LAYERS}, got {layers!r}")
    names = []
    for k, v in state.items():
        if not _is_float(v):
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
        d_{\text{global}} = \Big(\sum_{l=1}^{L}\|W^{\text{old}}_l - W^{\text{new}}_l\|_2^2\Big)^{1/2},

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
    if reduction not in DIVERGENCE_REDUCTIONS:
        raise ValueError(f"reduction must be one of {DIVERGENCE_REDUCTIONS}, got {reduction!r}")
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
        a, b = _to_f64(old[k]), _to_f64(new[k])
        if a.shape != b.shape:
            raise ValueError(f"model_divergence: shapes differ for {k!r}: {a.shape} vs {b.shape}")
        dists.append(float(np.linalg.norm((a - b).ravel())))
    if reduction == "layer_mean":
        return float(np.mean(dists))
    return float(math.sqrt(sum(x * x for x in dists)))


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
    thr = _check_positive("threshold", threshold)
    return check_real("divergence", divergence, low=0.0, allow_inf=True) < thr


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
    t = _check_unit("tau", tau, open_low=True)
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
    lam = _check_positive("scaler", scaler)
    divergence = check_real("divergence", divergence, low=0.0)
    return min(1.0, lam * divergence)


# ---------------------------------------------------------------------------
# FedX
# ---------------------------------------------------------------------------
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
    :func:`relational_js_loss` with ``relational_temperature`` and ``form``.  Index 1/2
    are the two views of a batch, :math:`a` a batch of random anchor samples.

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
    t = _check_positive("temperature", temperature)
    rt = _check_positive("relational_temperature", relational_temperature)
    local = nt_xent(z1, z2, t) + relational_js_loss(z1, z2, z_anchor, rt, form=form)
    glob = nt_xent(p1, g2, t) + relational_js_loss(p1, p2, g_anchor, rt, form=form)
    return local + glob


# ---------------------------------------------------------------------------
# FedCA
# ---------------------------------------------------------------------------
def dictionary_ema(
    old: np.ndarray | None, new: np.ndarray, decay: float = 0.5
) -> np.ndarray:
    r"""FedCA's dictionary update of one client's per-sample representations.

    :math:`D_i \leftarrow \beta D_i + (1-\beta)\,\hat z_i` for each local sample
    :math:`i`, :math:`\hat z_i = z_i/\|z_i\|` the representation just computed,
    :math:`\beta` = ``decay`` (0.5); the first time (``old is None``)
    :math:`D_i = \hat z_i`.  Rows are not renormalised after mixing (the loss
    normalises them).

    Parameters
    ----------
    old : ndarray, shape (n, d), or None
    new : ndarray, shape (n, d)
    decay : float in [0, 1]

    Returns
    -------
    ndarray, shape (n, d), float32
    """
    b = _check_unit("decay", decay)
    new = np.asarray(new, dtype=np.float64)
    if new.ndim != 2:
        raise ValueError(f"new must have shape (n, d), got {new.shape}")
    norms = np.linalg.norm(new, axis=1, keepdims=True)
    new_hat = new / np.maximum(norms, np.finfo(np.float64).tiny)
    if old is None:
        return new_hat.astype(np.float32)
    old = np.asarray(old, dtype=np.float64)
    if old.shape != new.shape:
        raise ValueError(f"old and new must have the same shape, got {old.shape} and "
                         f"{new.shape}")
    return (b * old + (1.0 - b) * new_hat).astype(np.float32)


def alignment_loss(z_local: Tensor, z_base: Tensor) -> Tensor:
    r"""FedCA's alignment module: mean squared distance between the normalised
    representations of public samples under the local model and under the base model
    trained on the public data (constant):
    :math:`\frac1P\sum_i\|\hat z^{\text{local}}_i - \hat z^{\text{base}}_i\|_2^2`.

    Parameters
    ----------
    z_local : Tensor, shape (P, d)
    z_base : Tensor, shape (P, d)
        Detached here.

    Returns
    -------
    Tensor, scalar in [0, 4]
    """
    _check_2d("z_local", z_local)
    _check_2d("z_base", z_base)
    if z_local.shape != z_base.shape:
        raise ValueError(f"z_local and z_base must have the same shape, got "
                         f"{tuple(z_local.shape)} and {tuple(z_base.shape)}")
    d = F.normalize(z_local, dim=1) - F.normalize(z_base.detach().to(z_local.dtype), dim=1)
    return (d * d).sum(dim=1).mean()
