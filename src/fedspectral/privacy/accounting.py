r"""Privacy accounting: every release recorded as a dp-accounting event.

A :class:`PrivacyLedger` holds the Gaussian releases made by each *party* (a
user, a client, a Flower node).  Each release is stored with the noise standard
deviation :math:`\sigma` and the L2 sensitivity :math:`\Delta` under the stated
neighbouring relation, so its noise multiplier is :math:`z=\sigma/\Delta`.  The
ε of a party is computed by an accountant of ``dp_accounting``:

``"rdp"``
    Rényi-DP accountant (``dp_accounting.rdp.RdpAccountant``).
``"pld"``
    Privacy-loss-distribution accountant (numerically tight).
``"closed_form"``
    The RDP bound optimised in closed form, :math:`\rho + 2\sqrt{\rho\ln(1/\delta)}`
    with :math:`\rho=\sum_i T_i/(2z_i^2)`.  For :math:`T` releases of one noise
    multiplier this is :math:`T/(2z^2)+\sqrt{2T\ln(1/\delta)}/z`, the FedSC seed's
    Proposition (with :math:`z=\sigma|D_j|/\mu`, as in its proof).
``"analytic"``
    Exact ε of a single Gaussian release (Balle & Wang 2018); only for a party
    with exactly one release.

Sensitivities are computed by the caller for its own neighbouring relation and
every event is then a unit-sensitivity Gaussian; the accountants are therefore
always run with ``ADD_OR_REMOVE_ONE`` (under ``REPLACE_ONE`` the PLD accountant
would double the sensitivity a second time).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import dp_accounting

ACCOUNTANTS = ("rdp", "pld", "closed_form", "analytic")
NEIGHBOURING = ("replace_one", "add_remove")


@dataclass(frozen=True)
class Release:
    """One (possibly self-composed) Gaussian release by one party."""

    party: str
    mechanism: str
    sigma: float
    sensitivity: float
    count: int = 1
    neighbouring: str = "replace_one"
    step: int | None = None

    @property
    def noise_multiplier(self) -> float:
        """:math:`z = \\sigma / \\Delta` (0 means no noise: infinite ε)."""
        return self.sigma / self.sensitivity

    def dp_event(self) -> dp_accounting.DpEvent:
        if self.noise_multiplier == 0:
            return dp_accounting.NonPrivateDpEvent()
        ev = dp_accounting.GaussianDpEvent(self.noise_multiplier)
        return ev if self.count == 1 else dp_accounting.SelfComposedDpEvent(ev, self.count)


def _check_delta(delta: float) -> None:
    if not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _make_accountant(kind: str) -> dp_accounting.PrivacyAccountant:
    rel = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if kind == "rdp":
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=rel)
    if kind == "pld":
        return dp_accounting.pld.PLDAccountant(neighboring_relation=rel)
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {kind!r}")


def epsilon_of_releases(releases: list[Release], delta: float, accountant: str = "rdp") -> float:
    """ε(δ) of the composition of ``releases`` (all made by one party)."""
    _check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if not releases:
        return 0.0
    if any(r.noise_multiplier == 0 for r in releases):
        return math.inf
    if accountant == "closed_form":
        rho = sum(r.count / (2.0 * r.noise_multiplier**2) for r in releases)
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    if accountant == "analytic":
        if len(releases) != 1 or releases[0].count != 1:
            raise ValueError(
                f"the analytic accountant covers one release only, got "
                f"{sum(r.count for r in releases)} releases"
            )
        return float(dp_accounting.get_epsilon_gaussian(releases[0].noise_multiplier, delta))
    acc = _make_accountant(accountant)
    # group equal noise multipliers into one self-composed event (faster, same result)
    groups: OrderedDict[float, int] = OrderedDict()
    for r in releases:
        groups[r.noise_multiplier] = groups.get(r.noise_multiplier, 0) + r.count
    for z, count in groups.items():
        ev = dp_accounting.GaussianDpEvent(z)
        acc.compose(ev if count == 1 else dp_accounting.SelfComposedDpEvent(ev, count))
    return float(acc.get_epsilon(delta))


class PrivacyLedger:
    """Record of every privatised release, per party, with ε computed by accountants.

    Parties hold disjoint data, so the guarantee of the whole system is the
    worst party's (parallel composition): :meth:`epsilon` with ``party=None``
    returns the maximum over parties.

    Examples
    --------
    >>> led = PrivacyLedger()
    >>> _ = led.record("client-0", "fedsc/dp-calr", sigma=2.0, sensitivity=1.0, count=10)
    >>> round(led.epsilon(1e-5, accountant="pld"), 2)
    7.51
    """

    def __init__(self) -> None:
        self._releases: list[Release] = []

    # -- recording ---------------------------------------------------------
    def record(
        self,
        party: str,
        mechanism: str,
        sigma: float,
        sensitivity: float,
        count: int = 1,
        neighbouring: str = "replace_one",
        step: int | None = None,
    ) -> Release:
        """Record ``count`` Gaussian releases of noise ``sigma`` and sensitivity ``sensitivity``."""
        if not isinstance(sigma, (int, float)) or not sigma >= 0 or not math.isfinite(sigma):
            raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
        if not isinstance(sensitivity, (int, float)) or not sensitivity > 0 or not math.isfinite(
            sensitivity
        ):
            raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        if neighbouring not in NEIGHBOURING:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
        rel = Release(str(party), str(mechanism), float(sigma), float(sensitivity), count,
                      neighbouring, step)
        self._releases.append(rel)
        return rel

    def record_noise_multiplier(
        self, party: str, mechanism: str, noise_multiplier: float, count: int = 1,
        neighbouring: str = "add_remove", step: int | None = None,
    ) -> Release:
        """Record releases given directly by their noise multiplier (sensitivity 1)."""
        return self.record(party, mechanism, float(noise_multiplier), 1.0, count, neighbouring,
                           step)

    def merge(self, other: PrivacyLedger) -> None:
        """Append all releases of ``other``."""
        self._releases.extend(other._releases)

    # -- queries -----------------------------------------------------------
    @property
    def releases(self) -> list[Release]:
        return list(self._releases)

    @property
    def parties(self) -> list[str]:
        return list(OrderedDict.fromkeys(r.party for r in self._releases))

    def count(self, party: str | None = None) -> int:
        return sum(r.count for r in self._releases if party is None or r.party == party)

    def epsilon(self, delta: float, party: str | None = None, accountant: str = "rdp") -> float:
        """ε(δ) of ``party`` (or the maximum over all parties when ``party`` is None)."""
        _check_delta(delta)
        if party is not None:
            if party not in self.parties:
                raise ValueError(f"unknown party {party!r}; known: {self.parties[:10]}")
            return epsilon_of_releases([r for r in self._releases if r.party == party], delta,
                                       accountant)
        if not self._releases:
            return 0.0
        return max(self.epsilon(delta, p, accountant) for p in self.parties)

    def report(self, delta: float, accountants: tuple[str, ...] = ("rdp", "pld", "closed_form"),
               per_party: bool = False) -> dict[str, Any]:
        """ε by each accountant (max over parties, and per party if asked)."""
        out: dict[str, Any] = {"delta": delta, "releases": self.count(),
                               "parties": len(self.parties)}
        for a in accountants:
            out[f"epsilon_{a}"] = self.epsilon(delta, accountant=a)
        if per_party:
            out["per_party"] = {
                p: {f"epsilon_{a}": self.epsilon(delta, p, a) for a in accountants}
                for p in self.parties
            }
        return out

    # -- persistence -------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"releases": [asdict(r) for r in self._releases]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        led = cls()
        for r in data.get("releases", []):
            led._releases.append(Release(**r))
        return led

    def __len__(self) -> int:
        return len(self._releases)

    def __repr__(self) -> str:
        return f"PrivacyLedger(parties={len(self.parties)}, releases={self.count()})"


def calibrate_noise_multiplier(
    epsilon: float, delta: float, count: int, accountant: str = "rdp", tol: float = 1e-4
) -> float:
    """Smallest noise multiplier :math:`z` such that ``count`` Gaussian releases are (ε, δ)-DP.

    Uses ``dp_accounting.calibrate_dp_mechanism`` with the chosen accountant
    (``"rdp"`` or ``"pld"``); returns 0 for ``epsilon = inf``.
    """
    if not isinstance(epsilon, (int, float)) or math.isnan(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a number > 0, got {epsilon!r}")
    _check_delta(delta)
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    if math.isinf(epsilon):
        return 0.0
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be 'rdp' or 'pld' for calibration, got {accountant!r}")

    def make_event(z: float) -> dp_accounting.DpEvent:
        ev = dp_accounting.GaussianDpEvent(z)
        return ev if count == 1 else dp_accounting.SelfComposedDpEvent(ev, count)

    # Bracket: one release needs at least the single-release analytic z; the
    # closed-form RDP bound dominates both accountants, so its z is enough.
    lower = float(dp_accounting.get_sigma_gaussian(float(epsilon), float(delta)))
    upper = closed_form_noise_multiplier(epsilon, delta, count)
    if upper <= lower:
        return upper
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: _make_accountant(accountant),
            make_event,
            float(epsilon),
            float(delta),
            dp_accounting.ExplicitBracketInterval(lower, upper),
            tol=tol,
        )
    )


def closed_form_noise_multiplier(epsilon: float, delta: float, count: int) -> float:
    """Noise multiplier at which the closed-form bound equals ``epsilon`` (inverse of
    :math:`\\rho + 2\\sqrt{\\rho\\ln(1/\\delta)}`, :math:`\\rho = T/(2z^2)`)."""
    log_inv = math.log(1.0 / delta)
    rho = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    return math.sqrt(count / (2.0 * rho))
