"""`fedspectral audit`: the default calibrations pass, the negative controls fail.

Each audit runs the real release function on its worst-case pair with a fixed seed, so
each verdict is deterministic; the bounds' statistical validity is that of
Clopper-Pearson at confidence 0.95 (checked here on a Gaussian with known ε).
"""

import math

import numpy as np
import pytest

from fedspectral.experiments.audit import audit_dp_calr, audit_ldp_pca, epsilon_lower_bound


def test_lower_bound_is_below_the_true_epsilon_of_a_gaussian_and_tight_enough():
    # one Gaussian release of sensitivity 1, z = 1: exact ε(δ) from dp-accounting
    import dp_accounting

    rng = np.random.default_rng(3)
    m = 400_000
    delta = 1e-3
    true = float(dp_accounting.get_epsilon_gaussian(1.0, delta))
    a = rng.normal(1.0, 1.0, (m, 1))
    b = rng.normal(0.0, 1.0, (m, 1))
    lb = epsilon_lower_bound(a, b, delta)
    assert 0.7 * true < lb <= true
    # identical inputs: nothing to distinguish
    assert epsilon_lower_bound(b[: m // 2], b[m // 2 :], delta) < 0.05


def test_ldp_pca_default_calibration_passes():
    res = audit_ldp_pca()  # analytic, eps 2, delta 1e-5, 1e6 samples per input
    assert res.passed and res.epsilon_lower_bound <= res.epsilon_claimed
    assert res.epsilon_claimed == pytest.approx(2.0, rel=1e-6)  # delta' = delta here
    assert res.epsilon_lower_bound > 1.0  # the audit is not vacuous


def test_ldp_pca_paper_calibration_is_caught():
    # the seed's sigma is calibrated for sensitivity 1; e1/e2 has sqrt(2)
    res = audit_ldp_pca(calibration="paper")
    assert not res.passed and res.epsilon_lower_bound > res.epsilon_claimed
    assert res.sensitivity_claimed == 1.0


def test_dp_calr_default_calibration_passes():
    # rdp, zero-out pair, eps 2; 4000 samples per input keeps the test short (the CLI
    # default is 1e4: docs/privacy-audit.md)
    res = audit_dp_calr(samples=4000)
    assert res.passed
    assert res.epsilon_lower_bound > 0.2


def test_dp_calr_without_clip_is_caught():
    res = audit_dp_calr(calibration="noclip", samples=2000)
    assert not res.passed and res.epsilon_lower_bound > 2 * res.epsilon_claimed


def test_replace_one_pair_passes_with_its_own_sensitivity():
    res = audit_dp_calr(neighbouring="replace_one", samples=2000)
    assert res.passed and res.sensitivity_claimed == pytest.approx(math.sqrt(2) * 4.0 / 8)


def test_cli_exit_codes(capsys):
    from fedspectral.cli import main

    assert main(["audit", "ldp-pca", "--samples", "20000"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["audit", "ldp-pca", "--calibration", "paper"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main(["audit", "dp-calr", "--samples", "-3"]) == 2
    assert "samples" in capsys.readouterr().err
    assert main(["audit", "ldp-pca", "--calibration", "bogus"]) == 2


@pytest.mark.parametrize("noise", ["secure", "opendp"])
def test_seed_is_refused_where_it_seeds_nothing(noise, capsys):
    from fedspectral.cli import main

    assert main(["audit", "ldp-pca", "--noise", noise, "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert f"--seed 3 seeds nothing with --noise {noise}" in err
