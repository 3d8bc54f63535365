r"""Distributed private PCA with scikit-learn's API (:class:`DistributedDPPCA`).

The rows of ``X`` are users; ``groups`` says which data holder holds each row.  Every
holder adds a share of the central Gaussian mechanism's noise to the packed sum of its
users' :math:`x_ix_i^\top` and the shares meet in a secure sum
(:mod:`fedspectral.pca.holders` has the protocol, the sensitivity and the
accounting): the analyst's :math:`\hat S` carries noise :math:`\sigma/n` per entry,
a factor :math:`\sqrt n` below the local model's at the same (ε, δ) per user.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from fedspectral.checks import check_bool, check_choice, check_int
from fedspectral.kinds import ANALYTIC, PLD, RDP
from fedspectral.linalg import VECTORISATIONS, top_k_eigvecs
from fedspectral.pca.estimators import _check_random_state, _LocalDPBase
from fedspectral.pca.holders import (
    HOLDER_NOISE_MODES,
    NEIGHBOURING,
    holder_index,
    holder_noise,
    record_distributed_release,
    simulate_holder_sums,
)
from fedspectral.pca.local import NORM_POLICIES, CovarianceAggregator, _as_rng
from fedspectral.pca.rows import check_real_data
from fedspectral.privacy import PrivacyLedger
from fedspectral.privacy.accounting import accountants_at
from fedspectral.privacy.mechanisms import CALIBRATIONS

__all__ = ["DistributedDPPCA"]


class DistributedDPPCA(_LocalDPBase):
    r"""Private PCA over data holders: the central Gaussian mechanism in shares, summed by
    secure aggregation (:mod:`fedspectral.pca.holders`).

    Holder :math:`h` releases :math:`\mathrm{svec}(\sum_{i\in U_h}x_ix_i^\top) + g_h`,
    :math:`g_h \sim N(0, \sigma_s^2 I)`, :math:`\sigma_s = \sigma/\sqrt{m_{min} - c}`
    (:func:`fedspectral.privacy.distributed_gaussian`); the estimator returns the top-``k``
    eigenvectors of :math:`\hat S = \frac1n\,\mathrm{unpack}(\sum_h m_h)`.  With
    :math:`C \ge m_{min}` contributors each user is :math:`(\varepsilon, \delta)`-DP
    against the analyst while secure aggregation holds (the "Analyze Gauss" central
    mechanism of Dwork et al., STOC 2014, at noise :math:`\sigma_s\sqrt{C - c}`), and
    the property :attr:`privacy_` also reports the weaker guarantee if it is broken (each
    holder's message seen alone, at :math:`\sigma_s`).  Uncentred, like
    :class:`~fedspectral.pca.LocalDPPCA`.

    Parameters
    ----------
    n_components : int
        ``k``, ``1 <= k <= n_features``.
    epsilon, delta : float
        Each user's target (ε, δ) while secure aggregation holds (``epsilon=np.inf``:
        no noise).
    min_contributors : int or None, default None
        :math:`m_{min}`: the secure sum releases nothing with fewer contributors, and the
        shares are sized for it.  ``None``: every holder in ``groups``.
    neighbouring : {"replace_one", "add_remove"}, default "replace_one"
        The relation of ε: one row replaced (Δ = √2, the local model's; ``n`` public) or
        added/removed (Δ = 1).
    secure_aggregation : bool, default True
        ``False``: every holder releases its sum in the clear with the full central σ
        (the *per-holder central* model; the sum then carries :math:`\sigma\sqrt m`).
        ``min_contributors``, ``colluders`` and ``secure_sum`` belong to the secure sum:
        set with ``secure_aggregation=False`` they would have no effect, and are refused.
    colluders : int, default 0
        :math:`c`, holders that may collude with the analyst (their shares do not count
        towards the user's protection), ``0 <= c < m_min``.
    calibration : {"analytic", "classic"}, default "analytic"
        The central σ's calibration (:func:`fedspectral.privacy.gaussian_sigma`).
    noise_mode : {"aggregate", "per_holder"}, default "aggregate"
        Simulation: the sum of the holders' shares drawn at once (its exact law), or each
        holder's own draw (what holders send).
    norm_policy : {"clip", "raise"}, default "clip"
        Rows with ``||x|| > 1``: clipped to norm 1 with a warning, or ``ValueError``.
    random_state : None, int or numpy.random.Generator
        Noise source of the simulation (``None``: OS entropy).
    vectorisation : {"isometric", "upper"}, default "isometric"
        Packing of the holders' messages (:mod:`fedspectral.pca.local`).
    one_holder : bool, default False
        ``True``: every row is with one holder (the central Gaussian mechanism) and
        ``fit`` takes no ``groups``.  ``False`` (default): ``fit`` requires ``groups``,
        so that holder labels that do not arrive -- passed positionally as ``y``, or
        dropped by a meta-estimator that does not route them -- are an error, never a
        silent fit with one holder.
    secure_sum : callable or None, default None
        ``None``: the holders' messages are summed in floating point (the exact sum
        secure aggregation delivers, up to its quantisation).  Otherwise
        ``secure_sum(messages) -> (total, contributors)`` with ``messages`` a dict
        ``{holder id: packed message}`` (per-holder noise) -- e.g. the secure-sum
        exchange of :mod:`fedspectral.fed.secagg`; ``contributors`` (the holders whose
        message is in ``total``) must number at least ``min_contributors``, else
        ``fit`` raises (the sum aborted).

    Attributes
    ----------
    components_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    explained_variance_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    covariance_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    n_components_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    n_features_in_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    vectorisation_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    bootstrap_
        As in :class:`~fedspectral.pca.LocalDPPCA`.
    n_samples_ : int
        Users in the released sum (the contributors' rows).
    noise_scale_ : float
        :math:`\sigma_s`, each holder's share per packed entry.
    holders_ : list of str
        The holder ids (sorted labels of ``groups``; ``["0"]`` with ``one_holder``).
    contributors_ : list of str
        The holders whose message is in the sum.
    min_contributors_ : int
    noise_ : DistributedGaussian
        The calibration (central σ, share σ).
    ledger_ : PrivacyLedger
        Per holder ``users@<holder>``: a ``"secagg"`` and a ``"fallback"`` entry (one
        ``"any"`` entry without secure aggregation).

    Examples
    --------
    >>> import numpy as np
    >>> from fedspectral.pca import DistributedDPPCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 5)) / 5
    >>> est = DistributedDPPCA(2, epsilon=1.0, delta=1e-5, random_state=0)
    >>> est = est.fit(X, groups=rng.integers(0, 3, size=3000))
    >>> est.contributors_, round(est.privacy_["secagg"]["epsilon_analytic"], 3)
    (['0', '1', '2'], 1.0)
    """

    def __init__(
        self,
        n_components: int,
        epsilon: float,
        delta: float,
        min_contributors: int | None = None,
        neighbouring: str = "replace_one",
        secure_aggregation: bool = True,
        colluders: int = 0,
        calibration: str = "analytic",
        noise_mode: str = "aggregate",
        norm_policy: str = "clip",
        random_state: Any = None,
        vectorisation: str = "isometric",
        secure_sum: Any = None,
        one_holder: bool = False,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.min_contributors = min_contributors
        self.neighbouring = neighbouring
        self.secure_aggregation = secure_aggregation
        self.colluders = colluders
        self.calibration = calibration
        self.noise_mode = noise_mode
        self.norm_policy = norm_policy
        self.random_state = random_state
        self.vectorisation = vectorisation
        self.secure_sum = secure_sum
        self.one_holder = one_holder

    #: scikit-learn metadata routing: ``groups`` is requested by ``fit`` by default, so a
    #: meta-estimator (``GridSearchCV``, ``Pipeline``) passes it on once routing is enabled
    __metadata_request__fit = {"groups": True}  # noqa: RUF012 - scikit-learn's protocol

    def _validate_params(self) -> None:
        check_int("n_components", self.n_components, low=1)
        _check_random_state(self.random_state)
        check_choice("neighbouring", self.neighbouring, NEIGHBOURING)
        check_bool("secure_aggregation", self.secure_aggregation)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        check_choice("noise_mode", self.noise_mode, HOLDER_NOISE_MODES)
        check_choice("norm_policy", self.norm_policy, NORM_POLICIES)
        check_choice("vectorisation", self.vectorisation, VECTORISATIONS)
        if self.min_contributors is not None:
            check_int("min_contributors", self.min_contributors, low=1)
        check_int("colluders", self.colluders, low=0)
        check_bool("one_holder", self.one_holder)
        if self.secure_sum is not None and not callable(self.secure_sum):
            raise TypeError(
                f"secure_sum must be None or a callable, got {type(self.secure_sum).__name__}"
            )
        if not self.secure_aggregation:  # a parameter that has no effect is an error
            idle = [
                f"{name}={value!r}"
                for name, value, default in (
                    ("min_contributors", self.min_contributors, None),
                    ("colluders", self.colluders, 0),
                    ("secure_sum", self.secure_sum, None),
                )
                if value is not default and value != default
            ]
            if idle:
                raise ValueError(
                    f"{', '.join(idle)} set with secure_aggregation=False: these belong to "
                    f"the secure sum, and without it they would have no effect (each "
                    f"holder releases its sum in the clear); drop them or set "
                    f"secure_aggregation=True"
                )

    def _check_groups(self, y: Any, groups: Any) -> None:
        """``groups`` given unless ``one_holder``; ``y`` never holds holder labels."""
        if self.one_holder:
            if groups is not None:
                raise ValueError(
                    "groups given with one_holder=True: every row is with one holder "
                    "there, so the labels would have no effect; drop groups or set "
                    "one_holder=False"
                )
            return  # y ignored, as by every unsupervised scikit-learn estimator
        if y is not None:
            raise ValueError(
                "y must be None: DistributedDPPCA is unsupervised, and holder labels go "
                "in the keyword groups= (fit(X, groups=labels)); labels passed "
                "positionally land in y and would fit one holder"
            )
        if groups is None:
            raise ValueError(
                "groups is required: one holder label per row of X (or "
                "one_holder=True for the central model). Under GridSearchCV, "
                "cross_validate or a Pipeline, scikit-learn passes groups to fit only "
                "with metadata routing: sklearn.set_config(enable_metadata_routing=True)"
            )

    def _contributed_sum(
        self, X: np.ndarray, groups: Any, noise: Any, rng: np.random.Generator
    ) -> tuple[np.ndarray, dict[str, int]]:
        """The released sum and ``{holder: users}`` of its contributors."""
        mode = "per_holder" if self.secure_sum is not None else self.noise_mode
        sums, total = simulate_holder_sums(
            X,
            groups,
            noise,
            rng,
            noise_mode=mode,
            vectorisation=self.vectorisation,
            norm_policy=self.norm_policy,
        )
        if self.secure_sum is None:
            return total, sums.counts
        total, contributors = self.secure_sum(dict(sums.messages))
        got = [str(c) for c in contributors]
        if len(set(got)) != len(got) or not set(got) <= set(sums.counts):
            raise ValueError(
                f"secure_sum returned contributors {got[:10]} that are not "
                f"distinct holders of {list(sums.counts)[:10]}"
            )
        if len(got) < noise.min_contributors:
            raise ValueError(
                f"the secure sum had {len(got)} contributor(s), fewer than "
                f"min_contributors={noise.min_contributors}: it must abort"
            )
        total = np.asarray(total, dtype=np.float64)
        return total, {h: sums.counts[h] for h in sums.counts if h in set(got)}

    def fit(self, X: Any, y: Any = None, *, groups: Any = None) -> DistributedDPPCA:
        """Simulate the holders' messages for the rows of ``X`` (holder of row ``i``:
        ``groups[i]``, scikit-learn's name for such labels, keyword only and required
        unless ``one_holder=True``; ``y`` must be ``None``) and fit the components.
        Everything is validated before any noise is drawn."""
        self._validate_params()
        self._check_groups(y, groups)
        check_real_data(X)
        X = validate_data(
            self,
            X,
            reset=True,
            dtype=np.float64,
            ensure_all_finite=False,
            ensure_min_samples=1,
            ensure_min_features=1,
        )
        n, p = X.shape
        if self.n_components > p:
            raise ValueError(f"n_components must be <= n_features = {p}, got {self.n_components!r}")
        holders, _, _ = holder_index(groups, n)
        m_min = len(holders) if self.min_contributors is None else int(self.min_contributors)
        if m_min > len(holders):
            raise ValueError(
                f"min_contributors={m_min} exceeds the {len(holders)} holder(s) "
                f"in groups: the secure sum would abort"
            )
        noise = holder_noise(
            self.epsilon,
            self.delta,
            m_min,
            neighbouring=self.neighbouring,
            calibration=self.calibration,
            colluders=self.colluders,
            secure_aggregation=self.secure_aggregation,
        )
        rng = _as_rng(self.random_state, name="random_state")
        total, counts = self._contributed_sum(X, groups, noise, rng)
        ledger = PrivacyLedger()
        record_distributed_release(
            ledger,
            noise,
            counts,
            neighbouring=self.neighbouring,
            secure_aggregation=self.secure_aggregation,
        )
        n_used = sum(counts.values())
        S_hat = CovarianceAggregator(p, self.vectorisation).add_sum(total, n_used).covariance()
        self.vectorisation_ = self.vectorisation
        self.n_samples_, self.n_components_ = n_used, int(self.n_components)
        self.holders_, self.contributors_ = holders, list(counts)
        self.min_contributors_, self.noise_ = m_min, noise
        self.noise_scale_ = float(noise.share_sigma)
        self.ledger_, self._privacy_cache = ledger, None
        self.covariance_ = S_hat
        self._set_components(top_k_eigvecs(S_hat, self.n_components_)[1], S_hat)
        return self

    def fit_transform(self, X: Any, y: Any = None, *, groups: Any = None) -> np.ndarray:
        """``fit(X, y, groups=groups)`` then ``transform(X)``."""
        return self.fit(X, y, groups=groups).transform(X)

    def _noise_sum_sd(self) -> float:
        r""":math:`\sigma_s\sqrt C`: the law of the noise in the released sum (every
        contributor's share, colluders' included)."""
        return self.noise_.total_sigma(len(self.contributors_))

    def _reading(self, threat: str) -> dict[str, Any]:
        """σ and ε(δ) of the worst holder's users under ``threat``.  Every party holds one
        release per reading, so the maximum over parties is taken over one party per
        distinct (σ, Δ) (the ledger's own maximum, without recomputing equal entries)."""
        d, led = float(self.delta), self.ledger_
        rep: dict[tuple[float, float], str] = {}
        for r in led.releases:
            if r.threat in ("any", threat):
                rep.setdefault((r.sigma, r.sensitivity), r.party)
        out: dict[str, Any] = {"sigma": float(min(s for s, _ in rep))}
        _, skipped = accountants_at(d, (PLD,))  # PLD only for delta >= 1e-15
        for a in (ANALYTIC, PLD, RDP):
            out[f"epsilon_{a}"] = (
                None
                if a in skipped
                else max(led.epsilon(d, party=p, accountant=a, threat=threat) for p in rep.values())
            )
        if skipped:
            out["not_reported"] = skipped
        return out

    @property
    def privacy_(self) -> dict[str, Any]:
        """Each user's privacy under both threat models, from ``ledger_`` (max over
        holders; cached): ``"secagg"`` (secure aggregation holds: the completed sum's noise
        the analyst cannot remove) and ``"fallback"`` (broken: one holder's message
        alone), each with its ``sigma`` and ε(δ) by the ``"analytic"`` (exact),
        ``"pld"`` and ``"rdp"`` accountants; and the calibration: target ``epsilon``,
        ``delta``, ``neighbouring``, ``sensitivity``, central ``sigma``, ``sigma_share``,
        ``sigma_sum`` (the sum's noise law), ``min_contributors``, ``colluders``,
        ``holders``, ``contributors``, ``n_users``."""
        check_is_fitted(self, "ledger_")
        if self._privacy_cache is None:
            nz = self.noise_
            self._privacy_cache = {
                "epsilon": float(self.epsilon),
                "delta": float(self.delta),
                "neighbouring": self.neighbouring,
                "sensitivity": float(nz.sensitivity),
                "calibration": nz.method,
                "vectorisation": self.vectorisation_,
                "secure_aggregation": bool(self.secure_aggregation),
                "sigma": float(nz.sigma),
                "sigma_share": float(nz.share_sigma),
                "sigma_sum": float(self._noise_sum_sd()),
                "min_contributors": int(self.min_contributors_),
                "colluders": int(nz.colluders) if self.secure_aggregation else 0,
                "holders": len(self.holders_),
                "contributors": len(self.contributors_),
                "n_users": int(self.n_samples_),
                "secagg": self._reading("secagg"),
                "fallback": self._reading("fallback"),
            }
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self._privacy_cache.items()}
