"""The baselines (FedAvg+BYOL, FedU, FedEMA, FedX, FedCA).

Part 1: each defining rule in isolation, against direct formulas on hand-made data
(references written out element by element in numpy, not by calling the code under
test).  Part 2: the methods -- the rules wired into the client handlers, tiny
end-to-end runs through the in-process runner, resume, and option checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from faults import StopAfter, weights_equal  # tests/faults.py
from fedspectral.config import ExperimentConfig
from fedspectral.data import load_dataset
from fedspectral.data.augment import SimCLRAugment
from fedspectral.fed.losses import (
    byol_symmetric_loss,
    nt_xent,
    nt_xent_with_negatives,
    relational_js_loss,
)
from fedspectral.fed.methods import method_class
from fedspectral.fed.methods.baseline import (
    ema_update_,
    encoder_part,
    model_divergence,
    part,
    select_layers,
)
from fedspectral.fed.methods.fedca import alignment_loss, dictionary_ema
from fedspectral.fed.methods.fedema import ema_mix, fedema_autoscaler, fedema_mu
from fedspectral.fed.methods.fedu import fedu_update_predictor
from fedspectral.fed.methods.fedx import fedx_loss
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState, client_generators
from fedspectral.fed.simulation import Simulation
from fedspectral.fed.validation import validate
from fedspectral.fed.weights import mean_arrays, net_to_arrays

RTOL = 1e-10


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def _normalize_rows(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max())
    return e / e.sum()


def _ref_nt_xent(z1: np.ndarray, z2: np.ndarray, t: float, neg: np.ndarray | None = None) -> float:
    """-log(exp(s_pos) / (sum_{b != a} exp(s_ab) + sum_k exp(s_ak))), averaged over 2B rows."""
    u = _normalize_rows(np.vstack([z1, z2]))
    n = None if neg is None else _normalize_rows(neg)
    b = z1.shape[0]
    total = 0.0
    for a in range(2 * b):
        pos = (a + b) % (2 * b)
        den = sum(math.exp(u[a] @ u[c] / t) for c in range(2 * b) if c != a)
        if n is not None:
            den += sum(math.exp(u[a] @ n[k] / t) for k in range(n.shape[0]))
        total += -math.log(math.exp(u[a] @ u[pos] / t) / den)
    return total / (2 * b)


def _ref_relational(x1, x2, anchors, t, t2=None, form="js") -> float:
    x1, x2, a = _normalize_rows(x1), _normalize_rows(x2), _normalize_rows(anchors)
    t2 = t if t2 is None else t2
    out = 0.0
    for i in range(x1.shape[0]):
        s1 = np.array([x1[i] @ a[k] for k in range(a.shape[0])])
        s2 = np.array([x2[i] @ a[k] for k in range(a.shape[0])])
        p1, p2 = _softmax(s1 / t), _softmax(s2 / t)
        if form == "js":
            m = (p1 + p2) / 2
            out += 0.5 * np.sum(p1 * np.log(p1 / m)) + 0.5 * np.sum(p2 * np.log(p2 / m))
        else:
            m = (_softmax(s1 / t2) + _softmax(s2 / t2)) / 2
            out += 0.5 * np.sum(m * np.log(m / p1)) + 0.5 * np.sum(m * np.log(m / p2))
    return out / x1.shape[0]


# ---------------------------------------------------------------------------
# EMA rules (BYOL target, FedEMA mixing) and FedAvg
# ---------------------------------------------------------------------------
def _small_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()


def test_ema_update_matches_formula_and_copies_integer_buffers():
    target, online = _small_net(0), _small_net(1)
    online.train()
    online(torch.randn(8, 3, dtype=torch.float64))  # move BN stats, num_batches_tracked = 1
    before_t = {k: v.clone() for k, v in target.state_dict().items()}
    before_o = {k: v.clone() for k, v in online.state_dict().items()}
    ema_update_(target, online, momentum=0.99)
    after = target.state_dict()
    for k, v in after.items():
        if v.is_floating_point():
            expect = 0.99 * before_t[k] + 0.01 * before_o[k]
            torch.testing.assert_close(v, expect, rtol=RTOL, atol=0)
        else:
            assert int(v) == int(before_o[k]) == 1
    # online unchanged, and the extremes: m = 1 freezes, m = 0 copies
    for k, v in online.state_dict().items():
        assert torch.equal(v, before_o[k])
    frozen = {k: v.clone() for k, v in target.state_dict().items()}
    ema_update_(target, online, momentum=1.0)
    assert all(torch.equal(v, frozen[k]) for k, v in target.state_dict().items())
    ema_update_(target, online, momentum=0.0)
    assert all(torch.equal(v, before_o[k]) for k, v in target.state_dict().items())


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_ema_update_rejects_bad_momentum(bad):
    with pytest.raises(ValueError, match="momentum"):
        ema_update_(_small_net(0), _small_net(1), momentum=bad)
    with pytest.raises(TypeError, match="momentum"):
        ema_update_(_small_net(0), _small_net(1), momentum="0.9")


def test_ema_mix_direction_is_local_weighted_by_mu_numpy_and_torch():
    local = {"w": np.ones((2, 3)), "n": np.array(7)}
    glob = {"w": np.zeros((2, 3)), "n": np.array(9)}
    out = ema_mix(local, glob, 0.7)
    np.testing.assert_allclose(out["w"], 0.7 * np.ones((2, 3)), rtol=RTOL)
    assert out["n"] == 9  # integer entries from `new`
    assert np.all(local["w"] == 1) and np.all(glob["w"] == 0)  # inputs untouched
    r = _rng(1)
    a, b = r.normal(size=(4, 5)), r.normal(size=(4, 5))
    out_t = ema_mix({"w": _t(a)}, {"w": _t(b)}, 0.25)
    np.testing.assert_allclose(out_t["w"].numpy(), 0.25 * a + 0.75 * b, rtol=RTOL)
    with pytest.raises(ValueError, match="different names"):
        ema_mix({"w": a}, {"v": b}, 0.5)
    with pytest.raises(ValueError, match="shapes differ"):
        ema_mix({"w": a}, {"w": b.T}, 0.5)


def test_baselines_average_is_data_size_weighted_fedavg():
    # BaselineMethod.aggregate averages with weights.mean_arrays weighted by |D_j|
    r = _rng(2)
    states = [
        {"w": r.normal(size=(3, 2)).astype(np.float32), "k": np.array(2 * i)} for i in range(3)
    ]
    sizes = [100, 300, 600]
    out = mean_arrays(states, sizes)
    expect = sum(n * s["w"].astype(np.float64) for n, s in zip(sizes, states, strict=True)) / 1000
    np.testing.assert_allclose(out["w"], expect, rtol=1e-6)
    # integer entries: the weighted mean 0.1 * 0 + 0.3 * 2 + 0.6 * 4 = 3, kept an integer
    assert out["w"].dtype == np.float32 and out["k"] == 3 and out["k"].dtype == states[0]["k"].dtype
    with pytest.raises(ValueError, match="weights"):
        mean_arrays(states, [0, 0, 0])
    with pytest.raises(ValueError, match="weights must be 3"):
        mean_arrays(states, [1, 2])


# ---------------------------------------------------------------------------
# BYOL loss
# ---------------------------------------------------------------------------
def test_byol_symmetric_loss_matches_formula_and_target_gets_no_gradient():
    torch.manual_seed(0)
    online = nn.Linear(4, 3, bias=False).double()
    pred = nn.Linear(3, 3, bias=False).double()
    target = nn.Linear(4, 3, bias=False).double()
    r = _rng(3)
    x1, x2 = r.normal(size=(5, 4)), r.normal(size=(5, 4))
    loss = byol_symmetric_loss(online, pred, target, _t(x1), _t(x2))
    wo = online.weight.detach().numpy()
    wp = pred.weight.detach().numpy()
    wt = target.weight.detach().numpy()

    def ell(p, z):
        return np.mean(
            [
                2 - 2 * (p[i] @ z[i]) / np.linalg.norm(p[i]) / np.linalg.norm(z[i])
                for i in range(p.shape[0])
            ]
        )

    p1, p2 = x1 @ wo.T @ wp.T, x2 @ wo.T @ wp.T
    z1, z2 = x1 @ wt.T, x2 @ wt.T
    assert loss.item() == pytest.approx(ell(p1, z2) + ell(p2, z1), rel=1e-12)
    loss.backward()
    assert online.weight.grad is not None and pred.weight.grad is not None
    assert target.weight.grad is None
    # identical online∘predictor and target on identical views: the loss is 0
    ident = nn.Identity()
    x = _t(r.normal(size=(4, 3)))
    assert byol_symmetric_loss(ident, ident, ident, x, x).item() == pytest.approx(0, abs=1e-12)


# ---------------------------------------------------------------------------
# FedU: divergence and gate
# ---------------------------------------------------------------------------
def _conv_state(delta1: float, delta2: float) -> tuple[dict, dict]:
    old = {
        "conv1.weight": np.zeros((2, 1, 3, 3)),
        "conv1.bias": np.zeros(2),
        "bn.weight": np.ones(2),
        "bn.num_batches_tracked": np.array(3),
        "conv2.weight": np.zeros((2, 2, 1, 1)),
        "fc.weight": np.zeros((4, 2)),
    }
    new = {k: np.array(v, copy=True) for k, v in old.items()}
    new["conv1.weight"] += delta1  # 18 entries
    new["conv2.weight"][0, 0, 0, 0] = delta2  # 1 entry
    new["fc.weight"] += 5.0  # ignored for layers="conv"
    new["conv1.bias"] += 9.0  # ignored
    return old, new


def test_divergence_mean_of_per_layer_l2_over_conv_weights():
    old, new = _conv_state(0.1, 3.0)
    d = model_divergence(old, new)  # layer_mean over conv weights
    expect = (0.1 * math.sqrt(18) + 3.0) / 2
    assert d == pytest.approx(expect, rel=1e-12)
    assert select_layers(new, "conv") == ["conv1.weight", "conv2.weight"]
    d_glob = model_divergence(old, new, reduction="global")
    assert d_glob == pytest.approx(math.sqrt(0.01 * 18 + 9.0), rel=1e-12)
    d_w = model_divergence(old, new, layers="weights")
    assert d_w == pytest.approx((0.1 * math.sqrt(18) + 3.0 + 5.0 * math.sqrt(8)) / 3, rel=1e-12)
    assert model_divergence(old, old) == 0.0
    # torch state dicts give the same number
    d_t = model_divergence(
        {k: torch.as_tensor(v) for k, v in old.items()},
        {k: torch.as_tensor(v) for k, v in new.items()},
    )
    assert d_t == pytest.approx(expect, rel=1e-12)


def test_divergence_rejects_networks_without_selected_layers_and_bad_options():
    mlp = {"fc.weight": np.zeros((2, 2))}
    with pytest.raises(ValueError, match="no layers of kind 'conv'"):
        model_divergence(mlp, mlp)
    with pytest.raises(ValueError, match="layers"):
        model_divergence(mlp, mlp, layers="dense")
    with pytest.raises(ValueError, match="reduction"):
        model_divergence(mlp, mlp, layers="weights", reduction="max")


def test_fedu_gate_is_strictly_below_threshold():
    assert fedu_update_predictor(0.0)
    assert fedu_update_predictor(0.399)
    assert not fedu_update_predictor(0.4)
    assert not fedu_update_predictor(2.0)
    assert fedu_update_predictor(0.5, threshold=0.6)
    old, new = _conv_state(0.01, 0.1)  # d = (0.01*sqrt(18) + 0.1)/2 ~ 0.071
    assert fedu_update_predictor(model_divergence(old, new))
    old, new = _conv_state(0.5, 1.0)  # d ~ 1.56
    assert not fedu_update_predictor(model_divergence(old, new))
    with pytest.raises(ValueError, match="divergence"):
        fedu_update_predictor(-1.0)
    with pytest.raises(ValueError, match="threshold"):
        fedu_update_predictor(0.1, threshold=0.0)


# ---------------------------------------------------------------------------
# FedEMA: mu and the autoscaler
# ---------------------------------------------------------------------------
def test_fedema_autoscaler_makes_first_mu_equal_tau_and_mu_is_clipped():
    d0 = 0.37
    lam = fedema_autoscaler(0.7, d0)
    assert lam == pytest.approx(0.7 / 0.37, rel=1e-15)
    assert fedema_mu(lam, d0) == pytest.approx(0.7, rel=1e-15)
    assert fedema_mu(lam, 0.5 * d0) == pytest.approx(0.35, rel=1e-14)
    assert fedema_mu(lam, 10 * d0) == 1.0  # min(1, .)
    assert fedema_mu(lam, 0.0) == 0.0
    with pytest.raises(ValueError, match="divergence > 0"):
        fedema_autoscaler(0.7, 0.0)
    with pytest.raises(ValueError, match="tau"):
        fedema_autoscaler(1.5, 0.3)
    with pytest.raises(ValueError, match="scaler"):
        fedema_mu(-1.0, 0.3)


def test_fedema_update_keeps_mu_of_local_model():
    """online <- mu * local + (1 - mu) * global, the paper's direction."""
    r = _rng(4)
    local, glob = {"w": r.normal(size=(3, 3))}, {"w": r.normal(size=(3, 3))}
    lam = fedema_autoscaler(0.8, 2.0)
    mu = fedema_mu(lam, 1.0)  # = 0.4
    out = ema_mix(local, glob, mu)
    np.testing.assert_allclose(out["w"], 0.4 * local["w"] + 0.6 * glob["w"], rtol=RTOL)


# ---------------------------------------------------------------------------
# FedX
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("form,t2", [("js", None), ("fedx_code", None), ("fedx_code", 0.05)])
def test_relational_loss_matches_direct_formula(form, t2):
    r = _rng(5)
    x1, x2, a = r.normal(size=(6, 4)), r.normal(size=(6, 4)), r.normal(size=(9, 4))
    got = relational_js_loss(_t(x1), _t(x2), _t(a), 0.1, t2, form=form).item()
    assert got == pytest.approx(_ref_relational(x1, x2, a, 0.1, t2, form), rel=1e-10)


def test_relational_js_properties():
    r = _rng(6)
    x1, x2, a = r.normal(size=(5, 3)), r.normal(size=(5, 3)), r.normal(size=(7, 3))
    same = relational_js_loss(_t(x1), _t(x1), _t(a)).item()
    assert same == pytest.approx(0.0, abs=1e-12)
    l12 = relational_js_loss(_t(x1), _t(x2), _t(a)).item()
    l21 = relational_js_loss(_t(x2), _t(x1), _t(a)).item()
    assert l12 == pytest.approx(l21, rel=1e-12)
    assert 0 < l12 <= math.log(2)
    with pytest.raises(ValueError, match="form"):
        relational_js_loss(_t(x1), _t(x2), _t(a), form="kl")
    with pytest.raises(ValueError, match="columns"):
        relational_js_loss(_t(x1), _t(x2), _t(r.normal(size=(7, 2))))


def test_fedx_loss_is_the_four_terms_and_global_model_gets_no_gradient():
    r = _rng(7)
    z1, z2, p1, p2, g2 = (r.normal(size=(4, 3)) for _ in range(5))
    za, ga = r.normal(size=(6, 3)), r.normal(size=(6, 3))
    tz1, tg2, tga = _t(z1, True), _t(g2, True), _t(ga, True)
    loss = fedx_loss(tz1, _t(z2), _t(p1), _t(p2), _t(za), tg2, tga, 0.1, 0.1)
    expect = (
        _ref_nt_xent(z1, z2, 0.1)
        + _ref_relational(z1, z2, za, 0.1)
        + _ref_nt_xent(p1, g2, 0.1)
        + _ref_relational(p1, p2, ga, 0.1)
    )
    assert loss.item() == pytest.approx(expect, rel=1e-10)
    loss.backward()
    assert tz1.grad is not None and tz1.grad.abs().sum() > 0
    assert tg2.grad is None and tga.grad is None  # the global model is frozen


# ---------------------------------------------------------------------------
# FedCA
# ---------------------------------------------------------------------------
def test_nt_xent_with_dictionary_negatives_matches_formula():
    r = _rng(8)
    z1, z2, neg = r.normal(size=(4, 3)), r.normal(size=(4, 3)), r.normal(size=(5, 3))
    tneg = _t(neg, True)
    loss = nt_xent_with_negatives(_t(z1, True), _t(z2), tneg, 0.1)
    assert loss.item() == pytest.approx(_ref_nt_xent(z1, z2, 0.1, neg), rel=1e-10)
    loss.backward()
    assert tneg.grad is None  # the dictionary is a constant
    # no negatives: exactly NT-Xent; more negatives: a larger loss
    base = nt_xent_with_negatives(_t(z1), _t(z2), None, 0.1).item()
    assert base == pytest.approx(nt_xent(_t(z1), _t(z2), 0.1).item(), rel=1e-12)
    assert base == pytest.approx(_ref_nt_xent(z1, z2, 0.1), rel=1e-10)
    assert nt_xent_with_negatives(_t(z1), _t(z2), _t(np.zeros((0, 3))), 0.1).item() == base
    assert loss.item() > base


def test_dictionary_ema_update():
    r = _rng(9)
    new1 = r.normal(size=(5, 3))
    d1 = dictionary_ema(None, new1)
    np.testing.assert_allclose(d1, _normalize_rows(new1), rtol=1e-6)
    new2 = r.normal(size=(5, 3))
    d2 = dictionary_ema(d1, new2, decay=0.5)
    expect = 0.5 * d1.astype(np.float64) + 0.5 * _normalize_rows(new2)
    np.testing.assert_allclose(d2, expect, rtol=1e-6)
    assert d2.dtype == np.float32
    d3 = dictionary_ema(d1, new2, decay=1.0)
    np.testing.assert_array_equal(d3, d1)
    with pytest.raises(ValueError, match="same shape"):
        dictionary_ema(d1, new2[:4])
    with pytest.raises(ValueError, match="decay"):
        dictionary_ema(d1, new2, decay=2.0)


def test_alignment_loss():
    r = _rng(10)
    a, b = r.normal(size=(6, 4)), r.normal(size=(6, 4))
    got = alignment_loss(_t(a), _t(b)).item()
    expect = np.mean(np.sum((_normalize_rows(a) - _normalize_rows(b)) ** 2, axis=1))
    assert got == pytest.approx(expect, rel=1e-12)
    assert alignment_loss(_t(a), _t(3.0 * a)).item() == pytest.approx(0.0, abs=1e-12)


# ===========================================================================
# The methods: wiring of the rules, end-to-end smoke runs, resume, option checks
# ===========================================================================

BASELINES = ("fedavg_byol", "fedu", "fedema", "fedx", "fedca")


def _tiny_cfg(name: str, rounds: int = 2, **params) -> ExperimentConfig:
    cfg = ExperimentConfig()
    cfg.name = f"tiny_{name}"
    cfg.data.dataset = "digits"
    cfg.partition.num_clients = 3
    cfg.partition.classes_per_client = 2
    cfg.model.kwargs = {"width": 8}
    cfg.model.projector_hidden = 32
    cfg.model.projector_out = 16
    cfg.method.name = name
    cfg.method.rounds = rounds
    cfg.method.params = dict(params)
    cfg.optim.batch_size = 64
    cfg.eval.every = rounds
    cfg.eval.test_size = 100
    cfg.eval.knn_k = 10
    cfg.run.progress = False
    cfg.run.threads = 1
    return cfg


def _runtime(method, cid: str = "c0", n: int = 48, rnd: int = 1) -> ClientRuntime:
    torch.manual_seed(0)
    data = load_dataset("digits", "train").subset(np.arange(n))
    g, rng = client_generators(0, rnd, cid, "train")
    return ClientRuntime(
        cid=cid,
        data=data,
        net=method.build_net(),
        augment=SimCLRAugment(8, color=False),
        generator=g,
        noise_rng=rng,
        state={},
        config=method.config,
    )


def _shifted(weights: dict, delta: float) -> dict:
    return {
        k: (v + delta).astype(v.dtype) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in weights.items()
    }


@pytest.mark.filterwarnings("ignore:partition_by_class")
@pytest.mark.parametrize("name", BASELINES)
def test_each_baseline_trains_two_rounds_with_finite_loss(name):
    sim = Simulation(_tiny_cfg(name))
    res = sim.run()
    recs = res["records"]
    assert len(recs) == 2
    for rec in recs:
        m = rec["phases"]["train"]["metrics"]
        assert m["clients"] == 3 and math.isfinite(m["train_loss"])
        assert rec["bytes_up_total"] > 0 and rec["bytes_down_total"] > 0
    assert 0.0 <= recs[-1]["knn_projector"] <= 1.0
    w = sim.state.server.weights
    enc = encoder_part(w, ["predictor.", "target.", "frozen."])
    n_enc = sum(v.nbytes for v in enc.values())
    n_pred = sum(v.nbytes for v in part(w, "predictor.").values())
    n_tgt = sum(v.nbytes for v in part(w, "target.").values())
    up = recs[1]["bytes_up"]
    # communication counted honestly: exactly the parts each method sends back
    expected_up = {
        "fedavg_byol": n_enc + n_pred + n_tgt,
        "fedu": n_enc + n_pred,
        "fedema": n_enc + n_pred + n_tgt,
        "fedx": n_enc + n_pred,
    }
    if name in expected_up:
        assert set(up.values()) == {expected_up[name]}
    else:  # fedca: weights + the client's dictionary (one float32 row per sample)
        for cid, b in up.items():
            assert b == n_enc + len(sim.fed.clients[cid]) * 16 * 4
        # round 2: each client receives the other two clients' dictionaries
        down = recs[1]["bytes_down"]
        total_rows = sum(len(v) for v in sim.fed.clients.values())
        for cid, b in down.items():
            assert b == n_enc + (total_rows - len(sim.fed.clients[cid])) * 16 * 4
        # round 1: no dictionary yet, but the public split and its base representations
        pub = sim.fed.public
        p_bytes = pub.images.numel() * 4 + len(pub) * 16 * 4
        assert set(recs[0]["bytes_down"].values()) == {n_enc + p_bytes}
    if name == "fedema":  # target sent only at a client's first participation
        assert set(recs[0]["bytes_down"].values()) == {n_enc + n_pred + n_tgt}
        assert set(recs[1]["bytes_down"].values()) == {n_enc + n_pred}
        assert recs[1]["phases"]["train"]["metrics"]["mu"] == pytest.approx(0.7, rel=1e-9)


@pytest.mark.filterwarnings("ignore:partition_by_class")
@pytest.mark.parametrize("name", ["fedema", "fedca"])
def test_resume_restores_per_client_state(name, tmp_path):
    """Interrupted after round 2 and resumed == uninterrupted, bit for bit: the local
    targets/predictors/online encoders/scalers (FedEMA) and dictionaries (FedCA) are in
    the checkpoint."""
    cfg = _tiny_cfg(name, rounds=3)
    full = Simulation(cfg)
    full.run()
    a = Simulation(cfg, out_dir=tmp_path, callbacks=[StopAfter(2)])
    a.run()
    b = Simulation(cfg, out_dir=tmp_path)
    b.run(resume=True)
    assert weights_equal(full.state.server.weights, b.state.server.weights)
    assert weights_equal(full.state.server.arrays, b.state.server.arrays)


def test_fedu_predictor_gate_in_the_client():
    method = method_class("fedu")(validate(_tiny_cfg("fedu")))
    rt = _runtime(method)
    glob = net_to_arrays(rt.net)
    glob = {k: v for k, v in glob.items() if not k.startswith("target.")}
    local_pred = _shifted(part(glob, "predictor."), 0.5)
    for d_prev, expect_global in ((0.39, True), (0.41, False)):
        rt.state = {f"local.{k}": v for k, v in local_pred.items()}
        rt.state["fedu.divergence"] = np.array(d_prev)
        rep = method.client_phase("train", 2, Payload.with_weights(glob, config={"lr": 0.0}), rt)
        assert rep.metrics["predictor_updated"] == float(expect_global)
        sent = part(rep.weights(), "predictor.")
        ref = part(glob, "predictor.") if expect_global else local_pred
        # lr = 0: the predictor sent back is the one the gate chose
        assert all(np.array_equal(sent[k], ref[k]) for k in ref)
        # the online encoder always starts from the global one
        enc_sent = encoder_part(rep.weights(), ["predictor."])
        assert all(np.array_equal(enc_sent[k], glob[k]) for k in enc_sent)
        # and the divergence of this (lr = 0) training is 0, kept for the next round
        assert float(rt.state["fedu.divergence"]) == 0.0


def test_fedema_client_mixes_local_and_global_with_mu_equal_tau_first():
    method = method_class("fedema")(validate(_tiny_cfg("fedema", tau=0.6)))
    rt = _runtime(method)
    full = net_to_arrays(rt.net)
    glob = {k: v for k, v in full.items() if not k.startswith("target.")}
    enc_g = encoder_part(glob, ["predictor."])
    local = _shifted(glob, 0.01)
    rt.state = {
        **{f"local.online.{k}": v for k, v in encoder_part(local, ["predictor."]).items()},
        **{f"local.{k}": v for k, v in part(local, "predictor.").items()},
        **{f"local.{k}": v for k, v in part(full, "target.").items()},
    }
    rep = method.client_phase("train", 2, Payload.with_weights(glob, config={"lr": 0.0}), rt)
    assert rep.metrics["mu"] == pytest.approx(0.6, rel=1e-12)  # autoscaler: first mu = tau
    lam = float(rt.state["fedema.scaler"])
    assert lam == pytest.approx(0.6 / rep.metrics["divergence"], rel=1e-12)
    sent = rep.weights()
    for k in list(enc_g)[:6] + list(part(glob, "predictor."))[:4]:
        if np.issubdtype(glob[k].dtype, np.floating):
            np.testing.assert_allclose(
                sent[k], 0.6 * local[k] + 0.4 * glob[k], rtol=1e-5, atol=1e-7
            )


def test_fedca_uses_other_clients_dictionaries_as_negatives():
    method = method_class("fedca")(validate(_tiny_cfg("fedca", dict_size=10, align_weight=0.0)))
    st = ServerState(weights={}, clients=["a", "b", "c"])
    st.arrays = {"dict.a": np.zeros((2, 4), np.float32), "dict.b": np.ones((3, 4), np.float32)}
    assert method.extra_down(1, st, "a")["dictionary"].shape == (3, 4)
    assert method.extra_down(1, st, "c")["dictionary"].shape == (5, 4)
    rt = _runtime(method)
    glob = net_to_arrays(rt.net)
    rep = method.client_phase("train", 1, Payload.with_weights(glob, config={"lr": 0.01}), rt)
    assert rep.arrays["dictionary"].shape == (10, 16)
    np.testing.assert_allclose(np.linalg.norm(rep.arrays["dictionary"], axis=1), 1.0, rtol=1e-5)
    first = rt.state["fedca.dict"].copy()
    rep2 = method.client_phase("train", 2, Payload.with_weights(glob, config={"lr": 0.01}), rt)
    assert rep2.metrics["negatives"] == 0.0
    # second update is an EMA (decay 0.5) with the first: no longer unit rows in general
    assert not np.allclose(rt.state["fedca.dict"], first)


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("fedsc", {"ema": 0.99}, "has no parameter"),
        ("fedavg_byol", {"threshold": 0.4}, "has no parameter"),
        ("fedu", {"tau": 0.7}, "has no parameter"),
        ("fedema", {"tau": 0.0}, "tau"),
        ("fedema", {"divergence_reduction": "max"}, "divergence_reduction"),
        ("fedx", {"relational_form": "kl"}, "relational_form"),
        ("fedca", {"dict_size": 0}, "dict_size"),
        ("fedca", {"align_weight": -1.0}, "align_weight"),
        ("fedca", {"public_size": 0}, "public_size"),
        ("fedca", {"base_epochs": 1.5}, "base_epochs"),
        ("fedu", {"threshold": "0.4"}, "threshold"),
    ],
)
def test_method_specific_options_are_rejected_with_a_clear_message(name, params, match):
    with pytest.raises(ValueError, match=match):
        validate(_tiny_cfg(name, **params))


def test_incompatible_experiment_options_are_rejected():
    cfg = _tiny_cfg("fedavg_byol")
    cfg.method.views = 2
    with pytest.raises(ValueError, match="method.views"):
        validate(cfg)
    cfg = _tiny_cfg("fedema")
    cfg.dp.enabled, cfg.dp.sigma = True, 0.1
    with pytest.raises(ValueError, match="dp.enabled"):
        validate(cfg)


# ---------------------------------------------------------------------------
# FedCA's alignment module: the public split, the base model, the alignment term
# ---------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_fedca_public_split_is_held_out_and_leaves_the_clients_data_unchanged():
    from fedspectral.fed.federation import prepare_federation

    def fed_of(name, **params):
        cfg = _tiny_cfg(name, **params)
        cfg.data.max_train = 600  # digits has more: the public split comes from outside
        cfg = validate(cfg)
        return prepare_federation(cfg, method_class(name)(cfg))

    ref = fed_of("fedavg_sc")
    fed = fed_of("fedca", public_size=120)
    assert ref.public is None and len(fed.public) == 120
    assert fed.info["public_source"] == "training images outside data.max_train"
    for c in ref.clients:  # same clients, same images, bit for bit
        assert torch.equal(ref.clients[c].images, fed.clients[c].images)

    def flat(x):
        return {bytes(r) for r in x.images.reshape(len(x), -1).numpy()}

    held = set().union(*(flat(v) for v in fed.clients.values()))
    assert not flat(fed.public) & held
    counts = np.bincount(fed.public.labels.numpy(), minlength=10)
    assert counts.min() >= 11 and counts.max() <= 13  # stratified: 120 / 10 classes

    # no room outside the subset: carved out of the training set before partitioning
    cfg = validate(_tiny_cfg("fedca", public_size=200))
    full = load_dataset("digits", "train")
    fed2 = prepare_federation(cfg, method_class("fedca")(cfg))
    assert fed2.info["public_source"].startswith("carved out")
    assert sum(len(v) for v in fed2.clients.values()) <= len(full) - 200
    held2 = set().union(*(flat(v) for v in fed2.clients.values()))
    assert not flat(fed2.public) & held2
    with pytest.raises(ValueError, match="public split of 100000 images"):
        bad = validate(_tiny_cfg("fedca", public_size=100000))
        prepare_federation(bad, method_class("fedca")(bad))
    # align_weight 0: no public split at all
    assert fed_of("fedca", align_weight=0.0).public is None


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_fedca_base_model_is_trained_and_deterministic():
    from fedspectral.fed.federation import prepare_federation

    cfg = validate(_tiny_cfg("fedca", public_size=100, base_epochs=3))
    method = method_class("fedca")(cfg)
    fed = prepare_federation(cfg, method)
    states = []
    for _ in range(2):
        st = method.init_server_state({}, {c: len(v) for c, v in fed.clients.items()})
        method.prepare_server(st, fed.public, fed.augment, cfg.run.seed)
        states.append(st)
    a, b = states
    assert np.array_equal(a.arrays["fedca.public_z"], b.arrays["fedca.public_z"])
    assert np.array_equal(a.arrays["fedca.public_images"], fed.public.images.numpy())
    assert a.arrays["fedca.public_z"].shape == (100, 16)
    # 100 images, batch 64: one step per epoch
    assert a.method_state["fedca.base"]["steps"] == 3 and a.method_state["fedca.has_public"] == []
    # the base model is trained: its representations differ from an untrained network's
    torch.manual_seed(0)
    untrained = method._represent(method.build_net(), fed.public.images, torch.device("cpu"))
    assert not np.allclose(untrained, a.arrays["fedca.public_z"], atol=1e-3)


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_fedca_alignment_pulls_local_representations_to_the_base_model():
    """One round from the same start: a large β ends closer to the base model on the
    public images than a negligible one, and the public data travels once."""
    dist = {}
    for beta in (1e-6, 20.0):
        sim = Simulation(
            _tiny_cfg("fedca", rounds=2, align_weight=beta, public_size=100, base_epochs=2)
        )
        res = sim.run()
        m1 = res["records"][0]["phases"]["train"]["metrics"]
        dist[beta] = m1["alignment"]
        assert m1["aligned"] == 1.0
        assert sim.state.server.method_state["fedca.has_public"] == sorted(sim.fed.clients)
        b1, b2 = res["records"][0]["bytes_down"], res["records"][1]["bytes_down"]
        public_bytes = 100 * (64 + 16) * 4  # 100 images of 1x8x8 floats + 16-d representations
        for c in b1:
            assert (
                b1[c] - b2[c]
                == public_bytes
                - (sum(len(v) for v in sim.fed.clients.values()) - len(sim.fed.clients[c])) * 16 * 4
            )
    assert dist[20.0] < 0.5 * dist[1e-6], dist


def test_fedca_client_without_public_data_trains_without_alignment_and_gets_it_again():
    method = method_class("fedca")(validate(_tiny_cfg("fedca", public_size=20)))
    rt = _runtime(method)
    glob = net_to_arrays(rt.net)
    rep = method.client_phase("train", 3, Payload.with_weights(glob, config={"lr": 0.01}), rt)
    assert rep.metrics["aligned"] == 0.0 and rep.config["fedca.has_public"] is False
    st = ServerState(weights={}, clients=["c0", "c1"], method_state={"fedca.has_public": ["c0"]})
    st.arrays = {
        "fedca.public_images": np.zeros((20, 1, 8, 8), np.float32),
        "fedca.public_z": np.ones((20, 16), np.float32),
    }
    method.aggregate_extra(3, st, {"c0": rep})
    assert st.method_state["fedca.has_public"] == []  # c0 lost its copy: it is sent again
    down = method.extra_down(4, st, "c0")
    assert down["public_images"].shape == (20, 1, 8, 8)
    rep2 = method.client_phase(
        "train", 4, Payload.with_weights(glob, arrays=down, config={"lr": 0.01}), rt
    )
    assert rep2.metrics["aligned"] == 1.0 and rep2.config["fedca.has_public"] is True
    method.aggregate_extra(4, st, {"c0": rep2})
    assert st.method_state["fedca.has_public"] == ["c0"]
    assert "public_images" not in method.extra_down(5, st, "c0")
