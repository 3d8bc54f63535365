"""The node owns its data: a hostile server chooses neither which records a node uses,
nor how a release over them is priced, nor the key of its budget, nor when a failure
speaks.

As in test_active_server.py, each attack runs against the real ClientApp in process: on a
*weakened* node (one defence monkeypatched away), where it must work, and on the real node
with its default policy, where it must fail.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from test_active_server import (
    APP,
    _ctx,
    _hello,
    _ledger,
    _oracle_weights,
    _refused,
    _request,
    _seeded_noise,
    _weights,
)

from fedspectral.fed.flower.apps import client_app as ca
from fedspectral.fed.flower.apps.records import payload_from_recorddict
from fedspectral.fed.flower.node.client_dp import CLIP_KEY, STD_KEY
from fedspectral.fed.flower.node.policy import NodeLedger, NodePolicy, PolicyRefusal
from fedspectral.fed.protocol import Payload

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def _narrow(cfg):
    """A narrow network (the tests' time goes into training and noising it)."""
    from fedspectral.config import thaw
    from fedspectral.fed.validation import validate

    cfg = thaw(cfg)  # an editable copy (a validated config is frozen)
    cfg.model.width, cfg.model.projector_hidden, cfg.model.projector_out = 4, 32, 16
    return validate(cfg)


def _train(w, clip: float = 1.0, std: float = 0.5, rnd: int = 1):
    """A FedSC/baseline train request with client-side client-level DP."""
    return _request(
        Payload.with_weights(w, config={"lr": 0.05, CLIP_KEY: clip, STD_KEY: std}),
        "train",
        "train",
        rnd,
    )


# -- 1. the train phase is total: no reply-or-failure oracle -----------------------------------
def _weaken_train_totality(monkeypatch) -> None:
    """The node before this defence: the handler's exception became the (uniform) failure."""
    monkeypatch.setattr(
        ca, "total_handler", lambda m, phase, rnd, p, rt, ref, t0: m.client_phase(phase, rnd, p, rt)
    )


@pytest.mark.parametrize("weakened", [True, False])
def test_train_phase_membership_and_binary_search_oracles(
    tiny, tmp_path, monkeypatch, weakened
) -> None:
    """z_0 = 1e38 relu(sum(h) + b) makes the local loss non-finite exactly when some view
    of the node's data has sum(h) > -b (a predicate the server chose): the train phase
    failed then, under the default policy's client-side client-level DP."""
    cfg = _narrow(tiny("fedsc", 1))
    ctx = _ctx(tmp_path, max_epsilon=1e6, max_epsilon_total=1e9)
    _seeded_noise(monkeypatch, 5)
    _hello(cfg, ctx)
    if weakened:
        _weaken_train_totality(monkeypatch)

    forms = set()

    def ask(b: float) -> bool:
        msg = APP(_train(_oracle_weights(cfg, b)), ctx)
        if msg.has_error():  # the uniform failure, as the server sees it
            _refused(msg, "", cls="DataError")
            return False
        reply = payload_from_recorddict(msg.content)
        forms.add(
            (
                tuple((k, v.shape, v.dtype.str) for k, v in reply.arrays.items()),
                tuple(sorted(reply.metrics.items())),
                tuple(sorted(reply.config)),
            )
        )
        return True

    always, never = ask(1e6), ask(-1e6)  # membership: above / below every value
    lo, hi, seen = -1e3, 1e3, []
    for _ in range(6):  # the server's search for the node's statistic
        mid = (lo + hi) / 2
        ok = ask(-mid)
        seen.append(ok)
        lo, hi = (lo, mid) if ok else (mid, hi)
    if weakened:  # the outcome is the predicate
        assert (always, never) == (False, True) and True in seen and False in seen
    else:  # every query answered whatever the data: the outcome carries nothing, and
        # a reply's form (keys, shapes, dtypes, metrics) is the same whatever happened
        assert (always, never) == (True, True) and all(seen)
    assert len(forms) == 1
    # every query, answered or not, is one ledgered client-level release
    led = _ledger(tmp_path)
    assert len(led) == 8 and {r["unit"] for r in led} == {"client"}


def test_a_zero_update_is_clipped_to_zero() -> None:
    """Flower's clipping divides by the update's norm: a zero update (a server that sends
    lr = 0, or a loss that is flat on the node's data) raised; the node's clip does not."""
    from flwr.supercore.differential_privacy import clip_inputs_inplace, compute_clip_model_update

    from fedspectral.fed.flower.node.client_dp import clip_update, privatise_update

    ref = [np.ones((3, 2))]
    with pytest.raises(ZeroDivisionError):
        compute_clip_model_update([np.ones((3, 2))], ref, 1.0)
    zero = [np.zeros((3, 2))]
    clip_update(zero, 1.0)
    assert np.array_equal(zero[0], np.zeros((3, 2)))
    big = [np.full(4, 1e300)]  # the norm overflows float64: still clipped to C
    clip_update(big, 2.0)
    assert np.linalg.norm(big[0]) == pytest.approx(2.0)
    # the same identity on a nonzero update as Flower's
    a, r = [np.arange(6.0).reshape(3, 2)], [np.ones((3, 2))]
    mine = [a[0] - r[0]]
    clip_update(mine, 1.5)
    compute_clip_model_update(a, r, 1.5)
    assert np.array_equal(r[0] + mine[0], a[0])
    # Flower's clip on a NaN norm: min(1, C / nan) = 1, the update passes unclipped
    nan = [np.array([np.nan, 50.0])]
    clip_inputs_inplace(nan, 1.0)
    assert nan[0][1] == 50.0
    nan = [np.array([np.nan, 50.0])]
    clip_update(nan, 1.0)  # the node's: nothing of it can be bounded, so nothing of it
    assert np.array_equal(nan[0], [0.0, 0.0])
    # a NaN the server put in the reference cannot open the clipping ball either
    from fedspectral.fed.protocol import ClientRuntime

    net = torch.nn.Linear(2, 1)
    sent = {"weight": np.array([[np.nan, 0.0]], np.float32), "bias": np.zeros(1, np.float32)}
    rt = ClientRuntime(
        cid="c",
        data=None,
        net=net,
        augment=None,
        generator=None,
        noise_rng=None,
        state={},
        config=None,
        device="cpu",
    )
    from fedspectral.fed.flower.node.client_dp import node_reference

    ref = node_reference(Payload.with_weights(sent), rt)
    trained = Payload.with_weights(
        {"weight": np.array([[np.nan, 80.0]], np.float32), "bias": np.array([90.0], np.float32)}
    )
    out = privatise_update(trained, ref, 1.0, 0.0, np.random.default_rng(0))
    moved = np.sqrt(sum(float(np.sum(out.arrays[f"w.{k}"].astype(float) ** 2)) for k in sent))
    assert moved <= 1.0 + 1e-6
    reply = Payload.with_weights({"x": np.ones(3, np.float32)}, metrics={"num-examples": 4.0})
    out = privatise_update(reply, {"x": np.ones(3)}, 1.0, 0.0, np.random.default_rng(0))
    assert np.array_equal(out.arrays["w.x"], np.ones(3, np.float32))


# -- 2. no stale reference, no network state across requests --------------------------------------
_LEFT_OUT = "projector.net.3.weight"


def _weaken_reference(monkeypatch) -> None:
    """The node before this defence: a tensor the server left out was clipped towards the
    node's *current* value, and the network kept its state from request to request."""
    from fedspectral.fed.flower.node import client_dp

    def own_for_missing(payload, rt):
        sent = client_dp.reference_weights(payload, rt)
        out = {}
        for k, v in rt.net.state_dict().items():
            if v.is_floating_point():
                own = v.detach().cpu().numpy().astype(np.float64)
                s = sent.get(k)
                ok = s is not None and np.shape(s) == own.shape
                out[k] = np.asarray(s, dtype=np.float64) if ok else own
        return out

    monkeypatch.setattr(client_dp, "node_reference", own_for_missing)
    monkeypatch.setattr(ca, "_fresh_net", lambda net: None)


@pytest.mark.parametrize("weakened", [True, False])
def test_stale_reference_attack(tiny, tmp_path, monkeypatch, weakened) -> None:
    """Request 1 trains on the node's data (released clipped and noised); request 2 leaves a
    tensor out: the weakened node clips towards what request 1 trained -- never released --
    and sends it back, far outside the clipping ball around anything the server knows."""
    cfg = _narrow(tiny("fedavg_byol", 1))  # BYOL loads whatever subset it is sent
    ctx = _ctx(
        tmp_path,
        methods="fedavg_byol:train",
        max_epsilon=float("inf"),  # near-noiseless requests: the leak is then plain
        max_epsilon_total=float("inf"),
    )
    _seeded_noise(monkeypatch, 7)
    _hello(cfg, ctx)
    if weakened:
        _weaken_reference(monkeypatch)
    w = _weights(cfg)
    clip1 = 1e-3  # request 1's release: the update clipped to 1e-3, barely noised
    first = payload_from_recorddict(APP(_train(w, clip=clip1, std=1e-6), ctx).content)
    assert f"w.{_LEFT_OUT}" in first.arrays
    partial = {k: v for k, v in w.items() if k != _LEFT_OUT}
    clip, std = 1e-6, 1e-6
    second = payload_from_recorddict(APP(_train(partial, clip, std, rnd=2), ctx).content)
    key = f"w.{_LEFT_OUT}"
    if weakened:
        # the reply sits on request 1's *unclipped* trained value: far from everything the
        # server knows (what it sent, what request 1 released) -- beyond both clips and
        # the noise
        got = second.arrays[key].astype(np.float64)
        known = (w[_LEFT_OUT], first.arrays[key])
        moved = min(float(np.linalg.norm(got - np.asarray(k, np.float64))) for k in known)
        allowed = clip1 + clip + 10 * 1e-6 * np.sqrt(got.size)
        assert moved > 30 * allowed
    else:
        assert key not in second.arrays  # not sent, not returned
        for k, v in second.arrays.items():  # every other tensor: within the ball + noise
            sent = partial[k[2:]].astype(np.float64)
            assert np.linalg.norm(v.astype(np.float64) - sent) < clip + 10 * std * np.sqrt(v.size)


def test_the_deployed_node_keeps_no_network_state(tiny, tmp_path, monkeypatch) -> None:
    """The same request twice to a long-lived node: the same reply (same seeded noise),
    whatever the first trained -- nothing of it survives into the second."""
    cfg = _narrow(tiny("fedavg_byol", 1))
    ctx = _ctx(tmp_path, methods="fedavg_byol:train", max_epsilon=1e9, max_epsilon_total=1e12)
    _seeded_noise(monkeypatch, 3)  # the same noise for both requests
    _hello(cfg, ctx)
    partial = {k: v for k, v in _weights(cfg).items() if k != _LEFT_OUT}
    a = payload_from_recorddict(APP(_train(partial, 0.1, 0.01), ctx).content)
    b = payload_from_recorddict(APP(_train(partial, 0.1, 0.01), ctx).content)
    assert a.arrays.keys() == b.arrays.keys()
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k


# -- 3. the ledger: keyed by the node's data, check-and-record under a lock -----------------------
def _release(i: int = 0):
    from fedspectral.privacy.accounting import Release

    return Release("client-0", "fedsc/dp-calr", 2.0, 1.0, 1, "replace_one", i)


def _policy(tmp_path, total: float) -> NodePolicy:
    return NodePolicy(ledger_dir=str(tmp_path), max_epsilon=100.0, max_epsilon_total=total)


def _allowed(total: float) -> int:
    """How many of :func:`_release` fit under ``total`` (composed as the node composes)."""
    from fedspectral.privacy.accounting import PrivacyLedger

    led, k = PrivacyLedger(unit=None), 0
    while True:
        from fedspectral.privacy.report import epsilon_with

        if epsilon_with(led.releases, _release(k), 1e-4) > total:
            return k
        led.add(_release(k))
        k += 1


def _weaken_ledger(monkeypatch) -> None:
    """The ledger before this defence: read when the request arrived, checked and
    rewritten later, without a lock (the temporary name made unique, so that only the
    race is left)."""

    def spend(self, releases, check=True):
        out = []
        for r in [r for r in releases if r is not None]:
            if check:
                out.append(self.policy.check_release(r, self))
            self.ledger.add(r)
        self._write()
        return out

    monkeypatch.setattr(NodeLedger, "spend", spend)


@pytest.mark.parametrize("weakened", [True, False])
def test_concurrent_requests_in_threads_cannot_race_the_ledger(
    tmp_path, monkeypatch, weakened
) -> None:
    total = 6.0
    fit = _allowed(total)
    assert 2 <= fit < 8
    if weakened:
        _weaken_ledger(monkeypatch)
    pol = _policy(tmp_path, total)
    barrier = threading.Barrier(8)
    results: list[bool] = []

    def request(i: int) -> None:
        ledger = NodeLedger(pol, "data")  # read as the request arrives
        barrier.wait()
        try:
            ledger.spend([_release(i)])
            results.append(True)
        except PolicyRefusal:
            results.append(False)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recorded = json.loads((tmp_path / "ledger-data.json").read_text())["releases"]
    if weakened:  # every request passed the check; the ledger lost most of them
        assert results.count(True) == 8 and len(recorded) < 8
    else:  # every release is in the ledger, and the limit held
        assert results.count(True) == fit == len(recorded)


def _spend_in_process(path: str, total: float, i: int, barrier, out) -> None:
    pol = NodePolicy(ledger_dir=path, max_epsilon=100.0, max_epsilon_total=total)
    ledger = NodeLedger(pol, "data")  # read as the request arrives
    barrier.wait()
    try:
        ledger.spend([_release(i)])
        out.put(True)
    except PolicyRefusal:
        out.put(False)


def test_concurrent_requests_in_processes_cannot_race_the_ledger(tmp_path) -> None:
    import multiprocessing as mp

    total = 6.0
    fit = _allowed(total)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(6), ctx.Queue()
    procs = [
        ctx.Process(target=_spend_in_process, args=(str(tmp_path), total, i, barrier, out))
        for i in range(6)
    ]
    for p in procs:
        p.start()
    ok = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    recorded = json.loads((tmp_path / "ledger-data.json").read_text())["releases"]
    assert ok.count(True) == min(fit, 6) == len(recorded)
    assert not list(tmp_path.glob("*.tmp"))  # no temporary file left behind


def _share(cfg):
    return _request(
        Payload.with_weights(_weights(cfg), config={"cache_weights": False}), "share", "query"
    )


def _dp_cfg(tiny, root: str | None = None):
    from fedspectral.fed.validation import validate

    cfg = tiny("fedsc", 1)
    cfg.dp.enabled, cfg.dp.epsilon = True, 4.0
    cfg.method.params.update({"neighbouring": "replace_one", "share_views": 1})
    cfg.data.root = root
    return _narrow(validate(cfg))


@pytest.mark.parametrize("weakened", [True, False])
def test_the_server_cannot_rekey_the_budget(tiny, tmp_path, monkeypatch, weakened) -> None:
    """The server sends the same data under ever new ``data.root`` paths (symlinks to one
    folder): the weakened node keyed its ledger by that path (a fresh budget each time)."""
    from fedspectral.fed.flower.node.policy import dataset_key

    if weakened:

        class Rekeyed(NodeLedger):
            def __init__(self, pol, ident, context=None, digest=None):
                js = json.loads(str(context.state.config_records[ca.CONFIG_KEY]["json"]))
                super().__init__(pol, dataset_key(ident, js["data"]["root"]), context, digest)

        monkeypatch.setattr(ca, "NodeLedger", Rekeyed)
    (tmp_path / "data").mkdir()
    ctx = _ctx(tmp_path, max_epsilon=50.0, max_epsilon_total=8.0)
    answered = 0
    for i in range(5):
        link = tmp_path / f"via-{i}"
        link.symlink_to(tmp_path / "data")
        cfg = _dp_cfg(tiny, str(link))
        _hello(cfg, ctx)
        reply = APP(_share(cfg), ctx)
        if reply.has_error():
            _refused(reply, "above max-epsilon-total")
        else:
            answered += 1
    files = sorted((tmp_path / "led").glob("ledger-*.json"))
    if weakened:
        assert answered == 5 and len(files) == 5
    else:  # one data set, one ledger: the limit holds across the server's paths
        assert 1 <= answered < 5 and len(files) == 1
        assert len(_ledger(tmp_path)) == answered


def test_the_ledger_key_is_the_declared_data_set_not_its_content(
    tiny, tmp_path, monkeypatch
) -> None:
    """Issue 48: one record changed in the node's data set keeps the ledger's key (the
    declared identity, default data-dataset) and changes only the content digest the
    ledger records; a data-id names another data set."""
    cfg = tiny("fedsc", 1)
    ctx = _ctx(tmp_path)
    ctx.node_config.clear()
    ctx.node_config.update({"partition-id": 0, "data-dataset": "digits", "data-limit": 50})
    pol = NodePolicy()

    def ident(kind=None):
        import fedspectral.data

        if kind is not None:
            monkeypatch.setattr(fedspectral.data, "load_dataset", _changed(kind, 400))
        ca._PROCESS_CACHE.clear()
        try:
            return ca._setup(cfg, "client-0", ctx, pol)[4]
        finally:
            ca._PROCESS_CACHE.clear()
            monkeypatch.undo()

    base = ident()
    for kind in ("record", "label"):  # outside the node's 50 records: the content moves
        other = ident(kind)
        assert other[0] == base[0] == "digits" and other[1] != base[1]
    ctx.node_config["data-id"] = "digits-2026"
    assert ident()[0] == "digits-2026"


def test_the_content_digest_is_the_datas_content_not_its_path(tmp_path) -> None:
    from fedspectral.fed.flower.node.data import data_identity

    x = torch.rand(5, 1, 8, 8)
    y = torch.arange(5)
    same = data_identity("digits", x.clone(), y.clone())
    assert data_identity("digits", x, y) == same
    x2 = x.clone()
    x2[3, 0, 1, 1] += 0.5
    assert data_identity("digits", x2, y) != same
    y2 = y.clone()
    y2[0] = 9
    assert data_identity("digits", x, y2) != same


# -- 4. node-owned data: the server's plan picks nothing, the price is per record ---------------
def _changed(kind: str, pos: int):
    """``fedspectral.data.load_dataset`` with one record of the train split changed."""
    from fedspectral.data import datasets

    real = datasets.load_dataset

    def load(name, split="train", root=None, download=False):
        d = real(name, split, root=root, download=download)
        if split == "train" and kind == "label":
            d.labels = d.labels.clone()
            d.labels[pos] = (int(d.labels[pos]) + 1) % d.num_classes
        elif split == "train" and kind == "record":
            d.images = d.images.clone()
            d.images[pos] = 1.0 - d.images[pos]
        return d

    return load


def _node_records(cfg, ctx, pol, monkeypatch, kind=None, pos=0):
    import fedspectral.data

    if kind is not None:
        monkeypatch.setattr(fedspectral.data, "load_dataset", _changed(kind, pos))
    ca._PROCESS_CACHE.clear()
    try:
        return ca._setup(cfg, "client-0", ctx, pol)[1]
    finally:
        ca._PROCESS_CACHE.clear()
        monkeypatch.undo()


def _R(images: torch.Tensor, mu: float) -> np.ndarray:
    """DP-CalR's noiseless output with one fixed view per record (the encoder is the
    server's choice: any per-sample map)."""
    from fedspectral.fed.correlation import dp_correlation

    g = torch.Generator().manual_seed(0)
    enc = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(images[0].numel(), 6))
    with torch.no_grad():
        enc[1].weight.copy_(torch.randn(enc[1].weight.shape, generator=g))
        enc[1].bias.zero_()
    return dp_correlation(enc, images, None, 1, mu, 0.0, None, np.random.default_rng(0))


_PLANS = [
    {},
    {"data-limit": 300},
    {"data-shard": "1/3"},
    {"data-limit": 500, "data-shard": "2/4"},
]


@pytest.mark.parametrize("plan", _PLANS, ids=lambda p: ",".join(map(str, p.values())) or "all")
def test_priced_sensitivity_holds_for_every_plan_the_node_accepts(
    tiny, tmp_path, monkeypatch, plan
) -> None:
    """For a label change and a record change of one record of the node's data set, the
    node's records change in at most that record, |D_j| stays, and DP-CalR moves by at
    most the sensitivity the node prices (replace-one, sqrt(2) mu / n)."""
    from fedspectral.fed.correlation import correlation_sensitivity
    from fedspectral.fed.flower.node.data import NodeData

    cfg = tiny("fedsc", 1)
    cfg.partition.scheme, cfg.partition.dirichlet_alpha = "dirichlet", 0.5  # ignored
    nc = {"partition-id": 0, "data-dataset": "digits", **plan}
    ctx = _ctx(tmp_path)
    ctx.node_config.clear()
    ctx.node_config.update(nc)
    pol = NodePolicy()
    base = _node_records(cfg, ctx, pol, monkeypatch)
    pos = int(NodeData.from_node_config(nc).positions(1343)[7])  # one of the node's records
    mu = 1.0
    priced = correlation_sensitivity(mu, len(base), "replace_one")
    r0 = _R(base.images, mu)
    for kind in ("label", "record"):
        other = _node_records(cfg, ctx, pol, monkeypatch, kind, pos)
        assert len(other) == len(base)
        differ = int((other.images != base.images).flatten(1).any(1).sum()) + int(
            (other.labels != base.labels).sum()
        )
        assert differ == 1  # exactly the changed record
        measured = float(np.linalg.norm(_R(other.images, mu) - r0))
        assert measured <= priced * (1 + 1e-6)
        assert (measured > 0) == (kind == "record")  # labels do not enter DP-CalR
    assert pos < 1343


@pytest.mark.parametrize("weakened", [True, False])
def test_the_servers_dirichlet_plan_cannot_move_the_nodes_records(
    tiny, tmp_path, monkeypatch, weakened
) -> None:
    """Under the server's Dirichlet plan one record's label change moves many records in or
    out of the node's partition: DP-CalR moves far beyond the priced sensitivity.  The
    weakened node honours the server's plan (a simulation node's policy); the real node
    keeps its own records."""
    from fedspectral.fed.correlation import correlation_sensitivity

    cfg = tiny("fedsc", 1)
    cfg.data.max_train = None
    cfg.partition.scheme, cfg.partition.dirichlet_alpha = "dirichlet", 0.5
    ctx = _ctx(tmp_path)
    ctx.node_config.update({"data-limit": 1343, "data-shard": "0/3"})
    pol = NodePolicy(simulation=weakened)
    base = _node_records(cfg, ctx, pol, monkeypatch)
    mu = 1.0
    priced = correlation_sensitivity(mu, len(base), "replace_one")
    worst, moved = 0.0, 0
    r0 = _R(base.images, mu)
    for pos in (3, 500, 1000):
        other = _node_records(cfg, ctx, pol, monkeypatch, "label", pos)
        if len(other) == len(base):
            moved = max(moved, int((other.images != base.images).flatten(1).any(1).sum()))
        else:  # records left or joined the node's partition
            moved = max(moved, abs(len(other) - len(base)))
        # DP-CalR's move against the price at the smaller of the two sizes
        price = correlation_sensitivity(mu, min(len(other), len(base)), "replace_one")
        worst = max(worst, float(np.linalg.norm(_R(other.images, mu) - r0)) / price * priced)
    if weakened:  # the price the node ledgered does not hold
        assert worst > 3 * priced, (worst / priced, moved)
    else:
        assert worst == 0.0 and moved == 0  # a label does not move the node's records


def test_a_deployed_node_without_its_own_data_refuses(tiny, tmp_path) -> None:
    """No ``data-dataset`` in the node config: refused before any data is read (the node
    never falls back to the server's data set, root or plan); a model for other images is
    refused too."""
    cfg = _dp_cfg(tiny)
    ctx = _ctx(tmp_path)
    for k in ("data-dataset", "data-limit", "data-shard"):
        del ctx.node_config[k]
    _hello(cfg, ctx)
    _refused(APP(_share(cfg), ctx), "data set is not configured")
    ctx.node_config["data-shard"] = "0/3"  # a part of no named data set
    with pytest.raises(ValueError, match="no data-dataset"):
        APP(_share(cfg), ctx)
    ctx.node_config["data-dataset"] = "fashion_mnist"  # 28x28 images, the model is 8x8's
    _refused(APP(_share(cfg), ctx), "model is for 'digits' images")
    assert ca._PROCESS_CACHE.get("clients", {}) == {} and _ledger(tmp_path) == []


def test_concurrent_requests_through_the_client_app_are_all_ledgered(tiny, tmp_path) -> None:
    """8 share requests at once to one node (threads of one process, as a node runtime
    serving concurrent messages): each release that went ahead is in the ledger, and no
    more went ahead than its limit allows."""
    cfg = _dp_cfg(tiny)
    ctx = _ctx(tmp_path, max_epsilon=50.0, max_epsilon_total=12.0)
    _hello(cfg, ctx)
    APP(_share(cfg), ctx)  # the data loaded once, as a long-lived node has it
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def request() -> None:
        barrier.wait()
        reply = APP(_share(cfg), ctx)  # what the server sees: a reply or an error reply
        if not reply.has_error():
            outcomes.append("answered")
        elif reply.error.reason.startswith("PolicyRefusal: "):
            outcomes.append("refused")
        else:
            outcomes.append("failed")

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent = 1 + outcomes.count("answered") + outcomes.count("failed")
    assert len(_ledger(tmp_path)) == spent
    assert 1 <= outcomes.count("refused") < 8  # the limit held, some went ahead
    _refused(APP(_share(cfg), ctx), "above max-epsilon-total")
    assert len(_ledger(tmp_path)) == spent  # the refusal charged nothing


@pytest.mark.parametrize(
    ("clip", "std", "match"),
    [("big", 0.5, "request client-dp.clip"), (1.0, -1.0, "request client-dp.std")],
)
def test_a_bad_client_dp_request_is_named_before_any_data(tiny, tmp_path, clip, std, match):
    """A server's malformed clip or noise share: a clear error naming the request key,
    before the node reads its data or spends budget (not the uniform failure)."""
    cfg = _narrow(tiny("fedsc", 1))
    ctx = _ctx(tmp_path)
    _hello(cfg, ctx)
    with pytest.raises((TypeError, ValueError), match=match):
        APP(_train(_weights(cfg), clip=clip, std=std), ctx)
    assert ca._PROCESS_CACHE.get("clients", {}) == {} and _ledger(tmp_path) == []


def test_a_secure_nodes_ledger_records_the_values_each_release_draws(tiny, tmp_path) -> None:
    """The node's own secure source (no noise seed): its DP-CalR reply draws the packed
    d x d matrix, d(d+1)/2 values, and its client-level DP reply one value per
    floating-point weight; the ledger records both counts, so the sampler's total variation
    (count * values * 2**-80) enters every ε it reports."""
    from fedspectral.privacy import PrivacyLedger
    from fedspectral.privacy.discrete_gaussian import MECHANISM, TV_PER_VALUE

    cfg = _dp_cfg(tiny)
    ctx = _ctx(tmp_path, max_epsilon=1e6, max_epsilon_total=1e9)
    _hello(cfg, ctx)
    APP(_share(cfg), ctx)
    APP(_train(_weights(cfg)), ctx)
    share, train = _ledger(tmp_path)
    d = cfg.model.projector_out
    floats = sum(a.size for a in _weights(cfg).values() if np.issubdtype(a.dtype, np.floating))
    assert (share["noise"], share["values"]) == (MECHANISM, d * (d + 1) // 2)
    assert (train["noise"], train["values"], train["unit"]) == (MECHANISM, floats, "client")
    led = PrivacyLedger.from_dict({"unit": None, "releases": [share, train]})
    assert [r.sampler_tv for r in led.releases] == [
        d * (d + 1) // 2 * TV_PER_VALUE,
        floats * TV_PER_VALUE,
    ]
