"""Issue 48 (deliver 4): property tests over the node's request parsers.

Whatever a server (or the node's operator, for its own data keys) puts in a request,
each parser either returns a value of the kind it promises, in its range, or refuses it
naming the key (``TypeError``/``ValueError``, or :class:`PolicyRefusal` where the node
refuses a request) -- never another exception, never a truncated or coerced value
(``int(2.5)``, ``'2.0'`` as 2.0, ``True`` as 1), and a refused request charges nothing.
Hypothesis, derandomised with few examples: the file runs in a few seconds.
"""

from __future__ import annotations

import math
import re

import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedspectral.fed.flower.node import data as node_data
from fedspectral.fed.flower.node.client_dp import CLIP_KEY, STD_KEY, client_dp_request
from fedspectral.fed.flower.node.policy import NodePolicy, PolicyRefusal
from fedspectral.pca.flower import node as pca_node

FAST = settings(derandomize=True, max_examples=25, deadline=None, database=None)

#: anything a config record (or a plain mapping) may hold
ANY = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.none(),
)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@FAST
@given(value=ANY)
def test_config_int_is_an_integer_or_names_the_key(value) -> None:
    try:
        got = pca_node.config_int({"users": value}, "users")
    except (TypeError, ValueError) as exc:
        assert not _is_int(value) or abs(value) > 2**53
        assert "'users'" in str(exc)
        return
    assert _is_int(value) and type(got) is int and got == value


@FAST
@given(value=ANY)
def test_config_float_is_a_real_or_names_the_key(value) -> None:
    try:
        got = pca_node.config_float({"spike": value}, "spike")
    except (TypeError, ValueError) as exc:
        assert "'spike'" in str(exc)
        real = _is_int(value) or isinstance(value, float)
        assert not real or (isinstance(value, float) and math.isnan(value)) or abs(value) > 1e308
        return
    assert (_is_int(value) or isinstance(value, float)) and type(got) is float
    assert got == float(value)


@FAST
@given(users=ANY, seed=ANY, spike=ANY)
def test_synthetic_users_are_valid_or_refused(users, seed, spike) -> None:
    """Parsed before the ledger is charged: valid (an integer count, a seed in
    [0, 2**63), a finite positive spike) or a refusal naming the request."""
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    cfg = {"users": users, "seed": seed, "spike": spike}
    try:
        got = pca_node._synthetic_request(ctx, cfg, NodePolicy())
    except PolicyRefusal as exc:
        assert "synthetic users are not valid" in str(exc)
        return
    assert got == (users, seed, spike)
    assert _is_int(users) and _is_int(seed) and 0 <= seed < 2**63
    assert isinstance(spike, int | float) and not isinstance(spike, bool)
    assert math.isfinite(spike) and spike > 0


class _Request:
    def __init__(self, config: dict) -> None:
        self.config = config


@FAST
@given(clip=ANY, std=ANY)
def test_client_dp_request_is_a_positive_clip_and_a_std_or_names_the_key(clip, std) -> None:
    try:
        got = client_dp_request(_Request({CLIP_KEY: clip, STD_KEY: std}))
    except (TypeError, ValueError) as exc:
        assert CLIP_KEY in str(exc) or STD_KEY in str(exc)
        return
    c, s = got
    assert type(c) is float and type(s) is float
    assert math.isfinite(c) and c > 0 and math.isfinite(s) and s >= 0
    assert (c, s) == (clip, std)


SHARD_TEXT = st.one_of(
    st.text(alphabet="0123456789/_ +-\u0661\u0663\uff11\u00b2.", max_size=7),
    st.builds("{}/{}".format, st.integers(-3, 30), st.integers(-3, 30)),
    ANY,
)


@FAST
@given(shard=SHARD_TEXT)
def test_a_shard_is_i_of_n_in_ascii_digits_or_named(shard) -> None:
    nc = {"data-dataset": "digits", "data-shard": shard}
    try:
        spec = node_data.NodeData.from_node_config(nc)
    except ValueError as exc:
        assert "data-shard" in str(exc)
        return
    assert spec is not None
    if shard is None:  # no data-shard: all the records
        assert spec.shard is None
        return
    assert isinstance(shard, str) and re.fullmatch(r"[0-9]+/[0-9]+", shard.strip())
    i, n = spec.shard
    assert 0 <= i < n and (i, n) == tuple(int(x) for x in shard.strip().split("/"))


@FAST
@given(key=st.text(alphabet="abdhistr-_", min_size=1, max_size=10))
def test_an_unknown_data_key_is_named(key) -> None:
    nc = {"data-dataset": "digits", f"data-{key}": "0/3"}
    if f"data-{key}" in node_data.NODE_DATA_KEYS:
        return
    with pytest.raises(ValueError, match=f"unknown node-config key 'data-{key}'"):
        node_data.NodeData.from_node_config(nc)


@settings(FAST, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.one_of(st.text(max_size=8), st.integers(), st.booleans()))
@pytest.mark.usefixtures("task_identity")
def test_an_unknown_request_kind_is_refused_and_charges_nothing(kind, tmp_path_factory) -> None:
    if kind in pca_node.REQUEST_KINDS:
        return
    led = tmp_path_factory.mktemp("led")
    ctx = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1, "policy-ledger-dir": str(led)},
        state=RecordDict(),
        run_config={},
    )
    q = {"p": 4, "k": 1, "epsilon": 1.0, "delta": 1e-5, "users": 20, "seed": 0, "spike": 1.0}
    msg = Message(
        RecordDict({"ldp-pca": ConfigRecord({**q, "request": kind})}),
        dst_node_id=1,
        message_type="query.ldp_pca",
    )
    with pytest.raises(PolicyRefusal, match="unknown LDP-PCA request"):
        pca_node.pca_client_query(msg, ctx)
    assert list(led.iterdir()) == []
