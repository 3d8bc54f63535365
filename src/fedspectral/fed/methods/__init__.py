"""Federated methods, each defined once as the phases of a round (see
:mod:`fedspectral.fed.protocol`).

``METHODS`` maps a config's ``method.name`` to ``"module:Class"``; classes are
imported on first use so that listing methods stays cheap.

=============  ===============================================================
name           method
=============  ===============================================================
``fedsc``      FedSC (seed 001, Algorithm 1) with DP correlation sharing
``fedavg_sc``  FedAvg of local spectral contrastive training (FedAvg+SC)
``central_sc`` centralized SC: one party holding every client's data
``fedavg_byol``, ``fedu``, ``fedema``, ``fedx``, ``fedca``: the baselines
=============  ===============================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedspectral.fed.protocol import Method

METHODS: dict[str, str] = {
    "fedsc": "fedspectral.fed.methods.fedsc:FedSC",
    "fedavg_sc": "fedspectral.fed.methods.fedavg:FedAvgSC",
    "central_sc": "fedspectral.fed.methods.central:CentralSC",
    # baselines (fed/methods/<module>.py)
    "fedavg_byol": "fedspectral.fed.methods.byol:FedAvgBYOL",
    "fedu": "fedspectral.fed.methods.fedu:FedU",
    "fedema": "fedspectral.fed.methods.fedema:FedEMA",
    "fedx": "fedspectral.fed.methods.fedx:FedX",
    "fedca": "fedspectral.fed.methods.fedca:FedCA",
}

__all__ = ["METHODS", "build_method", "is_baseline", "method_class"]


def method_class(name: str) -> type[Method]:
    """The :class:`~fedspectral.fed.protocol.Method` subclass registered as ``name``."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {sorted(METHODS)}")
    module, cls = METHODS[name].split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise ValueError(
                f"method {name!r} is registered but not available (module {module} is missing)"
            ) from exc
        raise
    return getattr(mod, cls)


def is_baseline(name: str) -> bool:
    """Whether method ``name`` is one of the baselines (BYOL family, FedX, FedCA: they
    train on one pair of augmented views per sample)."""
    from fedspectral.fed.methods._baseline import BaselineMethod

    return issubclass(method_class(name), BaselineMethod)


def build_method(config: Any) -> Any:
    """The method of ``config.method.name``, constructed from the whole config."""
    return method_class(config.method.name)(config)
