r"""The spectral-contrastive (SC) machinery every SC-style method shares: FedAvg+SC
(:mod:`~fedspectral.fed.methods.fedavg`), FedSC (:mod:`~fedspectral.fed.methods.fedsc`) and
centralized SC (:mod:`~fedspectral.fed.methods.central`).

- :func:`build_ssl_net`: backbone + projector of the config's model;
- :func:`local_train`: the client's SGD loop (one net, reused; views of a batch augmented
  together and passed through the network in one forward pass);
- :func:`global_sc_objective`: the SC objective of the FedSC paper Eq. 2 on a whole data set;
- :class:`SCMethod`: model construction and the train phase (the learning-rate schedule
  and the average come from :class:`~fedspectral.fed.methods._averaging.AveragingMethod`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedspectral.config_checks import MethodParams, bad, param
from fedspectral.data import dataset_info
from fedspectral.data.augment import Normalize
from fedspectral.fed.losses import SpectralContrastiveLoss, clip_norm
from fedspectral.fed.methods._averaging import AveragingMethod
from fedspectral.fed.methods._local import sgd_epochs
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState, TrainPhase, derive_seed
from fedspectral.fed.weights import arrays_to_net, net_to_arrays
from fedspectral.models import Projector, SSLNet, build_backbone, module_dim

if TYPE_CHECKING:
    from fedspectral.models import SSLNet

__all__ = ["MAX_MU", "SCMethod", "SCParams", "build_ssl_net", "global_sc_objective", "local_train"]


# --------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------
def build_ssl_net(config: Any) -> SSLNet:
    """Backbone + projector of ``config.model`` for the channels of ``config.data.dataset``."""
    mc = config.model
    info = dataset_info(config.data.dataset)
    kw = dict(mc.kwargs or {})
    if mc.width is not None:
        kw["width"] = mc.width
    backbone = build_backbone(mc.backbone, in_channels=info.channels, norm=mc.norm, **kw)
    projector = Projector(
        module_dim(backbone, "feature_dim"),
        mc.projector_hidden,
        mc.projector_out,
        norm=mc.projector_norm,
    )
    input_norm = None
    if mc.input_normalize:
        input_norm = Normalize(info.mean, info.std)
    return SSLNet(backbone, projector, input_norm)


def local_train(
    rt: ClientRuntime,
    weights: Mapping[str, np.ndarray] | None,
    loss_fn: Callable[[list[torch.Tensor]], torch.Tensor],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    n_views: int,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    grad_clip: float | None = None,
) -> dict[str, float]:
    r"""The client's local SGD: ``epochs`` passes over ``rt.data`` in ``rt.net``.

    Every step draws a batch of :math:`B` samples (a random permutation per epoch;
    the last incomplete batch is dropped unless the client has fewer than
    :math:`B` samples, then the batch is all of them), augments it into
    ``n_views`` views, runs one forward pass over the stacked views and calls
    ``loss_fn(list_of_view_representations)``.  SGD with momentum (a fresh
    optimizer per call: momentum does not cross rounds) and optional gradient-norm
    clipping.  Randomness: ``rt.generator`` only.

    Returns
    -------
    dict
        ``loss`` (mean over steps), ``steps``, ``num-examples``.
    """
    net = rt.net
    if weights is not None:
        arrays_to_net(net, weights)
    g = rt.generator

    def batch_loss(xb: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        views = torch.cat([rt.augment(xb, g) for _ in range(n_views)], dim=0)
        return loss_fn(list(net(views).split(xb.shape[0], dim=0)))

    return sgd_epochs(
        rt,
        [p for p in net.parameters() if p.requires_grad],
        batch_loss,
        lr=lr,
        epochs=epochs,
        batch_size=batch_size,
        momentum=momentum,
        weight_decay=weight_decay,
        grad_clip=grad_clip,
    )


@torch.inference_mode()
def global_sc_objective(
    net: torch.nn.Module,
    images: torch.Tensor | list[torch.Tensor],
    augment: Callable[..., Any],
    mu: float | None,
    seed: int,
    batch_size: int = 512,
    device: str = "cpu",
) -> float:
    r"""The SC objective of the FedSC paper Eq. 2 on a whole data set (not a mini-batch):
    :math:`-\operatorname{Tr}R^+ + \tfrac12\|R\|_F^2` with :math:`R^+` the symmetrised
    correlation of two views of every image and :math:`R` the mean of :math:`zz^\top`
    over both views, representations clipped to :math:`\sqrt\mu`; views drawn from a
    generator seeded by ``seed`` (the same views at every evaluation).  On the pooled
    client data this is the global objective FedSC is designed to minimise.

    ``images`` may be a list of parts (the clients' data sets): batches then never mix
    parts, so a batch-dependent normalisation sees each client's data as the client
    does in training (for per-sample normalisations the value does not depend on it)."""
    was = net.training
    net.eval()
    g = torch.Generator().manual_seed(seed)
    r_pos = r_all = None
    parts = list(images) if isinstance(images, (list, tuple)) else [images]
    n = sum(len(x) for x in parts)
    batches = [x[i : i + batch_size] for x in parts for i in range(0, len(x), batch_size)]
    try:
        for xb in batches:
            xb = xb.to(device)
            b = len(xb)
            z = net(torch.cat([augment(xb, g), augment(xb, g)])).double()
            z1, z2 = clip_norm(z[:b], mu), clip_norm(z[b:], mu)
            c = z1.T @ z2
            p_ = c + c.T
            a_ = z1.T @ z1 + z2.T @ z2
            r_pos = p_ if r_pos is None else r_pos + p_
            r_all = a_ if r_all is None else r_all + a_
    finally:
        net.train(was)
    assert r_pos is not None and r_all is not None
    r_pos, r_all = r_pos / (2 * n), r_all / (2 * n)
    return float(-torch.trace(r_pos) + 0.5 * (r_all * r_all).sum())


# --------------------------------------------------------------------------------------
# SC methods
# --------------------------------------------------------------------------------------

#: largest ``method.params.mu`` accepted (see :class:`SCParams`)
MAX_MU = 1e15


@dataclass(frozen=True)
class SCParams(MethodParams):
    """The parameters of the SC methods (FedAvg+SC, centralized SC; FedSC extends them).

    ``mu``: representations are clipped to norm :math:`\\sqrt\\mu`; ``pairing``: which
    views pair up in the loss (``paper``: the paper's; ``all``)."""

    mu: float = param(
        4.0, low=0.0, low_open=True, why="representations are clipped to norm sqrt(mu)"
    )
    pairing: str = param("paper", choices=("paper", "all"), why="'seed' is read as 'paper'")
    #: ``pairing`` was called ``"seed"`` (the paper's pairing) before
    renamed_values: ClassVar[dict[str, dict[Any, Any]]] = {"pairing": {"paper": "seed"}}
    #: whether the method shares what DP-CalR protects (only FedSC)
    uses_dp: ClassVar[bool] = False

    def check_values(self) -> None:
        if self.mu > MAX_MU:
            raise bad(
                "method.params.mu",
                self.mu,
                f"must be <= {MAX_MU:g}: the loss and the correlation are float32 "
                f"(largest 3.4e38) and hold terms up to mu^2 summed over a batch's pairs, "
                f"which overflow beyond it",
            )

    def check(self, config: Any, method: str) -> None:
        dp = getattr(config, "dp", None)
        if dp is not None and dp.enabled and not self.uses_dp:
            raise bad(
                "dp.enabled",
                True,
                f"method {method!r} shares nothing that DP-CalR protects (only fedsc does)",
            )


class SCMethod(AveragingMethod):
    """Base of the spectral-contrastive methods: one ``train`` phase of local SC
    training and a (plain or weighted) mean of the returned weights.  Subclasses
    change :meth:`train_config` (what the server sends) and :meth:`make_loss`."""

    Params: ClassVar[type[MethodParams]] = SCParams
    params: SCParams

    # -- model ------------------------------------------------------------------------
    def build_net(self) -> torch.nn.Module:
        return build_ssl_net(self.config)

    # -- evaluation -------------------------------------------------------------------
    def extra_metrics(self, net: torch.nn.Module, fed: Any) -> dict[str, float]:
        """``sc_objective`` (with ``eval.sc_objective``): the global SC objective of
        ``net`` (:func:`global_sc_objective`) in the clients' own normalisation mode --
        on the pooled training data (``fed.bank``), and with batch statistics anywhere
        in the network on each client's data in batches of that client only (as it
        trains); views seeded from ``run.seed``, the same at every evaluation."""
        cfg = self.config
        if not cfg.eval.sc_objective:
            return {}
        batch_stats = "batch" in (cfg.model.norm, cfg.model.projector_norm)
        images = [d.images for d in fed.clients.values()] if batch_stats else fed.bank.images
        return {
            "sc_objective": global_sc_objective(
                net,
                images,
                fed.augment,
                self.params.mu,
                derive_seed("sc-objective", cfg.run.seed) % 2**62,
                cfg.eval.batch_size,
                cfg.run.device,
            )
        }

    # -- server -----------------------------------------------------------------------
    def size_weighted(self) -> bool:
        """``method.weighted``: :math:`|D_j|`-weighted mean, else the paper's plain mean."""
        return bool(self.config.method.weighted)

    def train_config(self, rnd: int, state: ServerState, cid: str) -> tuple[dict, dict]:
        """``(arrays, config)`` added to client ``cid``'s train payload."""
        return {}, {"alpha": 1.0}

    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase != TrainPhase.TRAIN:
            raise ValueError(f"{self.name} has no phase {phase!r}")
        out = {}
        for c in cids:
            arrays, cfg = self.train_config(rnd, state, c)
            cfg = {"lr": self.lr(rnd), **cfg}
            weights = state.weights if self.send_weights(rnd, state, c) else {}
            out[c] = Payload.with_weights(weights, arrays=arrays, config=cfg)
        return out

    def send_weights(self, rnd: int, state: ServerState, cid: str) -> bool:
        """Whether the train payload carries :math:`\theta^{t-1}` (FedSC: not when the
        client kept it from this round's share phase)."""
        return True

    # -- client -----------------------------------------------------------------------
    def make_loss(
        self, payload: Payload, rt: ClientRuntime
    ) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        """The local loss of this payload (FedAvg+SC: plain SC, paper Eq. 2)."""
        return SpectralContrastiveLoss(self.params.mu, self.params.pairing)

    def received_weights(self, payload: Payload, rt: ClientRuntime) -> dict[str, np.ndarray]:
        return payload.weights()

    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        if phase != TrainPhase.TRAIN:
            raise ValueError(f"{self.name} has no phase {phase!r}")
        cfg, o = self.config, self.config.optim
        loss_fn = self.make_loss(payload, rt)
        stats = local_train(
            rt,
            self.received_weights(payload, rt),
            loss_fn,
            lr=float(payload.config["lr"]),
            epochs=cfg.method.local_epochs,
            batch_size=o.batch_size,
            n_views=2 * cfg.method.views,
            momentum=o.momentum,
            weight_decay=o.weight_decay,
            grad_clip=o.grad_clip,
        )
        return Payload.with_weights(net_to_arrays(rt.net), metrics=stats)
