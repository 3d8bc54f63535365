r"""The server of Algorithm 1 (Wang & Xu, IJCAI 2019): the running sum of the users'
packed messages and the noisy second moment :math:`\hat S` it gives
(:mod:`fedspectral.pca.local` has the protocol, the messages and their vectorisations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from fedspectral.checks import check_choice, check_int
from fedspectral.linalg import VECTORISATIONS, n_packed, unpack_symmetric

__all__ = ["MAX_P", "CovarianceAggregator", "check_dimension", "dense_real"]

#: Largest data dimension accepted: the server holds p(p+1)/2 floats and Ŝ holds p² floats
#: (2 GiB at p = 16384); beyond it a clear error is raised instead of a MemoryError.
MAX_P: int = 16384


def check_dimension(p: object, name: str = "p") -> int:
    """``p`` as an int in ``[1, MAX_P]`` (a data dimension), else ``TypeError``/``ValueError``
    naming ``name``."""
    p = check_int(name, p, low=1)
    if p > MAX_P:
        raise ValueError(
            f"{name} must be <= {MAX_P} (MAX_P: the server holds p(p+1)/2 and p^2 floats), got {p}"
        )
    return p


def dense_real(a: object, name: str) -> np.ndarray:
    """``a`` as a numpy array, refused (TypeError naming ``name``) when it is a scipy
    sparse matrix or not of a real numeric dtype."""
    if scipy.sparse.issparse(a):
        raise TypeError(
            f"{name} must be a dense array, got a scipy.sparse "
            f"{type(a).__name__} of shape {getattr(a, 'shape', None)}; pass {name}.toarray()"
        )
    a = np.asarray(a)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    return a


@dataclass(eq=False)
class CovarianceAggregator:
    r"""Server side of Algorithm 1: running sum of packed messages.

    Holds one vector of :math:`p(p+1)/2` floats and a count -- :math:`O(p^2)`
    memory whatever the number of users.  Aggregators over disjoint groups of
    users combine with :meth:`merge` (addition: associative and commutative up
    to floating-point rounding).  :meth:`covariance` returns
    :math:`\hat S = \frac1n\,\mathrm{unpack}(\sum_i m_i)`, the (noisy, uncentred)
    second moment; for the isometric packing ``unpack`` divides the off-diagonal
    entries by :math:`\sqrt2` (the one place where the device's :math:`\sqrt2` is
    undone).

    The sum is held as ``mantissa * 2**exponent`` (a float64 vector and one integer
    exponent, 0 unless needed), so finite messages never overflow it: two messages of
    ``1e308`` give ``Ŝ = 1e308``, not ``inf``.  The exponent rises only when the sum
    would overflow; entries then smaller than about ``2**(exponent - 1074)`` are lost,
    as in any float64 sum of that magnitude.

    The whole state -- ``p``, ``vectorisation``, the sum (``_sum``, ``_exp``) and the
    count (``_count``) -- is what ``==`` compares (the represented sums compared
    exactly) and what ``dataclasses.asdict`` and :meth:`to_dict` hold;
    :meth:`from_dict` restores it (JSON-ready, checked).

    Parameters
    ----------
    p : int
        Data dimension, ``1 <= p <=`` :data:`MAX_P`.
    vectorisation : {"isometric", "upper"}, default "isometric"
        The packing of the messages (:func:`perturb`); ``"upper"`` for the paper's
        messages (what ``calibration="paper"`` sends by default).
    """

    p: int
    vectorisation: str = "isometric"
    _sum: Any = field(default=None, repr=False, kw_only=True)
    _exp: int = field(default=0, repr=False, kw_only=True)
    _count: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        self.p = check_dimension(self.p)
        check_choice("vectorisation", self.vectorisation, VECTORISATIONS)
        if self._sum is None:
            if self._exp != 0 or self._count != 0:
                raise ValueError(
                    f"an aggregator with _count={self._count!r} or _exp={self._exp!r} "
                    f"needs its _sum"
                )
            self._sum = np.zeros(n_packed(self.p))
            return
        # a state given back (``CovarianceAggregator(**dataclasses.asdict(a))``): the same
        # checks as from_dict, one path
        state = self._checked_state(self.p, self._sum, self._exp, self._count, "_")
        self._sum, self._exp, self._count = state

    def __eq__(self, other: object) -> bool:
        """Equal when ``p``, ``vectorisation``, the count and the represented sums
        (``mantissa * 2**exponent``, compared exactly) are."""
        if not isinstance(other, CovarianceAggregator):
            return NotImplemented
        if (self.p, self.vectorisation, self._count) != (
            other.p,
            other.vectorisation,
            other._count,
        ):
            return False
        lo, hi = sorted((self, other), key=lambda a: a._exp)
        # the mantissa of the larger exponent, scaled up to the smaller: exact (a power of
        # two) or ±inf, which no finite mantissa of ``lo`` equals
        with np.errstate(over="ignore"):
            return bool(np.array_equal(np.ldexp(hi._sum, hi._exp - lo._exp), lo._sum))

    __hash__ = None  # type: ignore[assignment]  # unhashable: mutable (the usual idiom)

    def to_dict(self) -> dict[str, Any]:
        """The whole state, JSON-ready: ``p``, ``vectorisation``, ``count``, ``exponent``
        and ``sum`` (the mantissa, a list of floats)."""
        return {
            "p": self.p,
            "vectorisation": self.vectorisation,
            "count": self._count,
            "exponent": self._exp,
            "sum": self._sum.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CovarianceAggregator:
        """The aggregator of :meth:`to_dict`; errors name the key at fault."""
        if not isinstance(data, dict):
            raise TypeError(f"aggregator data must be a dict, got {type(data).__name__}")
        keys = {"p", "vectorisation", "count", "exponent", "sum"}
        if set(data) != keys:
            raise ValueError(
                f"aggregator data must have the keys {sorted(keys)}, got {sorted(map(str, data))}"
            )
        agg = cls(data["p"], data["vectorisation"])
        agg._sum, agg._exp, agg._count = cls._checked_state(
            agg.p, data["sum"], data["exponent"], data["count"], ""
        )
        return agg

    @staticmethod
    def _checked_state(p: int, total: Any, exp: Any, count: Any, prefix: str) -> tuple:
        """``(sum, exponent, count)`` of a state given back, checked: ``count`` an integer
        >= 0, the exponent in ``[0, 2**20]``, the sum ``p(p+1)/2`` finite floats, all zero
        when the count is; errors name the key (``prefix`` ``"_"``: the dataclass fields
        ``_sum``, ``_exp``, ``_count``; ``""``: :meth:`to_dict`'s keys)."""
        names = {"sum": f"{prefix}sum", "exp": f"{prefix}exp" if prefix else "exponent"}
        names["count"] = f"{prefix}count"
        count = check_int(names["count"], count, low=0)
        exp = check_int(names["exp"], exp, low=0, high=1 << 20)
        if isinstance(total, (str, bytes)):
            raise TypeError(
                f"aggregator key {names['sum']!r} must be a list of floats, got "
                f"{type(total).__name__}"
            )
        try:
            total = np.array(dense_real(total, names["sum"]), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"aggregator key {names['sum']!r}: {exc}") from exc
        m = n_packed(p)
        if total.shape != (m,) or not np.isfinite(total).all():
            raise ValueError(
                f"aggregator key {names['sum']!r} must hold {m} finite floats "
                f"(p={p}), got shape {total.shape}"
            )
        if count == 0 and (exp or total.any()):
            raise ValueError("aggregator data has count 0 but a non-zero sum")
        return total, exp, count

    @property
    def n_packed(self) -> int:
        """Message length :math:`p(p+1)/2`."""
        return self._sum.shape[0]

    @property
    def count(self) -> int:
        """Number of messages aggregated."""
        return self._count

    @property
    def total(self) -> np.ndarray:
        """Sum of the packed messages (a copy; entries beyond float64's range are ``±inf``)."""
        with np.errstate(over="ignore"):
            return np.ldexp(self._sum, self._exp)

    def _check_msgs(self, a: object, ndim: int, name: str) -> tuple[np.ndarray, float]:
        """``a`` as float64 of the right shape, and its largest magnitude (finite)."""
        a = np.asarray(dense_real(a, name), dtype=np.float64)
        if a.ndim != ndim or a.shape[-1] != self.n_packed:
            want = "(m,)" if ndim == 1 else "(n, m)"
            raise ValueError(
                f"{name} must have shape {want} with m = p(p+1)/2 = {self.n_packed} "
                f"(p={self.p}), got shape {a.shape}"
            )
        if ndim == 2 and a.shape[0] == 0:
            raise ValueError(f"{name} is empty (shape {a.shape})")
        big = float(np.abs(a).max())  # NaN propagates, inf stays inf: one pass
        if not math.isfinite(big):
            raise ValueError(f"{name} contains NaN or infinite values")
        return a, big

    def _accumulate(self, part: np.ndarray, exp: int) -> None:
        """``sum += part * 2**exp``, raising the common exponent if the sum would overflow."""
        e = max(self._exp, exp)
        with np.errstate(over="ignore"):
            while True:
                new = np.ldexp(self._sum, self._exp - e) + np.ldexp(part, exp - e)
                if np.isfinite(new).all():
                    break
                e += 2
        self._sum, self._exp = new, e

    @staticmethod
    def _summed(msgs: np.ndarray, big: float) -> tuple[np.ndarray, int]:
        """Column sums of ``msgs`` as ``(mantissa, exponent)`` (no overflow)."""
        n = msgs.shape[0]
        if big * n < 2.0**1000:  # common case: plain BLAS sum, exponent 0
            return np.ones(n) @ msgs, 0
        e = math.frexp(big)[1] + n.bit_length()  # |sum| / 2**e <= 1
        return np.ones(n) @ np.ldexp(msgs, -e), e

    def add(self, message: np.ndarray) -> CovarianceAggregator:
        """Add one user's message (shape ``(p(p+1)/2,)``)."""
        msg, _ = self._check_msgs(message, 1, "message")
        self._accumulate(msg, 0)
        self._count += 1
        return self

    def add_batch(self, messages: np.ndarray) -> CovarianceAggregator:
        """Add the messages of several users (shape ``(n, p(p+1)/2)``)."""
        msgs, big = self._check_msgs(messages, 2, "messages")
        self._accumulate(*self._summed(msgs, big))
        self._count += msgs.shape[0]
        return self

    def add_sum(self, total: np.ndarray, count: int) -> CovarianceAggregator:
        """Add a pre-summed block of ``count`` messages (e.g. from
        :func:`simulate_messages_sum`)."""
        count = check_int("count", count, low=1)
        t, _ = self._check_msgs(total, 1, "total")
        self._accumulate(t, 0)
        self._count += count
        return self

    def merge(self, other: CovarianceAggregator) -> CovarianceAggregator:
        """Add the state of ``other`` (same ``p``, another group of users) into this
        aggregator; returns self.  Merging an aggregator into itself is refused (its
        messages would count twice)."""
        if not isinstance(other, CovarianceAggregator):
            raise TypeError(f"can only merge a CovarianceAggregator, got {type(other).__name__}")
        if other is self:
            raise ValueError(
                "cannot merge an aggregator into itself: its messages would "
                "count twice (merge aggregators of disjoint groups of users)"
            )
        if other.p != self.p:
            raise ValueError(f"cannot merge aggregators of dimension p={self.p} and p={other.p}")
        if other.vectorisation != self.vectorisation:
            raise ValueError(
                f"cannot merge aggregators of vectorisation "
                f"{self.vectorisation!r} and {other.vectorisation!r}"
            )
        self._accumulate(other._sum, other._exp)
        self._count += other._count
        return self

    def covariance(self) -> np.ndarray:
        r""":math:`\hat S = \frac1n\,\mathrm{unpack}(\sum_i m_i)`, symmetric ``p`` x ``p``
        (:func:`fedspectral.linalg.unpack_symmetric` with this aggregator's
        ``vectorisation``).

        Finite whenever the messages were (a mean of finite numbers)."""
        if self._count == 0:
            raise ValueError("no messages aggregated yet (count = 0)")
        with np.errstate(over="ignore"):
            mean = np.ldexp(self._sum / self._count, self._exp)
        if not np.isfinite(mean).all():  # only at the very edge of float64's range
            raise ValueError("the mean message exceeds float64's range")
        return unpack_symmetric(mean, self.p, self.vectorisation)
