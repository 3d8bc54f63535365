"""Noise sources (defect 8): seeded numpy for experiments, the secure source for devices."""

import math

import numpy as np
import pytest
from scipy import stats

from fedspectral.fed.protocol import client_generators
from fedspectral.pca.local import perturb, perturb_batch
from fedspectral.privacy import (
    SecureNoise,
    add_gaussian,
    add_symmetric_gaussian,
    as_noise_source,
    symmetric_gaussian,
)


def test_secure_noise_is_gaussian_with_the_requested_scale():
    # 10 000 draws from OS entropy (no seed: each run is a fresh draw, so each check's
    # false-alarm rate is what matters): the sample sd has relative sd 0.7 %, tolerance 4 %
    # (6 sd, about 2e-9); the mean within 5.5 sd (4e-8); KS at p > 1e-6 (1e-6)
    sigma = 0.7
    x = np.full(10_000, 3.25)
    y = SecureNoise().add_gaussian(x, sigma)
    e = (y - x) / sigma
    assert abs(e.mean()) < 5.5 / math.sqrt(e.size)
    assert e.std() == pytest.approx(1.0, rel=0.04)
    assert stats.kstest(e, "norm").pvalue > 1e-6


def test_secure_noise_takes_no_seed_and_ignores_numpy_state():
    src = SecureNoise()
    np.random.seed(0)
    a = src.add_gaussian(np.zeros(64), 1.0)
    np.random.seed(0)
    b = src.add_gaussian(np.zeros(64), 1.0)
    assert not np.array_equal(a, b)  # OS entropy, not numpy's generator
    with pytest.raises(ValueError, match="finite"):
        src.add_gaussian(np.array([np.nan]), 1.0)


def test_numpy_path_draws_the_historical_stream():
    x = np.arange(6.0).reshape(2, 3)
    got = add_gaussian(x, 0.3, np.random.default_rng(5))
    np.testing.assert_array_equal(got, x + 0.3 * np.random.default_rng(5).standard_normal((2, 3)))
    m = np.eye(4)
    np.testing.assert_array_equal(
        add_symmetric_gaussian(m, 0.2, np.random.default_rng(1)),
        m + symmetric_gaussian(4, 0.2, np.random.default_rng(1)),
    )


@pytest.mark.parametrize("vectorisation, off_var", [("isometric", 0.125), ("upper", 0.25)])
def test_secure_symmetric_release_is_symmetric_and_noised_once_per_entry(vectorisation, off_var):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 6))
    a = a + a.T
    out = add_symmetric_gaussian(a, 0.5, "secure", vectorisation)
    np.testing.assert_array_equal(out, out.T)
    assert not np.allclose(out, a)
    # many releases: diagonal variance sigma^2 (not doubled); off the diagonal sigma^2
    # on the plain upper triangle, sigma^2 / 2 once the isometric sqrt(2) is undone
    noise = np.stack(
        [add_symmetric_gaussian(a, 0.5, "secure", vectorisation) - a for _ in range(300)]
    )
    assert np.var(noise[:, 0, 0]) == pytest.approx(0.25, rel=0.25)
    assert np.var(noise[:, 0, 1]) == pytest.approx(off_var, rel=0.25)


def test_device_paths_use_the_secure_source():
    # a device's message (rng=None) and a deployment's client generators
    x = np.array([0.6, 0.8, 0.0])
    assert not np.array_equal(perturb(x, 1.0, 1e-5), perturb(x, 1.0, 1e-5))
    _, src = client_generators(0, 1, "c", "share", noise_seed=None)
    assert isinstance(src, SecureNoise)
    _, src = client_generators(0, 1, "c", "share", noise_seed="secure")
    assert isinstance(src, SecureNoise)
    _, src = client_generators(0, 1, "c", "share")
    assert isinstance(src, np.random.Generator)  # experiments stay seeded and fast
    m = perturb_batch(np.eye(3), 1.0, 1e-5, rng="secure")
    assert m.shape == (3, 6)
    with pytest.raises(TypeError, match="secure"):
        as_noise_source(3)


def test_secure_path_through_dp_correlation():
    import torch

    from fedspectral.fed.correlation import dp_correlation

    x = torch.randn(10, 3, dtype=torch.float64)
    r1 = dp_correlation(lambda z: z, x, None, 1, 4.0, 0.1, None, SecureNoise())
    r2 = dp_correlation(lambda z: z, x, None, 1, 4.0, 0.1, None, "secure")
    assert np.array_equal(r1, r1.T) and not np.array_equal(r1, r2)
