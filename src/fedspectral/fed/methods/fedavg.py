r"""FedAvg+SC: federated averaging of local spectral contrastive training.

Each round :math:`t` the server sends :math:`\theta^{t-1}` to the sampled clients
:math:`\mathcal J^t`; client :math:`j` runs ``local_epochs`` epochs of SGD on the SC
loss of its own data (the FedSC paper Eq. 2, batch estimates Eq. 8),

.. math::

    \hat{\mathcal L}_j = -\operatorname{Tr}\hat R^+_j + \tfrac12\|\hat R_j\|_F^2 ,

and the server averages the returned weights,
:math:`\theta^t = |\mathcal J^t|^{-1}\sum_{j\in\mathcal J^t}\theta_j^t` (or weighted by
:math:`|D_j|` with ``method.weighted``).  Because
:math:`\mathcal L(\theta;\mathcal D) \ne \sum_j q_j\mathcal L(\theta;\mathcal D_j)` in
general (paper Eq. 4), this does not minimise the global SC objective under non-iid
data: the plain federated averaging that FedSC corrects.

The machinery the SC methods share (:class:`~fedspectral.fed.methods.sc.SCMethod`,
:func:`~fedspectral.fed.methods.sc.local_train`) lives in :mod:`fedspectral.fed.methods.sc`.
"""

from __future__ import annotations

from fedspectral.fed.methods.sc import SCMethod

__all__ = ["FedAvgSC"]


class FedAvgSC(SCMethod):
    """FedAvg+SC (see the module docstring)."""

    name = "fedavg_sc"
