"""Evaluation of a self-supervised encoder: kNN on backbone and projector features,
optionally a linear probe on the backbone features."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn

from fedspectral.checks import check_int
from fedspectral.eval.knn import _owner_module, _run_batched, knn_accuracy
from fedspectral.eval.linear_probe import probe_accuracy

__all__ = ["encoder_features", "evaluate_encoder"]


def _unpack(name: str, data: Any) -> tuple[Tensor, Tensor, int | None]:
    if hasattr(data, "images") and hasattr(data, "labels"):
        return data.images, data.labels, getattr(data, "num_classes", None)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1], None
    raise TypeError(
        f"{name} must be an ImageData or an (images, labels) pair, got {type(data).__name__}"
    )


def encoder_features(
    net: nn.Module,
    images: Tensor,
    batch_size: int = 512,
    device: str | torch.device | None = None,
) -> tuple[Tensor, Tensor]:
    """Backbone features ``h = net.features(x)`` and projector outputs ``z = net(x)``.

    One pass through ``net.encode(x) -> (h, z)`` when the net has it
    (:class:`fedspectral.models.SSLNet`), else two passes.  Inference mode, ``eval()``
    mode with every submodule's mode restored afterwards.

    Returns
    -------
    h, z : Tensor, shapes (n, d_h) and (n, d_z), float32 on the CPU
    """
    features = getattr(net, "features", None)
    if not isinstance(net, nn.Module) or not callable(features):
        raise TypeError(
            f"net must be an nn.Module with a features(x) method, got {type(net).__name__}"
        )
    batch_size = check_int("batch_size", batch_size, low=1)
    encode = getattr(net, "encode", None)
    if callable(encode):
        h, z = _run_batched(encode, images, batch_size, device, net)
        return h, z
    (h,) = _run_batched(features, images, batch_size, device, _owner_module(features))
    (z,) = _run_batched(net, images, batch_size, device, net)
    return h, z


def evaluate_encoder(
    net: nn.Module,
    train_data: Any,
    test_data: Any,
    *,
    k: int = 200,
    t: float = 0.1,
    batch_size: int = 512,
    linear: bool = False,
    probe_epochs: int = 30,
    probe_lr: float = 3e-3,
    probe_batch_size: int = 512,
    probe_solver: str = "adam",
    probe_c: float = 1.0,
    seed: int = 0,
    num_classes: int | None = None,
    device: str | torch.device | None = None,
) -> dict[str, float]:
    """kNN accuracy on backbone features and on projector outputs, optionally a linear probe.

    The kNN bank is the un-augmented ``train_data``; accuracies are on ``test_data``
    (pass a validation split when choosing settings).

    Parameters
    ----------
    net : nn.Module
        Has ``features(x)`` (backbone) and ``forward(x)`` (projector output), e.g.
        :class:`fedspectral.models.SSLNet`.
    train_data, test_data : ImageData or (images, labels)
    k, t : kNN neighbours and temperature (:func:`fedspectral.eval.knn_accuracy`).
    batch_size : int
        Images per forward pass.
    linear : bool
        Also train a linear probe on the frozen backbone features
        with ``probe_solver``: ``"adam"`` (:func:`fedspectral.eval.linear_probe`,
        ``probe_epochs``, ``probe_lr``, ``probe_batch_size``, ``seed``) or ``"lbfgs"``
        (:func:`fedspectral.eval.logistic_probe`, ``probe_c``).
    num_classes : int, optional
        Default: the data's ``num_classes`` if present, else inferred from the labels.
    device : optional
        Where to run the network.

    Returns
    -------
    dict
        ``knn_backbone``, ``knn_projector``, ``linear_probe`` (if ``linear``), all in
        [0, 1], and ``eval_seconds``.
    """
    x_tr, y_tr, c_tr = _unpack("train_data", train_data)
    x_te, y_te, c_te = _unpack("test_data", test_data)
    if num_classes is None:
        num_classes = c_tr or c_te
    if num_classes is None:
        num_classes = int(max(int(y_tr.max()), int(y_te.max()))) + 1
    t0 = time.perf_counter()
    h_tr, z_tr = encoder_features(net, x_tr, batch_size, device)
    h_te, z_te = encoder_features(net, x_te, batch_size, device)
    out = {
        "knn_backbone": knn_accuracy(h_tr, y_tr, h_te, y_te, k, t, num_classes),
        "knn_projector": knn_accuracy(z_tr, y_tr, z_te, y_te, k, t, num_classes),
    }
    if linear:
        out["linear_probe"] = probe_accuracy(
            h_tr,
            y_tr,
            h_te,
            y_te,
            solver=probe_solver,
            c=probe_c,
            epochs=probe_epochs,
            lr=probe_lr,
            batch_size=probe_batch_size,
            seed=seed,
            num_classes=num_classes,
        )
    out["eval_seconds"] = time.perf_counter() - t0
    return out
