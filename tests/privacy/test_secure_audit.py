"""`fedspectral audit` with the node's secure source (issue 35): the default calibrations
still pass and the negative controls are still caught.

The secure source's bits come from a seeded Philox stream here (a fresh child of one
seed sequence per release, as the real source keys a fresh generator per release), so
each verdict is deterministic; nothing outside tests can seed it.
"""

import numpy as np

from fedspectral.experiments.audit import audit_dp_calr, audit_ldp_pca
from fedspectral.privacy import SecureNoise


class SeededSecure(SecureNoise):
    def __init__(self, seed: int) -> None:
        self._seq = np.random.SeedSequence(seed)

    def _bits(self) -> np.random.BitGenerator:
        return np.random.Philox(self._seq.spawn(1)[0])


def test_ldp_pca_audit_with_the_secure_source():
    ok = audit_ldp_pca(noise=SeededSecure(1), samples=400_000)
    assert ok.passed and ok.epsilon_lower_bound > 0.8  # not vacuous
    bad = audit_ldp_pca(calibration="paper", noise=SeededSecure(2))
    assert not bad.passed and bad.epsilon_lower_bound > bad.epsilon_claimed


def test_dp_calr_audit_with_the_secure_source():
    ok = audit_dp_calr(samples=2000, noise=SeededSecure(3))
    assert ok.passed and ok.epsilon_lower_bound <= ok.epsilon_claimed
    bad = audit_dp_calr(calibration="noclip", samples=1000, noise=SeededSecure(4))
    assert not bad.passed and bad.epsilon_lower_bound > 2 * bad.epsilon_claimed
