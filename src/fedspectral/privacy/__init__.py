"""Privacy core shared by both pillars: noise calibration, noise sources and accounting."""

from fedspectral.privacy.accounting import PrivacyLedger, Release
from fedspectral.privacy.budget import BudgetAccountant, BudgetExceededError, check_accountant
from fedspectral.privacy.calibration import calibrate_noise_multiplier
from fedspectral.privacy.gaussian_shares import DistributedGaussian, distributed_gaussian
from fedspectral.privacy.mechanisms import (
    CALIBRATIONS,
    VECTORISATIONS,
    add_symmetric_gaussian,
    gaussian_sigma,
    symmetric_gaussian,
)
from fedspectral.privacy.noise import (
    OpenDPNoise,
    SecureNoise,
    add_gaussian,
    as_noise_source,
    noise_mechanism,
)

__all__ = [
    "CALIBRATIONS",
    "VECTORISATIONS",
    "BudgetAccountant",
    "BudgetExceededError",
    "DistributedGaussian",
    "OpenDPNoise",
    "PrivacyLedger",
    "Release",
    "SecureNoise",
    "add_gaussian",
    "add_symmetric_gaussian",
    "as_noise_source",
    "calibrate_noise_multiplier",
    "check_accountant",
    "distributed_gaussian",
    "gaussian_sigma",
    "noise_mechanism",
    "symmetric_gaussian",
]
