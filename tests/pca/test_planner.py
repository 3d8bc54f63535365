"""Users-needed planner (fedspectral.pca.planner, ``fedspectral pca-plan``).

The plan is checked by an independent simulation: users' rows sampled from the
covariance, the real estimator (:class:`LocalDPPCA`, per-fit noise, the server's
un-packing), fresh seeds.  At the planned n the error meets the target in at least the
stated confidence of repeats; at half of it, it does not (the plan is not wildly
conservative).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedspectral import cli
from fedspectral.linalg import subspace_distance
from fedspectral.pca import (
    DistributedDPPCA,
    LocalDPPCA,
    UsersPlan,
    random_stiefel,
    required_users,
)
from fedspectral.pca import planner as planner_mod

P, K, GAP, EPS, DELTA, T = 10, 2, 0.02, 16.0, 1e-5, 0.6


def _simulated_fraction(
    n: int, reps: int, seed: int, eps: float = EPS, holders: int | None = None
) -> float:
    """Share of ``reps`` fresh data sets of ``n`` rows on which the real estimator
    (LocalDPPCA, or DistributedDPPCA over ``holders`` holders) meets the target."""
    hits = 0
    for r in range(reps):
        rng = np.random.default_rng([seed, r])
        V = random_stiefel(P, K, rng)
        Sigma = GAP * (V @ V.T + np.eye(P))
        X = rng.multivariate_normal(np.zeros(P), Sigma, size=n, method="cholesky")
        noise_seed = int(rng.integers(2**32))
        with warnings.catch_warnings():  # a handful of the 10^4 rows exceed norm 1: clipped
            warnings.simplefilter("ignore", UserWarning)
            if holders is None:
                est = LocalDPPCA(K, eps, DELTA, random_state=noise_seed).fit(X)
            else:
                est = DistributedDPPCA(K, eps, DELTA, random_state=noise_seed)
                est.fit(X, groups=rng.integers(0, holders, size=n))
        hits += subspace_distance(est.components_.T, V) <= T
    return hits / reps


def test_planned_n_meets_the_target_in_an_independent_simulation():
    plan = required_users(P, K, EPS, DELTA, eigengap=GAP, target_error=T, confidence=0.9, n_sim=200)
    assert isinstance(plan, UsersPlan) and plan.status == "ok"
    lo, hi = plan.bracket
    assert lo <= plan.n <= hi * 1.01 and plan.vectorisation == "isometric"
    # 200 independent repeats (measured 0.94: the plan's Clopper-Pearson margin; binomial
    # sd 0.017); half the users fall far short (measured 0.43 on 100 repeats)
    assert _simulated_fraction(plan.n, 200, seed=1) >= 0.9
    assert _simulated_fraction(plan.n // 2, 60, seed=2) < 0.75


def test_distributed_plan_meets_the_target_in_an_independent_simulation():
    """--model distributed at ε = 1 (where the local model needs ~10^8 users): rows sampled
    afresh, split at random over 5 holders, the real DistributedDPPCA (per-fit noise,
    the server's un-packing).  Measured: plan 2460 users; 0.955 at n (200 repeats), 0.03
    at n/2 (60 repeats): the noise falls as 1/n, so halving n doubles it."""
    plan = required_users(
        P, K, 1.0, DELTA, eigengap=GAP, target_error=T, n_sim=200, model="distributed", holders=5
    )
    assert plan.status == "ok" and plan.model == "distributed" and plan.holders == 5
    assert plan.min_contributors == 5 and plan.n < 10_000
    assert _simulated_fraction(plan.n, 200, seed=3, eps=1.0, holders=5) >= 0.9
    assert _simulated_fraction(plan.n // 2, 60, seed=4, eps=1.0, holders=5) < 0.5


def test_local_and_distributed_plans_from_the_cli(capsys):
    base = [
        "pca-plan",
        "--p",
        str(P),
        "--k",
        str(K),
        "--epsilon",
        "1",
        "--delta",
        str(DELTA),
        "--eigengap",
        str(GAP),
        "--target-error",
        str(T),
        "--n-sim",
        "60",
        "--json",
    ]
    import json

    plans = {}
    for model in (
        ["--model", "distributed", "--holders", "5"],
        ["--model", "per-holder", "--holders", "5"],
    ):
        assert cli.main(base + model) == 0
        plans[model[1]] = json.loads(capsys.readouterr().out)
    # without secure aggregation the sum carries sqrt(5) times the noise: more users
    assert plans["per-holder"]["n"] > 1.3 * plans["distributed"]["n"]
    assert plans["per-holder"]["model"] == "per_holder"
    rc = cli.main(base + ["--holders", "5"])  # holders with the local model
    assert rc == 2 and "to model='distributed'" in capsys.readouterr().err


def test_isometric_needs_about_half_the_users():
    kw = {"eigengap": GAP, "target_error": T, "n_sim": 200}
    iso = required_users(P, K, EPS, DELTA, **kw)
    up = required_users(P, K, EPS, DELTA, vectorisation="upper", **kw)
    # error ∝ n^(-1/2) and the isometric noise has (p+1)/2p of the Frobenius energy
    assert up.n / iso.n == pytest.approx(2 * P / (P + 1), rel=0.15)


def test_spectrum_file_and_matrix_give_the_same_plan(tmp_path, capsys):
    ev = np.full(P, GAP)
    ev[:K] = 2 * GAP
    f = tmp_path / "ev.txt"
    np.savetxt(f, ev)
    Q = random_stiefel(P, P, 3)
    m = tmp_path / "cov.txt"
    np.savetxt(m, Q @ np.diag(ev) @ Q.T)
    base = [
        "pca-plan",
        "--p",
        str(P),
        "--k",
        str(K),
        "--epsilon",
        str(EPS),
        "--delta",
        str(DELTA),
        "--target-error",
        str(T),
        "--n-sim",
        "100",
    ]
    outs = []
    for extra in (["--eigengap", str(GAP)], ["--spectrum", str(f)], ["--spectrum", str(m)]):
        assert cli.main(base + extra) == 0
        outs.append(capsys.readouterr().out.splitlines()[0])
    assert outs[0].startswith("users needed: ") and outs[0] == outs[1] == outs[2]


def test_unreachable_and_trivial_targets(capsys):
    plan = required_users(P, K, EPS, DELTA, eigengap=GAP, target_error=1e-7, n_max=1e9, n_sim=50)
    assert plan.status == "unreachable" and plan.n is None
    assert "below the non-private error" in plan.message
    rl = np.sqrt(2 * K - 2 * K * K / P)
    plan = required_users(P, K, EPS, DELTA, eigengap=GAP, target_error=rl + 0.01)
    assert plan.status == "above_random_level" and plan.evaluations == 0
    rc = cli.main(
        [
            "pca-plan",
            "--p",
            "10",
            "--k",
            "2",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--eigengap",
            "0.02",
            "--target-error",
            "1.9",
        ]
    )
    assert rc == 2 and "above_random_level" in capsys.readouterr().err  # a user error


@pytest.fixture
def no_simulation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("simulation started before the input was validated")

    monkeypatch.setattr(planner_mod, "_Experiment", boom)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"k": 11}, "k must be <= p = 10, got k=11"),
        ({"k": 10}, "k must be < p = 10"),
        ({"target_error": 0.0}, "target_error must be > 0.0, got 0.0"),
        ({"target_error": -1.0}, "target_error must be > 0.0, got -1.0"),
        ({"eigengap": 0.0}, "eigengap must be > 0.0, got 0.0"),
        ({"eigengap": -0.1}, "eigengap must be > 0.0, got -0.1"),
        ({"eigengap": 0.2}, "eigengap=0.2 gives trace"),
        ({"eigengap": None, "spectrum": [0.1] * 9 + [-0.05]}, "smallest eigenvalue -0.05"),
        ({"eigengap": None, "spectrum": [0.1] * 10}, "eigen-gap"),
        ({"eigengap": None, "spectrum": [0.2] * 2 + [0.1] * 8}, "trace 1.2"),
        ({"spectrum": [0.1] * 10}, "exactly one of eigengap and spectrum"),
        ({"confidence": 1.0}, "confidence must be < 1.0, got 1.0"),
        ({"n_sim": 10}, "n_sim must be >= 50, got 10"),
        ({"epsilon": np.inf}, "epsilon must be finite"),
        ({"model": "central"}, "model must be one of"),
        ({"holders": 3}, "holders=3 applies to model='distributed'"),
        ({"model": "distributed", "holders": 0}, "holders must be >= 1, got 0"),
        (
            {"model": "distributed", "holders": 3, "min_contributors": 4},
            "min_contributors must be <= 3, got 4",
        ),
        ({"model": "distributed", "holders": 3, "calibration": "paper"}, "calibration must be"),
    ],
)
def test_bad_input_named_before_any_work(no_simulation, kw, match):
    args = {"p": P, "k": K, "epsilon": EPS, "delta": DELTA, "eigengap": GAP, "target_error": T} | kw
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        required_users(args.pop("p"), args.pop("k"), args.pop("epsilon"), args.pop("delta"), **args)


def test_cli_bad_spectrum_file(tmp_path, capsys, no_simulation):
    A = np.diag([0.2, 0.1, -0.01])
    f = tmp_path / "bad.txt"
    np.savetxt(f, A)
    rc = cli.main(
        [
            "pca-plan",
            "--p",
            "3",
            "--k",
            "1",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--spectrum",
            str(f),
            "--target-error",
            "0.3",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "not positive semi-definite" in err and "-0.01" in err
    rc = cli.main(
        [
            "pca-plan",
            "--p",
            "3",
            "--k",
            "1",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--spectrum",
            str(tmp_path / "missing.txt"),
            "--target-error",
            "0.3",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "missing.txt" in err and "does not exist" in err
