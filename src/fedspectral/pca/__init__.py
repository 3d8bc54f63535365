"""Locally private PCA (Wang & Xu, IJCAI 2019): Algorithm 1 (dense) and Algorithm 2 (sparse).

* :mod:`fedspectral.pca.local` -- client message :func:`perturb`, server
  :class:`CovarianceAggregator`, noise calibration, simulation of ``n`` users;
* :mod:`fedspectral.pca.estimators` -- :class:`LocalDPPCA`, :class:`LocalDPSparsePCA`
  (scikit-learn estimators);
* :mod:`fedspectral.pca.holders` -- the distributed model: data holders add shares of
  one central Gaussian mechanism's noise to their sums, combined by secure aggregation;
  :mod:`fedspectral.pca.distributed_estimator` -- :class:`DistributedDPPCA`;
* :mod:`fedspectral.pca.fps` -- Fantope projection and selection by ADMM (Vu et al. 2013);
* :mod:`fedspectral.pca.synthetic` -- the paper's spiked and row-sparse models;
* :mod:`fedspectral.pca.bounds` -- Theorems 1-4 as rates;
* :mod:`fedspectral.pca.planner` -- :func:`required_users`, how many users a target needs.
* :mod:`fedspectral.pca.comparators` -- non-private, central Gaussian and OpenDP PCA,
  the methods Algorithm 1 is compared with.
"""

from fedspectral.pca.bounds import (
    davis_kahan_bound,
    theorem1_lower_bound,
    theorem2_upper_bound,
    theorem3_lower_bound,
    theorem4_upper_bound,
)
from fedspectral.pca.distributed_estimator import DistributedDPPCA
from fedspectral.pca.estimators import LAM_AUTO_CONSTANT, LocalDPPCA, LocalDPSparsePCA, auto_lambda
from fedspectral.pca.fps import FPSResult, fantope_projection, fps_admm, fps_objective
from fedspectral.pca.holders import (
    DistributedGaussian,
    distributed_from_moment,
    holder_message,
    holder_noise,
    record_distributed_release,
    simulate_holder_sums,
)
from fedspectral.pca.local import (
    SENSITIVITY,
    CovarianceAggregator,
    LDPNoiseScale,
    clip_rows,
    ldp_from_moment,
    ldp_noise_scale,
    perturb,
    perturb_batch,
    record_ldp_release,
    simulate_messages_sum,
)
from fedspectral.pca.planner import UsersPlan, required_users
from fedspectral.pca.synthetic import (
    random_stiefel,
    row_sparse_covariance,
    sample,
    spiked_covariance,
    spiked_eigenvalues,
)

__all__ = [
    "LAM_AUTO_CONSTANT",
    "SENSITIVITY",
    "CovarianceAggregator",
    "DistributedDPPCA",
    "DistributedGaussian",
    "FPSResult",
    "LDPNoiseScale",
    "LocalDPPCA",
    "LocalDPSparsePCA",
    "UsersPlan",
    "auto_lambda",
    "clip_rows",
    "davis_kahan_bound",
    "distributed_from_moment",
    "fantope_projection",
    "fps_admm",
    "fps_objective",
    "holder_message",
    "holder_noise",
    "ldp_from_moment",
    "ldp_noise_scale",
    "perturb",
    "perturb_batch",
    "random_stiefel",
    "record_distributed_release",
    "record_ldp_release",
    "required_users",
    "row_sparse_covariance",
    "sample",
    "simulate_holder_sums",
    "simulate_messages_sum",
    "spiked_covariance",
    "spiked_eigenvalues",
    "theorem1_lower_bound",
    "theorem2_upper_bound",
    "theorem3_lower_bound",
    "theorem4_upper_bound",
]
