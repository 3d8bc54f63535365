r"""How many users does private PCA need?  (:func:`required_users`)

Given the dimension ``p``, the subspace size ``k``, the privacy parameters and the
covariance spectrum, find the smallest number of users ``n`` for which Algorithm 1
(:class:`~fedspectral.pca.LocalDPPCA`, aggregate-noise shortcut) returns a subspace
within ``target_error`` of the true one, :math:`\|\hat V\hat V^\top - VV^\top\|_F \le T`,
with probability at least ``confidence``.

Model
-----
Users are iid :math:`N(0, \Sigma)` (as in the paper's experiments; the rows must lie in
the unit ball, so :math:`\operatorname{tr}\Sigma \le 1` is required).  Only the
eigenvalues :math:`\lambda_1 \ge \dots \ge \lambda_p` matter: the error is measured
in the eigenbasis, and each simulated repeat rotates the noise by a Haar-random
orthogonal matrix (the isometric noise is rotation invariant anyway; the
upper-triangle noise is not).  With ``eigengap`` :math:`G` the spectrum is the paper's
spiked model with λ = 1 scaled to that gap: :math:`\Sigma = G(VV^\top + I_p)`, i.e.
``k`` eigenvalues :math:`2G` and ``p - k`` eigenvalues :math:`G` (the paper's
:math:`(VV^\top + I)/(10p)` is ``eigengap = 1/(10p)``).

Simulation
----------
For ``n`` users the server's matrix is
:math:`\hat S = \Lambda + n^{-1/2}\,(\Lambda^{1/2} W \Lambda^{1/2} + \sigma Q^\top Z Q)`:
:math:`W` (symmetric, :math:`W_{aa} \sim N(0,2)`, :math:`W_{ab} \sim N(0,1)`) is the
sampling fluctuation of :math:`X^\top X/n` (the Gaussian limit of the Wishart law,
accurate for :math:`n \gg p`), and :math:`\sigma Z/\sqrt n` is the aggregate-noise
shortcut: the sum of the ``n`` users' noise drawn at once
(:func:`fedspectral.privacy.symmetric_gaussian` with standard deviation
:math:`\sigma\sqrt n`, divided by ``n``), σ from
:func:`~fedspectral.pca.ldp_noise_scale`.  Each repeat keeps its draws of
:math:`W, Z, Q` for every ``n`` (common random numbers), so the error of a repeat is a
smooth function of ``n`` and the bisection is on one fixed random experiment.

Models
------
``model="local"`` (default) is Algorithm 1 above: the noise of :math:`\hat S` is
:math:`\sigma_{LDP}/\sqrt n` per packed entry.  ``"distributed"`` is
:class:`~fedspectral.pca.DistributedDPPCA` over ``holders`` data holders, all
contributing, shares sized for ``min_contributors`` (default: all) at the replace-one
relation: the sum of the shares has :math:`\sigma_s\sqrt m` per packed entry
(:math:`\sigma` when :math:`m_{min} = m`) and :math:`\hat S`'s noise is that over
:math:`n`.  ``"per_holder"`` is the same without secure aggregation (each holder the full
central :math:`\sigma`, the sum :math:`\sigma\sqrt m`).  The simulation is the same with
:math:`\sigma Z/\sqrt n` replaced by the model's noise of :math:`\hat S`.

Search
------
The Theorem 2 rate (:func:`~fedspectral.pca.theorem2_upper_bound`, squared error
:math:`\ln(1.25/\delta)\,kp/(n\varepsilon^2(\lambda_k-\lambda_{k+1})^2)`) set equal to
:math:`T^2` gives the starting point :math:`n_0`; the bracket
:math:`[n_0/100, 100 n_0]` is widened by factors of 100 until its ends fail and
succeed, then bisected on :math:`\log n` to 1 %.  ``n`` "succeeds" when the one-sided
95 % Clopper-Pearson lower bound on :math:`P(\text{error} \le T)` from ``n_sim``
repeats is at least ``confidence`` -- a margin, so that an independent simulation at the
planned ``n`` meets the target in at least ``confidence`` of its repeats.

Bounds
------
The simulation holds two stacks of ``n_sim`` matrices ``p`` x ``p`` and each evaluation
of an ``n`` runs ``n_sim`` eigendecompositions (25-40 evaluations per plan), so
``n_sim * p**2`` is bounded by :data:`MAX_SIM_ENTRIES` (2**28: 4 GiB of draws, the bound
of ``pca-plan``; ``p`` at most 2317 with ``n_sim = 50``) and ``n_sim`` by :data:`MAX_N_SIM`
(1e5), checked before any draw; ``allow_large=True`` (or the environment variable
``FEDSPECTRAL_ALLOW_LARGE=1``) lifts both for a caller who knows the cost.
``confidence`` must be reachable with ``n_sim`` repeats (the Clopper-Pearson bound of
``n_sim`` successes out of ``n_sim`` must reach it).

Unreachable targets
-------------------
``target_error`` at or above the random-subspace level :math:`\sqrt{2k - 2k^2/p}` is
met without data (status ``"above_random_level"``).  When even ``n_max`` users do not
succeed, the status is ``"unreachable"`` and the result reports the private and the
non-private error at ``n_max``: a target below the non-private (sampling) error of
``n_max`` users cannot be met by any private method with that many users.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from fedspectral.checks import (
    ALLOW_LARGE_ENV,
    check_bool,
    check_choice,
    check_int,
    check_real,
    describe,
    large_allowed,
)
from fedspectral.linalg import subspace_distance, top_k_eigvecs
from fedspectral.pca.bounds import theorem2_upper_bound
from fedspectral.pca.holders import holder_noise
from fedspectral.pca.local import _as_rng, ldp_noise_scale, resolve_vectorisation
from fedspectral.privacy import symmetric_gaussian
from fedspectral.privacy.validate import MAX_COUNT

__all__ = ["MAX_N_SIM", "MAX_SIM_ENTRIES", "UsersPlan", "plan_eigenvalues", "required_users"]

#: One-sided level of the Clopper-Pearson bound used as the success criterion.
CP_LEVEL: float = 0.95
#: privacy models the planner sizes (module docstring)
MODELS = ("local", "distributed", "per_holder")
#: Largest ``n_sim * p**2`` without ``allow_large``: two stacks of that many float64
#: (4 GiB in all, the bound ``pca-plan`` checks); at p = 400 and n_sim = 400 a plan takes
#: a few minutes on one core here.
MAX_SIM_ENTRIES: int = 2**28
#: Largest ``n_sim`` without ``allow_large`` (each repeat is a Python-level loop step in
#: every evaluation: about 5 s per evaluation at 1e5 repeats of p = 2 here).
MAX_N_SIM: int = 100_000


@dataclass
class UsersPlan:
    """Result of :func:`required_users` (``asdict`` gives a JSON-ready dictionary)."""

    status: str  # "ok", "unreachable" or "above_random_level"
    n: int | None
    message: str
    p: int
    k: int
    epsilon: float
    delta: float
    target_error: float
    confidence: float
    calibration: str
    vectorisation: str
    sigma: float
    random_level: float
    n_rate: float
    n_sim: int
    evaluations: int
    success_fraction: float | None = None
    error_quantile: float | None = None
    nonprivate_error_quantile: float | None = None
    bracket: tuple[float, float] | None = None
    eigenvalues: list[float] = field(default_factory=list)
    model: str = "local"
    holders: int | None = None
    min_contributors: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_eigenvalues(
    p: int, k: int, eigengap: float | None = None, spectrum: Any = None
) -> np.ndarray:
    """The descending eigenvalues the planner uses (validated; module docstring)."""
    p = check_int("p", p, low=2)
    k = check_int("k", k, low=1)
    if k >= p:
        raise ValueError(f"k must be < p = {p} (an eigen-gap needs λ_(k+1)), got k={k}")
    if (eigengap is None) == (spectrum is None):
        raise ValueError("give exactly one of eigengap and spectrum")
    if eigengap is not None:
        g = check_real("eigengap", eigengap, low=0.0, low_open=True)
        if g * (k + p) > 1.0:
            raise ValueError(
                f"eigengap={g!r} gives trace G(k + p) = {g * (k + p):.4g} > 1: "
                f"rows of norm <= 1 need tr Σ <= 1, so eigengap <= 1/(k + p) = "
                f"{1.0 / (k + p):.4g}"
            )
        ev = np.full(p, g)
        ev[:k] = 2.0 * g
        return ev
    a = _real_array("spectrum", spectrum)
    if a.ndim == 2:
        if a.shape != (p, p):
            raise ValueError(f"spectrum matrix must be {p} x {p}, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError("spectrum matrix contains NaN or infinite values")
        asym = float(np.abs(a - a.T).max())
        if asym > 1e-10 * max(1.0, float(np.abs(a).max())):
            raise ValueError(f"spectrum matrix is not symmetric (max |A - Aᵀ| = {asym:.3g})")
        a = np.linalg.eigvalsh(0.5 * (a + a.T))
    elif a.ndim == 1:
        if a.shape[0] != p:
            raise ValueError(f"spectrum must have p = {p} eigenvalues, got {a.shape[0]}")
        if not np.isfinite(a).all():
            raise ValueError("spectrum contains NaN or infinite values")
    else:
        raise ValueError(f"spectrum must be p eigenvalues or a p x p matrix, got shape {a.shape}")
    ev = np.sort(a)[::-1]
    tol = 1e-12 * max(1.0, float(np.abs(ev).max()))
    if ev[-1] < -tol:
        raise ValueError(
            f"spectrum is not positive semi-definite: smallest eigenvalue {float(ev[-1])!r}"
        )
    ev = np.clip(ev, 0.0, None)
    if not ev[k - 1] - ev[k] > 0:
        gap = float(ev[k - 1] - ev[k])
        raise ValueError(f"eigen-gap λ_k - λ_(k+1) must be > 0, got {gap!r} (k={k})")
    tr = float(ev.sum())
    if tr > 1.0 + 1e-9:
        raise ValueError(
            f"spectrum has trace {tr:.6g} > 1: rows of norm <= 1 need tr Σ <= 1 (rescale the data)"
        )
    return ev


def _real_array(name: str, value: Any) -> np.ndarray:
    """``value`` as float64, refused with ``name`` when it is not numbers (``'abc'``) or
    holds a number beyond float64's range (``10**400``)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name} must be numbers (p eigenvalues or a p x p matrix), got {describe(value)}"
        )
    try:
        with np.errstate(over="ignore"):
            a = np.asarray(value)
            if a.dtype.kind not in "biufO":
                raise TypeError(
                    f"{name} must be numbers (p eigenvalues or a p x p matrix), got dtype {a.dtype}"
                )
            return np.asarray(a, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{name} holds a number beyond float64's range") from None
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(name):
            raise
        raise TypeError(
            f"{name} must be numbers (p eigenvalues or a p x p matrix): {exc}"
        ) from None


def _check_sizes(p: int, nsim: int, conf: float, allow_large: bool) -> None:
    """The bounds of the module docstring, and a ``confidence`` that ``n_sim`` can reach."""
    if not (allow_large or large_allowed()):
        if nsim > MAX_N_SIM:
            raise ValueError(
                f"n_sim must be <= {MAX_N_SIM} (MAX_N_SIM), got {nsim}; pass "
                f"allow_large=True (or set {ALLOW_LARGE_ENV}=1) to go past it "
                "knowingly"
            )
        if nsim * p * p > MAX_SIM_ENTRIES:
            raise ValueError(
                f"n_sim * p^2 = {nsim} * {p}^2 = {nsim * p * p:.3g} exceeds "
                f"MAX_SIM_ENTRIES = {MAX_SIM_ENTRIES} (two stacks of that many float64, "
                f"{2 * nsim * p * p * 8 / 2**30:.3g} GiB here, and n_sim eigendecompositions "
                f"of p x p per evaluation); lower n_sim to <= "
                f"{max(MAX_SIM_ENTRIES // (p * p), 1)} or pass allow_large=True (or set "
                f"{ALLOW_LARGE_ENV}=1) to go past it knowingly"
            )
    # all n_sim repeats succeeding gives the Clopper-Pearson lower bound (1-CP_LEVEL)^(1/n)
    best = (1.0 - CP_LEVEL) ** (1.0 / nsim)
    if best < conf:
        need = math.ceil(math.log(1.0 - CP_LEVEL) / math.log(conf)) if conf < 1 else None
        raise ValueError(
            f"confidence={conf!r} cannot be shown with n_sim={nsim} repeats (at "
            f"most {best:.6g} even if all succeed); use n_sim >= {need} or a "
            f"lower confidence"
        )


def _round_up(n: float, digits: int = 3) -> int:
    """``n`` rounded up to ``digits`` significant figures (the bisection stops at 1 %)."""
    m = math.ceil(n)
    e = max(0, len(str(m)) - digits)
    return -(-m // 10**e) * 10**e


def _cp_lower(successes: int, trials: int) -> float:
    """One-sided :data:`CP_LEVEL` Clopper-Pearson lower bound on a success probability."""
    if successes == 0:
        return 0.0
    from scipy.stats import beta

    return float(beta.ppf(1.0 - CP_LEVEL, successes, trials - successes + 1))


class _Experiment:
    """Fixed draws of the simulation (common random numbers across ``n``): the sampling
    fluctuation ``W`` and the rotated unit-σ noise ``Z`` of each repeat."""

    def __init__(
        self, ev: np.ndarray, k: int, vectorisation: str, n_sim: int, rng: np.random.Generator
    ) -> None:
        from scipy.stats import ortho_group

        p = ev.shape[0]
        self.ev, self.k = ev, k
        root = np.sqrt(ev)
        self.Z = np.empty((n_sim, p, p))
        self.W = np.empty((n_sim, p, p))
        for r in range(n_sim):
            G = rng.standard_normal((p, p))
            W = (G + G.T) / math.sqrt(2.0)  # off-diagonal N(0, 1), diagonal N(0, 2)
            self.W[r] = root[:, None] * W * root[None, :]
            Q = ortho_group.rvs(p, random_state=rng) if p > 1 else np.ones((1, 1))
            # unit-σ packed noise (the model's σ of the sum is applied in errors)
            Z = symmetric_gaussian(p, 1.0, rng, vectorisation=vectorisation)
            self.Z[r] = Q.T @ Z @ Q
        self.V = np.eye(p)[:, :k]

    def errors(self, n: float, noise_sd: float = 0.0) -> np.ndarray:
        """Errors of every repeat at ``n`` users with ``noise_sd`` per packed entry of Ŝ's
        noise (0: non-private)."""
        t = 1.0 / math.sqrt(n)
        L = np.diag(self.ev)
        return np.array(
            [
                subspace_distance(
                    top_k_eigvecs(L + t * self.W[r] + noise_sd * self.Z[r], self.k)[1], self.V
                )
                for r in range(self.W.shape[0])
            ]
        )


class _Model(NamedTuple):
    """A privacy model's noise: ``sigma`` (the user's σ, local; the central σ otherwise),
    ``sum_sd`` the σ per packed entry of the summed noise (local: per user, times √n),
    ``local`` whether the sum's noise grows with n, and the validated settings."""

    name: str
    sigma: float
    sum_sd: float
    local: bool
    vectorisation: str
    holders: int | None
    min_contributors: int | None

    def noise_sd(self, n: float) -> float:
        """σ per packed entry of the noise in Ŝ = sum / n."""
        return self.sum_sd / math.sqrt(n) if self.local else self.sum_sd / n


def _model(
    model: str,
    epsilon: float,
    delta: float,
    calibration: str,
    vectorisation: str,
    holders: Any,
    min_contributors: Any,
) -> _Model:
    """Validate a model's settings and size its noise (module docstring)."""
    check_choice("model", model, MODELS)
    if model == "local":
        given = [
            f"{name}={value!r}"
            for name, value in (("holders", holders), ("min_contributors", min_contributors))
            if value is not None
        ]
        if given:
            raise ValueError(
                f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to "
                f"model='distributed' or 'per_holder' only; the model is 'local' (every "
                f"user perturbs its own message, there are no holders): set the model, "
                f"or drop {'them' if len(given) > 1 else 'it'}"
            )
        scale = ldp_noise_scale(epsilon, delta, calibration)
        vec = resolve_vectorisation(vectorisation, calibration)
        return _Model(model, scale.sigma, scale.sigma, True, vec, None, None)

    m = check_int("holders", holders, low=1, high=MAX_COUNT)  # a count privacy/ can price
    m_min = (
        m
        if min_contributors is None
        else check_int("min_contributors", min_contributors, low=1, high=m)
    )
    check_choice("calibration", calibration, ("analytic", "classic"))
    vec = (
        "isometric"
        if vectorisation == "auto"
        else check_choice("vectorisation", vectorisation, ("isometric", "upper"))
    )
    noise = holder_noise(
        epsilon, delta, m_min, calibration=calibration, secure_aggregation=model == "distributed"
    )
    return _Model(model, noise.sigma, noise.total_sigma(m), False, vec, m, m_min)


def required_users(
    p: int,
    k: int,
    epsilon: float,
    delta: float,
    *,
    target_error: float,
    eigengap: float | None = None,
    spectrum: Any = None,
    confidence: float = 0.9,
    calibration: str = "analytic",
    vectorisation: str = "auto",
    n_sim: int = 400,
    n_max: float = 1e15,
    random_state: Any = 0,
    model: str = "local",
    holders: int | None = None,
    min_contributors: int | None = None,
    allow_large: bool = False,
) -> UsersPlan:
    r"""Smallest number of users for which the ``model``'s estimator meets
    ``target_error`` with probability ``confidence`` (module docstring: model,
    simulation, search).

    Parameters
    ----------
    p, k : int
        Dimension and subspace size, ``1 <= k < p``.
    epsilon, delta : float
        Each user's (ε, δ) (local: :func:`~fedspectral.pca.ldp_noise_scale`; distributed:
        while secure aggregation holds, :func:`~fedspectral.pca.holder_noise`).
    target_error : float > 0
        :math:`T`, in the subspace distance :math:`\|\hat V\hat V^\top - VV^\top\|_F`.
    eigengap : float, optional
        :math:`G > 0`: the spectrum is :math:`G(VV^\top + I)`.  Exactly one of
        ``eigengap`` and ``spectrum``.
    spectrum : array-like, optional
        ``p`` eigenvalues, or a ``p`` x ``p`` covariance (symmetric, PSD, trace <= 1).
    confidence : float in (0, 1), default 0.9
    calibration, vectorisation : str
        As in :class:`~fedspectral.pca.LocalDPPCA` (distributed models: ``"analytic"`` or
        ``"classic"``; ``vectorisation="auto"`` is isometric).
    n_sim : int >= 50
        Simulated repeats; ``n_sim * p**2 <=`` :data:`MAX_SIM_ENTRIES` and
        ``n_sim <=`` :data:`MAX_N_SIM` unless ``allow_large`` (module docstring).
    n_max : float
        Largest number of users considered.
    random_state : None, int or numpy.random.Generator
        Randomness of the simulation (default 0: the same plan every time).
    model : {"local", "distributed", "per_holder"}, default "local"
        :class:`~fedspectral.pca.LocalDPPCA`, or :class:`~fedspectral.pca.DistributedDPPCA`
        over ``holders`` data holders with (``"distributed"``) or without
        (``"per_holder"``, each holder the full central σ) secure aggregation, at the
        replace-one relation of the local model.
    holders : int, optional
        :math:`m`, the number of data holders (distributed models only; all contribute).
    min_contributors : int, optional
        :math:`m_{min} \le m` the shares are sized for (default ``holders``).
    allow_large : bool, default False
        Lift the size bounds on ``n_sim`` and ``p`` (memory and time are the caller's);
        ``FEDSPECTRAL_ALLOW_LARGE=1`` in the environment does the same.

    Returns
    -------
    UsersPlan
    """
    # -- validation before any work ------------------------------------------------
    p = check_int("p", p, low=2)
    k = check_int("k", k, low=1)
    if k > p:
        raise ValueError(f"k must be <= p = {p}, got k={k}")
    T = check_real("target_error", target_error, low=0.0, low_open=True)
    conf = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    nsim = check_int("n_sim", n_sim, low=50)
    _check_sizes(p, nsim, conf, check_bool("allow_large", allow_large))
    nmax = check_real("n_max", n_max, low=float(p + 1))
    mod = _model(model, epsilon, delta, calibration, vectorisation, holders, min_contributors)
    if mod.holders is not None and mod.holders > nmax:
        raise ValueError(
            f"holders={mod.holders} exceeds n_max={nmax:.3g}: every holder holds at "
            f"least one user, so no plan within n_max users has that many holders"
        )
    if math.isinf(float(epsilon)):
        raise ValueError("epsilon must be finite for a private plan, got inf")
    ev = plan_eigenvalues(p, k, eigengap, spectrum)
    rng = _as_rng(random_state, name="random_state")

    random_level = math.sqrt(2 * k - 2 * k * k / p)
    n_rate = _rate_start(mod, p, k, float(epsilon), float(delta), ev, T)
    base = {
        "p": p,
        "k": k,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "target_error": T,
        "confidence": conf,
        "calibration": calibration,
        "vectorisation": mod.vectorisation,
        "sigma": mod.sigma,
        "random_level": random_level,
        "n_rate": n_rate,
        "n_sim": nsim,
        "eigenvalues": ev.tolist(),
        "model": mod.name,
        "holders": mod.holders,
        "min_contributors": mod.min_contributors,
    }
    if random_level <= T:
        return UsersPlan(
            status="above_random_level",
            n=None,
            evaluations=0,
            message=(
                f"target error {T:g} is at or above the random-subspace "
                f"level {random_level:.3f}: a random {k}-dimensional "
                "subspace meets it, no users needed"
            ),
            **base,
        )
    exp = _Experiment(ev, k, mod.vectorisation, nsim, rng)
    # every holder holds at least one user: a plan never has fewer users than holders
    floor = float(max(2 * p, 10, mod.holders or 0))
    return _search(exp, mod, T, conf, nsim, nmax, n_rate, floor, base)


def _rate_start(
    mod: _Model, p: int, k: int, epsilon: float, delta: float, ev: np.ndarray, T: float
) -> float:
    """Where the search starts: the Theorem 2 rate set to :math:`T^2` (local); for the
    distributed models the ``n`` whose noise per entry of Ŝ, ``sum_sd / n``, equals the
    local model's at that rate."""
    # / T / T: T**2 underflows to 0 below T ≈ 1e-162; the rate is inf beyond float64
    n_local = theorem2_upper_bound(1, p, k, epsilon, ev, delta=delta) / T / T
    if mod.local:
        return n_local
    sigma_local = ldp_noise_scale(epsilon, delta, "analytic").sigma
    return mod.sum_sd * math.sqrt(n_local) / sigma_local


def _search(
    exp: _Experiment,
    mod: _Model,
    T: float,
    conf: float,
    nsim: int,
    nmax: float,
    n_rate: float,
    n_floor: float,
    base: dict[str, Any],
) -> UsersPlan:
    """Bracket and bisect on log n (module docstring, "Search")."""
    evals = 0
    cache: dict[float, tuple[bool, float, float]] = {}

    def ok(n: float) -> bool:
        nonlocal evals
        if n not in cache:
            evals += 1
            e = exp.errors(n, mod.noise_sd(n))
            s = int((e <= T).sum())
            cache[n] = (_cp_lower(s, nsim) >= conf, s / nsim, float(np.quantile(e, conf)))
        return cache[n][0]

    lo = min(max(n_rate / 100.0, n_floor), nmax)
    hi = min(max(n_rate * 100.0, n_floor), nmax)
    while not ok(hi):
        if hi >= nmax:
            e_np = float(np.quantile(exp.errors(nmax), conf))
            _, frac, q = cache[nmax]
            return UsersPlan(
                status="unreachable",
                n=None,
                evaluations=evals,
                success_fraction=frac,
                error_quantile=q,
                nonprivate_error_quantile=e_np,
                message=(
                    f"target error {T:g} is not met with n_max = {nmax:.3g} users: "
                    f"there the {conf:.0%} quantile of the private error is {q:.3g} "
                    f"(non-private: {e_np:.3g})"
                    + ("; the target is below the non-private error itself" if e_np > T else "")
                ),
                **base,
            )
        lo, hi = hi, min(hi * 100.0, nmax)
    while lo > n_floor and ok(lo):
        hi, lo = lo, max(lo / 100.0, n_floor)
    if ok(lo):
        hi = lo
    bracket = (lo, hi)
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    n = _round_up(hi)
    if not ok(float(n)):  # rounding up never hurts in expectation; keep the tested n
        n = math.ceil(hi)
    _, frac, q = cache[float(n)] if float(n) in cache else cache[hi]
    e_np = float(np.quantile(exp.errors(n), conf))
    return UsersPlan(
        status="ok",
        n=n,
        evaluations=evals,
        success_fraction=frac,
        error_quantile=q,
        nonprivate_error_quantile=e_np,
        bracket=bracket,
        message=(
            f"{n:.3g} users: the error is <= {T:g} in {frac:.1%} of {nsim} simulated "
            f"repeats ({conf:.0%} quantile {q:.3g}; non-private {e_np:.3g})"
        ),
        **base,
    )
