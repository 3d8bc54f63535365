"""The global model evaluated on an experiment's data: :func:`fedspectral.eval.evaluate_encoder`
on a :class:`~fedspectral.fed.federation.Federation` (the KNN bank and the evaluation set)
with the settings of its config's ``eval`` section.  Both runners evaluate through here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedspectral.config import ExperimentConfig
from fedspectral.eval import evaluate_encoder
from fedspectral.fed.randomness import derive_seed

if TYPE_CHECKING:
    from fedspectral.fed.federation import Federation

__all__ = ["evaluate_knn", "linear_probe_accuracy"]


def evaluate_knn(net: Any, fed: Federation, cfg: ExperimentConfig) -> dict[str, float]:
    """KNN accuracy (``eval.knn_k``, ``eval.knn_t``, cosine; bank = un-augmented train
    images) on backbone (``knn_backbone``) and projector (``knn_projector``) features."""
    out = evaluate_encoder(
        net,
        fed.bank,
        fed.eval,
        k=cfg.eval.knn_k,
        t=cfg.eval.knn_t,
        batch_size=cfg.eval.batch_size,
        num_classes=fed.bank.num_classes,
        device=cfg.run.device,
    )
    return {k: out[k] for k in ("knn_backbone", "knn_projector")}


def linear_probe_accuracy(
    net: Any,
    fed: Federation,
    cfg: ExperimentConfig,
    *,
    solver: str | None = None,
    epochs: int | None = None,
    normalize: str = "none",
) -> dict[str, float]:
    """Linear probe on frozen backbone features (train = bank, test = eval set) with
    ``eval.probe_solver`` (see :class:`~fedspectral.config.EvalConfig`).  ``solver``,
    and for the ``adam`` probe ``epochs`` (default ``eval.probe_epochs``) and
    ``normalize`` (see :func:`fedspectral.eval.linear_probe`), let a diagnostic try
    other probes on the same features."""
    ev = cfg.eval
    out = evaluate_encoder(
        net,
        fed.bank,
        fed.eval,
        knn=False,
        linear=True,
        batch_size=ev.batch_size,
        probe_solver=ev.probe_solver if solver is None else solver,
        probe_c=ev.probe_c,
        probe_max_iter=ev.probe_max_iter,
        probe_epochs=ev.probe_epochs if epochs is None else epochs,
        probe_lr=ev.probe_lr,
        seed=derive_seed("probe", cfg.run.seed) % 2**31,
        probe_normalize=normalize,
        num_classes=fed.bank.num_classes,
        device=cfg.run.device,
    )
    return {"linear_probe": float(out["linear_probe"])}
