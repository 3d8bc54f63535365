"""fedspectral.eval: kNN monitor, feature extraction, linear probe, evaluate_encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier
from torch import nn

from fedspectral.eval import (
    encoder_features,
    evaluate_encoder,
    extract_features,
    knn_accuracy,
    knn_predict,
    linear_probe,
)


def blobs(n_per: int, n_cls: int, d: int, spread: float, seed: int, centre_seed: int = 0):
    """Gaussian clusters around random unit directions (well separated if spread small).

    ``centre_seed`` fixes the cluster centres, ``seed`` the draws around them."""
    gc = torch.Generator().manual_seed(centre_seed)
    centres = torch.nn.functional.normalize(torch.randn(n_cls, d, generator=gc), dim=1)
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n_cls).repeat_interleave(n_per)
    x = centres[y] + spread * torch.randn(len(y), d, generator=g)
    perm = torch.randperm(len(y), generator=g)
    return x[perm], y[perm]


# ---------------------------------------------------------------------------
# kNN
# ---------------------------------------------------------------------------
def test_knn_separated_clusters_is_perfect():
    x_tr, y_tr = blobs(100, 5, 16, 0.05, seed=0)
    x_te, y_te = blobs(40, 5, 16, 0.05, seed=1)
    assert knn_accuracy(x_tr, y_tr, x_te, y_te, k=200, t=0.1) == 1.0
    # and a shuffled bank is at chance
    y_bad = y_tr[torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(1))]
    assert knn_accuracy(x_tr, y_bad, x_te, y_te, k=20, t=0.1) < 0.5


@pytest.mark.parametrize("k,t", [(1, 0.1), (7, 0.1), (30, 0.5), (200, 0.1)])
def test_knn_matches_sklearn_weighted_vote(k, t):
    x_tr, y_tr = blobs(60, 4, 8, 0.8, seed=2)  # overlapping: many non-trivial votes
    x_te, y_te = blobs(25, 4, 8, 0.8, seed=3)
    ref = KNeighborsClassifier(
        n_neighbors=k,
        metric="cosine",
        algorithm="brute",
        weights=lambda dist: np.exp((1.0 - dist) / t),
    )
    ref.fit(x_tr.double().numpy(), y_tr.numpy())
    expect = ref.predict(x_te.double().numpy())
    for chunk in (1, 7, 1024):
        got = knn_predict(x_tr, y_tr, x_te, k=k, t=t, chunk_size=chunk)
        assert np.array_equal(got.numpy(), expect), chunk
    acc = knn_accuracy(x_tr, y_tr, x_te, y_te, k=k, t=t)
    assert acc == pytest.approx(float(np.mean(expect == y_te.numpy())))
    assert 0.3 < acc < 1.0  # a non-trivial problem


def test_knn_direct_loop_small_case():
    # 1-d directions in 2-d: cosine similarity is cos(angle difference)
    ang_tr = torch.tensor([0.0, 0.1, 0.2, 1.5, 1.6, 3.0])
    y_tr = torch.tensor([0, 0, 1, 1, 1, 2])
    x_tr = (
        torch.stack([torch.cos(ang_tr), torch.sin(ang_tr)], 1)
        * torch.tensor([1.0, 2.0, 0.5, 3.0, 1.0, 1.0])[:, None]
    )  # norms must not matter
    x_te = torch.tensor([[math.cos(0.15), math.sin(0.15)]])
    k, t = 3, 0.5
    sims = torch.cos(ang_tr - 0.15)
    top = sims.topk(k).indices
    score = [sum(math.exp(sims[i] / t) for i in top if y_tr[i] == c) for c in range(3)]
    assert knn_predict(x_tr, y_tr, x_te, k=k, t=t).item() == int(np.argmax(score)) == 0
    # with t tiny the single nearest neighbour decides
    assert (
        knn_predict(
            x_tr, y_tr, torch.tensor([[math.cos(0.19), math.sin(0.19)]]), k=3, t=0.001
        ).item()
        == 1
    )


def test_knn_validation_and_k_warning():
    x, y = blobs(5, 2, 3, 0.1, seed=0)
    with pytest.warns(UserWarning, match="k=200"):
        assert knn_accuracy(x, y, x, y, k=200) >= 0.5
    with pytest.raises(ValueError, match="k must"):
        knn_predict(x, y, x, k=0)
    with pytest.raises(ValueError, match="t must"):
        knn_predict(x, y, x, t=0.0)
    with pytest.raises(ValueError, match="dimension"):
        knn_predict(x, y, x[:, :2])
    with pytest.raises(ValueError, match="entries"):
        knn_predict(x, y[:-1], x)
    with pytest.raises(TypeError, match="integer"):
        knn_predict(x, y.float(), x)
    with pytest.raises(ValueError, match="num_classes=1"):
        knn_predict(x, y, x, num_classes=1)


# ---------------------------------------------------------------------------
# feature extraction
# ---------------------------------------------------------------------------
class ToyNet(nn.Module):
    """SSLNet-like: backbone with BatchNorm and dropout, projector; ``encode`` optional."""

    def __init__(self, with_encode: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(
            nn.Flatten(), nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5)
        )
        self.projector = nn.Linear(16, 6)
        if with_encode:
            self.encode = self._encode

    def features(self, x):
        return self.backbone(x)

    def _encode(self, x):
        h = self.features(x)
        return h, self.projector(h)

    def forward(self, x):
        return self.projector(self.features(x))


def test_extract_features_inference_eval_and_modes_restored():
    net = ToyNet()
    net.train()
    net.projector.eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(23, 3, 4)
    f1 = extract_features(net.features, x, batch_size=5)
    f2 = extract_features(net.features, x, batch_size=23)
    assert f1.shape == (23, 16) and f1.dtype == torch.float32 and not f1.requires_grad
    torch.testing.assert_close(f1, f2)  # eval mode: batch composition irrelevant
    assert net.training and not net.projector.training and net.backbone.training
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(f1, net.features(x))
    with pytest.raises(ValueError, match="batch_size"):
        extract_features(net, x, batch_size=0)


def test_encoder_features_one_and_two_pass_agree():
    x = torch.randn(17, 3, 4)
    h1, z1 = encoder_features(ToyNet(with_encode=True), x, batch_size=4)
    h2, z2 = encoder_features(ToyNet(with_encode=False), x, batch_size=4)
    torch.testing.assert_close(h1, h2)
    torch.testing.assert_close(z1, z2)
    assert h1.shape == (17, 16) and z1.shape == (17, 6)


def test_evaluate_encoder_on_separable_data():
    x_tr, y_tr = blobs(60, 3, 12, 0.05, seed=4)
    x_te, y_te = blobs(20, 3, 12, 0.05, seed=5)
    net = ToyNet()
    with torch.no_grad():  # a backbone that keeps the cluster structure (identity-like)
        net.backbone[1].weight.copy_(torch.cat([torch.eye(12), -torch.eye(12)[:4]]))
        net.backbone[1].bias.zero_()
    res = evaluate_encoder(
        net,
        (x_tr.reshape(-1, 3, 4), y_tr),
        (x_te.reshape(-1, 3, 4), y_te),
        k=20,
        linear=True,
        probe_epochs=40,
        probe_batch_size=32,
    )
    assert set(res) == {"knn_backbone", "knn_projector", "linear_probe", "eval_seconds"}
    assert res["knn_backbone"] >= 0.95 and res["linear_probe"] >= 0.9
    assert 0.0 <= res["knn_projector"] <= 1.0
    with pytest.raises(TypeError, match="ImageData"):
        evaluate_encoder(net, x_tr, (x_te, y_te))


# ---------------------------------------------------------------------------
# linear probe
# ---------------------------------------------------------------------------
def test_linear_probe_beats_chance_and_is_deterministic():
    x_tr, y_tr = blobs(150, 4, 20, 0.3, seed=5)
    x_te, y_te = blobs(50, 4, 20, 0.3, seed=6)
    acc = linear_probe(x_tr, y_tr, x_te, y_te, epochs=20, batch_size=64, seed=1)
    assert acc >= 0.9  # chance is 0.25
    assert linear_probe(x_tr, y_tr, x_te, y_te, epochs=20, batch_size=64, seed=1) == acc
    for norm in ("l2", "standardize"):
        assert linear_probe(x_tr, y_tr, x_te, y_te, epochs=20, batch_size=64, normalize=norm) >= 0.9
    # random labels cannot be learned beyond chance on test
    y_rand = torch.randint(0, 4, y_tr.shape, generator=torch.Generator().manual_seed(7))
    assert linear_probe(x_tr, y_rand, x_te, y_te, epochs=20, batch_size=64) < 0.5


def test_linear_probe_validation():
    x, y = blobs(5, 2, 3, 0.1, seed=0)
    with pytest.raises(ValueError, match="epochs"):
        linear_probe(x, y, x, y, epochs=0)
    with pytest.raises(ValueError, match="lr"):
        linear_probe(x, y, x, y, lr=-1.0)
    with pytest.raises(ValueError, match="normalize"):
        linear_probe(x, y, x, y, normalize="zca")
    with pytest.raises(ValueError, match="dimension"):
        linear_probe(x, y, x[:, :2], y)
    with pytest.raises(ValueError, match="labels"):
        linear_probe(x, y[:3], x, y)
