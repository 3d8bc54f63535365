r"""Linear evaluation: a linear classifier trained on frozen features.

As the FedSC official code's linear probe: one ``nn.Linear`` on the
frozen backbone features, cross-entropy, Adam with lr :math:`3\cdot10^{-3}`, batch 512;
the paper trains 200 epochs, the default here is a CPU-sized 30 (configurable).
Features are computed once by the caller (:func:`fedspectral.eval.extract_features`),
so an epoch costs only the linear layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.checks import check_int, check_real

__all__ = ["NORMALIZATIONS", "linear_probe"]

NORMALIZATIONS = ("none", "l2", "standardize")


def _check_xy(name: str, x: Tensor, y: Tensor) -> None:
    if not isinstance(x, Tensor) or x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name}_feats must be a non-empty 2-d tensor (n, d), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if not isinstance(y, Tensor) or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"{name}_labels must be a 1-d tensor of {x.shape[0]} labels, got "
                         f"{getattr(y, 'shape', type(y).__name__)}")
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        raise TypeError(f"{name}_labels must be integer class labels, got {y.dtype}")


def linear_probe(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    epochs: int = 30,
    lr: float = 3e-3,
    batch_size: int = 512,
    weight_decay: float = 0.0,
    seed: int = 0,
    num_classes: int | None = None,
    normalize: str = "none",
) -> float:
    r"""Test accuracy (in [0, 1]) of a linear classifier trained on frozen features.

    Minimises :math:`\frac1n\sum_i \mathrm{CE}(W h_i + b, y_i)` over :math:`(W, b)` with
    Adam (mini-batches of ``batch_size``, reshuffled each epoch), then evaluates on the
    test features.

    Parameters
    ----------
    train_feats, test_feats : Tensor, shape (n, d)
        Frozen features (computed once).
    train_labels, test_labels : Tensor, shape (n,), integer
    epochs : int
        Passes over the training features (paper: 200).
    lr : float
        Adam learning rate.
    batch_size : int
    weight_decay : float
        Adam's L2 penalty.
    seed : int
        Initialisation and batch order.
    num_classes : int, optional
        Default: ``max(train_labels) + 1``.
    normalize : {"none", "l2", "standardize"}
        Feature preprocessing: none (as the official code), unit rows, or per-feature
        standardisation with the *training* mean and standard deviation.

    Returns
    -------
    float
    """
    _check_xy("train", train_feats, train_labels)
    _check_xy("test", test_feats, test_labels)
    if test_feats.shape[1] != train_feats.shape[1]:
        raise ValueError(f"train_feats have dimension {train_feats.shape[1]} but test_feats "
                         f"have {test_feats.shape[1]}")
    epochs = check_int("epochs", epochs, low=1)
    lr = check_real("lr", lr, low=0.0, low_open=True)
    batch_size = check_int("batch_size", batch_size, low=1)
    weight_decay = check_real("weight_decay", weight_decay, low=0.0)
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    if int(train_labels.min()) < 0:
        raise ValueError(f"train_labels must be >= 0, got {int(train_labels.min())}")
    n_cls = int(train_labels.max()) + 1
    if num_classes is None:
        num_classes = n_cls
    elif num_classes < n_cls:
        raise ValueError(f"num_classes={num_classes!r} but train_labels go up to {n_cls - 1}")

    x_tr = train_feats.detach().float().cpu()
    x_te = test_feats.detach().float().cpu()
    if normalize == "l2":
        x_tr, x_te = F.normalize(x_tr, dim=1), F.normalize(x_te, dim=1)
    elif normalize == "standardize":
        mean, std = x_tr.mean(0), x_tr.std(0).clamp_min(1e-6)
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    y_tr = train_labels.to(torch.int64).cpu()
    y_te = test_labels.to(torch.int64).cpu()

    gen = torch.Generator().manual_seed(int(seed))
    layer = nn.Linear(x_tr.shape[1], num_classes)
    with torch.no_grad():  # nn.Linear's default init, drawn from our generator
        bound = 1.0 / x_tr.shape[1] ** 0.5
        layer.weight.uniform_(-bound, bound, generator=gen)
        layer.bias.uniform_(-bound, bound, generator=gen)
    opt = torch.optim.Adam(layer.parameters(), lr=lr, weight_decay=weight_decay)
    n = x_tr.shape[0]
    with torch.enable_grad():
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            for start in range(0, n, batch_size):
                idx = perm[start:start + batch_size]
                loss = F.cross_entropy(layer(x_tr[idx]), y_tr[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        pred = layer(x_te).argmax(dim=1)
    return float((pred == y_te).double().mean())
