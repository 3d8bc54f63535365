r"""Client-level DP on model updates (DP-FedAvg, McMahan et al. 2018): its noise scales and
the ε of the noised aggregate.

A round clips each answering client's model update to L2 norm :math:`C` (sensitivity
:math:`C` when one whole client is added or removed) and releases their mean with
Gaussian noise of noise multiplier :math:`z`:

* **server-side noise** (a trusted server): :math:`N(0, \sigma^2)` per weight of the mean
  of the :math:`m` clipped updates, :math:`\sigma = zC/m` (:func:`mean_sigma`, Flower's
  ``compute_stdv``);
* **client-side noise** (an untrusted server): each of the :math:`m` clients asked adds
  its share :math:`\sigma_c = zC/\sqrt m` to its own clipped update (:func:`share_sigma`,
  the distributed Gaussian of :mod:`.distributed` with no colluder); the :math:`m'` shares
  that arrive sum to noise multiplier :math:`z_c\sqrt{m'}` on the sum
  (:func:`summed_noise_multiplier`, :math:`z\sqrt{m'/m}` with :math:`z_c = z/\sqrt m`).

Each client's releases are recorded in the run's client-level
:class:`~fedspectral.privacy.PrivacyLedger` (its ε against the server for client-side
noise); the released aggregate's ε -- against whoever sees the model, composed over the
rounds whatever client took part -- is :func:`aggregate_epsilon`, one Gaussian event per
round through the ledger's accountants (:func:`~.accounting.epsilon_of_releases`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fedspectral.checks import check_real, describe
from fedspectral.kinds import RDP
from fedspectral.privacy.accounting import Release, epsilon_of_releases
from fedspectral.privacy.validate import check_count

__all__ = ["aggregate_epsilon", "mean_sigma", "share_sigma", "summed_noise_multiplier"]

#: the party and mechanism names of :func:`aggregate_epsilon`'s per-round events
AGGREGATE = "aggregate"


def _finite(what: str, value: float, *args: float) -> float:
    """``value`` if finite; else a ``ValueError`` naming the product that overflowed."""
    if not math.isfinite(value):
        raise ValueError(f"{what} of {', '.join(map(repr, args))} overflows float64")
    return float(value)


def mean_sigma(noise_multiplier: float, clipping_norm: float, contributors: int) -> float:
    r""":math:`zC/m`: the noise on the mean of ``contributors`` updates clipped to
    ``clipping_norm`` (server-side noise)."""
    z = check_real("noise_multiplier", noise_multiplier, low=0.0)
    c = check_real("clipping_norm", clipping_norm, low=0.0, low_open=True)
    m = check_count("contributors", contributors, low=1)
    return _finite("noise_multiplier x clipping_norm / contributors", z * c / m, z, c, m)


def share_sigma(noise_multiplier: float, clipping_norm: float, asked: int) -> float:
    r""":math:`zC/\sqrt m`: one client's share of the noise when ``asked`` clients are
    asked (client-side noise); the shares of all of them sum to :math:`zC` on the sum."""
    z = check_real("noise_multiplier", noise_multiplier, low=0.0)
    c = check_real("clipping_norm", clipping_norm, low=0.0, low_open=True)
    m = check_count("asked", asked, low=1)
    return _finite("noise_multiplier x clipping_norm / sqrt(asked)", z * c / math.sqrt(m), z, c, m)


def summed_noise_multiplier(share_multiplier: float, contributors: int) -> float:
    r""":math:`z_c\sqrt{m'}`: the noise multiplier of the sum of ``contributors`` updates
    that each carry a share of noise multiplier ``share_multiplier``."""
    z = check_real("share_multiplier", share_multiplier, low=0.0)
    m = check_count("contributors", contributors, low=1)
    return _finite("share_multiplier x sqrt(contributors)", z * math.sqrt(m), z, m)


def aggregate_epsilon(
    round_multipliers: Sequence[float], delta: float, accountant: str = RDP
) -> float:
    """ε(δ) of the released aggregates: one Gaussian event (add or remove one client) per
    round, of the noise multipliers ``round_multipliers``, composed by the ledger's
    accountant (no sampling amplification)."""
    if isinstance(round_multipliers, (str, bytes)) or not hasattr(round_multipliers, "__iter__"):
        raise TypeError(
            f"round_multipliers must be a sequence of reals, got {describe(round_multipliers)}"
        )
    rels = [
        Release(
            AGGREGATE,
            AGGREGATE,
            check_real(f"round_multipliers[{i}]", z, low=0.0),
            1.0,
            1,
            "add_remove",
            i + 1,
            unit="client",
        )
        for i, z in enumerate(round_multipliers)
    ]
    return epsilon_of_releases(rels, delta, accountant)
