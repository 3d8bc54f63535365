"""FedSC's DP-CalR release uses the configured vectorisation (``dp.vectorisation``,
isometric by default); the config refuses anything else by name."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from torch import nn

from fedspectral.config import ExperimentConfig
from fedspectral.fed.methods.fedsc import FedSC
from fedspectral.fed.protocol import Payload
from fedspectral.fed.validation import validate
from fedspectral.fed.weights import net_to_arrays


def _cfg(vectorisation=None):
    cfg = ExperimentConfig()
    cfg.method.name = "fedsc"
    cfg.method.rounds = 2
    cfg.partition.num_clients = 2
    cfg.dp.enabled, cfg.dp.sigma = True, 0.05
    if vectorisation is not None:
        cfg.dp.vectorisation = vectorisation
    return cfg


def _share(cfg):
    net = nn.Linear(3, 4, bias=False).double()
    torch.nn.init.eye_(net.weight)

    class Data:  # six zero images: R_j is the noise alone
        images = torch.zeros(6, 3, dtype=torch.float64)

        def __len__(self) -> int:
            return 6

    rt = types.SimpleNamespace(
        net=net,
        data=Data(),
        augment=None,
        generator=torch.Generator().manual_seed(0),
        noise_rng=np.random.default_rng(1),
        device=torch.device("cpu"),
        state={},
    )
    out = FedSC(cfg)._share(1, Payload.with_weights(net_to_arrays(net)), rt)
    return out.arrays["R"].astype(np.float64)


def test_default_is_isometric_and_upper_is_available():
    assert ExperimentConfig().dp.vectorisation == "isometric"
    iso, up = _share(_cfg()), _share(_cfg("upper"))
    # zero images: R_j is pure noise from the same stream; diagonal equal, off-diagonal / √2
    np.testing.assert_allclose(np.diag(iso), np.diag(up), rtol=1e-6)
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(iso[off] * np.sqrt(2), up[off], rtol=1e-5, atol=1e-7)
    assert np.abs(up[off]).max() > 0


def test_config_refuses_unknown_vectorisation():
    cfg = _cfg("svec")
    with pytest.raises(ValueError, match="dp.vectorisation.*svec"):
        validate(cfg)
