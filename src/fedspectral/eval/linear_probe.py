r"""Linear evaluation: a linear classifier trained on frozen features.

Two probes, both multinomial logistic regression on frozen backbone features computed
once by the caller (:func:`fedspectral.eval.encoder_features`):

* :func:`logistic_probe` (``eval.probe_solver: lbfgs``, the CPU configs' probe):
  standardised features, L2 penalty, full-batch L-BFGS run to its tolerance
  (scikit-learn's ``LogisticRegression``).  Its accuracy depends on the features, not on
  an optimisation budget.
* :func:`linear_probe` (``eval.probe_solver: adam``): as the FedSC official code, one
  ``nn.Linear`` on raw features, cross-entropy, Adam with lr :math:`3\cdot10^{-3}`,
  batch 512, a fixed number of epochs.  On 50 000 images 200 epochs are about 20 000
  steps; on a few thousand images the same epochs are a few hundred steps, and the
  probe stops far from its optimum (docs/fedsc.md, deviation 14, "Linear evaluation").
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedspectral.checks import check_int, check_real
from fedspectral.eval.knn import resolve_num_classes

__all__ = [
    "NORMALIZATIONS",
    "SOLVERS",
    "LogisticFit",
    "fit_logistic",
    "linear_probe",
    "logistic_probe",
    "probe_accuracy",
]

NORMALIZATIONS = ("none", "l2", "standardize")
SOLVERS = ("lbfgs", "adam")


def _check_xy(name: str, x: Tensor, y: Tensor) -> None:
    if not isinstance(x, Tensor) or x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(
            f"{name}_feats must be a non-empty 2-d tensor (n, d), got "
            f"{getattr(x, 'shape', type(x).__name__)}"
        )
    if not isinstance(y, Tensor) or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{name}_labels must be a 1-d tensor of {x.shape[0]} labels, got "
            f"{getattr(y, 'shape', type(y).__name__)}"
        )
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
        raise ValueError(
            f"train_feats have dimension {train_feats.shape[1]} but test_feats "
            f"have {test_feats.shape[1]}"
        )
    epochs = check_int("epochs", epochs, low=1)
    lr = check_real("lr", lr, low=0.0, low_open=True)
    batch_size = check_int("batch_size", batch_size, low=1)
    weight_decay = check_real("weight_decay", weight_decay, low=0.0)
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    num_classes = resolve_num_classes(train_labels, num_classes)

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
                idx = perm[start : start + batch_size]
                loss = F.cross_entropy(layer(x_tr[idx]), y_tr[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        pred = layer(x_te).argmax(dim=1)
    return float((pred == y_te).double().mean())


@dataclass(frozen=True)
class LogisticFit:
    """A fitted :func:`fit_logistic` probe: predicts ``argmax(((x - mean) / std) W^T + b)``."""

    mean: Tensor
    std: Tensor
    weight: Tensor  # (num_classes, d)
    bias: Tensor  # (num_classes,)
    iterations: int
    converged: bool

    def predict(self, feats: Tensor) -> Tensor:
        x = (feats.detach().double().cpu() - self.mean) / self.std
        return (x @ self.weight.T + self.bias).argmax(dim=1)


def fit_logistic(
    train_feats: Tensor,
    train_labels: Tensor,
    *,
    c: float = 1.0,
    max_iter: int = 1000,
    tol: float = 1e-6,
    num_classes: int | None = None,
) -> LogisticFit:
    r"""Multinomial logistic regression on standardised features, solved to tolerance.

    Minimises :math:`C\sum_i \mathrm{CE}(W \tilde h_i + b, y_i) + \tfrac12\|W\|_F^2`
    (the bias is not penalised) by full-batch L-BFGS (scikit-learn's
    ``LogisticRegression(solver="lbfgs")``), where :math:`\tilde h` is :math:`h`
    standardised with the training mean and standard deviation.  The problem is
    strictly convex, so the solution does not depend on a step size, a batch order or
    an epoch count; ``tol`` bounds the projected gradient at the stop.  One BLAS thread
    (several threads on small problems cost up to 20x on a loaded 2-core machine).

    Warns when L-BFGS stops at ``max_iter`` before reaching ``tol``.
    """
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    _check_xy("train", train_feats, train_labels)
    c = check_real("c", c, low=0.0, low_open=True)
    max_iter = check_int("max_iter", max_iter, low=1)
    tol = check_real("tol", tol, low=0.0, low_open=True)
    y = train_labels.to(torch.int64).cpu()
    num_classes = resolve_num_classes(y, num_classes)
    present = torch.unique(y)
    if len(present) < 2:
        raise ValueError(
            f"train_labels hold a single class ({int(present[0])}); a classifier needs at least two"
        )
    x = train_feats.detach().double().cpu()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    model = LogisticRegression(C=c, max_iter=max_iter, tol=tol)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's ConvergenceWarning: ours below names the knob
        model.fit(((x - mean) / std).numpy(), y.numpy())
    iterations = int(model.n_iter_[0])
    converged = iterations < max_iter
    if not converged:
        warnings.warn(
            f"linear probe: L-BFGS stopped at max_iter={max_iter} before reaching "
            f"tol={tol:g}; raise eval.probe_max_iter",
            RuntimeWarning,
            stacklevel=2,
        )
    # classes absent from the training labels can never be predicted
    weight = torch.zeros(num_classes, x.shape[1], dtype=torch.float64)
    bias = torch.full((num_classes,), -torch.inf, dtype=torch.float64)
    classes = torch.as_tensor(model.classes_, dtype=torch.int64)
    coef = torch.as_tensor(model.coef_, dtype=torch.float64)
    icpt = torch.as_tensor(model.intercept_, dtype=torch.float64)
    if len(classes) == 2:  # sklearn keeps one row for two classes: logit of classes_[1]
        coef = torch.cat([-coef / 2, coef / 2])
        icpt = torch.cat([-icpt / 2, icpt / 2])
    weight[classes], bias[classes] = coef, icpt
    return LogisticFit(mean, std, weight, bias, iterations, converged)


def logistic_probe(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    *,
    c: float = 1.0,
    max_iter: int = 1000,
    tol: float = 1e-6,
    num_classes: int | None = None,
) -> float:
    """Test accuracy (in [0, 1]) of :func:`fit_logistic` trained on the training features."""
    _check_xy("test", test_feats, test_labels)
    if test_feats.shape[1] != train_feats.shape[1]:
        raise ValueError(
            f"train_feats have dimension {train_feats.shape[1]} but test_feats "
            f"have {test_feats.shape[1]}"
        )
    fit = fit_logistic(
        train_feats, train_labels, c=c, max_iter=max_iter, tol=tol, num_classes=num_classes
    )
    pred = fit.predict(test_feats)
    return float((pred == test_labels.to(torch.int64).cpu()).double().mean())


def probe_accuracy(
    train_feats: Tensor,
    train_labels: Tensor,
    test_feats: Tensor,
    test_labels: Tensor,
    *,
    solver: str,
    c: float = 1.0,
    max_iter: int = 1000,
    epochs: int = 30,
    lr: float = 3e-3,
    batch_size: int = 512,
    seed: int = 0,
    normalize: str = "none",
    num_classes: int | None = None,
) -> float:
    """The probe named by ``solver``: ``"lbfgs"`` (:func:`logistic_probe`, ``c``,
    ``max_iter``) or ``"adam"`` (:func:`linear_probe`, ``epochs``, ``lr``,
    ``batch_size``, ``seed``, ``normalize``)."""
    if solver == "lbfgs":
        return logistic_probe(
            train_feats,
            train_labels,
            test_feats,
            test_labels,
            c=c,
            max_iter=max_iter,
            num_classes=num_classes,
        )
    if solver == "adam":
        return linear_probe(
            train_feats,
            train_labels,
            test_feats,
            test_labels,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            seed=seed,
            num_classes=num_classes,
            normalize=normalize,
        )
    raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
