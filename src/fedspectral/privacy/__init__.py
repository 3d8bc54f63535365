"""Privacy core shared by both pillars: noise calibration and accounting."""

from fedspectral.privacy.accounting import PrivacyLedger, Release, calibrate_noise_multiplier
from fedspectral.privacy.mechanisms import (
    CALIBRATIONS,
    VECTORISATIONS,
    gaussian_sigma,
    symmetric_gaussian,
)

__all__ = [
    "CALIBRATIONS",
    "VECTORISATIONS",
    "PrivacyLedger",
    "Release",
    "calibrate_noise_multiplier",
    "gaussian_sigma",
    "symmetric_gaussian",
]
