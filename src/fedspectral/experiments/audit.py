r"""``fedspectral audit``: an empirical, black-box privacy audit of the two releases.

The audit runs the project's real release function many times on a worst-case pair of
neighbouring inputs and tries to tell them apart:

``ldp-pca``
    :func:`fedspectral.pca.local.perturb_batch` (the message of Algorithm 1) on
    :math:`x = e_1` against :math:`x' = e_2` (``p = 2``), the pair that attains the
    sensitivity :math:`\sqrt2` of :math:`\mathrm{vech}(xx^\top)`.
``dp-calr``
    :func:`fedspectral.fed.correlation.dp_correlation` (one DP-CalR release, identity
    encoder on ``d = 2``) on a client dataset :math:`D` of ``n = 8`` samples against
    :math:`D'`, the same dataset with its last sample zeroed (``zero_out``, the default
    relation) or replaced (``replace_one``).  The last sample sits at
    :math:`\sqrt\mu e_1`, the others at :math:`\sqrt\mu e_2`.

The distinguisher is fitted on one half of the samples and evaluated on the other:
the statistic is the projection of a release on the difference of the two halves'
mean releases, and the threshold is the one that maximises the ε bound on the
fitting half.  On the evaluation half, with Clopper–Pearson bounds at confidence
:math:`1-\alpha` (Bonferroni over the four rates), :math:`(\varepsilon,\delta)`-DP
implies :math:`\mathrm{TPR} \le e^\varepsilon \mathrm{FPR} + \delta` and
:math:`\mathrm{TNR} \le e^\varepsilon \mathrm{FNR} + \delta`, hence the lower bound

.. math:: \hat\varepsilon_{lb} = \max\Big(\ln\frac{\mathrm{TPR}_{lb} - \delta'}{\mathrm{FPR}_{ub}},
          \ln\frac{\mathrm{TNR}_{lb} - \delta'}{\mathrm{FNR}_{ub}}\Big)

(Jagielski et al. 2020; Nasr et al. 2021) at :math:`\delta' = \max(\delta, 1/m)`, the
smallest δ that ``m`` evaluation samples per side can resolve.  The claim it is
compared with is the ε of the claimed mechanism at :math:`\delta'`: the release's
noise multiplier (its σ over the sensitivity it was calibrated for) recorded in a
:class:`~fedspectral.privacy.PrivacyLedger` and computed by its exact single-release
(``analytic``) accountant.  The audit fails (exit 1) when
:math:`\hat\varepsilon_{lb}` exceeds the claim.

Negative controls (``--calibration``): ``paper`` for ``ldp-pca`` (the paper's σ,
calibrated for sensitivity 1 where the true one is :math:`\sqrt2`), and ``noclip``
for ``dp-calr`` (a variant that forgets the clip: the last sample sits at
:math:`3\sqrt\mu e_1` and is clipped at :math:`3\sqrt\mu`, while σ is calibrated for
:math:`\mu`).  ``--violation k`` runs the mechanism at ``k`` times the claimed ε
(the audit's power: the smallest ``k`` it detects).

``--noise secure`` draws the mechanism's noise from the secure source a node runs
(:class:`~fedspectral.privacy.SecureNoise`: a discrete Gaussian on a grid, OS entropy;
``--seed`` is refused with it, as it would seed nothing), ``--noise opendp`` from
OpenDP's sampler; the default ``fast`` is seeded numpy.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from fedspectral.checks import check_choice, check_int, check_real, check_size
from fedspectral.config_checks import MAX_SEED
from fedspectral.inputs import check_output_file
from fedspectral.kinds import ANALYTIC, RDP
from fedspectral.results import write_json

__all__ = ["AuditResult", "audit", "audit_dp_calr", "audit_ldp_pca", "epsilon_lower_bound"]

#: the noise sources an audit can run the mechanism with (``--noise``)
NOISES = ("fast", "secure", "opendp")


def _noise_source(noise: Any, seed: int) -> Any:
    """Seeded numpy for ``"fast"``; the secure source by name or as an object."""
    from fedspectral.privacy.noise import as_noise_source, is_secure  # lazy: pulls in dp-accounting

    if isinstance(noise, str):
        check_choice("noise", noise, NOISES)
        return np.random.default_rng(seed) if noise == "fast" else as_noise_source(noise)
    if not is_secure(noise):
        raise TypeError(f"noise must be one of {NOISES} or a secure source, got {noise!r}")
    return noise


TARGETS = ("ldp-pca", "dp-calr")
LDP_CALIBRATIONS = ("analytic", "classic", "paper")
CALR_CALIBRATIONS = ("rdp", "pld", "closed_form", "noclip")
#: default samples per side (``ldp-pca`` messages are 3 floats; ``dp-calr`` calls the
#: full release function once per sample)
DEFAULT_SAMPLES = {"ldp-pca": 1_000_000, "dp-calr": 10_000}
#: most samples per side (``FEDSPECTRAL_ALLOW_LARGE=1`` lifts it): ``ldp-pca`` holds about
#: 150 bytes per sample (the inputs, the noise and the messages of both sides, float64),
#: 1.5 GB at the bound; ``dp-calr`` calls the release function once per sample (10^4
#: samples per side take about 11 s here, docs/privacy-audit.md: 10^6 take about 20 min)
MAX_SAMPLES = {"ldp-pca": 10**7, "dp-calr": 10**6}
#: most samples per side with ``noise="opendp"`` (the same variable lifts it): OpenDP's
#: sampler draws through Python lists, about 1.5 ms a sample (both sides) for ``ldp-pca``
#: on a loaded 2-core machine -- 25 min at 10^6, the default -- and doubles a ``dp-calr``
#: release's time (10^4 samples: 45 s instead of 23 s there)
MAX_OPENDP_SAMPLES = {"ldp-pca": 10**6, "dp-calr": 10**5}
OPENDP_COST = {"ldp-pca": "about 1.5 ms a sample", "dp-calr": "twice the time of a release"}
DEFAULT_EPSILON = {"ldp-pca": 2.0, "dp-calr": 2.0}
DEFAULT_DELTA = 1e-5


@dataclass
class AuditResult:
    """What one audit found (all figures per neighbouring pair)."""

    target: str
    calibration: str
    epsilon: float
    delta: float
    samples: int
    delta_prime: float
    epsilon_claimed: float
    epsilon_lower_bound: float
    alpha: float
    sigma: float
    sensitivity_claimed: float
    violation: float
    seconds: float
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cp_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    k = np.asarray(k, dtype=float)
    out = np.zeros_like(k)
    pos = k > 0
    out[pos] = stats.beta.ppf(a, k[pos], n - k[pos] + 1)
    return out


def _cp_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    k = np.asarray(k, dtype=float)
    out = np.ones_like(k)
    lt = k < n
    out[lt] = stats.beta.ppf(1 - a, k[lt] + 1, n - k[lt])
    return out


def _bounds(
    pos: np.ndarray, neg: np.ndarray, thresholds: np.ndarray, delta: float, alpha: float
) -> np.ndarray:
    """ε lower bound at each threshold (decide "D" when the statistic >= threshold)."""
    m1, m0 = len(pos), len(neg)
    ps, ns = np.sort(pos), np.sort(neg)
    tp = m1 - np.searchsorted(ps, thresholds, side="left")
    fp = m0 - np.searchsorted(ns, thresholds, side="left")
    a = alpha / 4.0
    tpr_lb, fpr_ub = _cp_lower(tp, m1, a), _cp_upper(fp, m0, a)
    tnr_lb, fnr_ub = _cp_lower(m0 - fp, m0, a), _cp_upper(m1 - tp, m1, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(tpr_lb - delta, 0.0) / fpr_ub)
        e2 = np.log(np.maximum(tnr_lb - delta, 0.0) / fnr_ub)
    return np.nan_to_num(np.maximum(e1, e2), nan=-np.inf)


def epsilon_lower_bound(
    releases_d: np.ndarray, releases_d2: np.ndarray, delta: float, alpha: float = 0.05
) -> float:
    """Clopper–Pearson ε lower bound (confidence ``1 - alpha``) at ``delta`` from samples of a
    mechanism on two neighbouring inputs, rows = releases (flattened).

    The first half of each sample fits the test (direction and threshold), the second
    half evaluates it; the bound is ``max(0, ...)``.
    """
    a = np.asarray(releases_d, dtype=np.float64).reshape(len(releases_d), -1)
    b = np.asarray(releases_d2, dtype=np.float64).reshape(len(releases_d2), -1)
    ha, hb = len(a) // 2, len(b) // 2
    direction = a[:ha].mean(axis=0) - b[:hb].mean(axis=0)
    norm = float(np.linalg.norm(direction))
    if not norm > 0:
        return 0.0
    direction /= norm
    fa, fb = a[:ha] @ direction, b[:hb] @ direction
    ea, eb = a[ha:] @ direction, b[hb:] @ direction
    cand = np.quantile(np.concatenate([fa, fb]), np.linspace(0.0005, 0.9995, 400))
    fit = _bounds(fa, fb, cand, delta, alpha)
    tau = cand[int(np.argmax(fit))]
    return max(0.0, float(_bounds(ea, eb, np.array([tau]), delta, alpha)[0]))


def _claimed_epsilon(sigma: float, sensitivity: float, delta_prime: float) -> float:
    from fedspectral.privacy import PrivacyLedger  # lazy: pulls in dp-accounting

    led = PrivacyLedger()
    led.record("audit", "audit", sigma=sigma, sensitivity=sensitivity)
    return led.epsilon(delta_prime, accountant=ANALYTIC)


def _check(
    epsilon: float,
    delta: float,
    samples: int,
    alpha: float,
    violation: float,
    seed: int,
    target: str,
    noise: Any = "fast",
) -> tuple[float, float, int, float, float, int]:
    from fedspectral.privacy.noise import OpenDPNoise  # lazy: pulls in dp-accounting

    eps = check_real("epsilon", epsilon, low=0.0, low_open=True)
    dlt = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    opendp = isinstance(noise, OpenDPNoise) or (isinstance(noise, str) and noise == "opendp")
    n = check_size(
        "samples",
        samples,
        (MAX_OPENDP_SAMPLES if opendp else MAX_SAMPLES)[target],
        low=200,
        why=f"{target}: memory and time per sample"
        + (f"; with OpenDP's sampler {OPENDP_COST[target]}" if opendp else ""),
    )
    a = check_real("alpha", alpha, low=0.0, high=1.0, low_open=True, high_open=True)
    k = check_real("violation", violation, low=1.0)
    s = check_int("seed", seed, low=0, high=MAX_SEED)  # the project's seeds: signed 64-bit
    return eps, dlt, n, a, k, s


def _at_violation(eps: float, k: float, calibrate: Any) -> Any:
    """``calibrate()`` of the mechanism at ``eps x k``; its refusal names both factors
    (the user gave ``epsilon`` and ``violation``, not their product)."""
    try:
        return calibrate()
    except ValueError as exc:
        why = str(exc).split("; ")[0]  # the library's own advice (epsilon=inf) is not ours
        raise ValueError(
            f"the mechanism runs at epsilon x violation = {eps:g} x {k:g} = "
            f"{eps * k:g}, which cannot be calibrated ({why}); lower epsilon or "
            f"violation"
        ) from exc


def _finish(
    target: str,
    calibration: str,
    eps: float,
    delta: float,
    n: int,
    alpha: float,
    sigma: float,
    sens_claim: float,
    violation: float,
    a: np.ndarray,
    b: np.ndarray,
    t0: float,
) -> AuditResult:
    delta_prime = max(delta, 1.0 / (n - n // 2))
    lb = epsilon_lower_bound(a, b, delta_prime, alpha)
    claim = _claimed_epsilon(sigma, sens_claim, delta_prime)
    return AuditResult(
        target,
        calibration,
        eps,
        delta,
        n,
        delta_prime,
        claim,
        lb,
        alpha,
        sigma,
        sens_claim,
        violation,
        time.perf_counter() - t0,
        lb <= claim,
    )


def audit_ldp_pca(
    epsilon: float = DEFAULT_EPSILON["ldp-pca"],
    delta: float = DEFAULT_DELTA,
    calibration: str = "analytic",
    samples: int = DEFAULT_SAMPLES["ldp-pca"],
    alpha: float = 0.05,
    violation: float = 1.0,
    seed: int = 0,
    noise: Any = "fast",
) -> AuditResult:
    """Audit the LDP-PCA message (:func:`~fedspectral.pca.local.perturb_batch`) on e₁ vs e₂.

    ``calibration`` is the claim (``"paper"``: the paper's sensitivity-1 σ, a negative
    control); the mechanism runs at ``violation`` x ``epsilon`` and claims ``epsilon``;
    ``noise`` is the noise source (:data:`NOISES`, or a secure source object).
    """
    # lazy: pulls in scikit-learn and dp-accounting
    from fedspectral.pca.local import SENSITIVITY, ldp_noise_scale, perturb_batch

    eps, delta, n, alpha, k, seed = _check(
        epsilon, delta, samples, alpha, violation, seed, "ldp-pca", noise
    )
    check_choice("calibration", calibration, LDP_CALIBRATIONS)
    if calibration == "classic" and eps * k >= 1:
        raise ValueError(
            f"calibration='classic' (the classic Gaussian formula) holds for "
            f"epsilon < 1 only, and the mechanism runs at epsilon x violation = "
            f"{eps:g} x {k:g} = {eps * k:g}; lower epsilon or violation, or use "
            f"calibration='analytic'"
        )
    t0 = time.perf_counter()
    run_eps = eps * k
    _at_violation(eps, k, lambda: ldp_noise_scale(run_eps, delta, calibration))
    rng = _noise_source(noise, seed)
    x1 = np.zeros((n, 2))
    x1[:, 0] = 1.0
    x2 = np.zeros((n, 2))
    x2[:, 1] = 1.0
    a = perturb_batch(x1, run_eps, delta, rng=rng, calibration=calibration)
    b = perturb_batch(x2, run_eps, delta, rng=rng, calibration=calibration)
    # the claim: the σ the calibration gives at epsilon, for the sensitivity it assumes
    sigma_claim = ldp_noise_scale(eps, delta, calibration).sigma
    sens_claim = 1.0 if calibration == "paper" else SENSITIVITY
    return _finish(
        "ldp-pca", calibration, eps, delta, n, alpha, sigma_claim, sens_claim, k, a, b, t0
    )


def audit_dp_calr(
    epsilon: float = DEFAULT_EPSILON["dp-calr"],
    delta: float = DEFAULT_DELTA,
    calibration: str = "rdp",
    samples: int = DEFAULT_SAMPLES["dp-calr"],
    alpha: float = 0.05,
    violation: float = 1.0,
    seed: int = 0,
    neighbouring: str = "zero_out",
    mu: float = 4.0,
    n: int = 8,
    noise: Any = "fast",
) -> AuditResult:
    """Audit one DP-CalR release (:func:`~fedspectral.fed.correlation.dp_correlation`).

    ``calibration`` is the accountant σ is calibrated with (``rdp``, ``pld``,
    ``closed_form``) or ``noclip`` (negative control: a variant that forgets the clip);
    ``noise`` is the noise source (:data:`NOISES`, or a secure source object).
    """
    import torch

    # lazy: pulls in torch and dp-accounting
    from fedspectral.fed.correlation import (
        calibrate_correlation_sigma,
        correlation_sensitivity,
        dp_correlation,
    )

    eps, delta, m, alpha, k, seed = _check(
        epsilon, delta, samples, alpha, violation, seed, "dp-calr", noise
    )
    check_choice("calibration", calibration, CALR_CALIBRATIONS)
    check_choice("neighbouring", neighbouring, ("zero_out", "replace_one"))
    mu = check_real("mu", mu, low=0.0, low_open=True)
    n = check_int("n", n, low=2, high=10**4)
    t0 = time.perf_counter()
    accountant = RDP if calibration == "noclip" else calibration
    sigma_claim = calibrate_correlation_sigma(eps, delta, 1, mu, n, accountant, neighbouring)
    sigma = _at_violation(
        eps,
        k,
        lambda: calibrate_correlation_sigma(eps * k, delta, 1, mu, n, accountant, neighbouring),
    )
    scale = 3.0 if calibration == "noclip" else 1.0
    clip_mu = mu * scale**2  # the forgotten clip: representations pass at full norm
    root = math.sqrt(mu) * scale
    d = torch.zeros(n, 2, dtype=torch.float64)
    d[:, 1] = math.sqrt(mu)
    d[-1] = torch.tensor([root, 0.0], dtype=torch.float64)
    d2 = d.clone()
    d2[-1] = (
        torch.zeros(2, dtype=torch.float64)
        if neighbouring == "zero_out"
        else torch.tensor([0.0, root], dtype=torch.float64)
    )

    def identity(z: torch.Tensor) -> torch.Tensor:
        return z

    rng = _noise_source(noise, seed)
    iu = np.triu_indices(2)

    def releases(data: torch.Tensor) -> np.ndarray:
        out = np.empty((m, 3))
        for i in range(m):
            r = dp_correlation(
                identity, data, None, 1, clip_mu, sigma, None, rng, check_independence=(i == 0)
            )
            out[i] = r[iu]
        return out

    a, b = releases(d), releases(d2)
    sens = correlation_sensitivity(mu, n, neighbouring)
    return _finish("dp-calr", calibration, eps, delta, m, alpha, sigma_claim, sens, k, a, b, t0)


def audit(target: str, **kw: Any) -> AuditResult:
    """:func:`audit_ldp_pca` or :func:`audit_dp_calr` by name."""
    check_choice("target", target, TARGETS)
    return audit_ldp_pca(**kw) if target == "ldp-pca" else audit_dp_calr(**kw)


# ----------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=TARGETS, help="the release to audit")
    parser.add_argument("--epsilon", type=float, default=None, help="claimed epsilon (default 2)")
    parser.add_argument(
        "--delta",
        type=float,
        default=DEFAULT_DELTA,
        help=f"claimed delta (default {DEFAULT_DELTA:g})",
    )
    parser.add_argument(
        "--calibration",
        default=None,
        help="ldp-pca: analytic (default), classic, paper (negative control); "
        "dp-calr: rdp (default), pld, closed_form, noclip (negative "
        "control: the clip forgotten)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="releases per neighbouring input (default 1e6 ldp-pca, "
        "1e4 dp-calr; at most 1e7 and 1e6, with --noise opendp 1e6 and 1e5; "
        "FEDSPECTRAL_ALLOW_LARGE=1 lifts the bounds)",
    )
    parser.add_argument(
        "--neighbouring",
        default="zero_out",
        choices=("zero_out", "replace_one"),
        help="dp-calr: the neighbouring pair (default zero_out)",
    )
    parser.add_argument(
        "--violation",
        type=float,
        default=1.0,
        help="run the mechanism at this multiple of the claimed epsilon (power study; default 1)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="1 - confidence of the Clopper-Pearson bounds (default 0.05)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed of the fast noise's draws (default 0; refused with --noise "
        "secure or opendp, whose noise comes from OS entropy)",
    )
    parser.add_argument(
        "--noise",
        default="fast",
        choices=NOISES,
        help="the mechanism's noise source: fast (seeded numpy, default), secure (the "
        "node's: discrete Gaussian on a grid, OS entropy), opendp (OpenDP's sampler)",
    )
    parser.add_argument("--json", default=None, help="also write the result to this JSON file")


def run(args: argparse.Namespace) -> int:
    target = args.target
    calibration = (
        args.calibration
        if args.calibration is not None
        else ("analytic" if target == "ldp-pca" else "rdp")
    )  # "" is refused, not the default
    kw: dict[str, Any] = {
        "epsilon": DEFAULT_EPSILON[target] if args.epsilon is None else args.epsilon,
        "delta": args.delta,
        "calibration": calibration,
        "samples": DEFAULT_SAMPLES[target] if args.samples is None else args.samples,
        "alpha": args.alpha,
        "violation": args.violation,
        "seed": 0 if args.seed is None else args.seed,
        "noise": args.noise,
    }
    if args.seed is not None and args.noise != "fast":
        print(
            f"fedspectral audit: error: --seed {args.seed} seeds nothing with --noise "
            f"{args.noise} (its noise comes from OS entropy); leave --seed out",
            file=sys.stderr,
        )
        return 2
    if target == "dp-calr":
        kw["neighbouring"] = args.neighbouring
    elif args.neighbouring != "zero_out":
        print("fedspectral audit: error: --neighbouring applies to dp-calr only", file=sys.stderr)
        return 2
    if args.json is not None:
        _check_json_path(args.json)  # before the audit's work, not after its verdict
    try:
        res = audit(target, **kw)
    except (TypeError, ValueError) as exc:
        print(f"fedspectral audit: error: {_option_names(str(exc))}", file=sys.stderr)
        return 2
    verdict = "PASS" if res.passed else "FAIL: the lower bound exceeds the claim"
    if args.json is not None:  # serialised and written before the verdict is printed:
        write_json(args.json, res.to_dict())
    print(
        f"audit {res.target} (calibration {res.calibration}, epsilon {res.epsilon:g}, "
        f"delta {res.delta:g}, violation x{res.violation:g})\n"
        f"  samples per input   {res.samples}\n"
        f"  delta'              {res.delta_prime:.3g}\n"
        f"  epsilon claimed     {res.epsilon_claimed:.4f}  (at delta')\n"
        f"  epsilon lower bound {res.epsilon_lower_bound:.4f}  "
        f"(Clopper-Pearson, confidence {1 - res.alpha:g})\n"
        f"  seconds             {res.seconds:.1f}\n"
        f"  {verdict}"
    )
    return 0 if res.passed else 1


#: the library's parameter names and the options that set them
_OPTIONS = {
    "samples": "--samples",
    "epsilon x violation": "--epsilon x --violation",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "alpha": "--alpha",
    "violation": "--violation",
    "seed": "--seed",
    "calibration": "--calibration",
}


def _option_names(message: str) -> str:
    """A library message with its leading parameter name as the option the user gave
    (``samples=10 ...`` -> ``--samples=10 ...``)."""
    for name, option in _OPTIONS.items():
        if message.startswith((name + " ", name + "=", name + "'")):
            return option + message[len(name) :]
    return message


def _check_json_path(path: str) -> None:
    """``--json PATH`` can be written (:func:`fedspectral.inputs.check_output_file`: not a
    folder nor any other non-file, not a dangling symlink, its folder writable) -- checked
    before the audit runs."""
    check_output_file(path, "--json")
