r"""Locally private PCA estimators (Wang & Xu, IJCAI 2019) with scikit-learn's API.

:class:`LocalDPPCA` is Algorithm 1 (low dimension): every user sends
:math:`p(p+1)/2` floats, the packed :math:`x_ix_i^\top` plus Gaussian noise
(isometric packing by default, :mod:`fedspectral.pca.local`), the server forms
:math:`\hat S = \frac1n\sum_i (x_ix_i^\top + Z_i)` and returns its top-``k``
eigenvectors.  :class:`LocalDPSparsePCA` is Algorithm 2 (high dimension,
row-sparse eigenvectors): the same messages, then Fantope projection and
selection (Vu et al. 2013) on :math:`\hat S`, then the top-``k`` eigenvectors of
its solution.

Both are **uncentred**: as in the paper the data are assumed to have mean zero
and the estimated matrix is the second moment :math:`\frac1n X^\top X` (a
private mean would cost a second release).  Accordingly ``transform(X)`` is
``X @ components_.T`` with no mean subtracted.

The simulation of the ``n`` users and the noise calibration live in
:mod:`fedspectral.pca.local`; ε is never computed here by hand: ``privacy_``
reads it from the estimator's :class:`~fedspectral.privacy.PrivacyLedger`.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from fedspectral.checks import (
    ALLOW_LARGE_ENV,
    check_bool,
    check_choice,
    check_int,
    check_real,
    large_allowed,
    warnings_at_caller,
)
from fedspectral.kinds import ANALYTIC, PLD, RDP
from fedspectral.linalg import VECTORISATIONS, subspace_distance, top_k_eigvecs
from fedspectral.pca.fps import DEFAULT_ANDERSON, DEFAULT_MAX_ITER, MAX_ITER_BOUND, fps_admm
from fedspectral.pca.local import (
    CALIBRATIONS,
    NOISE_MODES,
    NORM_POLICIES,
    PARTY,
    SENSITIVITY,
    CovarianceAggregator,
    _as_rng,
    clip_rows,
    ldp_noise_scale,
    ldp_release,
    resolve_vectorisation,
    simulate_messages_sum,
)
from fedspectral.pca.rows import check_real_data
from fedspectral.privacy import PrivacyLedger, check_accountant, symmetric_gaussian
from fedspectral.privacy.accounting import accountants_at

__all__ = [
    "LAM_AUTO_CONSTANT",
    "MAX_N_BOOT",
    "UNRESOLVED_FRACTION",
    "LocalDPPCA",
    "LocalDPSparsePCA",
    "auto_lambda",
]

#: :meth:`~LocalDPPCA.error_interval` treats the fitted subspace as unresolved when the
#: median bootstrap distance exceeds this fraction of the random-subspace level
#: √(2k − 2k²/p); its interval then extends to the largest possible error.  Chosen on
#: the coverage study of docs/pca.md ("Error bars"): below it the interval covered in
#: ≥ 95 % of repeats, above it the bootstrap falls short of the true error.
UNRESOLVED_FRACTION: float = 0.5

#: Largest ``n_boot`` of :meth:`~LocalDPPCA.error_interval` without ``allow_large``: each
#: refit is one eigendecomposition of a p x p matrix (LocalDPSparsePCA: an FPS solve), so
#: 1e5 refits take about 45 s at p = 20 and about an hour at p = 200 on one core of
#: this 2-core machine; the distances alone hold 8 bytes per refit.
MAX_N_BOOT: int = 100_000

#: Constant c of ``lam="auto"``: λ = c·σ₁·√(log p / n).  Chosen on synthetic data only
#: (seeds 9000-9005, none of the reported experiments; see :func:`auto_lambda`).
LAM_AUTO_CONSTANT: float = 0.5


def auto_lambda(sigma: float, n: int, p: int, c: float = LAM_AUTO_CONSTANT) -> float:
    r"""Theorem 4's scaling of the FPS penalty: :math:`\lambda = c\,\sigma_1\sqrt{\log p / n}`.

    :math:`\sigma_1/\sqrt n` is the standard deviation of each noise entry of
    :math:`\hat S`, and the largest of the :math:`p(p+1)/2` such entries is about
    :math:`(\sigma_1/\sqrt n)\sqrt{2\ln(p^2/2)} \approx 2\,(\sigma_1/\sqrt n)\sqrt{\ln p}`,
    so :math:`c \approx 2` thresholds away pure noise entirely (exact zero rows off the
    support) but also shrinks the signal.  For the subspace error a smaller constant is
    better.  :data:`LAM_AUTO_CONSTANT` ``= 0.5`` was chosen on synthetic data only, by
    the mean error :math:`\|\hat V\hat V^\top - VV^\top\|_F` over seeds 9000-9005 of
    :func:`fedspectral.pca.synthetic.row_sparse_covariance` (k = 2, spike 9, ε = 2,
    δ = 1e-5), with :math:`\hat S = \Sigma` + Gaussian sampling fluctuation + the exact
    aggregate privacy noise (``--``: c not run in that setting; c = 1.5-4 were worse
    still where run):

    ==================  =========  ======  ======  ======  ======  ======
    p, s, n             Alg. 1     0.25    0.5     0.75    1.0     2.0
    ==================  =========  ======  ======  ======  ======  ======
    100, 6, 1e9         1.012      --      0.346   --      0.473   0.831
    100, 6, 1e10        0.322      --      0.099   --      0.142   0.265
    100, 10, 1e9        0.950      0.411   0.423   0.558   0.686   --
    100, 10, 1e10       0.301      0.120   0.120   0.162   0.211   --
    50, 4, 1e8          1.057      0.538   0.404   0.423   0.496   --
    50, 4, 1e9          0.346      0.190   0.122   0.110   0.128   --
    ==================  =========  ======  ======  ======  ======  ======

    c = 0.5 is best or within 11 % of the best in every setting.  (The paper's own
    sparse setting, n = 2000, p = 400, is far too noisy for any c to matter.)  It is
    a rate up to a constant, as in the theorem.  With :math:`\sigma_1 = 0` (ε = ∞)
    it is 0, i.e. no sparsity penalty: pass ``lam`` explicitly for non-private sparse
    PCA.
    """
    if not sigma >= 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    if n < 1 or p < 1:
        raise ValueError(f"n and p must be >= 1, got n={n!r}, p={p!r}")
    return float(c * sigma * math.sqrt(math.log(p) / n)) if p > 1 else 0.0


def _check_random_state(random_state: Any) -> None:
    """Refuse a bad ``random_state`` (e.g. ``True``) without drawing from it."""
    if isinstance(random_state, np.random.Generator):
        return
    _as_rng(random_state, name="random_state")


def _project(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``X @ C.T``, finite wherever the exact product is: rows whose largest entry
    exceeds 2**500 are scaled by a power of two (exact) before the product and back
    after, so no partial sum overflows (each is at most sqrt(p) times the row's largest
    entry); other rows take the plain product, bit for bit."""
    with np.errstate(over="ignore", invalid="ignore"):  # rows redone below
        out = X @ C.T if len(X) else np.zeros((0, C.shape[0]))
        big = np.abs(X).max(axis=1, initial=0.0) > 2.0**500
    for i in np.flatnonzero(big):
        e = math.frexp(float(np.abs(X[i]).max()))[1]
        with np.errstate(over="ignore"):
            out[i] = np.ldexp(np.ldexp(X[i], -e) @ C.T, e)
    return out


class _LocalDPBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared parameter checks, perturbation (Algorithm 1 lines 1-4) and reporting."""

    _privacy_cache: dict[str, Any] | None  # privacy_'s report, set to None by each fit

    # -- validation ---------------------------------------------------------------
    def _validate_params_common(self) -> None:
        check_int("n_components", self.n_components, low=1)
        _check_random_state(self.random_state)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        check_choice("noise_mode", self.noise_mode, NOISE_MODES)
        check_choice("norm_policy", self.norm_policy, NORM_POLICIES)
        check_choice("vectorisation", self.vectorisation, VECTORISATIONS + ("auto",))
        # validates epsilon and delta (and classic with eps >= 1) before any work
        self._scale = ldp_noise_scale(self.epsilon, self.delta, self.calibration)

    def _check_budget(self, user_ids: Any) -> tuple[Any, list[Any] | None]:
        """The accountant and the user ids, after the accountant's check of this fit's
        release (one Gaussian message per user, known from the parameters): a fit that
        would exceed the budget is refused here, before ``X`` is read."""
        acc = check_accountant(self.accountant)
        ids = None
        if user_ids is not None:
            arr = np.asarray(user_ids, dtype=object)
            if arr.ndim != 1:
                raise ValueError(f"user_ids must be 1-D (one id per row), got shape {arr.shape}")
            ids = arr.tolist()
            if not ids:
                raise ValueError("user_ids is empty: give one id per row of X")
        if acc is not None:
            acc.check([ldp_release(self._scale.sigma)], ids)
        return acc, ids

    def _perturbed_second_moment(
        self, X: Any, budget: tuple[Any, list[Any] | None] = (None, None)
    ) -> np.ndarray:
        """Validate ``X``, charge the budget, simulate the users' messages, return
        :math:`\\hat S`."""
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
        acc, ids = budget
        if ids is not None and len(ids) != n:
            raise ValueError(f"user_ids has {len(ids)} entries for {n} rows of X")
        if acc is not None:
            # everything checkable is checked before the budget is charged: a NaN, or a
            # row of norm > 1 under norm_policy="raise", is refused with nothing spent
            # (clip_rows raises exactly what the release would raise, later)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the release warns, once
                clip_rows(X, self.norm_policy)
            # recorded before the noise is drawn; never refunded
            acc.spend([ldp_release(self._scale.sigma)], ids)
        rng = _as_rng(self.random_state, name="random_state")
        ledger = PrivacyLedger()
        vec = resolve_vectorisation(self.vectorisation, self.calibration)
        with warnings_at_caller():  # a clipping warning names the user's line
            total, n = simulate_messages_sum(
                X,
                self.epsilon,
                self.delta,
                rng=rng,
                calibration=self.calibration,
                noise_mode=self.noise_mode,
                norm_policy=self.norm_policy,
                ledger=ledger,
                vectorisation=vec,
            )
        agg = CovarianceAggregator(p, vec).add_sum(total, n)
        self.vectorisation_ = vec
        self.n_samples_ = n
        self.n_components_ = int(self.n_components)
        self.noise_scale_ = float(self._scale.sigma)
        self.ledger_ = ledger
        self._privacy_cache = None
        return agg.covariance()

    # -- reporting ----------------------------------------------------------------
    @property
    def privacy_(self) -> dict[str, Any]:
        """Privacy actually used: nominal ``epsilon``/``delta``, the ``calibration`` and
        its ``method``, ``sigma`` per packed entry, the ``vectorisation``, ``sensitivity``
        used to calibrate and ``true_sensitivity`` (√2, replace-one), and ε(δ) of the
        recorded release by
        the ``"analytic"`` (exact, single release), ``"pld"`` and ``"rdp"`` accountants
        -- all from ``ledger_`` (computed on first access, then cached).  Below
        δ = 1e-15 the PLD accountant is not defined: ``epsilon_pld`` is ``None`` and
        ``not_reported`` says why (:func:`fedspectral.privacy.accounting.accountants_at`)."""
        check_is_fitted(self, "ledger_")
        if self._privacy_cache is None:
            d = float(self.delta)
            led = self.ledger_
            _, skipped = accountants_at(d, (PLD,))
            self._privacy_cache = {
                "epsilon": float(self.epsilon),
                "delta": d,
                "calibration": self.calibration,
                "method": self._scale.method,
                "sigma": float(self._scale.sigma),
                "vectorisation": self.vectorisation_,
                "sensitivity": float(self._scale.sensitivity),
                "true_sensitivity": SENSITIVITY,
                "neighbouring": "replace_one",
                "party": PARTY,
                "n_users": int(self.n_samples_),
                "epsilon_analytic": led.epsilon(d, accountant=ANALYTIC),
                "epsilon_pld": None if skipped else led.epsilon(d, accountant=PLD),
                "epsilon_rdp": led.epsilon(d, accountant=RDP),
            }
            if skipped:
                self._privacy_cache["not_reported"] = skipped
        return dict(self._privacy_cache)

    def _set_components(self, V: np.ndarray, S_hat: np.ndarray) -> None:
        self.components_ = np.ascontiguousarray(V.T)
        # variance of the (noisy, uncentred) second moment along each component
        self.explained_variance_ = np.einsum(
            "ij,jk,ik->i", self.components_, S_hat, self.components_
        )

    # -- error bars -----------------------------------------------------------------
    def _noise_sum_sd(self) -> float:
        """σ per packed entry of the noise in the sum of the messages: the sum of ``n``
        users' noise, :math:`\\sigma\\sqrt n`."""
        return self.noise_scale_ * math.sqrt(self.n_samples_)

    def _refit_distances(self, E: np.ndarray, V_hat: np.ndarray) -> np.ndarray:
        """Distances to ``V_hat`` of the refits on ``covariance_ + E[b]`` (stack ``E``):
        top-``k`` eigenvectors, one batched ``eigh``."""
        k = self.n_components_
        _, U = np.linalg.eigh(self.covariance_ + E)
        W = U[..., ::-1][..., :k]
        # ||W W^T - V V^T||_F^2 = 2k - 2 ||W^T V||_F^2 for orthonormal W, V
        c = np.einsum("bpk,pl->bkl", W, V_hat)
        return np.sqrt(np.clip(2 * k - 2 * np.einsum("bkl,bkl->b", c, c), 0.0, None))

    def error_interval(
        self,
        confidence: float = 0.95,
        n_boot: int = 200,
        random_state: Any = None,
        *,
        allow_large: bool = False,
    ) -> tuple[float, float]:
        r"""Interval for the error :math:`\|\hat V\hat V^\top - V_0V_0^\top\|_F` that the
        privacy noise caused, by a parametric bootstrap from the known noise law.

        :math:`V_0` is the top-``k`` subspace the same estimator would find on the
        noiseless second moment of the same users.  The server knows the law of the
        aggregate noise exactly: :math:`\hat S - X^\top X/n` is symmetric Gaussian with
        variance :math:`\sigma^2/n` on the diagonal and :math:`\sigma^2/n`
        (``"upper"``) or :math:`\sigma^2/(2n)` (``"isometric"``) off it.  The bootstrap
        draws ``n_boot`` such matrices :math:`E_b` (one aggregate draw each, as
        :func:`~fedspectral.pca.local.simulate_messages_sum` in ``"aggregate"`` mode),
        refits on :math:`\hat S + E_b` (the same algorithm and, for the sparse
        estimator, the same λ), and returns the :math:`(1\mp\text{confidence})/2`
        quantiles of :math:`\|\hat V_b\hat V_b^\top - \hat V\hat V^\top\|_F`.  It is
        post-processing of the release: no privacy cost.  The sampling error of the
        users' data (:math:`X^\top X/n` against the population) is not included.

        The bootstrap world's truth is :math:`\hat S`, which carries the noise as if it
        were signal; once the noise dominates, the refits stay closer to :math:`\hat V`
        than :math:`\hat V` is to :math:`V_0`, and the quantiles fall short of the
        true error.  So when the median bootstrap distance exceeds
        :data:`UNRESOLVED_FRACTION` of the random-subspace level
        :math:`\sqrt{2k - 2k^2/p}`, the subspace is reported as unresolved
        (``bootstrap_["resolved"] = False``) and the upper end is the largest possible
        error :math:`\sqrt{2\min(k, p-k)}`.  Coverage measured from clear signal to
        saturation: docs/pca.md ("Error bars") -- 0.91-1.00 for :class:`LocalDPPCA`;
        for :class:`LocalDPSparsePCA` the interval is too high where the subspace is
        resolved (coverage about 0.7, every miss below it): use its upper end as a
        conservative bound.

        Parameters
        ----------
        confidence : float in (0, 1), default 0.95
        n_boot : int >= 10, default 200
            Number of bootstrap refits, at most :data:`MAX_N_BOOT` (1e5: about 45 s at
            p = 20, an hour at p = 200 on one core here) unless ``allow_large``.
        random_state : None, int or numpy.random.Generator
            Randomness of the bootstrap (``None``: OS entropy).
        allow_large : bool, default False
            Lift the :data:`MAX_N_BOOT` bound (the refits are drawn a few MiB at a time;
            the distances take 8 bytes each): for a caller who knows the time it takes.
            ``FEDSPECTRAL_ALLOW_LARGE=1`` in the environment does the same.

        Returns
        -------
        (low, high) : tuple of float
            Also stored, with the cost (``seconds``, ``refits``) and the bootstrap
            distances, in ``bootstrap_``.
        """
        check_is_fitted(self, "components_")
        conf = check_real(
            "confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True
        )
        nb = check_int("n_boot", n_boot, low=10)
        if not (check_bool("allow_large", allow_large) or large_allowed()) and nb > MAX_N_BOOT:
            raise ValueError(
                f"n_boot must be <= {MAX_N_BOOT} (MAX_N_BOOT: one p x p "
                f"eigendecomposition per refit, about an hour at p = 200 here), "
                f"got {nb}; pass allow_large=True (or set {ALLOW_LARGE_ENV}=1) "
                "to go past it knowingly"
            )
        rng = _as_rng(random_state, name="random_state")
        t0 = time.perf_counter()
        p, n = self.n_features_in_, self.n_samples_
        V_hat = self.components_.T
        sd = self._noise_sum_sd()  # the noise of the summed messages, per packed entry
        dist = np.zeros(nb)
        if sd > 0:
            step = max(1, (1 << 22) // (8 * p * p))  # ~4 MiB of noise matrices at a time
            for s in range(0, nb, step):
                m = min(step, nb - s)
                E = symmetric_gaussian(p, sd, rng, size=m, vectorisation=self.vectorisation_)
                dist[s : s + m] = self._refit_distances(E / n, V_hat)
        a = (1.0 - conf) / 2.0
        low, high = (float(v) for v in np.quantile(dist, [a, 1.0 - a]))
        k = self.n_components_
        random_level = math.sqrt(2 * k - 2 * k * k / p)
        resolved = bool(np.median(dist) <= UNRESOLVED_FRACTION * random_level)
        if not resolved:
            high = math.sqrt(2 * min(k, p - k))
        self.bootstrap_ = {
            "confidence": conf,
            "n_boot": nb,
            "refits": nb if sd > 0 else 0,
            "seconds": time.perf_counter() - t0,
            "interval": (low, high),
            "resolved": resolved,
            "median": float(np.median(dist)),
            "random_level": random_level,
            "distances": dist,
            "noise_sd_diagonal": sd / n,
        }
        return low, high

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    def transform(self, X: Any) -> np.ndarray:
        """Project onto the components: ``X @ components_.T`` (uncentred, no mean removed)."""
        check_is_fitted(self, "components_")
        check_real_data(X)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return _project(X, self.components_)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """``fit(X)`` then ``transform(X)``."""
        return self.fit(X).transform(X)


class LocalDPPCA(_LocalDPBase):
    r"""Locally private PCA, Algorithm 1 of Wang & Xu (IJCAI 2019).

    Each row of ``X`` is one user.  User :math:`i` sends
    the packed :math:`x_ix_i^\top` plus Gaussian noise (symmetric :math:`Z_i` once
    un-packed)
    (:func:`fedspectral.pca.local.perturb`); the estimator returns the top-``k``
    eigenvectors of :math:`\hat S = \frac1n\sum_i(x_ix_i^\top + Z_i)`.  Each user is
    :math:`(\varepsilon,\delta)`-LDP (for ``calibration`` ``"analytic"`` or
    ``"classic"``); the upper bound on the squared subspace error is of order
    :math:`kp/(n\varepsilon^2)` up to eigen-gap factors (Theorem 2;
    :mod:`fedspectral.pca.bounds`).

    PCA here is **uncentred** (second moment, as in the paper) and :meth:`transform` is
    ``X @ components_.T``.  With ``epsilon=np.inf`` no noise is added and the result
    is the exact top-``k`` eigenspace of :math:`X^\top X/n` (of the clipped rows).
    After ``fit``, the property :attr:`privacy_` reports the privacy delivered and
    :meth:`error_interval` bootstraps the error from the known noise law.

    Parameters
    ----------
    n_components : int
        ``k``, with ``1 <= k <= n_features``.
    epsilon : float
        Local privacy parameter ``> 0`` (``np.inf``: no privacy, no noise).
    delta : float
        In ``(0, 1)``.
    calibration : {"analytic", "classic", "paper"}, default "analytic"
        Noise calibration (:func:`fedspectral.pca.local.ldp_noise_scale`).
        ``"analytic"`` uses the correct replace-one sensitivity √2 and the analytic
        Gaussian mechanism; ``"paper"`` reproduces the paper's
        :math:`\sigma_1^2 = 2\ln(1.25/\delta)/\varepsilon^2`, which assumes
        sensitivity 1 and uses the classic bound for every ε, so it does not deliver
        the promised ε (``privacy_`` reports the ε it does deliver).
    noise_mode : {"aggregate", "per_user"}, default "aggregate"
        How the simulation draws the users' noise: one :math:`N(0, n\sigma^2)` draw
        for the sum (fast) or each user's own draws (what devices do); same
        distribution of :math:`\hat S`.
    norm_policy : {"clip", "raise"}, default "clip"
        Rows with ``||x|| > 1``: clipped to norm 1 with a warning, or ``ValueError``.
    random_state : None, int or numpy.random.Generator
        Noise source (``None``: OS entropy).
    vectorisation : {"auto", "isometric", "upper"}, default "auto"
        How each message packs :math:`x_ix_i^\top` (:mod:`fedspectral.pca.local`):
        ``"isometric"`` multiplies the off-diagonal entries by √2 (same σ, same ε,
        half the off-diagonal noise variance once the server divides by √2 again);
        ``"upper"`` is the paper's plain upper triangle.  ``"auto"``: ``"upper"`` for
        ``calibration="paper"`` (the seed exactly), ``"isometric"`` otherwise.
    accountant : BudgetAccountant or None, default None
        A privacy budget shared with other fits over the same users
        (:class:`fedspectral.privacy.BudgetAccountant`): each ``fit`` declares its release
        (one Gaussian message per user) and is refused, before reading ``X``, when it
        would take the budget past its ε; ``fit(X, user_ids=...)`` charges only those
        users.  ``None``: accounted in ``ledger_`` only.  ``clone`` keeps the same
        accountant (it is never copied), so a grid search draws from one budget.

    Attributes
    ----------
    components_ : ndarray (k, n_features)
        Orthonormal principal directions (rows), by decreasing eigenvalue of
        :math:`\hat S`.
    explained_variance_ : ndarray (k,)
        Top-``k`` eigenvalues of :math:`\hat S` (noisy; may be negative).
    covariance_ : ndarray (n_features, n_features)
        :math:`\hat S`, the privatised uncentred second moment.
    n_components_ : int
        ``k``.
    n_features_in_ : int
        Features of ``X`` (``p``).
    n_samples_ : int
        Users (rows of ``X``) in the estimate.
    noise_scale_ : float
        σ of each packed noise entry of one user's message.
    vectorisation_ : str
        The packing used (``"auto"`` resolved).
    bootstrap_ : dict
        After :meth:`error_interval`: its interval, distances and cost.
    ledger_ : PrivacyLedger
        One release for party ``"user"`` standing for all ``n`` users.

    Examples
    --------
    >>> import numpy as np
    >>> from fedspectral.pca import LocalDPPCA
    >>> X = np.random.default_rng(0).normal(size=(1000, 5)) / 5
    >>> est = LocalDPPCA(n_components=2, epsilon=np.inf, delta=1e-5).fit(X)
    >>> est.components_.shape
    (2, 5)
    """

    def __init__(
        self,
        n_components: int,
        epsilon: float,
        delta: float,
        calibration: str = "analytic",
        noise_mode: str = "aggregate",
        norm_policy: str = "clip",
        random_state: Any = None,
        vectorisation: str = "auto",
        accountant: Any = None,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.noise_mode = noise_mode
        self.norm_policy = norm_policy
        self.random_state = random_state
        self.vectorisation = vectorisation
        self.accountant = accountant

    def fit(self, X: Any, y: Any = None, user_ids: Any = None) -> LocalDPPCA:
        """Simulate the users' messages for the rows of ``X`` and fit the components.

        ``user_ids`` (one per row, distinct): who the rows are, for ``accountant``; each
        fit is charged to those users only (``None``: to every user)."""
        self._validate_params_common()
        budget = self._check_budget(user_ids)
        S_hat = self._perturbed_second_moment(X, budget)
        self.covariance_ = S_hat
        _, V = top_k_eigvecs(S_hat, self.n_components_)
        self._set_components(V, S_hat)
        return self


class LocalDPSparsePCA(_LocalDPBase):
    r"""Locally private sparse PCA, Algorithm 2 of Wang & Xu (IJCAI 2019).

    Same messages as :class:`LocalDPPCA`; the server then solves the Fantope
    projection and selection problem (Vu et al. 2013) on :math:`\hat S`,

    .. math:: \hat X = \arg\max_{0 \preceq X \preceq I,\ \mathrm{tr}X = k}
              \langle \hat S, X\rangle - \lambda \|X\|_{1,1},

    by ADMM (:func:`fedspectral.pca.fps.fps_admm`) and returns the top-``k``
    eigenvectors of :math:`\hat X`.  Uncentred, like :class:`LocalDPPCA`.

    Parameters
    ----------
    n_components, epsilon, delta, calibration, noise_mode, norm_policy
        As in :class:`LocalDPPCA`.
    random_state, vectorisation, accountant
        As in :class:`LocalDPPCA`.
    lam : "auto" or float, default "auto"
        Penalty λ ≥ 0.  ``"auto"``: Theorem 4's scaling
        :math:`c\,\sigma_1\sqrt{\log p / n}` (:func:`auto_lambda`, ``c =``
        :data:`LAM_AUTO_CONSTANT`); 0 when ``epsilon = inf``.
    tol : float, default 1e-3
        ADMM stopping tolerance: both residuals below :math:`\sqrt k\,` tol, and with
        ``anderson > 0`` the relative duality gap too (:func:`~fedspectral.pca.fps.fps_admm`).
    max_iter : int, default fps.DEFAULT_MAX_ITER (2000), at most fps.MAX_ITER_BOUND (10⁶)
        ADMM iteration cap.
    anderson : int, default fps.DEFAULT_ANDERSON (5)
        Memory of the accelerated ADMM with its certified stop; 0: the plain ADMM of the
        reference R package, bit for bit.

    Attributes
    ----------
    components_
        As in :class:`LocalDPPCA`.
    covariance_
        As in :class:`LocalDPPCA`.
    n_components_
        As in :class:`LocalDPPCA`.
    n_features_in_
        As in :class:`LocalDPPCA`.
    n_samples_
        As in :class:`LocalDPPCA`.
    noise_scale_
        As in :class:`LocalDPPCA`.
    vectorisation_
        As in :class:`LocalDPPCA`.
    bootstrap_
        As in :class:`LocalDPPCA`.
    ledger_
        As in :class:`LocalDPPCA`.
    explained_variance_ : ndarray (k,)
        The Rayleigh quotients :math:`v_j^\top \hat S v_j` of the components.
    lam_ : float
        The λ used.
    fps_ : FPSResult
        Solution ``X`` and ADMM diagnostics (iterations, residuals, converged).
    n_iter_ : int
        ADMM iterations run (``fps_.iterations``, at most ``max_iter``).
    """

    def __init__(
        self,
        n_components: int,
        epsilon: float,
        delta: float,
        lam: str | float = "auto",
        calibration: str = "analytic",
        noise_mode: str = "aggregate",
        norm_policy: str = "clip",
        tol: float = 1e-3,
        max_iter: int = DEFAULT_MAX_ITER,
        random_state: Any = None,
        vectorisation: str = "auto",
        accountant: Any = None,
        anderson: int = DEFAULT_ANDERSON,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.lam = lam
        self.anderson = anderson
        self.calibration = calibration
        self.noise_mode = noise_mode
        self.norm_policy = norm_policy
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.vectorisation = vectorisation
        self.accountant = accountant

    def fit(self, X: Any, y: Any = None, user_ids: Any = None) -> LocalDPSparsePCA:
        """Simulate the users' messages, solve FPS on :math:`\\hat S`, fit the components
        (``user_ids``: as in :meth:`LocalDPPCA.fit`)."""
        self._validate_params_common()
        lam = self.lam
        if isinstance(lam, str):
            check_choice("lam", lam, ("auto",))
        else:
            lam = check_real("lam", lam, low=0.0)
        check_real("tol", self.tol, low=0.0, low_open=True)
        check_int("max_iter", self.max_iter, low=1, high=MAX_ITER_BOUND)
        check_int("anderson", self.anderson, low=0)
        budget = self._check_budget(user_ids)

        S_hat = self._perturbed_second_moment(X, budget)
        self.covariance_ = S_hat
        n, p = self.n_samples_, self.n_features_in_
        self.lam_ = auto_lambda(self._scale.sigma, n, p) if isinstance(lam, str) else lam
        self.fps_ = self._fps(S_hat)
        self.n_iter_ = int(self.fps_.iterations)
        _, V = top_k_eigvecs(self.fps_.X, self.n_components_)
        self._set_components(V, S_hat)
        return self

    def _refit_distances(self, E: np.ndarray, V_hat: np.ndarray) -> np.ndarray:
        """FPS with the fitted λ on each ``covariance_ + E[b]``, then the top-``k``
        eigenvectors; distances to ``V_hat``."""
        out = np.empty(E.shape[0])
        for b in range(E.shape[0]):
            res = self._fps(self.covariance_ + E[b])
            out[b] = subspace_distance(top_k_eigvecs(res.X, self.n_components_)[1], V_hat)
        return out

    def _fps(self, S: np.ndarray) -> Any:
        """FPS on ``S`` with the fitted λ and the solver's parameters (checked in fit)."""
        return fps_admm(
            S,
            self.n_components_,
            self.lam_,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            anderson=int(self.anderson),
        )
