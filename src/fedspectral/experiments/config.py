"""The experiment configuration, re-exported from :mod:`fedspectral.config` (where the
schema now lives, below the federated code that is built on it)."""

from fedspectral.config import (
    MAX_SIGMA,
    MAX_WIDTH,
    SECTIONS,
    DataConfig,
    DPConfig,
    EvalConfig,
    ExperimentConfig,
    MethodConfig,
    ModelConfig,
    OptimConfig,
    PartitionConfig,
    RunConfig,
    apply_overrides,
    from_dict,
    save_config,
    to_dict,
)
from fedspectral.fed.validation import config_fingerprint, load_config, validate

__all__ = [
    "MAX_SIGMA",
    "MAX_WIDTH",
    "SECTIONS",
    "DPConfig",
    "DataConfig",
    "EvalConfig",
    "ExperimentConfig",
    "MethodConfig",
    "ModelConfig",
    "OptimConfig",
    "PartitionConfig",
    "RunConfig",
    "apply_overrides",
    "config_fingerprint",
    "from_dict",
    "load_config",
    "save_config",
    "to_dict",
    "validate",
]
