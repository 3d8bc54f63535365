r"""A release's mechanism as one object: its noise, its sensitivity, its relation, its event.

A mechanism object holds what one privatised release is -- the noise law and scale, the
sensitivity of the released quantity under a neighbouring relation -- and everything
that follows from it comes from the same object:

- :meth:`~Gaussian.add` draws the noise (from a seeded numpy generator, or the secure
  source on a device: :mod:`fedspectral.privacy.noise`);
- :meth:`~Gaussian.event` is its ``dp_accounting`` event (a unit-sensitivity event of
  the noise multiplier :math:`z = \text{scale}/\Delta`, as the ledger composes them:
  :mod:`fedspectral.privacy.accounting`);
- :meth:`~Gaussian.entry` is the ledger's :class:`~fedspectral.privacy.accounting.Release`
  of one party.

:class:`Gaussian` is every release both pillars make (σ from
:func:`~fedspectral.privacy.mechanisms.gaussian_sigma` through :meth:`Gaussian.calibrated`);
:class:`Laplace` is here so that a release of another law enters the same ledger through
the same path: the ledger composes any law whose event dp-accounting's RDP and PLD
accountants know (:data:`LAWS`), with no code of its own per law.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np

from fedspectral.checks import check_choice, check_real, describe
from fedspectral.kinds import RELATIONS
from fedspectral.privacy.accounting import Release
from fedspectral.privacy.composition import LAWS, law_event
from fedspectral.privacy.mechanisms import add_symmetric_gaussian, gaussian_sigma
from fedspectral.privacy.noise import add_gaussian
from fedspectral.privacy.validate import real_values

__all__ = ["LAWS", "Gaussian", "Laplace", "law_event", "mechanism_of"]


@dataclass(frozen=True)
class _Mechanism:
    scale: float
    sensitivity: float
    neighbouring: str = "zero_out"

    law: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_real("scale", self.scale, low=0.0))
        sens = check_real("sensitivity", self.sensitivity, low=0.0, low_open=True)
        object.__setattr__(self, "sensitivity", sens)
        check_choice("neighbouring", self.neighbouring, RELATIONS)
        if not math.isfinite(self.scale / sens):
            raise ValueError(f"scale/sensitivity = {self.scale!r}/{sens!r} overflows")

    @property
    def noise_multiplier(self) -> float:
        """:math:`z = \\text{scale}/\\Delta` (0: no noise, no privacy)."""
        return self.scale / self.sensitivity

    def event(self, count: int = 1) -> dp_accounting.DpEvent:
        """The dp-accounting event of ``count`` such releases (:func:`law_event`)."""
        if self.scale == 0:
            return dp_accounting.NonPrivateDpEvent()
        return law_event(self.law, self.noise_multiplier, count)

    def entry(
        self,
        party: str,
        name: str,
        step: int | None = None,
        *,
        count: int = 1,
        unit: str = "sample",
        threat: str = "any",
        noise: str | None = None,
        values: int | None = None,
    ) -> Release:
        """The ledger's record of ``count`` such releases by ``party``, named ``name`` (the
        mechanism's name in the ledger: ``"fedsc/dp-calr"``, ...), in round ``step``."""
        return Release(
            party,
            name,
            self.scale,
            self.sensitivity,
            count,
            self.neighbouring,
            step,
            unit,
            threat,
            noise,
            values,
            law=self.law,
        )


@dataclass(frozen=True)
class Gaussian(_Mechanism):
    """A Gaussian release: ``N(0, scale^2)`` noise on each value of a quantity of L2
    ``sensitivity`` under ``neighbouring`` (``scale`` is σ)."""

    law: ClassVar[str] = "gaussian"

    @property
    def sigma(self) -> float:
        return self.scale

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        sensitivity: float,
        neighbouring: str = "zero_out",
        method: str = "analytic",
    ) -> Gaussian:
        """The Gaussian release that is (ε, δ)-DP once
        (:func:`~fedspectral.privacy.mechanisms.gaussian_sigma`)."""
        return cls(gaussian_sigma(epsilon, delta, sensitivity, method), sensitivity, neighbouring)

    def add(self, values: np.ndarray, source: Any) -> np.ndarray:
        """``values`` plus this release's noise from ``source``
        (:func:`~fedspectral.privacy.noise.add_gaussian`)."""
        return add_gaussian(values, self.scale, source)

    def add_symmetric(
        self, matrix: np.ndarray, source: Any, vectorisation: str = "isometric"
    ) -> np.ndarray:
        """A symmetric ``matrix`` plus this release's noise on its packed vector
        (:func:`~fedspectral.privacy.mechanisms.add_symmetric_gaussian`)."""
        return add_symmetric_gaussian(matrix, self.scale, source, vectorisation)


@dataclass(frozen=True)
class Laplace(_Mechanism):
    """A Laplace release: ``Laplace(0, scale)`` noise on each value of a quantity of L1
    ``sensitivity`` under ``neighbouring`` (pure ε = sensitivity/scale for one release)."""

    law: ClassVar[str] = "laplace"

    def add(self, values: np.ndarray, source: Any) -> np.ndarray:
        """``values`` plus this release's noise from a seeded numpy generator ``source``
        (experiments; the secure source draws Gaussian noise only and is refused)."""
        if not isinstance(source, np.random.Generator):
            raise TypeError(
                f"a Laplace release draws from a numpy Generator (experiments); got "
                f"{describe(source)}: the secure source draws Gaussian noise only"
            )
        real_values("values", values, finite=False)
        x = np.asarray(values, dtype=np.float64)
        return x + source.laplace(0.0, self.scale, x.shape) if self.scale else x.copy()


def mechanism_of(release: Any) -> Gaussian | Laplace:
    """The mechanism object of a ledger :class:`~fedspectral.privacy.accounting.Release`."""
    cls = Gaussian if release.law == "gaussian" else Laplace
    return cls(release.sigma, release.sensitivity, release.neighbouring)
