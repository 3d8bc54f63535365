"""Numbers at the public entry points: a numpy scalar gives exactly the result of the
equal Python number, and ``True`` is refused with a TypeError naming the parameter
(``fedspectral.checks``).  One case per entry point, one representative parameter."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fedspectral.data.augment import SimCLRAugment
from fedspectral.data.datasets import ImageData, train_val_split
from fedspectral.data.partition import partition_iid
from fedspectral.eval.evaluate import encoder_features
from fedspectral.eval.knn import extract_features, knn_predict
from fedspectral.eval.linear_probe import linear_probe
from fedspectral.fed.correlation import calibrate_correlation_sigma, dp_correlation
from fedspectral.fed.methods.fedema import ema_mix, fedema_autoscaler, fedema_mu
from fedspectral.fed.methods.fedu import fedu_update_predictor
from fedspectral.linalg import n_packed, top_k_eigvecs
from fedspectral.models import FixupResNet20, Projector, ResNet20, SmallCNN, SSLNet
from fedspectral.pca import bounds, fps, real_data, synthetic
from fedspectral.pca import comparators as pb

_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((6, 6))
_S = _A @ _A.T / 6
_X = _RNG.standard_normal((20, 4))
_X /= np.linalg.norm(_X, axis=1, keepdims=True)
_EIG = np.array([3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
_IMGS = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
_FEATS = torch.randn(12, 3, generator=torch.Generator().manual_seed(1))
_LABELS = torch.arange(12) % 3
_DATA = ImageData(_IMGS, torch.arange(6) % 2, 2, "toy")


def _seeded(build: Callable[[], Any]) -> Any:
    torch.manual_seed(0)
    return build()


def _views(n: Any) -> torch.Tensor:
    return SimCLRAugment(8, color=False).views(_IMGS, n, torch.Generator().manual_seed(0))


def _ssl() -> SSLNet:
    torch.manual_seed(0)
    return SSLNet(SmallCNN(width=2), Projector(SmallCNN(width=2).feature_dim, 4, 4))


# (entry point, parameter, Python value, call(value) -> result)
CASES: list[tuple[str, str, Any, Callable[[Any], Any]]] = [
    ("random_stiefel", "k", 2, lambda v: synthetic.random_stiefel(6, v, 0)),
    ("spiked_eigenvalues", "lam", 1.5, lambda v: synthetic.spiked_eigenvalues(5, 2, v)),
    ("spiked_covariance", "p", 5, lambda v: synthetic.spiked_covariance(v, 2, rng=0)),
    ("row_sparse_covariance", "rng", 0, lambda v: synthetic.row_sparse_covariance(6, 2, 3, rng=v)),
    ("sample", "n", 4, lambda v: synthetic.sample(_S, v, 0)),
    ("average_pool", "block", 2, lambda v: real_data.average_pool(np.ones((1, 4, 4)), v)),
    ("fantope_projection", "k", 2, lambda v: fps.fantope_projection(_S, v)),
    ("fps_admm", "lam", 0.25, lambda v: fps.fps_admm(_S, 2, v, max_iter=20).X),
    (
        "theorem1_lower_bound",
        "eps",
        0.5,
        lambda v: bounds.theorem1_lower_bound(1000, 8, 2, v, _EIG),
    ),
    ("davis_kahan_bound", "sigma", 0.5, lambda v: bounds.davis_kahan_bound(1000, 8, 2, v, _EIG)),
    ("nonprivate_pca", "k", 2, lambda v: pb.nonprivate_pca(_X, v).V),
    (
        "central_gaussian_pca",
        "epsilon",
        0.5,
        lambda v: pb.central_gaussian_pca(_X, 2, v, 1e-5, 0).V,
    ),
    (
        "central_gaussian_from_moment",
        "n",
        20,
        lambda v: pb.central_gaussian_from_moment(_X.T @ _X / 20, v, 2, 1.0, 1e-5, 0).V,
    ),
    ("top_k_eigvecs", "k", 2, lambda v: top_k_eigvecs(_S, v)),
    ("n_packed", "p", 5, lambda v: n_packed(v)),
    ("SmallCNN", "width", 2, lambda v: _seeded(lambda: SmallCNN(width=v))),
    ("Projector", "hidden", 4, lambda v: _seeded(lambda: Projector(3, v, 2))),
    ("ResNet20", "width", 1, lambda v: _seeded(lambda: ResNet20(1, width=v, num_blocks=1))),
    (
        "FixupResNet20",
        "width",
        1,
        lambda v: _seeded(lambda: FixupResNet20(1, width=v, num_blocks=1)),
    ),
    ("partition_iid", "num_clients", 3, lambda v: partition_iid(12, v, 0)),
    (
        "SimCLRAugment",
        "size",
        8,
        lambda v: SimCLRAugment(v, color=False)(_IMGS, torch.Generator().manual_seed(0)),
    ),
    ("SimCLRAugment.views", "n_views", 2, _views),
    (
        "train_val_split",
        "val_fraction",
        0.5,
        lambda v: [part.labels for part in train_val_split(_DATA, v, 0)],
    ),
    ("knn_predict", "k", 3, lambda v: knn_predict(_FEATS, _LABELS, _FEATS, k=v)),
    (
        "linear_probe",
        "epochs",
        2,
        lambda v: linear_probe(_FEATS, _LABELS, _FEATS, _LABELS, epochs=v, batch_size=4),
    ),
    (
        "extract_features",
        "batch_size",
        4,
        lambda v: extract_features(lambda x: x.flatten(1), _IMGS, batch_size=v),
    ),
    ("encoder_features", "batch_size", 4, lambda v: encoder_features(_ssl(), _IMGS, v)),
    ("ema_mix", "decay", 0.5, lambda v: ema_mix({"w": np.ones(2)}, {"w": np.zeros(2)}, v)),
    ("fedu_update_predictor", "divergence", 0.25, lambda v: fedu_update_predictor(v)),
    ("fedema_autoscaler", "tau", 0.5, lambda v: fedema_autoscaler(v, 0.25)),
    ("fedema_mu", "divergence", 0.25, lambda v: fedema_mu(2.0, v)),
    (
        "calibrate_correlation_sigma",
        "releases",
        3,
        lambda v: calibrate_correlation_sigma(1.0, 1e-5, v, 4.0, 100),
    ),
    (
        "dp_correlation",
        "n_views",
        2,
        lambda v: dp_correlation(
            lambda x: x.flatten(1), _IMGS, None, v, 4.0, 0.1, None, np.random.default_rng(0)
        ),
    ),
]


def _numpy(v: Any) -> Any:
    if isinstance(v, int):
        return np.int64(v)
    assert np.float32(v) == v  # exactly representable: the same number
    return np.float32(v)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, torch.nn.Module):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(sa[key], sb[key]), key
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b and type(a) is type(b)


@pytest.mark.parametrize(("entry", "param", "value", "call"), CASES, ids=[c[0] for c in CASES])
def test_numpy_scalar_equals_python_number(
    entry: str, param: str, value: Any, call: Callable[[Any], Any]
) -> None:
    _same(call(value), call(_numpy(value)))


@pytest.mark.parametrize(("entry", "param", "value", "call"), CASES, ids=[c[0] for c in CASES])
def test_bool_refused_naming_the_parameter(
    entry: str, param: str, value: Any, call: Callable[[Any], Any]
) -> None:
    for flag in (True, np.bool_(True)):
        with pytest.raises(TypeError, match=rf"^{re.escape(param)} must be .*got bool True"):
            call(flag)
