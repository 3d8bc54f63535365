"""Issue 48, the node's request and identity as the fifth fuzzing round found them
(``scripts/fuzz_cases_r5.py``, ``lib: node request (r5)``): each fix with a test that
fails on the code before it."""

from __future__ import annotations

import pytest


def _pca_context(tmp_path, **node_config):
    from flwr.app import Context, RecordDict

    nc = {"partition-id": 0, "num-partitions": 1, "policy-ledger-dir": str(tmp_path / "led")}
    return Context(run_id=1, node_id=1, node_config={**nc, **node_config}, state=RecordDict(),
                   run_config={})  # fmt: skip


def _pca_message(**over):
    from flwr.app import ConfigRecord, Message, RecordDict

    q = {"p": 4, "k": 1, "epsilon": 1.0, "delta": 1e-5, "calibration": "analytic",
         "norm-policy": "clip", "users": 20, "seed": 0, "spike": 1.0, **over}  # fmt: skip
    return Message(
        RecordDict({"ldp-pca": ConfigRecord(q)}), dst_node_id=1, message_type="query.ldp_pca"
    )


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("p", [0, -3])
def test_a_request_of_no_dimension_is_refused_naming_p(tmp_path, p) -> None:
    """``p = 0`` reached the release the node builds before its size checks: the error said
    "values must be >= 1, got 0" (a field of the ledger's release, not the request's key);
    ``p = -3`` made 6 values.  Now ``p`` and ``k`` are parsed with their ranges where they
    enter, and nothing is charged."""
    from fedspectral.fed.flower.node.policy import PolicyRefusal
    from fedspectral.pca.flower import node as pca_node

    with pytest.raises(PolicyRefusal, match=f"pca-p/pca-k are not valid .p must be >= 1, got {p}"):
        pca_node.pca_client_query(_pca_message(p=p), _pca_context(tmp_path))
    assert not list((tmp_path / "led").glob("ledger-*.json"))


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("pid", [1.7, "1", True, -1])
def test_a_partition_id_is_an_integer_never_truncated(tmp_path, pid) -> None:
    """``int(partition-id)`` read 1.7 (and True) as node 1, "1" as 1, and took -1: the
    node's party and ledger name.  Now refused, naming the key."""
    from fedspectral.fed.flower.apps.client_app import client_id
    from fedspectral.pca.flower import node as pca_node

    ctx = _pca_context(tmp_path, **{"partition-id": pid})
    with pytest.raises((TypeError, ValueError), match="node config partition-id"):
        pca_node.pca_client_query(_pca_message(), ctx)
    with pytest.raises((TypeError, ValueError), match="node config partition-id"):
        client_id(ctx)
    assert not list((tmp_path / "led").glob("ledger-*.json"))
