"""Federated methods, each defined once as the phases of a round (see
:mod:`fedspectral.fed.protocol`).

The registry: ``METHODS`` maps a config's ``method.name`` to its
:class:`~fedspectral.fed.protocol.Method` (``"module:Class"``, imported on first use so
that listing methods stays cheap, or the class itself); ``PROTOCOLS`` names the other
protocols of one method that its parameters choose (FedSC with ``secure_aggregation:
true`` is :class:`~fedspectral.fed.methods.fedsc_secure.SecureFedSC`).  Everything else
-- phases, releases, reply manifests, threat models, whether ``dp`` applies -- is read
from the method class.  Adding a method is one module and its line here (or a call of
:func:`register`).

=============  ===============================================================
name           method
=============  ===============================================================
``fedsc``      FedSC (the FedSC paper, Algorithm 1) with DP correlation sharing
``fedavg_sc``  FedAvg of local spectral contrastive training (FedAvg+SC)
``central_sc`` centralized SC: one party holding every client's data
``fedavg_byol``, ``fedu``, ``fedema``, ``fedx``, ``fedca``: the baselines
``ldp_pca``    locally private PCA (the LDP-PCA paper, Algorithm 1): one query
``distributed_pca``  the same estimate from holders' shares, summed securely
=============  ===============================================================

:func:`ssl_methods` are those that train a network (``Method.pillar == "ssl"``): what the
FedSC reproduction and comparisons run.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedspectral.checks import did_you_mean

if TYPE_CHECKING:
    from fedspectral.fed.protocol import Method

METHODS: dict[str, str | type] = {
    "fedsc": "fedspectral.fed.methods.fedsc:FedSC",
    "fedavg_sc": "fedspectral.fed.methods.fedavg:FedAvgSC",
    "central_sc": "fedspectral.fed.methods.central:CentralSC",
    # baselines (fed/methods/<module>.py)
    "fedavg_byol": "fedspectral.fed.methods.byol:FedAvgBYOL",
    "fedu": "fedspectral.fed.methods.fedu:FedU",
    "fedema": "fedspectral.fed.methods.fedema:FedEMA",
    "fedx": "fedspectral.fed.methods.fedx:FedX",
    "fedca": "fedspectral.fed.methods.fedca:FedCA",
    # the PCA pillar (fed/methods/pca.py): one round, no network
    "ldp_pca": "fedspectral.fed.methods.pca:LdpPca",
    "distributed_pca": "fedspectral.fed.methods.pca:DistributedPca",
}

#: ``{name: ((parameter, value, protocol), ...)}``: the first protocol whose parameter has
#: that value in ``method.params`` is built instead of the registered class (the same
#: method name, parameters and ``Params``; another protocol)
PROTOCOLS: dict[str, tuple[tuple[str, Any, str | type], ...]] = {
    "fedsc": (("secure_aggregation", True, "fedspectral.fed.methods.fedsc_secure:SecureFedSC"),),
}

__all__ = [
    "METHODS",
    "PROTOCOLS",
    "build_method",
    "dp_methods",
    "is_baseline",
    "method_class",
    "register",
    "ssl_methods",
    "threat_models",
]


def register(
    name: str, target: str | type, protocols: tuple[tuple[str, Any, str | type], ...] = ()
) -> None:
    """Register method ``name``: ``target`` is its class or ``"module:Class"``; ``protocols``
    as in :data:`PROTOCOLS`.  ``ValueError`` if ``name`` is taken by another target."""
    if METHODS.get(name, target) != target:
        raise ValueError(f"method {name!r} is registered already ({METHODS[name]!r})")
    METHODS[name] = target
    if protocols:
        PROTOCOLS[name] = tuple(protocols)


def _load(name: str, target: str | type) -> type[Method]:
    if isinstance(target, type):
        out: type[Method] = target
        return out
    module, cls = target.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise ValueError(
                f"method {name!r} is registered but not available (module {module} is missing)"
            ) from exc
        raise
    loaded: type[Method] = getattr(mod, cls)
    return loaded


def method_class(name: str, params: Mapping[str, Any] | None = None) -> type[Method]:
    """The :class:`~fedspectral.fed.protocol.Method` subclass registered as ``name``; with
    ``params`` (a config's ``method.params``), the protocol of :data:`PROTOCOLS` they
    choose, if any."""
    if name not in METHODS:
        raise ValueError(
            f"unknown method {name!r}{did_you_mean(name, METHODS)}; known: {sorted(METHODS)}"
        )
    if isinstance(params, Mapping):
        for key, value, protocol in PROTOCOLS.get(name, ()):
            got = params.get(key)
            if (got is value) if isinstance(value, bool) else (got == value):
                return _load(name, protocol)
    return _load(name, METHODS[name])


def is_baseline(name: str) -> bool:
    """Whether method ``name`` is one of the baselines (BYOL family, FedX, FedCA: they
    train on one pair of augmented views per sample; their class says ``baseline``)."""
    return bool(getattr(method_class(name), "baseline", False))


def build_method(config: Any) -> Any:
    """The method of ``config.method.name`` (the protocol its parameters choose),
    constructed from the whole config."""
    return method_class(config.method.name, config.method.params)(config)


def ssl_methods() -> tuple[str, ...]:
    """The registered methods of the self-supervised pillar (``pillar == "ssl"``), in
    registration order; the PCA methods are ``"pca"``."""
    return tuple(n for n in METHODS if getattr(method_class(n), "pillar", "ssl") == "ssl")


def dp_methods() -> frozenset[str]:
    """The registered methods whose releases ``dp`` protects (their ``Params.uses_dp``);
    the others refuse ``dp.enabled``."""
    return frozenset(n for n in METHODS if getattr(method_class(n).Params, "uses_dp", False))


def threat_models() -> dict[str, str]:
    """``{ledger mechanism: whom its ε holds against}`` of every registered method (and
    protocol): their ``threat_models``."""
    out: dict[str, str] = {}
    for name in METHODS:
        classes = [method_class(name), *(_load(name, p) for _, _, p in PROTOCOLS.get(name, ()))]
        for cls in classes:
            out.update(cls.threat_models)
    return out
