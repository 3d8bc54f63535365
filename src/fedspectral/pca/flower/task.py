r"""What the server and the nodes of the locally private PCA app share (:mod:`.app`
serves it, :mod:`.node` answers it): the message type, the run config's defaults, the
privacy models a node may choose, the paper's synthetic users and the digest that binds a
distributed-model secure sum to its request.  Imported by both sides, it imports
neither (the one place their common definitions live).
"""

from __future__ import annotations

from typing import Any

from fedspectral.pca.synthetic import federated_model, federated_users

__all__ = [
    "PCA_DEFAULTS",
    "PCA_MESSAGE_TYPE",
    "PCA_MODELS",
    "request_digest",
    "synthetic_model",
    "synthetic_users",
]

PCA_MESSAGE_TYPE = "query.ldp_pca"
#: privacy models a node's ``pca-model`` may choose
PCA_MODELS = ("local", "distributed")
PCA_DEFAULTS: dict[str, Any] = {
    "pca-p": 8,
    "pca-k": 2,
    "pca-epsilon": 1.0,
    "pca-delta": 1e-4,
    "pca-calibration": "analytic",
    "pca-vectorisation": "auto",
    "pca-norm-policy": "clip",
    "pca-users": 200,
    "pca-seed": 0,
    "pca-spike": 1.0,
}


#: the synthetic users of a node's partition and their model (one definition:
#: :mod:`fedspectral.pca.synthetic`)
synthetic_model = federated_model
synthetic_users = federated_users


def request_digest(request: dict[str, Any]) -> str:
    """SHA-256 (first 32 hex digits) of the canonical JSON of a distributed-model request.
    The server names the secure sum's phase ``ldp-pca-<digest>``; the session, and so
    the parameters every holder signs (:mod:`fedspectral.fed.secagg`), carry it: holders
    asked different things (ε, δ, calibration, ...) cannot complete one sum."""
    import hashlib
    import json

    text = json.dumps({str(k): request[k] for k in sorted(request)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
