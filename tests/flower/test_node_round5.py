"""Hardening round 5 (issue 48) on the node: each attack works on a weakened node (the
defence monkeypatched away inside the test) and fails on the real one.

The node's LDP-PCA handler is called directly (no Flower app, no Ray): fast unit tests.
"""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from test_node_policy import _pca_query

from fedspectral.fed.flower.node.policy import PolicyRefusal, dataset_key
from fedspectral.pca.flower import node as pca_node

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def _ctx(node_config: dict) -> Context:
    return Context(
        run_id=5,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1, **node_config},
        state=RecordDict(),
        run_config={},
    )


_query = _pca_query  # the LDP-PCA request of test_node_policy.py


def _releases(led) -> list:
    return [
        r for f in sorted(led.glob("ledger-*.json")) for r in json.loads(f.read_text())["releases"]
    ]


def _epsilon(releases: list, delta: float = 1e-4) -> float:
    from fedspectral.privacy.accounting import _release_from_dict, epsilon_of_releases

    return epsilon_of_releases([_release_from_dict(r, "r") for r in releases], delta)


def _answer_until_refused(ctx, limit: int = 40) -> int:
    n = 0
    for _ in range(limit):
        try:
            pca_node.pca_client_query(_query(), ctx)
        except PolicyRefusal as exc:
            assert "above max-epsilon-total" in str(exc)
            return n
        n += 1
    return n


# -- 1. the budget follows the declared data set, not its content -----------------------
def _content_keyed(context, pid):
    """The node before this defence: its ledger keyed by a digest of pca-data's bytes."""
    with open(str(context.node_config["pca-data"]), "rb") as fh:
        return dataset_key("ldp-pca-content", hashlib.sha256(fh.read()).hexdigest()), None


@pytest.mark.parametrize("change", ["append", "reorder-tail"])
@pytest.mark.parametrize("weakened", [True, False])
def test_a_change_of_content_does_not_reset_the_budget(
    tmp_path, monkeypatch, weakened, change
) -> None:
    """One appended user, or a reordered tail, gave the node a fresh ledger (its key hashed
    the content): more releases of the same users, epsilon beyond max-epsilon-total."""
    if weakened:
        monkeypatch.setattr(pca_node, "_pca_dataset", _content_keyed)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 4))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    data, led = tmp_path / "users.npy", tmp_path / "led"
    np.save(data, X)
    limit = 3.0
    ctx = _ctx(
        {"pca-data": str(data), "policy-ledger-dir": str(led), "policy-max-epsilon-total": limit}
    )
    first = _answer_until_refused(ctx)
    assert first >= 1
    np.save(data, np.vstack([X, X[:1]]) if change == "append" else np.vstack([X[:90], X[:89:-1]]))
    again = _answer_until_refused(ctx)
    spent = _epsilon(_releases(led))
    if weakened:  # a fresh budget for the same users
        assert again == first and spent > limit * 1.2, (again, spent)
        assert len(list(led.glob("ledger-*.json"))) == 2
    else:  # one ledger: the change is logged and recorded, the limit holds
        assert again == 0 and spent <= limit
        (f,) = led.glob("ledger-*.json")
        assert len(json.loads(f.read_text())["releases"]) == first  # nothing new


def test_the_content_change_is_logged_and_recorded(tmp_path, caplog) -> None:
    """A request answered after a change of content under the same identity: the ledger
    keeps its releases and records the old and new digests; the node logs the change."""
    X = np.full((10, 4), 0.1)
    data, led = tmp_path / "users.npy", tmp_path / "led"
    np.save(data, X)
    ctx = _ctx({"pca-data": str(data), "policy-ledger-dir": str(led)})
    pca_node.pca_client_query(_query(), ctx)
    (f,) = led.glob("ledger-*.json")
    d0 = json.loads(f.read_text())["data"]["digest"]
    np.save(data, np.vstack([X, X[:1]]))
    with caplog.at_level(logging.WARNING, "fedspectral.fed.flower.node.policy"):
        pca_node.pca_client_query(_query(), ctx)
    (g,) = led.glob("ledger-*.json")
    saved = json.loads(g.read_text())
    assert len(saved["releases"]) == 2
    (ch,) = saved["data"]["changes"]
    assert ch["old"] == d0 and ch["new"] == saved["data"]["digest"] != d0
    assert f"{d0} -> {ch['new']}" in caplog.text and "kept" in caplog.text


def test_a_new_data_set_only_when_the_operator_declares_it(tmp_path) -> None:
    """The operator's data-id names the ledger: a new data-id opens a new one; the same
    data-id keeps it whatever file pca-data points to."""
    led = tmp_path / "led"
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.full((5, 4), 0.1 if name == "a" else 0.2))
    for path, ident in (("a", "site-1"), ("b", "site-1"), ("b", "site-2")):
        ctx = _ctx(
            {
                "pca-data": str(tmp_path / f"{path}.npy"),
                "policy-ledger-dir": str(led),
                "data-id": ident,
            }
        )
        pca_node.pca_client_query(_query(), ctx)
    files = {len(json.loads(f.read_text())["releases"]) for f in led.glob("ledger-*.json")}
    assert files == {2, 1}
    with pytest.raises(ValueError, match="data-id must be non-empty printable text"):
        pca_node.pca_client_query(_query(), _ctx({"data-id": "", "policy-ledger-dir": str(led)}))


# -- 2. no timing (or other data-dependent side) field in a reply -----------------------
def _form(reply: Message) -> tuple:
    """Everything in a reply but the noised payload's values."""
    c = reply.content
    arrays = {k: [(n, a.shape, a.dtype) for n, a in r.items()] for k, r in c.array_records.items()}
    configs = {k: dict(r) for k, r in c.config_records.items()}
    return sorted(c.keys()), arrays, configs


@pytest.mark.parametrize("weakened", [True, False])
def test_no_reply_field_depends_on_the_data(tmp_path, monkeypatch, weakened) -> None:
    """Two data sets of one size, one whose users all exceed the clip (the slower branch of
    pca/rows._clip_factors) and one whose users do not: every non-payload field of the
    reply is the same.  The weakened node sends the node-measured duration it used to
    (``release.seconds``), which the server reads the clip off."""
    import time

    if weakened:
        real = pca_node.ConfigRecord

        def timed(d):
            if "sigma" in d:  # the release record: the old field, measured on the node
                d = {**d, "seconds": time.perf_counter() - timed.t0}
            return real(d)

        monkeypatch.setattr(pca_node, "ConfigRecord", timed)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    forms = []
    for name, scale in (("inside", 0.5), ("clipped", 3.0)):
        np.save(tmp_path / f"{name}.npy", X * scale)
        ctx = _ctx(
            {"pca-data": str(tmp_path / f"{name}.npy"), "policy-ledger-dir": str(tmp_path / name)}
        )
        if weakened:
            timed.t0 = time.perf_counter()
        with pytest.warns(UserWarning) if scale > 1 else _no_warning():
            forms.append(_form(pca_node.pca_client_query(_query(), ctx)))
    assert forms[0][:2] == forms[1][:2]  # the same records and array shapes
    if weakened:
        assert forms[0][2] != forms[1][2]
    else:
        assert forms[0][2] == forms[1][2] and "seconds" not in forms[0][2]["release"]


def _no_warning():
    import contextlib

    return contextlib.nullcontext()


# -- 3. the cost of one request is bounded by default ------------------------------------
_OLD_BOUNDS = {"pca-max-dim": 4096, "pca-max-users": 10**6, "pca-max-bytes": 1 << 31}


@pytest.mark.parametrize("weakened", [True, False])
@pytest.mark.parametrize(("users", "p"), [(2000, 256), (1, 1024), (300000, 8)])
def test_default_bounds_keep_a_synthetic_request_cheap(monkeypatch, weakened, users, p) -> None:
    """A node without pca-data answered synthetic-user requests the server sized up to
    2 GiB of messages and p = 4096 (45 s and over 2 GiB a query).  The defaults now refuse
    them; the operator's node setting lets them through."""
    if weakened:
        monkeypatch.setattr(pca_node, "NODE_BOUNDS", _OLD_BOUNDS)
    cfg = _query(users=users, p=p).content.config_records["ldp-pca"]
    pol = pca_node.NodePolicy()
    if weakened:
        assert pca_node.node_users_count(_ctx({}), cfg, pol) == users
    else:
        with pytest.raises(PolicyRefusal, match="pca-max-(dim|bytes)"):
            pca_node.node_users_count(_ctx({}), cfg, pol)
        big = {"pca-max-dim": 2048, "pca-max-bytes": 1 << 30}
        assert pca_node.node_users_count(_ctx(big), cfg, pol) == users


# -- 7. parse, then charge; unknown requests refused --------------------------------------
@pytest.mark.parametrize(
    "bad",
    [{"seed": "x"}, {"seed": 2.5}, {"seed": -1}, {"spike": float("nan")}, {"spike": "1"}],
    ids=lambda d: f"{next(iter(d))}={next(iter(d.values()))!r}",
)
@pytest.mark.parametrize("weakened", [True, False])
def test_a_malformed_request_charges_nothing(tmp_path, monkeypatch, weakened, bad) -> None:
    """The node charged its ledger and then parsed the synthetic users' seed and spike: a
    malformed request burned budget and released nothing."""
    if weakened:

        def late(context, cfg, pol):
            return cfg["users"], cfg["seed"], cfg["spike"]

        monkeypatch.setattr(pca_node, "_synthetic_request", late)
    led = tmp_path / "led"
    ctx = _ctx({"policy-ledger-dir": str(led)})
    try:
        pca_node.pca_client_query(_query(**bad), ctx)
        error = None
    except Exception as exc:  # noqa: BLE001 -- the weakened node's uniform failure
        error = exc
    if weakened:  # charged, then failed (or answered with int(2.5) == 2)
        assert len(_releases(led)) == 1
    else:
        assert isinstance(error, PolicyRefusal) and _releases(led) == []
        assert "synthetic users are not valid" in str(error)


@pytest.mark.parametrize("kind", ["plans", "", 3, "release"])
def test_an_unknown_request_kind_is_refused(tmp_path, kind) -> None:
    led = tmp_path / "led"
    with pytest.raises(PolicyRefusal, match="unknown LDP-PCA request"):
        pca_node.pca_client_query(_query(request=kind), _ctx({"policy-ledger-dir": str(led)}))
    assert _releases(led) == []
    plan = pca_node.pca_client_query(_query(request="plan"), _ctx({}))
    assert plan.content.config_records["plan"]["model"] == "local"


# -- 4. a node inside a Ray actor says which policy it applies ----------------------------
def test_a_node_in_a_ray_actor_says_it_applies_the_simulation_policy(monkeypatch, caplog) -> None:
    """Inside a Ray actor (Flower's simulation runtime, recognised from the process) a node
    naming no policy gets the permissive simulation policy: it says so at start, once, with
    the policy's name; a node that names a policy keeps its own, silently."""
    from fedspectral.fed.flower.apps import client_app as ca

    monkeypatch.setattr(ca, "in_simulation_runtime", lambda: True)
    monkeypatch.setattr(ca, "_PROCESS_CACHE", {})
    with caplog.at_level(logging.WARNING, ca.__name__):
        pol = ca.node_policy(_ctx({}))
        ca.node_policy(_ctx({}))
    assert pol is ca.LOCAL_SIMULATION_POLICY
    (rec,) = [r for r in caplog.records if "Ray actor" in r.getMessage()]
    assert ca.LOCAL_SIMULATION_POLICY.source in rec.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, ca.__name__):
        own = ca.node_policy(_ctx({"policy-max-epsilon": 1.0}))
    assert not own.simulation and "Ray actor" not in caplog.text


# -- 6. the node's policy fails closed on a typo or a non-text path -----------------------
@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("policy-calibrations", "analytc", "unknown 'analytc' .did you mean 'analytic'"),
        ("policy-relations", "replace_on", "did you mean 'replace_one'"),
        ("policy-norm-policies", "clp", "did you mean 'clip'"),
        ("policy-methods", "fedsc:shar", "unknown 'fedsc:shar' .did you mean 'fedsc:share'"),
        ("policy-methods", "fedsc:train,ldp-pca:querry", "did you mean 'ldp-pca:query'"),
        ("policy-noise-seed", "derive", "noise-seed 'derive' is a simulation/test setting"),
        ("policy-ledger-dir", 3, "must be text"),
        ("policy-ledger-dir", ["/tmp/a"], "must be text"),
    ],
)
def test_a_policy_typo_or_a_non_text_path_is_refused(key, value, match) -> None:
    """An unknown calibration/relation/norm-policy name was accepted (and the node then
    refused everything, nothing pointing at the typo); an integer or list became a
    relative ledger path.  Refused at start, the bad value and the nearest valid one
    named."""
    with pytest.raises((TypeError, ValueError), match=match):
        pca_node.NodePolicy.from_node({key: value})
    pca_node.NodePolicy.from_node({"policy-methods": "*,fedca:train,ldp-pca:query"})  # known


def _answers(nc: dict, ctx=None) -> list[np.ndarray]:
    """The users' messages of LDP-PCA queries until the node refuses (at most 6)."""
    ctx = ctx or _ctx(nc)
    out = []
    for _ in range(6):
        try:
            reply = pca_node.pca_client_query(_query(), ctx)
        except PolicyRefusal:
            break
        out.append(reply.content.array_records["messages"]["messages"].numpy())
    return out


@pytest.mark.parametrize(("key", "value"), [("noise-seed", 11), ("ledger-dir", "memory")])
@pytest.mark.parametrize("weakened", [True, False])
def test_simulation_only_settings_are_refused_on_a_deployed_node(
    tmp_path, monkeypatch, weakened, key, value
) -> None:
    """A fixed noise seed (a server that knows it -- the tests use 11 -- regenerates the
    noise: the same query, the same messages) and an in-memory ledger (a restarted node
    answers again past max-epsilon-total) were accepted with ``simulation = false``."""
    from fedspectral.fed.flower.node import policy as node_policy

    if weakened:  # the node before this defence
        monkeypatch.setattr(node_policy, "_refuse_simulation_only", lambda pol: None)
    nc = {"policy-ledger-dir": str(tmp_path / "led"), "policy-max-epsilon-total": 3.0}
    nc[f"policy-{key}"] = value
    if not weakened:
        with pytest.raises(ValueError, match=f"{key} {value!r} is a simulation/test setting"):
            pca_node.NodePolicy.from_node(nc)
        return
    first = _answers(nc)
    if key == "noise-seed":  # the noise is the seed's: a server replays and removes it
        assert np.array_equal(first[0], first[1])
    else:  # a restart (a fresh context) and the budget is fresh
        again = _answers(nc)
        assert len(first) == len(again) >= 1
        assert _releases(tmp_path / "led") == []  # nothing on disk


# -- 7. the node's own data: its shard, its size and its keys as the operator wrote them ----
def _int_shard(value):
    """The node before this defence: ``int()`` read each side of the shard."""
    i, n = (int(s) for s in str(value).split("/"))
    return i, n


@pytest.mark.parametrize("shard", ["1_0/20", "\u0661/\u0663", "\uff11/\uff13"])
@pytest.mark.parametrize("weakened", [True, False])
def test_a_shard_is_written_in_ascii_digits(monkeypatch, weakened, shard) -> None:
    """``int()`` reads ``1_0`` as 10 and Arabic-Indic or full-width digits as numbers: the
    node served a part of its data its operator never wrote as one."""
    from fedspectral.fed.flower.node import data as node_data

    if weakened:
        monkeypatch.setattr(node_data, "_shard", _int_shard)
    nc = {"data-dataset": "digits", "data-shard": shard}
    if weakened:
        assert node_data.NodeData.from_node_config(nc).shard in ((10, 20), (1, 3))
    else:
        with pytest.raises(ValueError, match=f"data-shard must be 'i/N'.*{shard}"):
            node_data.NodeData.from_node_config(nc)


@pytest.mark.parametrize("weakened", [True, False])
def test_an_unknown_data_key_is_refused(monkeypatch, weakened) -> None:
    """``data-shards`` (a typo of ``data-shard``) was ignored: the node served all its
    records instead of the third its operator meant."""
    from fedspectral.fed.flower.node import data as node_data

    if weakened:
        monkeypatch.setattr(node_data, "check_node_data_keys", lambda node_config: None)
    nc = {"data-dataset": "digits", "data-shards": "0/3"}
    if weakened:
        spec = node_data.NodeData.from_node_config(nc)
        assert spec.shard is None and len(spec.positions(1797)) == 1797
    else:
        with pytest.raises(ValueError, match="'data-shards' .did you mean 'data-shard'"):
            node_data.NodeData.from_node_config(nc)


@pytest.mark.parametrize("weakened", [True, False])
def test_a_node_holding_no_record_is_refused(weakened) -> None:
    """``data-limit = 2`` cut into 3 shards leaves shard 2 empty: the node accepted it
    and served releases over 0 records (a sensitivity mu / |D_j| with |D_j| = 0)."""
    from fedspectral.data import load_dataset
    from fedspectral.fed.flower.node.data import NodeData, load_node_data

    spec = NodeData.from_node_config(
        {"data-dataset": "digits", "data-limit": 2, "data-shard": "2/3"}
    )
    assert spec is not None
    if weakened:  # the node before this defence: the records its config selects, 0 or not
        train = load_dataset("digits", "train", download=False)
        assert len(train.subset(spec.positions(len(train)))) == 0
    else:
        with pytest.raises(ValueError, match="data-limit 2 and data-shard '2/3' select 0 of"):
            load_node_data(spec)
