r"""FedCA: federated contrastive averaging with a shared dictionary (Zhang et al., 2023).

"Federated unsupervised representation learning", Frontiers of Information
Technology & Electronic Engineering 24 (2023).  No official code exists; this is
what is implemented (see ``docs/baselines.md``):

Dictionary module (implemented)
    Each client keeps, for a fixed set of its samples (all of them, or
    ``dict_size`` drawn once at its first participation), a dictionary entry
    :math:`D_i`.  After local training it computes the normalised projector
    output :math:`\hat z_i` of each such (un-augmented) sample with its trained
    model and updates :math:`D_i \leftarrow \beta D_i + (1-\beta)\hat z_i`,
    :math:`\beta` = ``dict_ema`` (0.5; first time :math:`D_i = \hat z_i`;
    :func:`dictionary_ema`), then uploads its
    dictionary with its weights.  The server keeps every client's latest
    dictionary and sends each participant the concatenation of the *other*
    clients' dictionaries, which it uses as extra negatives in SimCLR's NT-Xent
    (temperature ``temperature``, 0.1;
    :func:`~fedspectral.fed.losses.nt_xent_with_negatives`).  In the first
    round the dictionary is empty (plain SimCLR).
Alignment module (implemented, with a held-out public split)
    The runner draws ``public_size`` training images that no client holds
    (stratified; outside ``data.max_train``'s subset when it leaves enough, so the
    clients keep exactly the data of the other methods; see
    :func:`fedspectral.fed.federation.prepare_federation`).  Before round 1 the
    server trains a *base model* (same architecture, its own initialisation) with
    SimCLR on the public images for ``base_epochs`` epochs and stores the public
    images and the base model's representations :math:`z^{\text{base}}` of them
    (projector outputs of the un-augmented images).  A client receives both once,
    at its first participation (counted in that round's download; it says in its
    reply that it holds them, and a client that lost its state gets them again),
    keeps them in its state, and adds
    :math:`\beta\,\frac1m\sum_i\|\hat z^{\text{local}}_i - \hat z^{\text{base}}_i\|^2`
    (:func:`alignment_loss`, :math:`\beta` =
    ``align_weight``) over :math:`m = \min(B, P)` public images drawn without
    replacement at every local step.  ``align_weight: 0`` turns the module off
    (no public split is drawn).  The public-set size, :math:`\beta` and the base
    model's schedule are ours (the FedCA paper's values were not available here).

The server averages the networks weighted by :math:`|D_j|`.  Communication per
participation: weights down and up, the others' dictionaries down
(:math:`\sum_{k\ne j} n_k \times d` floats), the own dictionary up
(:math:`n_j\times d`) -- the "significant communication overhead" and privacy
leakage the FedSC seed attributes to FedCA -- and, once per client, the public
images and their base representations (:math:`P\times(C H W + d)` floats).

Per-client state: the dictionary, the indices of the samples it covers, and the
public images with their base representations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedspectral.checks import check_real
from fedspectral.config_checks import (
    MAX_LOCAL_EPOCHS,
    MIN_TEMPERATURE,
    TEMPERATURE_WHY,
    MethodParams,
    param,
)
from fedspectral.fed.losses import check_2d, nt_xent_with_negatives
from fedspectral.fed.manifest import Item, Manifests, train_manifests
from fedspectral.fed.methods.baseline import BaselineMethod, BaselineNet, BaselineParams, load_part
from fedspectral.fed.protocol import (
    ClientRuntime,
    Payload,
    ServerState,
    client_generators,
    derive_seed,
)
from fedspectral.fed.weights import net_to_arrays
from fedspectral.kinds import PhaseKind

__all__ = ["FedCA", "alignment_loss", "dictionary_ema"]

DICT_KEY = "fedca.dict"
INDEX_KEY = "fedca.index"
PUBLIC_KEY = "fedca.public_images"
BASE_Z_KEY = "fedca.public_z"
HAS_PUBLIC = "fedca.has_public"


def dictionary_ema(old: np.ndarray | None, new: np.ndarray, decay: float = 0.5) -> np.ndarray:
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
    b = check_real("decay", decay, low=0.0, high=1.0)
    new = np.asarray(new, dtype=np.float64)
    if new.ndim != 2:
        raise ValueError(f"new must have shape (n, d), got {new.shape}")
    norms = np.linalg.norm(new, axis=1, keepdims=True)
    new_hat = new / np.maximum(norms, np.finfo(np.float64).tiny)
    if old is None:
        return new_hat.astype(np.float32)
    old = np.asarray(old, dtype=np.float64)
    if old.shape != new.shape:
        raise ValueError(f"old and new must have the same shape, got {old.shape} and {new.shape}")
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
    check_2d("z_local", z_local)
    check_2d("z_base", z_base)
    if z_local.shape != z_base.shape:
        raise ValueError(
            f"z_local and z_base must have the same shape, got "
            f"{tuple(z_local.shape)} and {tuple(z_base.shape)}"
        )
    d = F.normalize(z_local, dim=1) - F.normalize(z_base.detach().to(z_local.dtype), dim=1)
    return (d * d).sum(dim=1).mean()


#: bounds on FedCA's sizes (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts them)
MAX_DICT_SIZE = 1_000_000
MAX_PUBLIC_SIZE = 100_000


@dataclass(frozen=True)
class FedCAParams(BaselineParams):
    """FedCA's parameters: the contrastive ``temperature``, the dictionary's EMA decay and
    size (``None``: every local sample), the alignment's weight (0 turns the alignment
    module off), the public split's size and the base model's epochs on it."""

    temperature: float = param(0.1, low=MIN_TEMPERATURE, why=TEMPERATURE_WHY)
    dict_ema: float = param(0.5, low=0.0, high=1.0)
    dict_size: int | None = param(
        None, low=1, size=MAX_DICT_SIZE, why="entries of every client's dictionary, in memory"
    )
    align_weight: float = param(1.0, low=0.0)
    public_size: int = param(
        300, low=1, size=MAX_PUBLIC_SIZE, why="images of the server's public split, in memory"
    )
    base_epochs: int = param(
        30,
        low=1,
        size=MAX_LOCAL_EPOCHS,
        why="the base model's time grows linearly with its epochs; the default is 30",
    )


class FedCA(BaselineMethod):
    """FedCA: dictionary and alignment modules (see the module docstring).

    Parameters (method.params)
    --------------------------
    temperature : float > 0
        NT-Xent temperature (0.1).
    dict_ema : float in [0, 1]
        Decay :math:`\\beta` of the dictionary entries across rounds (0.5).
    dict_size : int or None
        Dictionary entries per client (``None``: one per local sample).
    align_weight : float >= 0
        Weight :math:`\beta` of the alignment term (1.0; 0 turns the module off).
    public_size : int >= 1
        Images in the server's public split (300).
    base_epochs : int >= 1
        SimCLR epochs of the server's base model on the public split (30).
    """

    name = "fedca"
    Params: ClassVar[type[MethodParams]] = FedCAParams
    params: FedCAParams
    reported_metrics = ("negatives", "alignment", "aligned")

    @classmethod
    def reply_manifests(cls) -> Manifests:
        """The train reply's, with the dictionary (per-sample values) and its echo."""
        extra = (
            Item(
                "array",
                "dictionary",
                "per-sample",
                "one un-noised representation per covered sample",
            ),
            Item("config", "fedca.has_public", "public", "echo: public data sent"),
        )
        return train_manifests(
            cls.name, cls.reported_metrics, extra, cls.phases_of_kind(PhaseKind.TRAIN)
        )

    @property
    def aligns(self) -> bool:
        return self.params.align_weight > 0

    def public_size(self) -> int:
        return int(self.params.public_size) if self.aligns else 0

    # -- server: the base model on the public split -------------------------------------
    def prepare_server(self, state: ServerState, public: Any, augment: Any, seed: int) -> None:
        """Train the base model with SimCLR on ``public``; keep the public images and
        the base model's representations of them in ``state.arrays``."""
        if not self.aligns:
            return
        o = self.config.optim
        dev = torch.device(self.config.run.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed("fedca-base-init", seed))
            base = self.build_net()
        base.to(dev)
        g, rng = client_generators(seed, 0, "server", "fedca-base")
        rt = ClientRuntime(
            cid="server",
            data=public,
            net=base,
            augment=augment,
            generator=g,
            noise_rng=rng,
            state={},
            config=self.config,
            device=str(dev),
        )
        t = self.params.temperature

        def step(x1: torch.Tensor, x2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            b = x1.shape[0]
            z = base(torch.cat([x1, x2], dim=0))
            return nt_xent_with_negatives(z[:b], z[b:], None, t)

        stats = self.sgd(rt, None, step, lr=o.lr, epochs=self.params.base_epochs)
        images = public.images
        state.arrays[PUBLIC_KEY] = images.detach().cpu().numpy().astype(np.float32)
        state.arrays[BASE_Z_KEY] = self._represent(base, images, dev).astype(np.float32)
        state.method_state["fedca.base"] = {
            "loss": float(stats["loss"]),
            "steps": int(stats["steps"]),
            "public_size": int(images.shape[0]),
        }
        state.method_state[HAS_PUBLIC] = []

    def _represent(self, net: BaselineNet, images: torch.Tensor, dev: torch.device) -> np.ndarray:
        """Projector outputs of un-augmented ``images`` (eval mode, no gradient)."""
        bs = self.config.eval.batch_size
        net.eval()
        with torch.no_grad():
            zs = [net(images[i : i + bs].to(dev)).cpu() for i in range(0, images.shape[0], bs)]
        return torch.cat(zs, dim=0).double().numpy()

    # -- server -----------------------------------------------------------------------
    def extra_down(self, rnd: int, state: ServerState, cid: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        others = [
            state.arrays[f"dict.{c}"]
            for c in state.clients
            if c != cid and f"dict.{c}" in state.arrays
        ]
        if others:
            out["dictionary"] = np.concatenate(others, axis=0)
        if self.aligns and cid not in state.method_state.get(HAS_PUBLIC, []):
            if PUBLIC_KEY not in state.arrays:
                raise ValueError(
                    "fedca: alignment is on but the server state holds no public "
                    "split (prepare_server was not run)"
                )
            out["public_images"] = state.arrays[PUBLIC_KEY]
            out["public_z"] = state.arrays[BASE_Z_KEY]
        return out

    def aggregate_extra(self, rnd: int, state: ServerState, replies: Mapping[str, Payload]) -> None:
        for c, r in replies.items():
            if "dictionary" not in r.arrays:
                raise ValueError(f"fedca: client {c!r} sent no dictionary")
            state.arrays[f"dict.{c}"] = np.asarray(r.arrays["dictionary"], dtype=np.float32)
        if self.aligns:
            has = set(state.method_state.get(HAS_PUBLIC, []))
            for c, r in replies.items():
                if bool(r.config.get(HAS_PUBLIC, False)):
                    has.add(c)
                else:
                    has.discard(c)
            state.method_state[HAS_PUBLIC] = [c for c in state.clients if c in has]

    # -- client -----------------------------------------------------------------------
    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        load_part(net, payload.weights())
        dev = torch.device(rt.device)
        neg = payload.arrays.get("dictionary")
        negatives = None if neg is None else torch.as_tensor(np.asarray(neg)).to(dev)
        t = self.params.temperature
        if "public_images" in payload.arrays:
            rt.state[PUBLIC_KEY] = np.asarray(payload.arrays["public_images"], dtype=np.float32)
            rt.state[BASE_Z_KEY] = np.asarray(payload.arrays["public_z"], dtype=np.float32)
        pub = pub_z = None
        if self.aligns and PUBLIC_KEY in rt.state:
            pub = torch.from_numpy(rt.state[PUBLIC_KEY]).to(dev)
            pub_z = torch.from_numpy(rt.state[BASE_Z_KEY]).to(dev)
        beta = self.params.align_weight
        g = rt.generator

        def step(x1: torch.Tensor, x2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            b = x1.shape[0]
            z = net(torch.cat([x1, x2], dim=0))
            loss = nt_xent_with_negatives(z[:b], z[b:], negatives, t)
            if pub is not None and pub_z is not None:
                j = torch.randperm(pub.shape[0], generator=g)[: min(b, pub.shape[0])]
                jd = j.to(dev)
                loss = loss + beta * alignment_loss(net(pub[jd]), pub_z[jd])
            return loss

        stats = self.sgd(rt, payload, step)
        stats["negatives"] = 0.0 if negatives is None else float(negatives.shape[0])
        if self.aligns:
            stats["aligned"] = float(pub is not None)
            # the trained model's distance to the base model on the public set
            if pub is not None and pub_z is not None:
                z_pub = torch.from_numpy(self._represent(net, pub, dev)).float()
                stats["alignment"] = float(alignment_loss(z_pub, pub_z.cpu()))

        # dictionary update: the trained model's representations of the covered samples
        images = rt.data.images
        n = images.shape[0]
        if INDEX_KEY not in rt.state:
            ds = self.params.dict_size
            idx = (
                np.arange(n)
                if ds is None or ds >= n
                else np.sort(torch.randperm(n, generator=rt.generator)[:ds].numpy())
            )
            rt.state[INDEX_KEY] = idx.astype(np.int64)
        idx_t = torch.from_numpy(rt.state[INDEX_KEY])
        z_new = self._represent(net, images[idx_t], dev)
        d = dictionary_ema(rt.state.get(DICT_KEY), z_new, self.params.dict_ema)
        rt.state[DICT_KEY] = d
        config = {HAS_PUBLIC: pub is not None} if self.aligns else {}
        return Payload.with_weights(
            net_to_arrays(net), arrays={"dictionary": d}, metrics=stats, config=config
        )
