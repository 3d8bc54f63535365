"""Projector, predictor and SSLNet."""

import pytest
import torch
from torch import nn

from fedspectral.data.augment import Normalize
from fedspectral.models import Predictor, Projector, SSLNet, build_backbone


def test_projector_is_linear_relu_linear() -> None:
    p = Projector(512)
    kinds = [type(m) for m in p.net]
    assert kinds == [nn.Linear, nn.Identity, nn.ReLU, nn.Linear]
    assert (p.net[0].in_features, p.net[0].out_features, p.net[3].out_features) == (512, 1024, 512)
    assert p(torch.rand(3, 512)).shape == (3, 512)
    q = Projector(64, hidden=32, out=16, norm="batch")
    assert isinstance(q.net[1], nn.BatchNorm1d) and not q.net[1].track_running_stats


def test_predictor() -> None:
    p = Predictor(128, hidden=64)
    assert isinstance(p.net[1], nn.BatchNorm1d)
    assert p(torch.rand(5, 128)).shape == (5, 128)
    assert isinstance(Predictor(8, norm="none").net[1], nn.Identity)
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        Predictor(8, hidden=0)


def test_sslnet_paths() -> None:
    torch.manual_seed(0)
    bb = build_backbone("small_cnn", 1, width=8)
    net = SSLNet(bb, Projector(bb.feature_dim, 16, 8), Normalize([0.5], [0.25]))
    x = torch.rand(4, 1, 28, 28)
    h, z = net.encode(x)
    assert net.feature_dim == 32 and h.shape == (4, 32) and z.shape == (4, 8)
    assert torch.allclose(net.features(x), bb((x - 0.5) / 0.25))
    assert torch.allclose(net(x), net.projector(h))
    assert torch.allclose(z, net(x))
    # no normalisation constants in the state dict (only learnable weights travel)
    assert all(k.startswith(("backbone.", "projector.")) for k in net.state_dict())
    with pytest.raises(TypeError):
        SSLNet(bb, "projector")  # type: ignore[arg-type]
