"""An active server against one node: crafted weights, methods, bounds and keys.

Each attack runs twice against the real :func:`make_client_app` ClientApp, in process
(no Ray): on a deliberately *weakened* node -- one defence of the reference monitor
monkeypatched away -- where it must work (so the test can fail), and on the real node
with its default policy, where the server must learn nothing beyond the releases the
node's ledger holds and the objects its release manifest declares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedspectral.fed.flower.apps import client_app as ca
from fedspectral.fed.flower.apps.records import payload_from_recorddict, payload_to_recorddict
from fedspectral.fed.protocol import Payload

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py

APP = ca.make_client_app()  # every node reads its own policy from its node config


def _ctx(tmp_path: Path, **policy) -> Context:
    nc = {
        "partition-id": 0,
        "num-partitions": 3,
        "policy-ledger-dir": str(tmp_path / "led"),
        # the node's own data: the first 300 digits, its third (100 records)
        "data-dataset": "digits",
        "data-limit": 300,
        "data-shard": "0/3",
    }
    nc.update({f"policy-{k.replace('_', '-')}": v for k, v in policy.items()})
    return Context(run_id=1, node_id=1, node_config=nc, state=RecordDict(), run_config={})


def _refused(reply: Message, match: str, cls: str = "PolicyRefusal") -> str:
    """What a server sees of a node's refusal (``outcome.error_reply_mod``): an error reply,
    with no content, whose reason is the node's ``Class: message``; returns the reason."""
    assert reply.has_error(), "the node answered where it should have refused"
    assert not reply.has_content()
    reason = reply.error.reason
    assert reason.startswith(f"{cls}: ") and re.search(match, reason), (match, reason)
    return reason


def _seeded_noise(monkeypatch, seed: int) -> None:
    """The node's noise from numpy seeded with ``seed``, as a policy's ``noise-seed`` gives
    it (a simulation-only setting, refused on a deployed node): reproducible, and without
    the secure sampler's total variation, so near-noiseless test releases are accounted.
    Injected by the test into the deployed node it drives, never through its policy."""
    from fedspectral.fed.flower.node.policy import (
        NodePolicy,
        node_noise_generator,
        node_noise_mechanism,
    )

    seeded = NodePolicy(noise_seed=seed, simulation=True)
    monkeypatch.setattr(ca, "node_noise_generator", lambda p, *a: node_noise_generator(seeded, *a))
    monkeypatch.setattr(ca, "node_noise_mechanism", lambda p: node_noise_mechanism(seeded))


def _ledger(tmp_path: Path) -> list[dict]:
    files = sorted((tmp_path / "led").glob("ledger-*.json"))
    return [r for f in files for r in json.loads(f.read_text())["releases"]]


def _hello(cfg, ctx: Context) -> None:
    from fedspectral.config import to_dict

    ca._PROCESS_CACHE.clear()
    msg = Message(
        RecordDict({"config": ConfigRecord({"json": json.dumps(to_dict(cfg))})}),
        dst_node_id=1,
        message_type="query.hello",
    )
    APP(msg, ctx)


def _request(payload: Payload, phase: str, kind: str, rnd: int = 1) -> Message:
    return Message(
        payload_to_recorddict(payload, phase=phase, round=rnd), dst_node_id=1, message_type=kind
    )


def _dp_fedsc(tiny, **params):
    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", 2)
    cfg.dp.enabled, cfg.dp.epsilon = True, 4.0
    cfg.method.params.update({"neighbouring": "replace_one", "share_views": 1, **params})
    return validate(cfg)


def _weights(cfg) -> dict[str, np.ndarray]:
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.weights import net_to_arrays

    torch.manual_seed(0)
    return net_to_arrays(build_method(cfg).build_net())


# -- 1. failure is a release: the error oracle -------------------------------------------------
def _oracle_weights(cfg, b: float) -> dict[str, np.ndarray]:
    """z_0 = 1e38 relu(sum(h) + b): +inf (float32) exactly when some view of the node's
    data has sum(h) > 3.4 - b, the predicate the server chose; z_j = 0 for j > 0."""
    w = _weights(cfg)
    first = w["projector.net.0.weight"]
    w["projector.net.0.weight"] = np.zeros_like(first)
    w["projector.net.0.weight"][0] = 1.0
    w["projector.net.0.bias"] = np.zeros_like(w["projector.net.0.bias"])
    w["projector.net.0.bias"][0] = b
    last = np.zeros_like(w["projector.net.3.weight"])
    last[0, 0] = 1e38
    w["projector.net.3.weight"] = last
    w["projector.net.3.bias"] = np.zeros_like(w["projector.net.3.bias"])
    return w


def _ask(cfg, ctx, b: float) -> bool:
    """One crafted share request; True when the node answered (False: a failure, which the
    server sees as an error reply)."""
    req = _request(
        Payload.with_weights(_oracle_weights(cfg, b), config={"cache_weights": False}),
        "share",
        "query",
    )
    try:
        reply = APP(req, ctx)
    except ValueError:  # raised past the node's failure handling: the runtime's error reply
        return False
    return not reply.has_error()


def _weaken_totality(monkeypatch) -> None:
    """The node before this defence: DP-CalR raised on non-finite representations."""
    from fedspectral.fed import correlation

    real = correlation._clipped_moment

    def raising(*a, **k):
        acc, clipped, nonfinite = real(*a, **k)
        if nonfinite:
            raise ValueError("encoder returned non-finite representations")
        return acc, clipped, nonfinite

    monkeypatch.setattr(correlation, "_clipped_moment", raising)


def _binary_search(cfg, ctx, steps: int) -> tuple[float, list[bool]]:
    """The server's search for t* = max over the node's views of sum(h): inf iff t > 3.4 - b."""
    lo, hi, seen = -1e4, 1e4, []
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok = _ask(cfg, ctx, 3.4 - mid)  # fails iff some sum(h) > mid
        seen.append(ok)
        lo, hi = (lo, mid) if ok else (mid, hi)
    return (lo + hi) / 2, seen


@pytest.mark.parametrize("weakened", [True, False])
def test_error_oracle_membership_and_binary_search(tiny, tmp_path, monkeypatch, weakened) -> None:
    cfg = _dp_fedsc(tiny)
    ctx = _ctx(tmp_path, max_epsilon=1e6, max_epsilon_total=1e9)
    _hello(cfg, ctx)
    if weakened:
        _weaken_totality(monkeypatch)
    # membership: a bound below every value vs above every value
    always, never = _ask(cfg, ctx, 1e6), _ask(cfg, ctx, -1e6)
    t_star, seen = _binary_search(cfg, ctx, 16)
    n_queries = 2 + 16
    if weakened:  # the outcome is the predicate: the search converges on t*
        assert (always, never) == (False, True)
        assert True in seen and False in seen
    else:  # every query answered whatever the predicate: the outcome carries nothing
        assert (always, never) == (True, True) and all(seen)
    # each query, answered or not, is a ledgered release (spent before the computation)
    assert len(_ledger(tmp_path)) == n_queries
    if weakened:  # the search pinned the node's statistic down to 2e4 / 2^16
        assert -1e4 < t_star < 1e4 and seen.count(True) not in (0, len(seen))


def test_secure_sum_quantisation_clamps_instead_of_raising() -> None:
    """The bound oracle: a server that sizes the secure sum with a tiny bound learned from
    QuantisationOverflow whether the node's (noised) summand crossed it."""
    from fedspectral.fed.flower.node.secure_sum import clamp_summand
    from fedspectral.fed.secagg_primitives import QuantisationOverflow, quantise

    bound = 1e-3
    outcomes = {}
    for name, x in {
        "inside": np.full(4, 1e-4),
        "outside": np.array([5e-2, 0.0, 0.0, 0.0]),
        "non-finite": np.array([np.inf, -np.inf, np.nan, 0.0]),
    }.items():
        try:  # weakened: quantise the summand as it is
            quantise(x, 1e6, bound, 64)
            outcomes[name] = "ok"
        except QuantisationOverflow:
            outcomes[name] = "overflow"
        q = quantise(clamp_summand(x, bound), 1e6, bound, 64)  # real: never raises
        assert q.shape == x.shape
    assert outcomes == {"inside": "ok", "outside": "overflow", "non-finite": "overflow"}
    assert np.array_equal(
        clamp_summand(np.array([5e-2, -np.inf, np.nan, 1e-4]), bound), [bound, -bound, 0.0, 1e-4]
    )


# -- 2. per-sample encoders by construction ---------------------------------------------------
def _evading_projector() -> torch.nn.Module:
    """BatchNorm(beta = -2.8) -> ReLU: zero on every batch of <= 8 rows (|x_hat| <= sqrt(7)
    = 2.65), data-dependent on a large batch."""
    bn = torch.nn.BatchNorm1d(4, track_running_stats=False)
    with torch.no_grad():
        bn.bias.fill_(-2.8)
    return torch.nn.Sequential(torch.nn.Linear(6, 4), bn, torch.nn.ReLU())


def test_probe_is_evaded_but_the_allow_list_is_not() -> None:
    from fedspectral.fed.correlation import batch_dependence
    from fedspectral.models.per_sample import check_per_sample

    torch.manual_seed(0)
    enc = _evading_projector().eval()
    x = torch.randn(500, 6)
    with torch.no_grad():
        assert batch_dependence(enc, x[:8], rows=4) == 0.0  # the probe sees nothing
        full = enc(x)
        y = x.clone()
        y[499] = 50 * torch.randn(6)  # one other sample changes
        moved = (enc(y)[:499] - full[:499]).abs().max().item()
    assert moved > 0.05  # ... and the others' representations move on a real pass
    with pytest.raises(ValueError, match=r"1 \(BatchNorm1d\).*not on the allow-list"):
        check_per_sample(enc)


@pytest.mark.parametrize("norm", ["batch", "batch_running"])
def test_node_refuses_batch_statistics_before_reading_data(
    tiny, tmp_path, monkeypatch, norm
) -> None:
    from fedspectral.config import thaw
    from fedspectral.fed.validation import validate

    cfg = thaw(_dp_fedsc(tiny))  # an editable copy (a validated config is frozen)
    cfg.model.projector_norm = norm
    ctx = _ctx(tmp_path)
    _hello(cfg, ctx)  # the node validates the config itself (hostile input)
    if norm == "batch":
        with pytest.raises(ValueError, match="projector_norm"):
            validate(cfg)
    w = _weights(cfg)
    w["projector.net.1.bias"] = np.full_like(w["projector.net.1.bias"], -2.8)  # evades
    req = _request(Payload.with_weights(w, config={"cache_weights": False}), "share", "query")
    if norm == "batch":  # the node's own validation of the config: raised, before any work
        with pytest.raises(ValueError, match="projector_norm"):
            APP(req, ctx)
    else:  # valid config, refused by the allow-list: the server sees the error reply
        _refused(APP(req, ctx), "allow-list")
    assert ca._PROCESS_CACHE.get("clients", {}) == {}  # no data read
    assert _ledger(tmp_path) == []
    # a weakened node (no validation, no allow-list, the probe alone) serves the release
    monkeypatch.setattr(ca, "_config", lambda c, d: cfg)
    monkeypatch.setattr("fedspectral.models.per_sample.check_per_sample", lambda *a: None)
    reply = payload_from_recorddict(APP(req, ctx).content)
    assert "R" in reply.arrays


# -- 3. method switch -------------------------------------------------------------------------
@pytest.mark.parametrize("weakened", [True, False])
def test_method_switch_to_per_sample_outputs_is_refused(
    tiny, tmp_path, monkeypatch, weakened
) -> None:
    from fedspectral.fed import manifest
    from fedspectral.fed.validation import validate

    cfg = tiny("fedca", 1)
    cfg.method.params["align_weight"] = 0.0  # no public split: the dictionary alone
    cfg = validate(cfg)
    ctx = _ctx(tmp_path, allow_unprotected_weights=True)
    _hello(cfg, ctx)
    if weakened:  # no manifest: whatever the method returns leaves
        monkeypatch.setattr(
            manifest, "check_manifest", lambda pol, m, p, v: manifest.PhaseManifest(m, p, v, ())
        )
        monkeypatch.setattr(manifest, "enforce", lambda man, reply, allowed: reply)
    from fedspectral.fed.methods import build_method

    method = build_method(cfg)
    state = method.init_server_state(_weights(cfg), {f"client-{i}": 100 for i in range(3)})
    payload = method.configure("train", 1, state, ["client-0"])["client-0"]
    req = _request(payload, "train", "train")
    if weakened:
        reply = payload_from_recorddict(APP(req, ctx).content)
        d = reply.arrays["dictionary"]  # one un-noised representation per sample
        assert d.shape[0] >= 50
    else:
        _refused(APP(req, ctx), "fedca:train.*not served")
        assert ca._PROCESS_CACHE.get("clients", {}) == {}


# -- 4. client-level DP on the node's own terms -----------------------------------------------
_MISSING = "w.predictor.net.3.weight"


def _train_request(cfg, tamper: str) -> Message:
    from fedspectral.fed.flower.node.client_dp import CLIP_KEY, STD_KEY
    from fedspectral.fed.methods import build_method

    method = build_method(cfg)
    state = method.init_server_state(_weights(cfg), {f"client-{i}": 100 for i in range(3)})
    payload = method.configure("train", 1, state, ["client-0"])["client-0"]
    key = "w.projector.net.3.weight"
    if tamper == "int64":
        payload.arrays[key] = np.rint(payload.arrays[key] * 100).astype(np.int64)
    elif tamper == "missing":  # BYOL loads whatever subset it is sent: leave one out
        del payload.arrays[_MISSING]
    payload.config[CLIP_KEY], payload.config[STD_KEY] = 1.0, 0.5
    return _request(payload, "train", "train")


def _weaken_client_dp(monkeypatch) -> None:
    """The node before this defence: the reference (so what is clipped and noised) came
    from the server's message, float tensors only; metrics left as they were."""
    from fedspectral.fed import manifest
    from fedspectral.fed.flower.node import client_dp

    def server_keyed(payload, rt):
        w = client_dp.reference_weights(payload, rt)
        return {k: v for k, v in w.items() if np.issubdtype(np.asarray(v).dtype, np.floating)}

    real = client_dp.privatise_update

    def passing(reply, reference, clip, std, rng):  # keys outside the reference pass
        out = real(reply, reference, clip, std, rng)
        for k, v in reply.arrays.items():
            out.arrays.setdefault(k, v)
        return out

    monkeypatch.setattr(client_dp, "node_reference", server_keyed)
    monkeypatch.setattr(client_dp, "privatise_update", passing)
    monkeypatch.setattr(manifest, "enforce", lambda man, reply, allowed: reply)


@pytest.mark.parametrize("tamper", ["int64", "missing", "loss"])
@pytest.mark.parametrize("weakened", [True, False])
def test_client_dp_covers_every_float_tensor_and_drops_metrics(
    tiny, tmp_path, monkeypatch, tamper, weakened
) -> None:
    # "missing": BYOL's server sends only the online network; the target network's
    # weights, trained on the node, are in the reply without being in the request
    from fedspectral.fed.validation import validate

    method = "fedavg_byol" if tamper == "missing" else "fedavg_sc"
    cfg = tiny(method, 1)
    # a narrow network: the node's secure noise (OpenDP's exact sampler, tens of
    # microseconds per weight) is what this test spends its time on
    cfg.model.width, cfg.model.projector_hidden, cfg.model.projector_out = 4, 32, 16
    cfg = validate(cfg)
    ctx = _ctx(tmp_path, methods=f"{method}:train", max_epsilon=1e3, max_epsilon_total=1e6)
    _hello(cfg, ctx)
    if weakened:
        _weaken_client_dp(monkeypatch)
    replies = []
    for _ in range(2):  # the same request twice: un-noised outputs repeat exactly
        ca._PROCESS_CACHE.clear()
        torch.manual_seed(0)  # the node's fresh network: the same initial values
        replies.append(payload_from_recorddict(APP(_train_request(cfg, tamper), ctx).content))
    a, b = replies
    if tamper == "loss":
        leaked = "loss" in a.metrics and a.metrics["loss"] == b.metrics["loss"]
    else:
        k = "w.projector.net.3.weight" if tamper == "int64" else _MISSING
        leaked = k in a.arrays and np.array_equal(a.arrays[k], b.arrays[k])
    assert leaked == weakened
    assert set(a.metrics) <= (
        {"num-examples", "steps", "loss"} if weakened else {"num-examples", "steps"}
    )
    # both requests were ledgered as client-level releases by the node
    led = _ledger(tmp_path)
    assert len(led) == 2 and {r["unit"] for r in led} == {"client"}


# -- 7. honest threat models --------------------------------------------------------------------
def test_the_node_accounts_under_its_own_relation(tiny, tmp_path) -> None:
    from fedspectral.fed.correlation import correlation_sensitivity

    cfg = _dp_fedsc(tiny, neighbouring="zero_out")  # the server picks the weakest relation
    ctx = _ctx(tmp_path, max_epsilon=50.0, max_epsilon_total=100.0)
    _hello(cfg, ctx)
    out = APP(
        _request(
            Payload.with_weights(_weights(cfg), config={"cache_weights": False}), "share", "query"
        ),
        ctx,
    )
    rel = payload_from_recorddict(out.content).config
    (entry,) = _ledger(tmp_path)
    n = 100
    mu = cfg.method.params["mu"]
    assert entry["neighbouring"] == rel["release.neighbouring"] == "replace_one"
    assert entry["sensitivity"] == pytest.approx(correlation_sensitivity(mu, n, "replace_one"))
    assert entry["sensitivity"] > correlation_sensitivity(mu, n, "zero_out")
    assert entry["unit"] == "sample" and entry["threat"] == "any"


def test_default_node_sends_no_unprotected_weights(tiny, tmp_path) -> None:
    cfg = _dp_fedsc(tiny)
    ctx = _ctx(tmp_path)
    _hello(cfg, ctx)
    from fedspectral.fed.methods import build_method

    method = build_method(cfg)
    state = method.init_server_state(_weights(cfg), {f"client-{i}": 100 for i in range(3)})
    payload = method.configure("train", 1, state, ["client-0"])["client-0"]
    _refused(APP(_request(payload, "train", "train"), ctx), "allow-unprotected-weights: false")


def test_the_simulation_app_cannot_serve_outside_its_simulation(tiny, tmp_path) -> None:
    from fedspectral.fed.flower.apps import engine

    ctx = _ctx(tmp_path)
    ctx.run_config["simulation-token"] = "the server's guess"
    cfg = tiny("fedsc", 1)
    from fedspectral.config import to_dict

    hello = Message(
        RecordDict({"config": ConfigRecord({"json": json.dumps(to_dict(cfg))})}),
        dst_node_id=1,
        message_type="query.hello",
    )
    _refused(engine.client_app(hello, ctx), "runs only inside")


def test_manifest_table_in_docs_is_the_codes() -> None:
    from fedspectral.fed.manifest import manifest_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "flower.md").read_text()
    body = doc.split("<!-- manifest:begin -->\n", 1)[1].split("\n<!-- manifest:end -->", 1)[0]
    assert body == manifest_table()
