"""DP-CalR (fedspectral.fed.correlation): values, clipping, sensitivity, noise, accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps
from torch import nn

from fedspectral.fed.correlation import (
    LEDGER_RELATION,
    MECHANISM,
    batch_dependence,
    calibrate_correlation_sigma,
    correlation_sensitivity,
    dp_correlation,
)
from fedspectral.fed.releases import record_release, release_config
from fedspectral.privacy import PrivacyLedger, symmetric_gaussian

DT = torch.float64


def triu_norm(a: np.ndarray) -> float:
    """L2 norm of the released vector: the upper triangle incl. the diagonal."""
    return float(np.linalg.norm(a[np.triu_indices(a.shape[0])]))


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


def record_dp_calr(
    led: PrivacyLedger,
    party: str,
    sigma: float,
    mu: float,
    n: int,
    step: int = 0,
    neighbouring: str = "zero_out",
    count: int = 1,
):
    """Record a DP-CalR release as the round loop does with a FedSC client's reply."""
    cfg = release_config(
        sigma,
        correlation_sensitivity(mu, n, neighbouring),
        MECHANISM,
        LEDGER_RELATION[neighbouring],
        count=count,
    )
    return record_release(led, party, cfg, step)


def noiseless(
    x: torch.Tensor, mu: float, n_views: int = 1, augment=None, seed: int = 0, batch_size: int = 64
) -> np.ndarray:
    return dp_correlation(
        identity,
        x,
        augment,
        n_views,
        mu,
        0.0,
        torch.Generator().manual_seed(seed),
        np.random.default_rng(0),
        batch_size,
    )


def jitter(b: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A random per-row 'augmentation' (scale and shift)."""
    s = 1 + 0.5 * torch.rand(b.shape[0], 1, generator=g, dtype=b.dtype)
    return s * b + 0.3 * torch.randn(b.shape, generator=g, dtype=b.dtype)


# ---------------------------------------------------------------------------
# value
# ---------------------------------------------------------------------------
def test_value_matches_direct_loop():
    g = torch.Generator().manual_seed(0)
    x = 2 * torch.randn(13, 4, generator=g, dtype=DT)
    mu, v = 3.0, 3
    got = noiseless(x, mu, v, jitter, seed=5, batch_size=100)
    # reference: the same augmentation draws (one call on the V stacked copies), then a loop
    aug = jitter(x.repeat(v, 1), torch.Generator().manual_seed(5)).numpy()
    ref = np.zeros((4, 4))
    for z in aug:
        nz = np.linalg.norm(z)
        zc = z * min(1.0, math.sqrt(mu) / nz)
        ref += np.outer(zc, zc)
    ref /= 13 * v
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)
    assert got.dtype == np.float64 and np.array_equal(got, got.T)


def test_batch_size_invariance_without_augmentation():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 5, generator=g, dtype=DT)
    a = noiseless(x, 1.0, 2, None, batch_size=37)
    b = noiseless(x, 1.0, 2, None, batch_size=4)
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------
# clipping
# ---------------------------------------------------------------------------
def test_every_contribution_bounded_by_mu():
    g = torch.Generator().manual_seed(2)
    mu = 0.7
    x = torch.randn(60, 6, generator=g, dtype=DT) * torch.logspace(-1, 1, 60, dtype=DT)[:, None]
    stats: dict = {}
    for i in range(60):  # one sample = its contribution c(x) = mean over V views of z z^T
        c = dp_correlation(
            identity,
            x[i : i + 1],
            jitter,
            4,
            mu,
            0.0,
            torch.Generator().manual_seed(i),
            np.random.default_rng(0),
            8,
        )
        assert np.linalg.norm(c, "fro") <= mu * (1 + 1e-12)
        assert np.trace(c) <= mu * (1 + 1e-12)
        assert np.linalg.eigvalsh(c).min() >= -1e-12  # PSD
    noiseless_stats = dp_correlation(
        identity, x, None, 1, mu, 0.0, None, np.random.default_rng(0), 16, stats=stats
    )
    expected = float((torch.linalg.norm(x, dim=1) > math.sqrt(mu)).double().mean())
    assert 0 < expected < 1 and stats["clip_fraction"] == pytest.approx(expected)
    assert np.trace(noiseless_stats) <= mu


# ---------------------------------------------------------------------------
# sensitivity
# ---------------------------------------------------------------------------
def test_sensitivity_values():
    assert correlation_sensitivity(4.0, 100) == 0.04
    assert correlation_sensitivity(4.0, 100, "replace_one") == pytest.approx(math.sqrt(2) * 0.04)
    assert correlation_sensitivity(4.0, 100, "add_remove") == pytest.approx(math.sqrt(2) * 0.04)


def test_sensitivity_attained_by_axis_aligned_representations():
    """The worst cases: the bounds are tight, so the smaller seed bound is wrong for replace."""
    n, d, mu = 10, 3, 2.0
    e1, e2 = torch.eye(d, dtype=DT)[0], torch.eye(d, dtype=DT)[1]
    data = (5 * e2).repeat(n, 1)  # every other sample sits on e2 (clipped to sqrt(mu))
    data_rep = data.clone()
    data_rep[-1] = 7 * e1
    r = noiseless(data, mu)
    r_rep = noiseless(data_rep, mu)
    replace = triu_norm(r - r_rep)
    assert replace == pytest.approx(correlation_sensitivity(mu, n, "replace_one"), rel=1e-12)
    assert replace > 1.4 * correlation_sensitivity(mu, n, "zero_out")
    # zero-out (the seed's relation): the sample replaced by a null one (z = 0), the
    # normaliser n fixed: mu / n, attained
    r_minus = noiseless(data_rep[:-1], mu)
    data_zero = data_rep.clone()
    data_zero[-1] = 0.0
    zero_out = triu_norm(noiseless(data_rep, mu) - noiseless(data_zero, mu))
    assert zero_out == pytest.approx(correlation_sensitivity(mu, n, "zero_out"), rel=1e-12)
    assert zero_out == pytest.approx(
        triu_norm(noiseless(data_rep, mu) - (n - 1) / n * r_minus), rel=1e-12
    )
    # removing a real sample is not covered by mu / n: it moves R by sqrt(2) mu / n
    assert triu_norm(noiseless(data_rep, mu) - r_minus) > 1.4 * zero_out
    # add/remove with the true mean: sqrt(2) mu / n
    exact = triu_norm(noiseless(data_rep, mu) - r_minus)
    assert exact == pytest.approx(correlation_sensitivity(mu, n, "add_remove"), rel=1e-12)


@pytest.mark.parametrize("trial", range(3))
def test_neighbours_move_release_by_at_most_the_sensitivity(trial):
    g = torch.Generator().manual_seed(100 + trial)
    mu, v = 1.5, 3
    worst = {"zero_out": 0.0, "replace_one": 0.0, "add_remove": 0.0}
    for _ in range(40):
        n = int(torch.randint(2, 12, (1,), generator=g))
        d = int(torch.randint(1, 5, (1,), generator=g))
        scale = torch.exp(2 * torch.randn(n, 1, generator=g, dtype=DT))
        x = scale * torch.randn(n, d, generator=g, dtype=DT)
        x_rep = x.clone()
        x_rep[-1] = 3 * torch.randn(d, generator=g, dtype=DT)
        # batch_size 1: the augmentation draws of the first n-1 samples are the same
        r = noiseless(x, mu, v, jitter, seed=7, batch_size=1)
        r_rep = noiseless(x_rep, mu, v, jitter, seed=7, batch_size=1)
        r_minus = noiseless(x[:-1], mu, v, jitter, seed=7, batch_size=1)
        moves = {
            "replace_one": triu_norm(r - r_rep),
            "zero_out": triu_norm(r - (n - 1) / n * r_minus),
            "add_remove": triu_norm(r - r_minus),
        }
        for rel, move in moves.items():
            bound = correlation_sensitivity(mu, n, rel)
            assert move <= bound * (1 + 1e-12), (rel, n, d, move, bound)
            worst[rel] = max(worst[rel], move / bound)
    assert all(w > 0.05 for w in worst.values())  # the random cases are not all trivial


# ---------------------------------------------------------------------------
# noise
# ---------------------------------------------------------------------------
def zero_encoder(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.shape[0], 24, dtype=DT)


def test_noise_is_the_privacy_cores_symmetric_gaussian():
    x = torch.randn(9, 24, generator=torch.Generator().manual_seed(3), dtype=DT)
    sigma = 0.05
    clean = noiseless(x, 1.0, 2, jitter, seed=1)
    noisy = dp_correlation(
        identity,
        x,
        jitter,
        2,
        1.0,
        sigma,
        torch.Generator().manual_seed(1),
        np.random.default_rng(42),
        64,
    )
    np.testing.assert_allclose(
        noisy - clean, symmetric_gaussian(24, sigma, np.random.default_rng(42)), rtol=0, atol=1e-14
    )
    again = dp_correlation(
        identity,
        x,
        jitter,
        2,
        1.0,
        sigma,
        torch.Generator().manual_seed(1),
        np.random.default_rng(42),
        64,
    )
    assert np.array_equal(noisy, again)  # reproducible from the seeds
    other = dp_correlation(
        identity,
        x,
        jitter,
        2,
        1.0,
        sigma,
        torch.Generator().manual_seed(1),
        np.random.default_rng(43),
        64,
    )
    assert not np.allclose(noisy, other)


def test_noise_statistics():
    """Symmetric; upper-triangle entries iid N(0, sigma^2) (``vectorisation="upper"``; the
    isometric default: tests/privacy/test_vectorisation.py).

    40 draws of a 24 x 24 release: 12000 upper-triangle entries.  Tolerances: the sample
    variance within 5 % of sigma^2 (its relative sd is sqrt(2/12000) = 1.3 %), the mean
    within 4 standard errors, a KS test of normality at p > 1e-3 (seed fixed).
    """
    sigma, d, draws = 0.3, 24, 40
    rng = np.random.default_rng(2024)
    x = torch.zeros(3, 5)
    mats = [
        dp_correlation(zero_encoder, x, None, 2, 1.0, sigma, None, rng, 8, vectorisation="upper")
        for _ in range(draws)
    ]
    iu = np.triu_indices(d)
    vals = np.concatenate([m[iu] for m in mats])
    diag = np.concatenate([np.diag(m) for m in mats])
    for m in mats:
        assert np.array_equal(m, m.T)
    assert abs(vals.mean()) < 4 * sigma / math.sqrt(vals.size)
    assert vals.var() == pytest.approx(sigma**2, rel=0.05)
    assert diag.var() == pytest.approx(sigma**2, rel=0.2)  # 960 values: sd 4.6 %
    assert sps.kstest(vals / sigma, "norm").pvalue > 1e-3
    # distinct upper-triangle entries are uncorrelated
    a, b = np.array([m[0, 1] for m in mats]), np.array([m[2, 5] for m in mats])
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.5


# ---------------------------------------------------------------------------
# accounting
# ---------------------------------------------------------------------------
def seed_closed_form(t: int, mu: float, sigma: float, n: int, delta: float) -> float:
    """The seed's Proposition as in its proof (|D_j| kept)."""
    return t * mu**2 / (2 * sigma**2 * n**2) + math.sqrt(
        2 * t * mu**2 * math.log(1 / delta) / (sigma**2 * n**2)
    )


@pytest.mark.parametrize(
    "t,mu,sigma,n,delta", [(20, 4.0, 0.04, 500, 1e-2), (50, 2.0, 0.012, 1000, 1e-5)]
)
def test_ledger_epsilon_matches_seed_closed_form(t, mu, sigma, n, delta):
    led = PrivacyLedger()
    for step in range(1, t + 1):
        record_dp_calr(led, "client-0", sigma, mu, n, step=step)
    record_dp_calr(led, "client-1", sigma, mu, 2 * n, count=t)  # more data: less leakage
    closed = led.epsilon(delta, "client-0", accountant="closed_form")
    assert closed == pytest.approx(seed_closed_form(t, mu, sigma, n, delta), rel=1e-12)
    rdp = led.epsilon(delta, "client-0", accountant="rdp")
    pld = led.epsilon(delta, "client-0", accountant="pld")
    assert pld <= rdp <= closed
    assert led.epsilon(delta, "client-1", accountant="rdp") < rdp
    assert led.epsilon(delta, accountant="rdp") == rdp  # system: the worst party
    rel = {r.neighbouring for r in led.releases}
    assert rel == {"zero_out"} and led.releases[0].mechanism == "fedsc/dp-calr"
    assert led.releases[0].sensitivity == pytest.approx(mu / n)


@pytest.mark.parametrize(
    "accountant,neighbouring",
    [
        ("rdp", "zero_out"),
        ("rdp", "replace_one"),
        ("closed_form", "zero_out"),
        ("closed_form", "replace_one"),
        ("pld", "zero_out"),
    ],
)
def test_calibrate_then_ledger_round_trip(accountant, neighbouring):
    eps, delta, t, mu, n = 1.0, 1e-2, 10, 4.0, 600
    sigma = calibrate_correlation_sigma(eps, delta, t, mu, n, accountant, neighbouring)
    led = PrivacyLedger()
    for step in range(t):
        record_dp_calr(led, "c", sigma, mu, n, step=step, neighbouring=neighbouring)
    got = led.epsilon(delta, accountant=accountant)
    assert got <= eps * (1 + 1e-9)
    assert got == pytest.approx(eps, rel=2e-3)
    assert led.releases[0].neighbouring == neighbouring
    if accountant == "pld":  # the tight accountant needs less noise than RDP
        assert sigma < calibrate_correlation_sigma(eps, delta, t, mu, n, "rdp", neighbouring)


def test_calibration_orders_and_scaling():
    args = (3.0, 1e-2, 40, 4.0, 600)
    s_rdp = calibrate_correlation_sigma(*args, accountant="rdp")
    s_cf = calibrate_correlation_sigma(*args, accountant="closed_form")
    assert s_rdp < s_cf  # (pld < rdp: see the round trip, where pld's sigma gives eps <= 3)
    s_rep = calibrate_correlation_sigma(*args, neighbouring="replace_one")
    assert s_rep == pytest.approx(math.sqrt(2) * s_rdp, rel=1e-3)
    # sigma scales as mu / n
    assert calibrate_correlation_sigma(3.0, 1e-2, 40, 2.0, 1200) == pytest.approx(
        s_rdp / 4, rel=1e-3
    )


def test_calibration_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="mu must be > 0.0, got 0.0"):
        calibrate_correlation_sigma(1.0, 1e-5, 10, 0.0, 600)
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        calibrate_correlation_sigma(1.0, 1e-5, 10, 4.0, 600, neighbouring="bogus")
    with pytest.raises(ValueError, match="accountant must be one of"):
        calibrate_correlation_sigma(1.0, 1e-5, 10, 4.0, 600, accountant="exact")
    for acc in ("rdp", "closed_form"):  # the same checks whichever accountant calibrates
        with pytest.raises(ValueError, match="epsilon must be > 0.0, got -1.0"):
            calibrate_correlation_sigma(-1.0, 1e-5, 10, 4.0, 600, accountant=acc)
        with pytest.raises(ValueError, match="delta must be < 1.0, got 1.0"):
            calibrate_correlation_sigma(1.0, 1.0, 10, 4.0, 600, accountant=acc)
        with pytest.raises(TypeError, match="epsilon must be a real number, got bool True"):
            calibrate_correlation_sigma(True, 1e-5, 10, 4.0, 600, accountant=acc)
        assert calibrate_correlation_sigma(math.inf, 1e-5, 10, 4.0, 600, accountant=acc) == 0.0


# ---------------------------------------------------------------------------
# module handling and validation
# ---------------------------------------------------------------------------
def test_module_modes_restored_and_no_side_effects():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    net.train()
    net[2].eval()  # a submodule deliberately left in eval mode
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(20, 5)
    r1 = dp_correlation(net, x, None, 2, 1.0, 0.0, None, np.random.default_rng(0), 7)
    r2 = dp_correlation(net, x, None, 2, 1.0, 0.0, None, np.random.default_rng(0), 20)
    np.testing.assert_allclose(r1, r2, rtol=1e-5, atol=1e-8)  # eval mode: BN stats, no dropout
    assert [m.training for m in net.modules()] == [True, True, True, False, True]
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k  # running statistics untouched
    # the value is that of the eval-mode network
    net.eval()
    with torch.no_grad():
        z = net(x).double()
    z = z * torch.clamp(1 / torch.linalg.norm(z, dim=1, keepdim=True), max=1)
    np.testing.assert_allclose(r1, (z.T @ z / 20).numpy(), rtol=1e-6, atol=1e-9)


def test_bad_inputs_rejected_with_value():
    x = torch.zeros(4, 3)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="-1"):
        dp_correlation(identity, x, None, 2, -1.0, 0.0, None, rng, 4)
    with pytest.raises(ValueError, match="sigma"):
        dp_correlation(identity, x, None, 2, 1.0, -0.5, None, rng, 4)
    with pytest.raises(ValueError, match="n_views"):
        dp_correlation(identity, x, None, 0, 1.0, 0.0, None, rng, 4)
    with pytest.raises(ValueError, match="non-empty"):
        dp_correlation(identity, torch.zeros(0, 3), None, 2, 1.0, 0.0, None, rng, 4)
    with pytest.raises(TypeError, match="noise_rng"):
        dp_correlation(identity, x, None, 2, 1.0, 0.0, None, 0, 4)
    with pytest.raises(ValueError, match="batch_size"):
        dp_correlation(identity, x, None, 2, 1.0, 0.0, None, rng, 0)
    with pytest.raises(ValueError, match="neighbouring"):
        correlation_sensitivity(1.0, 10, "swap")
    with pytest.raises(ValueError, match="n "):
        correlation_sensitivity(1.0, 0)
    with pytest.raises(ValueError, match="releases"):
        calibrate_correlation_sigma(1.0, 1e-5, 0, 1.0, 10)


@pytest.mark.parametrize(
    "bad,err",
    [
        (True, TypeError),
        ("4", TypeError),
        (None, TypeError),
        (0.0, ValueError),
        (-1.0, ValueError),
        (float("nan"), ValueError),
    ],
)
def test_mu_is_checked_alike_by_dp_calr_and_the_losses(bad, err):
    """One rule for the clipping level mu (fedspectral.checks): the same error type and
    message from DP-CalR's sensitivity and calibration and from the loss's clipping."""
    from fedspectral.fed.losses import SpectralContrastiveLoss, clip_norm

    messages = set()
    calls = [
        lambda: correlation_sensitivity(bad, 10),
        lambda: calibrate_correlation_sigma(1.0, 1e-5, 3, bad, 10),
        lambda: dp_correlation(
            identity, torch.ones(2, 3), None, 1, bad, 0.0, None, np.random.default_rng(0)
        ),
    ]
    if bad is not None:  # None means "no clipping" for the losses
        calls += [lambda: SpectralContrastiveLoss(mu=bad), lambda: clip_norm(torch.ones(2, 3), bad)]
    for call in calls:
        with pytest.raises(err, match="^mu must be") as info:
            call()
        messages.add(str(info.value))
    assert len(messages) == 1


def test_forward_passes_split_at_forward_rows_give_the_same_bits(monkeypatch) -> None:
    """The share pass of the CPU config's network (512 views per augmentation call) split
    into passes of FORWARD_ROWS views equals one pass, bit for bit; an encoder with batch
    statistics is never split."""
    import numpy as np

    from fedspectral.data.augment import SimCLRAugment
    from fedspectral.fed import correlation as corr
    from fedspectral.fed.methods.sc import build_ssl_net
    from fedspectral.fed.validation import load_config

    cfg = load_config("configs/fmnist_fedsc.yaml", ["model.norm=group"])
    torch.manual_seed(0)
    net = build_ssl_net(cfg)
    images = torch.rand(300, 1, 28, 28)
    aug = SimCLRAugment(28)

    passes: list[int] = []
    net.register_forward_hook(lambda _m, args, _out: passes.append(int(args[0].shape[0])))

    def share(rows: int) -> np.ndarray:
        monkeypatch.setattr(corr, "FORWARD_ROWS", rows)
        passes.clear()
        return dp_correlation(
            net,
            images,
            aug,
            2,
            2.0,
            0.0,
            torch.Generator().manual_seed(1),
            np.random.default_rng(0),
            256,
        )

    assert corr.FORWARD_ROWS == 256
    split = share(256)
    assert passes == [256, 256, 88]  # 512 views of 256 images, then 88 of the last 44
    whole = share(10**9)
    assert passes == [512, 88]
    assert np.array_equal(split, whole)
    assert corr._per_sample(net)
    bn = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 4),
        torch.nn.BatchNorm1d(4, track_running_stats=False),
    )
    assert not corr._per_sample(bn) and corr._per_sample(torch.nn.BatchNorm1d(4))


def test_non_finite_rows_become_zero_rows_the_release_is_total():
    """A row with a non-finite entry is replaced by the zero row (inside the clipping
    ball) instead of raising: the outcome cannot depend on which rows overflow."""
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])

    def enc(b):  # +inf exactly for rows whose first coordinate exceeds 2
        out = b.clone()
        out[b[:, 0] > 2] = float("inf")
        return out

    stats: dict = {}
    r = dp_correlation(enc, x, None, 1, 4.0, 0.0, None, np.random.default_rng(0), 8, stats=stats)
    kept = x[:2].double()
    assert np.allclose(r, (kept.T @ kept).numpy() / 3)  # the third row counts as zero
    assert stats["nonfinite_fraction"] == pytest.approx(1 / 3)
    # the probe is total too: inf on both sides is no batch dependence
    assert batch_dependence(enc, x) == 0.0
