"""The converged linear probe (``eval.probe_solver: lbfgs``): its solution satisfies the
optimality condition of the stated objective (gradient written independently in
torch), its accuracy does not move with the solver's budget, and the authors' Adam
probe on a small bank does (the reason it is not the CPU default)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from fedspectral.config import ExperimentConfig, thaw, to_dict
from fedspectral.eval import fit_logistic, linear_probe, logistic_probe
from fedspectral.fed.validation import config_fingerprint, validate


def digits_split():
    d = load_digits()
    x = torch.as_tensor(d.data, dtype=torch.float32)
    y = torch.as_tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    tr, te = perm[:1200], perm[1200:]
    return x[tr], y[tr], x[te], y[te]


def objective_gradient(fit, x, y, c):
    """Gradient of mean CE(W x~ + b) + ||W||^2 / (2 C n) at the fit (sklearn's C
    objective divided by C n), by autograd in float64."""
    xs = (x.double() - fit.mean) / fit.std
    w = fit.weight.clone().requires_grad_(True)
    b = fit.bias.clone().requires_grad_(True)
    loss = F.cross_entropy(xs @ w.T + b, y) + (w**2).sum() / (2 * c * len(y))
    gw, gb = torch.autograd.grad(loss, (w, b))
    return torch.cat([gw.flatten(), gb])


@pytest.mark.parametrize("c", [0.1, 1.0])
def test_the_fit_is_a_stationary_point_of_the_stated_objective(c):
    x, y, _, _ = digits_split()
    fit = fit_logistic(x, y, c=c, tol=1e-8, max_iter=5000)
    assert fit.converged
    g = objective_gradient(fit, x, y, c)
    # at the initial point (W = 0, b = 0) the gradient is of order 0.1
    g0 = objective_gradient(
        type(fit)(
            fit.mean, fit.std, torch.zeros_like(fit.weight), torch.zeros_like(fit.bias), 0, True
        ),
        x,
        y,
        c,
    )
    assert g0.abs().max() > 0.05
    assert g.abs().max() < 1e-6


def test_accuracy_does_not_depend_on_the_budget():
    x, y, xt, yt = digits_split()
    loose = logistic_probe(x, y, xt, yt, tol=1e-4)
    tight = logistic_probe(x, y, xt, yt, tol=1e-10, max_iter=20000)
    assert abs(loose - tight) <= 0.005
    assert tight > 0.9  # digits are nearly linearly separable in pixel space


def test_the_adam_probe_on_a_small_bank_does_depend_on_its_budget():
    # the authors' probe (Adam 3e-3, batch 512, raw features): 1200 samples are 3 steps
    # an epoch, so 3 epochs (9 steps) are far from the optimum and 300 are not
    x, y, xt, yt = digits_split()
    short = linear_probe(x, y, xt, yt, epochs=3, seed=0)
    long = linear_probe(x, y, xt, yt, epochs=300, seed=0)
    converged = logistic_probe(x, y, xt, yt)
    assert long - short > 0.05
    assert abs(long - converged) < 0.03


def test_absent_classes_are_never_predicted_and_two_classes_match_sklearn():
    from sklearn.linear_model import LogisticRegression

    x, y, xt, _ = digits_split()
    keep = (y == 3) | (y == 8)
    fit = fit_logistic(x[keep], y[keep], num_classes=10)
    assert fit.weight.shape == (10, 64)
    pred = fit.predict(xt)
    assert set(pred.tolist()) <= {3, 8}
    xs = ((x[keep].double() - fit.mean) / fit.std).numpy()
    ref = LogisticRegression(tol=1e-6, max_iter=1000).fit(xs, y[keep].numpy())
    ref_pred = ref.predict(((xt.double() - fit.mean) / fit.std).numpy())
    assert (pred.numpy() == ref_pred).all()


def test_bad_input_is_named():
    x, y, xt, yt = digits_split()
    with pytest.raises(ValueError, match="single class"):
        fit_logistic(x[y == 1], y[y == 1])
    with pytest.raises(ValueError, match="c"):
        fit_logistic(x, y, c=0.0)
    with pytest.raises(ValueError, match="num_classes=5"):
        fit_logistic(x, y, num_classes=5)
    with pytest.raises(ValueError, match="dimension"):
        logistic_probe(x, y, xt[:, :10], yt)
    with pytest.warns(RuntimeWarning, match="max_iter=2"):
        fit_logistic(x, y, max_iter=2)


def test_probe_solver_is_checked_and_its_neutral_value_keeps_the_fingerprint():
    cfg = validate(ExperimentConfig())
    base = to_dict(cfg)
    legacy = to_dict(cfg)
    for k in ("probe_solver", "probe_c", "probe_max_iter"):
        del legacy["eval"][k]  # a config written before these keys existed
    assert config_fingerprint(base) == config_fingerprint(legacy)
    cfg = thaw(cfg)  # an editable copy (a validated config is frozen)
    cfg.eval.probe_solver = "lbfgs"
    assert config_fingerprint(to_dict(cfg)) != config_fingerprint(legacy)
    cfg.eval.probe_solver = "sgd"
    with pytest.raises(ValueError, match="eval.probe_solver='sgd'"):
        validate(cfg)


def test_a_run_records_the_converged_probe_of_its_initial_and_final_weights():
    # one round on digits: the recorded probe is logistic_probe on the bank's and the
    # eval set's backbone features, for the initial weights and for the final ones
    from fedspectral.eval import encoder_features
    from fedspectral.fed import simulation as sim_mod
    from fedspectral.fed.weights import arrays_to_net, net_to_arrays

    cfg = ExperimentConfig()
    cfg.data.dataset = "digits"
    cfg.partition.num_clients, cfg.partition.classes_per_client = 5, 2
    cfg.model.projector_hidden, cfg.model.projector_out = 32, 16
    cfg.method.name, cfg.method.rounds = "fedavg_sc", 1
    cfg.optim.batch_size = 64
    cfg.eval.every, cfg.eval.test_size, cfg.eval.knn_k = 1, 200, 10
    cfg.eval.linear_probe, cfg.eval.initial, cfg.eval.probe_solver = True, True, "lbfgs"
    cfg.run.progress, cfg.run.threads = False, 1
    sim = sim_mod.Simulation(validate(cfg))
    res = sim.run()
    fresh = sim_mod.Simulation(validate(cfg))
    fresh._setup()
    for label, weights in (
        ("initial", net_to_arrays(fresh.net)),
        ("final", sim.method.global_weights(sim.state.server)),
    ):
        arrays_to_net(fresh.net, weights)
        bs, dev = cfg.eval.batch_size, cfg.run.device
        hb, _ = encoder_features(fresh.net, fresh.fed.bank.images, bs, dev)
        he, _ = encoder_features(fresh.net, fresh.fed.eval.images, bs, dev)
        want = logistic_probe(hb, fresh.fed.bank.labels, he, fresh.fed.eval.labels, num_classes=10)
        assert res[label]["linear_probe"] == want
    assert res["initial"]["linear_probe"] != res["final"]["linear_probe"]


def test_one_dispatch_serves_the_config_and_evaluate_encoder():
    from torch import nn

    from fedspectral.config import PROBE_SOLVERS
    from fedspectral.eval import evaluate_encoder
    from fedspectral.eval.linear_probe import SOLVERS, probe_accuracy

    assert set(PROBE_SOLVERS) == set(SOLVERS)
    x, y, xt, yt = digits_split()

    class Identity(nn.Module):  # features h = x, projector z = x
        def features(self, v):
            return v

        def forward(self, v):
            return v

    res = evaluate_encoder(Identity(), (x, y), (xt, yt), k=10, linear=True, probe_solver="lbfgs")
    assert res["linear_probe"] == logistic_probe(x, y, xt, yt, num_classes=10)
    with pytest.raises(ValueError, match="solver must be one of"):
        probe_accuracy(x, y, xt, yt, solver="sgd")
