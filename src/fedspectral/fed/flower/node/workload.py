r"""What a node's data is, checked before it is read (:func:`check_node_data`), and a
node's users for the PCA methods (``ldp_pca``) served by the training ClientApp.

The same checks and the same data as the LDP-PCA app's node handler
(:mod:`fedspectral.pca.flower.node`), for a request that comes as a method's phase: the
method's parameters (``p``, ``k``, the synthetic users' ``users``, ``seed`` and
``spike``; sent by the server, so hostile input) are checked against the node's own
bounds (``pca-max-dim``, ``pca-max-users``, ``pca-max-bytes``) and its policy
(calibration, norm policy, δ, a non-private ε) before any budget is spent
(:func:`check_users_request`); the users are then the rows of the node's own
``pca-data`` file or the synthetic users of its partition (:func:`node_users`), and its
ledger is keyed by the data set's identity its operator declares (``data-id``, default
``pca-data@node<i>`` or ``pca-synthetic@node<i>``: the LDP-PCA app's key, so one budget
covers both paths).  A simulation node (policy ``simulation = true``) skips the size
bounds; its synthetic users are the in-process runner's for that client, bit for bit.  No
node reads a file the server names (``method.params.data`` is refused before any budget).
"""

from __future__ import annotations

from typing import Any

from flwr.app import Context

from fedspectral.fed.flower.node.data import declared_identity, node_data_spec, node_partition_id
from fedspectral.pca.flower import node as pca_node

__all__ = ["check_node_data", "check_session", "check_users_request", "node_users"]


def check_session(sa: Any, pol: Any, method: Any, context: Context) -> None:
    """A secure sum's stage 0 against what this node was asked, before any data: the
    session must carry the method's binding (:meth:`~fedspectral.fed.protocol.Method.
    session_binding`: holders asked different things cannot complete one sum); for the
    distributed PCA model, the threshold must be at least the one the node sized its share
    for and its own ``pca-min-contributors`` (default 2), and the node declares no
    colluders (its share is sized for none on this path)."""
    params = sa["params"]
    binding = method.session_binding()
    if binding and params.session.split(b"/")[2:3] != [binding.encode()]:
        raise pol.refuse(
            "the secure sum's session is not bound to this node's request (every holder "
            "must be asked the same)"
        )
    if method.pillar != "pca":
        return
    _, floor = pca_node.node_model(context)
    want = max(method.threshold(int(method.config.partition.num_clients)), floor)
    if params.threshold < want:
        raise pol.refuse(
            f"a secure sum with threshold {params.threshold}: this node's share is sized "
            f"for {want} (its pca-min-contributors and the request's threshold)"
        )
    if int(pol.secagg_colluders) > 0:
        raise pol.refuse(
            "secagg-colluders > 0: the distributed model sizes colluders' shares on the "
            "LDP-PCA app's path only (task = 'ldp-pca')"
        )


def check_node_data(context: Context, pol: Any, cfg: Any, method: Any) -> None:
    """The node's own data, checked before it is read: a deployed node's data set (its node
    config, :func:`~fedspectral.fed.flower.node.data.node_data_spec`), or, for a PCA
    method, the request against the node's bounds and policy (:func:`check_users_request`)."""
    if method.pillar == "pca":
        check_users_request(context, pol, method)
    elif not pol.simulation:
        node_data_spec(context.node_config, pol, cfg.data.dataset)


def _request(method: Any) -> dict[str, Any]:
    """The method's parameters as the LDP-PCA node reads a request."""
    pr = method.params
    return {"p": pr.p, "k": pr.k, "users": pr.users, "seed": pr.seed, "spike": pr.spike}


def check_users_request(context: Context, pol: Any, method: Any) -> None:
    """Everything about a PCA method's request that the node checks before any budget is
    spent or any data read: the policy's calibrations, norm policies and δ, a non-private
    ε, the node's bounds on sizes and the synthetic users' parameters (a refusal names
    what is wrong, never a value of the data)."""
    pr, dp = method.params, method.config.dp
    if pr.data:  # which file a node reads is the node's choice, never the server's
        raise pol.refuse(
            "the request names a users' file (method.params.data): a node's users are its "
            "own pca-data or the synthetic users of its partition"
        )
    pol.require("calibrations", str(pr.calibration), pol.calibrations)
    pol.require("norm-policies", str(pr.norm_policy), pol.norm_policies)
    pol.check_delta(float(dp.delta))  # (a non-finite epsilon never validates)
    if pol.simulation:  # the experimenter's own node: no bounds on the request's sizes
        return
    req = _request(method)
    pca_node.node_users_count(context, req, pol)
    pca_node.synthetic_request(context, req, pol)


def node_users(context: Context, pol: Any, cfg: Any, method: Any, cid: str) -> tuple[Any, Any]:
    """(the node's users, (its ledger's data-set identity, their content digest)).

    Called once the request has passed :func:`check_users_request`."""
    nc = context.node_config
    pid = node_partition_id(nc, 0)
    _, digest = pca_node.pca_dataset(context, pid)
    # the LDP-PCA app's identity: its ledger key (ledger_key of it) is the same budget
    default = f"pca-data@node{pid}" if nc.get("pca-data") else f"pca-synthetic@node{pid}"
    key = declared_identity(nc, default)
    req = _request(method)  # a simulation node: the same users as the in-process runner's
    synth = pca_node.synthetic_request(context, req, pol)
    return pca_node.node_users(context, synth, int(req["p"]), int(req["k"]), pid), (key, digest)
