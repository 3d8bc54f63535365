r"""Weighted k-nearest-neighbour monitor of representation quality, and feature extraction.

The monitor used by InstDisc (Wu et al. 2018) and by the FedSC official code: features
are L2-normalised, the :math:`k` training features most cosine-similar to a test
feature vote for their labels with weights :math:`\exp(s/t)`, and the class with the
largest total weight is predicted.  The bank is the un-augmented training set.
Defaults :math:`k = 200`, :math:`t = 0.1`, the FedSC official code's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.checks import check_int, check_real

__all__ = ["extract_features", "knn_accuracy", "knn_predict"]


def resolve_num_classes(train_labels: torch.Tensor, num_classes: int | None) -> int:
    """``num_classes``, or ``max(train_labels) + 1`` when ``None``; a clear error for a
    negative label or a ``num_classes`` the labels exceed."""
    if int(train_labels.min()) < 0:
        raise ValueError(f"train_labels must be >= 0, got {int(train_labels.min())}")
    n_cls = int(train_labels.max()) + 1
    if num_classes is None:
        return n_cls
    if num_classes < n_cls:
        raise ValueError(f"num_classes={num_classes!r} but train_labels go up to {n_cls - 1}")
    return num_classes


def _check_feats(
    name: str, feats: Tensor, labels: Tensor | None = None, labels_name: str = ""
) -> None:
    if not isinstance(feats, Tensor) or feats.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-d tensor (n, d), got "
            f"{getattr(feats, 'shape', type(feats).__name__)}"
        )
    if feats.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(feats.shape)})")
    if labels is not None:
        if not isinstance(labels, Tensor) or labels.ndim != 1:
            raise ValueError(
                f"{labels_name} must be a 1-d tensor, got "
                f"{getattr(labels, 'shape', type(labels).__name__)}"
            )
        if labels.shape[0] != feats.shape[0]:
            raise ValueError(
                f"{name} has {feats.shape[0]} rows but {labels_name} has {labels.shape[0]} entries"
            )
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise TypeError(f"{labels_name} must be integer class labels, got {labels.dtype}")


def extract_features(
    model_fn: Callable[[Tensor], Tensor] | nn.Module,
    images: Tensor,
    batch_size: int = 512,
    device: str | torch.device | None = None,
) -> Tensor:
    """Apply ``model_fn`` to ``images`` in batches, in inference mode.

    A module is put in ``eval()`` mode for the pass and every submodule's previous
    mode is restored afterwards.

    Parameters
    ----------
    model_fn : nn.Module or callable
        Maps a batch ``(b, ...)`` to features ``(b, d)`` (e.g. ``net.features``).
    images : Tensor, shape (n, ...)
    batch_size : int
    device : str or torch.device, optional
        Where to compute (default: the module's device, else the images').

    Returns
    -------
    Tensor, shape (n, d), float32 on the CPU
    """
    if not callable(model_fn):
        raise TypeError(f"model_fn must be callable, got {type(model_fn).__name__}")
    if not isinstance(images, Tensor) or images.ndim < 2:
        raise ValueError(
            f"images must be a tensor (n, ...), got "
            f"{getattr(images, 'shape', type(images).__name__)}"
        )
    batch_size = check_int("batch_size", batch_size, low=1)
    return _run_batched(model_fn, images, batch_size, device, _owner_module(model_fn))[0]


def _owner_module(fn: object) -> nn.Module | None:
    """The module whose modes to switch: ``fn`` itself or the owner of a bound method."""
    if isinstance(fn, nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, nn.Module) else None


def _run_batched(
    fn: Callable[[Tensor], Tensor | tuple[Tensor, ...]],
    images: Tensor,
    batch_size: int,
    device: str | torch.device | None,
    module: nn.Module | None,
) -> tuple[Tensor, ...]:
    if device is None:
        device = images.device
        if module is not None:
            for p in module.parameters():
                device = p.device
                break
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    if module is not None:
        module.eval()
    outs: list[list[Tensor]] = []
    try:
        with torch.inference_mode():
            for start in range(0, images.shape[0], batch_size):
                res = fn(images[start : start + batch_size].to(device, non_blocking=True))
                res = res if isinstance(res, tuple) else (res,)
                if not outs:
                    outs = [[] for _ in res]
                for acc, r in zip(outs, res, strict=True):
                    acc.append(r.reshape(r.shape[0], -1).float().cpu())
    finally:
        for m, was_training in modes:
            m.training = was_training
    return tuple(torch.cat(o) for o in outs)


def knn_predict(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    k: int = 200,
    t: float = 0.1,
    num_classes: int | None = None,
    chunk_size: int = 1024,
) -> Tensor:
    r"""Class predictions of the weighted kNN monitor.

    For a test feature :math:`u` (L2-normalised) and the normalised training bank
    :math:`\{v_i\}`: :math:`s_i = u^\top v_i`; among the :math:`k` largest :math:`s_i`,
    class :math:`c` scores :math:`\sum_{i\in\mathrm{top}_k,\,y_i=c}\exp(s_i/t)`; the
    prediction is the arg-max (computed with weights :math:`\exp((s_i - s_{max})/t)`,
    the same vote without overflow for small :math:`t`).  Memory is
    :math:`O(\text{chunk\_size}\times n_{train})`.

    Parameters
    ----------
    train_feats : Tensor, shape (n_train, d)
    train_labels : Tensor, shape (n_train,), integer
    test_feats : Tensor, shape (n_test, d)
    k : int
        Neighbours; reduced (with a warning) to ``n_train`` if larger.
    t : float
        Temperature of the weights.
    num_classes : int, optional
        Default: ``max(train_labels) + 1``.
    chunk_size : int
        Test rows per similarity block.

    Returns
    -------
    Tensor, shape (n_test,), int64
    """
    _check_feats("train_feats", train_feats, train_labels, "train_labels")
    _check_feats("test_feats", test_feats)
    if test_feats.shape[1] != train_feats.shape[1]:
        raise ValueError(
            f"train_feats have dimension {train_feats.shape[1]} but test_feats "
            f"have {test_feats.shape[1]}"
        )
    k = check_int("k", k, low=1)
    t = check_real("t", t, low=0.0, low_open=True)
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    num_classes = resolve_num_classes(train_labels, num_classes)
    n_train = train_feats.shape[0]
    if k > n_train:
        warnings.warn(f"k={k} exceeds the bank size {n_train}; using k={n_train}", stacklevel=2)
        k = n_train
    bank = F.normalize(train_feats.float(), dim=1)
    labels = train_labels.to(torch.int64)
    preds = []
    for start in range(0, test_feats.shape[0], chunk_size):
        q = F.normalize(test_feats[start : start + chunk_size].float(), dim=1)
        sim = q @ bank.T
        top_sim, top_idx = sim.topk(k, dim=1)
        # exp(s/t) up to a per-row factor exp(-s_max/t): same vote, no overflow for small t
        weights = ((top_sim - top_sim[:, :1]) / t).exp()
        scores = torch.zeros(q.shape[0], num_classes, dtype=weights.dtype)
        scores.scatter_add_(1, labels[top_idx], weights)
        preds.append(scores.argmax(dim=1))
    return torch.cat(preds)


def knn_accuracy(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    k: int = 200,
    t: float = 0.1,
    num_classes: int | None = None,
    chunk_size: int = 1024,
) -> float:
    """Accuracy (in [0, 1]) of the weighted kNN monitor (:func:`knn_predict`)."""
    _check_feats("test_feats", test_feats, test_labels, "test_labels")
    pred = knn_predict(train_feats, train_labels, test_feats, k, t, num_classes, chunk_size)
    return float((pred == test_labels.to(torch.int64)).double().mean())
