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
    :func:`fedspectral.fed.baselines.dictionary_ema`), then uploads its
    dictionary with its weights.  The server keeps every client's latest
    dictionary and sends each participant the concatenation of the *other*
    clients' dictionaries, which it uses as extra negatives in SimCLR's NT-Xent
    (temperature ``temperature``, 0.1;
    :func:`~fedspectral.fed.baselines.nt_xent_with_negatives`).  In the first
    round the dictionary is empty (plain SimCLR).
Alignment module (not implemented)
    FedCA also aligns each client's representations of a public data set with
    those of a base model the server trains on that public set.  The method
    interface gives the server no data (``init_server_state(weights,
    client_sizes)``), so there is no public set to train the base model on; the
    loss itself is :func:`~fedspectral.fed.baselines.alignment_loss`.  What is
    missing is (1) a public split carved out by the runner, (2) a server-side
    SimCLR pre-training of the base model on it, (3) sending the public images and
    the base model's representations of them to the clients (counted in the
    payloads) and (4) adding ``alignment_loss`` with its weight to the local loss.

The server averages the networks weighted by :math:`|D_j|`.  Communication per
participation: weights down and up, the others' dictionaries down
(:math:`\sum_{k\ne j} n_k \times d` floats), the own dictionary up
(:math:`n_j\times d`) -- the "significant communication overhead" and privacy
leakage the FedSC seed attributes to FedCA.

Per-client state: the dictionary and the indices of the samples it covers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from fedspectral.fed.baselines import dictionary_ema, nt_xent_with_negatives
from fedspectral.fed.methods.byol import BaselineMethod, BaselineNet, load_part
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState, net_to_arrays

__all__ = ["FedCA"]

DICT_KEY = "fedca.dict"
INDEX_KEY = "fedca.index"


class FedCA(BaselineMethod):
    """FedCA's dictionary module (see the module docstring).

    Parameters (``method.params``)
    -------------------------------
    temperature : float > 0
        NT-Xent temperature (0.1).
    dict_ema : float in [0, 1]
        Decay :math:`\\beta` of the dictionary entries across rounds (0.5).
    dict_size : int or None
        Dictionary entries per client (``None``: one per local sample).
    """

    name = "fedca"
    default_params: ClassVar[dict[str, Any]] = {"temperature": 0.1, "dict_ema": 0.5,
                                                "dict_size": None}
    reported_metrics = ("negatives",)

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        cls._positive("temperature", params["temperature"])
        cls._unit("dict_ema", params["dict_ema"])
        ds = params["dict_size"]
        if ds is not None and (isinstance(ds, bool) or not isinstance(ds, int) or ds < 1):
            raise ValueError(f"config method.params.dict_size={ds!r}: must be an integer >= 1 "
                             f"or null (every local sample)")

    # -- server -----------------------------------------------------------------------
    def extra_down(self, rnd: int, state: ServerState, cid: str) -> dict[str, np.ndarray]:
        others = [state.arrays[f"dict.{c}"] for c in state.clients
                  if c != cid and f"dict.{c}" in state.arrays]
        if not others:
            return {}
        return {"dictionary": np.concatenate(others, axis=0)}

    def aggregate_extra(self, rnd: int, state: ServerState,
                        replies: Mapping[str, Payload]) -> None:
        for c, r in replies.items():
            if "dictionary" not in r.arrays:
                raise ValueError(f"fedca: client {c!r} sent no dictionary")
            state.arrays[f"dict.{c}"] = np.asarray(r.arrays["dictionary"], dtype=np.float32)

    # -- client -----------------------------------------------------------------------
    def client_train(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        net: BaselineNet = rt.net
        load_part(net, payload.weights())
        dev = torch.device(rt.device)
        neg = payload.arrays.get("dictionary")
        negatives = None if neg is None else torch.as_tensor(np.asarray(neg)).to(dev)
        t = self.params["temperature"]

        def step(x1: torch.Tensor, x2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            b = x1.shape[0]
            z = net(torch.cat([x1, x2], dim=0))
            return nt_xent_with_negatives(z[:b], z[b:], negatives, t)

        stats = self.sgd(rt, payload, step)
        stats["negatives"] = 0.0 if negatives is None else float(negatives.shape[0])

        # dictionary update: the trained model's representations of the covered samples
        images = rt.data.images
        n = images.shape[0]
        if INDEX_KEY not in rt.state:
            ds = self.params["dict_size"]
            idx = np.arange(n) if ds is None or ds >= n else \
                np.sort(torch.randperm(n, generator=rt.generator)[:ds].numpy())
            rt.state[INDEX_KEY] = idx.astype(np.int64)
        idx_t = torch.from_numpy(rt.state[INDEX_KEY])
        bs = self.config.eval.batch_size
        net.eval()
        with torch.no_grad():
            zs = [net(images[idx_t[i:i + bs]].to(dev)).cpu()
                  for i in range(0, len(idx_t), bs)]
        z_new = torch.cat(zs, dim=0).double().numpy()
        d = dictionary_ema(rt.state.get(DICT_KEY), z_new, self.params["dict_ema"])
        rt.state[DICT_KEY] = d
        return Payload.with_weights(net_to_arrays(net), arrays={"dictionary": d},
                                    metrics=stats)
