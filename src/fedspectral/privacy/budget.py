r"""A privacy budget shared across fits: :class:`BudgetAccountant`.

Each fit of a private estimator releases something about its users and records it in
its own :class:`~fedspectral.privacy.PrivacyLedger`.  Fits over the *same* users compose:
a grid search or a cross-validation that refits an estimator ``m`` times releases ``m``
times.  A :class:`BudgetAccountant` is one budget :math:`(\varepsilon, \delta)` that several
estimators, and repeated fits of one, draw from (the idea of diffprivlib's
``BudgetAccountant``; written here over this package's ledger):

* every fit tells the accountant what it will release -- its Gaussian releases, known from
  its parameters alone -- and which users it covers; the accountant refuses the fit
  (:class:`BudgetExceededError`) **before it touches data** when the composition would
  exceed the budget;
* composition is dp-accounting's (PLD by default, or RDP) over the releases themselves,
  at the budget's δ, user by user: a user's ε is that of every release that covered
  them.  No ε is added by hand: with ``m`` fits of :math:`(\varepsilon_i, \delta_i)` the
  accountant's ε at :math:`\delta \ge \sum\delta_i` is at most basic composition's
  :math:`\sum\varepsilon_i` (up to PLD's pessimistic discretisation), and usually far
  below;
* which users a fit covers: ``parties=None`` means *every* user (the estimator does not
  know who its rows are, so each fit is charged to all users: an upper bound); an
  iterable of user ids charges only those users.  ``LocalDPPCA.fit(X, user_ids=ids)``
  passes them, and scikit-learn's ``GridSearchCV`` / ``cross_validate`` slice ``user_ids``
  with the rows, so a k-fold cross-validation is charged exactly what it spends: each
  user the ``k - 1`` fits whose training folds held them.

Using an accountant in an estimator (the protocol, three calls)::

    acc = check_accountant(self.accountant)       # None, or a BudgetAccountant
    planned = [...]                                # the fit's Release objects, from its
                                                   # parameters alone (no data)
    if acc is not None:
        acc.check(planned, parties=user_ids)       # 1. before touching data: may refuse
    ...validate X...
    if acc is not None:
        acc.spend(planned, parties=user_ids)       # 2. just before the noise is drawn
    ...release...

``spend`` checks again and records under a lock, so two fits racing for the last of a
budget cannot both pass.  A spent release is never refunded, even if the fit fails after
it (conservative).  The accountant is a shared resource: ``copy.copy`` and
``copy.deepcopy`` (hence scikit-learn's ``clone``) return the same object, so every clone
made by a search draws from the one budget.  A copy made by pickling (a joblib worker
process, ``n_jobs > 1``) refuses to charge anything, since its spending would be lost:
run searches with ``n_jobs=1`` (or joblib's threading backend).  There is no global
default accountant (no global mutable state): a fit without ``accountant=`` is accounted
only in its own ``ledger_``.

Every fit drawing from one accountant must protect the same kind of neighbour (the
releases carry their neighbouring relation and unit; releases of different units are
refused by the ledger's composition).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Iterable
from typing import Any

from fedspectral.checks import check_choice, check_real, describe
from fedspectral.kinds import PLD, RDP
from fedspectral.privacy.accounting import PrivacyLedger, Release, epsilon_of_releases

__all__ = ["BUDGET_ACCOUNTANTS", "BudgetAccountant", "BudgetExceededError", "check_accountant"]

#: dp-accounting accountants a budget composes with
BUDGET_ACCOUNTANTS = (PLD, RDP)
#: relative slack when comparing ε with the budget (PLD's grid is pessimistic; a fit
#: calibrated to exactly the budget must not be refused by rounding)
_RTOL = 1e-9


class BudgetExceededError(ValueError):
    """A fit refused because its releases would take the budget past its ε."""


class BudgetAccountant:
    r"""A privacy budget :math:`(\varepsilon, \delta)` drawn from by several fits.

    Parameters
    ----------
    epsilon : float > 0
        Total ε allowed for any one user over every fit charged here (``np.inf``:
        unlimited, spending still recorded).
    delta : float in (0, 1)
        The δ at which the composed ε is computed and compared with ``epsilon``.
    accountant : {"pld", "rdp"}, default "pld"
        dp-accounting's accountant used to compose (PLD: numerically tight; RDP: an
        upper bound, cheaper for very many releases).

    Examples
    --------
    >>> from fedspectral.privacy import BudgetAccountant
    >>> from fedspectral.pca import LocalDPPCA
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(500, 4)) / 4
    >>> acc = BudgetAccountant(epsilon=2.0, delta=1e-5)
    >>> _ = LocalDPPCA(2, epsilon=1.0, delta=1e-6, accountant=acc, random_state=0).fit(X)
    >>> len(acc), round(acc.spent(), 2) <= 2.0
    (1, True)
    """

    def __init__(self, epsilon: float, delta: float, accountant: str = "pld") -> None:
        self._epsilon = check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=True)
        self._delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        self._accountant = check_choice("accountant", accountant, BUDGET_ACCOUNTANTS)
        self._lock = threading.Lock()
        self._spends: list[tuple[Release, ...]] = []
        self._everyone: list[int] = []  # spends charged to every user
        self._per_user: dict[Hashable, list[int]] = {}  # user id -> spends naming them
        self._cache: dict[tuple[Any, ...], float] = {}  # (history, extra) -> epsilon

    # -- read-only parameters ------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The budget's ε."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The δ at which ε is composed."""
        return self._delta

    @property
    def accountant(self) -> str:
        """dp-accounting's accountant used to compose."""
        return self._accountant

    # -- a shared resource: never copied ----------------------------------------------
    def __copy__(self) -> BudgetAccountant:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetAccountant:
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # an unpickled accountant is a copy, typically in another process (joblib workers
        # of a search with n_jobs > 1): what it spent would never reach the original, so
        # it refuses to charge anything (fail closed); it can still be read
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._detached = True

    def _attached(self) -> None:
        if self.__dict__.get("_detached", False):
            raise RuntimeError(
                "this BudgetAccountant is a copy made by pickling (e.g. a "
                "joblib worker of a search with n_jobs > 1); its spending "
                "would not reach the shared budget, so it refuses to charge "
                "fits: run the search with n_jobs=1 or a threading backend"
            )

    def __len__(self) -> int:
        """Number of fits charged."""
        return len(self._spends)

    def __repr__(self) -> str:
        # spent: the fits' releases composed, read at this budget's delta (so a fit at
        # epsilon=1, delta=1e-6 shows less than 1 against delta=1e-5)
        n = len(self)
        return (
            f"BudgetAccountant(epsilon={self._epsilon:g}, delta={self._delta:g}, "
            f"accountant={self._accountant!r}; {n} fit{'' if n == 1 else 's'}, spent "
            f"epsilon={self.spent():.4g} at delta={self._delta:g}: the most-charged user's "
            f"releases composed by {self._accountant})"
        )

    # -- composition -----------------------------------------------------------------
    def _eps(self, history: tuple[int, ...], extra: tuple[Release, ...] = ()) -> float:
        """ε of the spends in ``history`` plus ``extra`` (cached: spends never change)."""
        key = (history, extra)
        if key not in self._cache:
            rels = [r for i in history for r in self._spends[i]] + list(extra)
            self._cache[key] = (
                epsilon_of_releases(rels, self._delta, self._accountant) if rels else 0.0
            )
        return self._cache[key]

    def _histories(self, ids: frozenset | None) -> set[tuple[tuple[int, ...], bool]]:
        """Distinct (history, covered by the new fit) pairs over all users: a user never
        named has the history of the everyone-spends."""
        everyone = tuple(self._everyone)
        out = {(everyone, ids is None)}
        for uid, named in self._per_user.items():
            hist = tuple(sorted(self._everyone + named))
            out.add((hist, ids is None or uid in ids))
        if ids is not None:
            out.update((everyone, True) for uid in ids if uid not in self._per_user)
        return out

    def spent(self) -> float:
        """ε (at the budget's δ) of the most-charged user so far (0 before any fit)."""
        with self._lock:
            return max(self._eps(h) for h, _ in self._histories(None))

    def remaining(self) -> float:
        """``epsilon - spent()``: how far the most-charged user is from the budget.  Not
        an ε that one more fit may use: ε does not add up (the accountant composes)."""
        return max(self._epsilon - self.spent(), 0.0)

    def would_spend(
        self, releases: Iterable[Release], parties: Iterable[Hashable] | None = None
    ) -> float:
        """ε of the most-charged user if ``releases`` were charged to ``parties`` (every
        user when ``None``); nothing is recorded."""
        rels, ids = _check_releases(releases), _check_parties(parties)
        with self._lock:
            return self._would_spend(rels, ids)

    def _would_spend(self, rels: tuple[Release, ...], ids: frozenset | None) -> float:
        return max(self._eps(h, rels if covered else ()) for h, covered in self._histories(ids))

    def check(
        self, releases: Iterable[Release], parties: Iterable[Hashable] | None = None
    ) -> float:
        """Refuse (:class:`BudgetExceededError`) unless ``releases`` charged to ``parties``
        keep every user within the budget; returns the ε they would bring it to."""
        rels, ids = _check_releases(releases), _check_parties(parties)
        self._attached()
        with self._lock:
            return self._check(rels, ids)

    def _check(self, rels: tuple[Release, ...], ids: frozenset | None) -> float:
        eps = self._would_spend(rels, ids)
        if not eps <= self._epsilon * (1 + _RTOL):
            who = "every user" if ids is None else f"{len(ids)} users"
            raise BudgetExceededError(
                f"privacy budget exceeded: this fit ({len(rels)} release(s) charged to {who}) "
                f"would bring epsilon to {eps:.4g} > the budget's {self._epsilon:g} at "
                f"delta={self._delta:g} ({self._accountant}; {len(self)} fits charged so "
                f"far, spent {self._would_spend((), None):.4g}); the fit was refused before "
                f"touching any data"
            )
        return eps

    def spend(
        self, releases: Iterable[Release], parties: Iterable[Hashable] | None = None
    ) -> float:
        """Check, then record ``releases`` as charged to ``parties`` (every user when
        ``None``); atomic.  Returns the new ε of the most-charged user."""
        rels, ids = _check_releases(releases), _check_parties(parties)
        self._attached()
        with self._lock:
            eps = self._check(rels, ids)
            idx = len(self._spends)
            self._spends.append(rels)
            if ids is None:
                self._everyone.append(idx)
            else:
                for uid in ids:
                    self._per_user.setdefault(uid, []).append(idx)
            return eps

    @property
    def ledger(self) -> PrivacyLedger:
        """Every release charged, in a :class:`~fedspectral.privacy.PrivacyLedger` (party
        names as recorded by the fits; who they covered is not in it)."""
        led = PrivacyLedger(unit=None)
        with self._lock:
            for rels in self._spends:
                for r in rels:
                    led.add(r)
        return led


def _check_releases(releases: Iterable[Release]) -> tuple[Release, ...]:
    if isinstance(releases, Release):
        releases = (releases,)
    try:
        rels = tuple(releases)
    except TypeError:
        raise TypeError(
            f"releases must be an iterable of Release, got {describe(releases)}"
        ) from None
    bad = [r for r in rels if not isinstance(r, Release)]
    if bad:
        raise TypeError(f"releases must be Release objects, got {describe(bad[0])}")
    if not rels:
        raise ValueError("a fit charged to a budget must declare at least one release")
    return rels


def _check_parties(parties: Iterable[Hashable] | None) -> frozenset | None:
    if parties is None:
        return None
    if isinstance(parties, str | bytes):
        raise TypeError(f"parties must be an iterable of user ids, got the string {parties!r}")
    try:
        ids = list(parties)
        out = frozenset(_plain(u) for u in ids)
    except TypeError as exc:
        raise TypeError(f"parties must be hashable user ids: {exc}") from None
    if len(out) != len(ids):
        raise ValueError(
            f"user ids must be distinct (one row per user); {len(ids)} ids, {len(out)} distinct"
        )
    if not out:
        raise ValueError("parties is empty: a fit covers at least one user")
    return out


def _plain(u: Any) -> Hashable:
    """numpy scalars as Python values, so ``np.int64(3)`` and ``3`` are one user."""
    u = u.item() if hasattr(u, "item") and callable(u.item) else u
    if isinstance(u, float) and math.isnan(u):
        raise TypeError("a user id cannot be NaN")
    return u


def check_accountant(accountant: Any) -> BudgetAccountant | None:
    """``accountant`` if it is ``None`` or a :class:`BudgetAccountant`; ``TypeError``
    otherwise (for an estimator's ``accountant=`` parameter, checked in ``fit``)."""
    if accountant is None or isinstance(accountant, BudgetAccountant):
        return accountant
    raise TypeError(
        f"accountant must be a fedspectral.privacy.BudgetAccountant or None, got "
        f"{describe(accountant)}"
    )
