r"""Distributed Gaussian mechanism: one central release's noise, added in shares.

Several parties (data holders) each release a summand :math:`s_h + g_h` through a secure
sum, and the analyst sees only :math:`\sum_h (s_h + g_h)`.  If every contributor adds a
share :math:`g_h \sim N(0, \sigma_s^2 I)` with

.. math:: \sigma_s^2 = \frac{\sigma^2}{m_{min} - c},

where :math:`\sigma` is the central Gaussian mechanism's noise for the target
:math:`(\varepsilon, \delta)` at L2 sensitivity :math:`\Delta`
(:func:`~fedspectral.privacy.gaussian_sigma`), :math:`m_{min}` the fewest contributors
the secure sum accepts, and :math:`c` the number of contributors that may collude with
the analyst (they know, and can subtract, their own shares), then a completed sum with
:math:`C \ge m_{min}` contributors carries noise of variance
:math:`(C - c)\,\sigma_s^2 \ge \sigma^2` that the analyst cannot remove: at least the
central mechanism's.  Sums of independent Gaussians are Gaussian, so the released sum is
*exactly* the central Gaussian mechanism at noise :math:`\sigma_s\sqrt{C - c}`.

Two threat models (recorded by the caller, :mod:`fedspectral.privacy.accounting`):

* **secure aggregation holds** (``threat="secagg"``): one Gaussian release of the
  summand at noise :math:`\sigma_s\sqrt{C - c}` (:meth:`DistributedGaussian.secagg_sigma`);
* **secure aggregation broken** (``threat="fallback"``): each summand seen alone, at its
  own share :math:`\sigma_s` only -- a weaker guarantee, reported, never hidden.

``c = 0`` (the default) is the brief of the distributed PCA mode: share variance
:math:`\sigma^2/m_{min}`.  FedSC's secure share phase uses :math:`c = 1`
(:math:`\sigma/\sqrt{m_{min} - 1}`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedspectral.checks import check_choice, check_real
from fedspectral.privacy.mechanism import Gaussian
from fedspectral.privacy.mechanisms import CALIBRATIONS, gaussian_sigma
from fedspectral.privacy.validate import check_count

__all__ = ["DistributedGaussian", "distributed_gaussian"]


@dataclass(frozen=True)
class DistributedGaussian:
    """The noise of a distributed Gaussian release (module docstring).

    ``sigma`` is the central mechanism's σ for (``epsilon``, ``delta``) at
    ``sensitivity``; ``share_sigma`` the σ each contributor adds."""

    epsilon: float
    delta: float
    sensitivity: float
    method: str
    min_contributors: int
    colluders: int
    sigma: float
    share_sigma: float

    def total_sigma(self, contributors: int) -> float:
        r"""σ of the noise in a sum of ``contributors`` summands,
        :math:`\sigma_s\sqrt C` (all shares: the law of the released sum's noise)."""
        c = check_count("contributors", contributors, low=1)
        return self.share_sigma * math.sqrt(c)

    def share(self, neighbouring: str = "replace_one") -> Gaussian:
        """One contributor's share as a mechanism (σ = ``share_sigma``): what it adds, and
        its release seen alone (the fallback reading)."""
        return Gaussian(self.share_sigma, self.sensitivity, neighbouring)

    def secagg(self, contributors: int, neighbouring: str = "replace_one") -> Gaussian:
        """The release protecting each summand of a completed sum of ``contributors``
        under secure aggregation (σ = :meth:`secagg_sigma`)."""
        return Gaussian(self.secagg_sigma(contributors), self.sensitivity, neighbouring)

    def secagg_sigma(self, contributors: int) -> float:
        r"""σ protecting each summand when secure aggregation holds,
        :math:`\sigma_s\sqrt{C - c}` (the colluders' own shares removed);
        ``ValueError`` when ``contributors`` is below ``min_contributors`` (the secure
        sum must abort: it released nothing)."""
        c = check_count("contributors", contributors, low=1)
        if c < self.min_contributors:
            raise ValueError(
                f"contributors={c} is below min_contributors="
                f"{self.min_contributors}: the secure sum must abort"
            )
        return self.share_sigma * math.sqrt(c - self.colluders)


def distributed_gaussian(
    epsilon: float,
    delta: float,
    sensitivity: float,
    min_contributors: int,
    method: str = "analytic",
    *,
    colluders: int = 0,
) -> DistributedGaussian:
    r"""Shares of the central Gaussian mechanism's noise (module docstring).

    Parameters
    ----------
    epsilon, delta : float
        The target guarantee of each protected record when secure aggregation holds
        (``epsilon = inf``: no noise).
    sensitivity : float
        L2 sensitivity :math:`\Delta` of one summand under the caller's neighbouring
        relation (one record changes one summand only).
    min_contributors : int >= 1
        :math:`m_{min}`, the fewest contributors the secure sum accepts.
    method : {"analytic", "classic"}
        Calibration of the central σ (:func:`~fedspectral.privacy.gaussian_sigma`).
    colluders : int, default 0
        :math:`c`, contributors that may collude with the analyst,
        ``0 <= c < min_contributors``.

    Returns
    -------
    DistributedGaussian
        With ``share_sigma`` :math:`= \sigma/\sqrt{m_{min} - c}`.
    """
    m = check_count("min_contributors", min_contributors, low=1)
    c = check_count("colluders", colluders, low=0)
    if c >= m:
        raise ValueError(
            f"colluders={c} must be < min_contributors={m} (the colluders' shares protect no one)"
        )
    check_choice("method", method, CALIBRATIONS)
    sens = check_real("sensitivity", sensitivity, low=0.0, low_open=True)
    sigma = gaussian_sigma(epsilon, delta, sens, method)
    return DistributedGaussian(
        float(epsilon), float(delta), sens, method, m, c, sigma, sigma / math.sqrt(m - c)
    )
