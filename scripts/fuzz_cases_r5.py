"""Case strategies of the fuzzing harness, round 5 (issue 48): the entry points the fourth
round found broken or that round 5 added.

* ``lib: privacy (r5)`` -- every public function of :mod:`fedspectral.privacy`, one
  argument at a time replaced by a bool, text, bytes, a complex number, NaN, ±inf, a huge
  real or integer (1e300, 2**61 + 1, 10**400), a negative, zero, or a float where a count
  belongs (2.5, 3.0); valid values drawn beside them.  Oracle: a result is finite (σ, a
  noise multiplier, released values on the secure grid), and an ε is never below the
  exact ε of the same Gaussian releases (dp-accounting's analytic ε of the composed
  multiplier, z / sqrt(count)); a calibrated σ or z never gives more than the ε asked.
* ``lib: secure sampler`` -- the secure source with values beyond its grid, at the edge of
  it, non-finite or of a non-real dtype; oracle: on the grid, the shape kept, the noise of
  the size of σ, nothing clipped.
* ``lib: node policy (r5)`` -- the node's ``policy-*`` node-config keys and policy files:
  unknown keys and names, wrong types, ints or lists where a path belongs, the simulation-
  only settings with ``simulation = false``; oracle: an accepted policy holds exactly what
  was written.
* ``lib: node data (r5)`` -- the node's ``data-*`` keys (shards in odd digits, limits,
  unknown keys, non-text ids).
* ``lib: node request (r5)`` -- the node's request parsers (``config_int``,
  ``config_float``, the client-DP request) and its LDP-PCA handler with a malformed
  request; oracle: a refusal charges nothing (the ledger folder holds no release), an
  answer has the shape asked, finite, with no side field.
* ``script: benchmarks`` -- every ``benchmarks/*.py`` with a bad argument or one that does
  nothing in the mode asked; ``script: fedsc_sweep`` -- ``scripts/fedsc_sweep.py``'s.
* ``cli:pca-bench (reanalyse rows)`` -- ``--reanalyse`` of a finished quick run whose
  ``fig1.csv`` has one row edited (NaN, negative or infinite errors, unknown methods,
  impossible distances, odd numbers).
* ``cli:reproduce (gpu-tflops)``, ``cli:audit (seed)`` -- the bounds and refusals of
  round 5.
* ``lib: encoder file (r5)`` -- ``load_encoder`` on an integer-weight, pickled,
  truncated, empty or foreign checkpoint.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_cases import ODD_FILES, Case
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
_TEMPLATES: dict[str, Any] = {}


# ======================================================================================
# value pools and what each kind of argument takes
# ======================================================================================
NAN, INF = math.nan, math.inf
#: never a real number (refused whatever the argument)
NOT_REAL = [
    True,
    False,
    np.bool_(True),
    "2.0",
    "1",
    "",
    b"1",
    2 + 1j,
    complex(1, 0),
    np.complex128(1 + 0j),
    None,
    [1.0],
    (0.5,),
    {"a": 1},
]
#: reals that are not finite, or that no float holds
NOT_FINITE = [NAN, -INF, np.float32("nan"), np.float64(-np.inf), 10**400, -(10**400)]
#: reals at the edges
EDGES = [
    INF,
    np.float64(np.inf),
    1e300,
    1.7e308,
    2**61 + 1,
    2**63,
    1e20,
    -1.0,
    -1e-300,
    -(2**61),
    0,
    0.0,
    -0.0,
    5e-324,
    1e-300,
    1e-20,
    np.array(1.0),
    Fraction(1, 2),
    Decimal("0.5"),
]
#: floats and other non-integers where a count belongs
NOT_COUNT = [2.5, 3.0, np.float64(2.0), 1.5, -1, 0, 2**53 + 1, 2**64, 10**30, "3", True]

KINDS = ("eps", "delta", "pos", "nonneg", "count", "tv")


def _plain_real(v: Any) -> float | None:
    """``v`` as a float when it is unambiguously a real number (Python or numpy, not bool,
    not an array, not Decimal), else None."""
    if isinstance(v, (bool, np.bool_, np.ndarray, Decimal)):
        return None
    if isinstance(v, (int, float, Fraction, np.integer, np.floating)):
        try:
            return float(v)
        except OverflowError:
            return None
    return None


def validity(kind: str, v: Any) -> bool | None:
    """True: a valid value of ``kind``; False: known invalid (must be refused); None: the
    function may take it or refuse it (the oracle still checks a result)."""
    if isinstance(v, (bool, np.bool_, str, bytes, complex, np.complexfloating, list, tuple)):
        return False
    if v is None or isinstance(v, dict):
        return False
    if kind == "count":
        if isinstance(v, (float, np.floating, Fraction, Decimal)):
            return False
        if isinstance(v, (int, np.integer)):
            return 1 <= int(v) <= 2**53
        return None  # a 0-d array
    x = _plain_real(v)
    if x is None:
        if isinstance(v, int):  # beyond the float range
            return False
        return None
    if math.isnan(x) or x == -INF:
        return False
    if kind == "eps":
        if x <= 0:
            return False
        return True if 1e-3 <= x <= 50 else None
    if kind == "delta":
        if not 0 < x < 1:
            return False
        return True if 1e-12 <= x <= 0.5 else None
    if kind == "pos":
        if x <= 0 or x == INF:
            return False
        return True if 1e-3 <= x <= 1e3 else None
    if kind == "nonneg":
        if x < 0 or x == INF:
            return False
        return True if 1e-3 <= x <= 1e3 else None
    if kind == "tv":
        if x < 0 or x == INF:
            return False
        return True if x == 0 or 1e-30 <= x <= 1e-12 else None
    raise AssertionError(kind)


def valid_values(kind: str) -> st.SearchStrategy[Any]:
    if kind == "eps":
        return st.floats(1e-3, 50)
    if kind == "delta":
        return st.sampled_from([1e-12, 1e-8, 1e-5, 1e-3, 0.1, 0.5])
    if kind in ("pos", "nonneg"):
        return st.floats(1e-3, 1e3)
    if kind == "count":
        return st.one_of(st.integers(1, 1000), st.sampled_from([np.int64(3), 1]))
    if kind == "tv":
        return st.sampled_from([0.0, 1e-20, 1e-15])
    raise AssertionError(kind)


def any_value(kind: str) -> st.SearchStrategy[Any]:
    pools = [st.sampled_from(NOT_REAL), st.sampled_from(NOT_FINITE), st.sampled_from(EDGES)]
    if kind == "count":
        pools.append(st.sampled_from(NOT_COUNT))
    return st.one_of(valid_values(kind), *pools)


# ======================================================================================
# the exact reference: Gaussian releases compose to one Gaussian of multiplier
# (sum count_i / z_i**2) ** -1/2; dp-accounting's analytic epsilon of it is exact
# ======================================================================================
def exact_epsilon(zs: list[tuple[float, int]], delta: float) -> float | None:
    """The exact ε(δ) of ``count`` Gaussian releases of multiplier ``z`` each (None where
    it is not computable: z out of [1e-3, 1e4], δ out of [1e-300, 0.5])."""
    import dp_accounting

    if not 1e-300 <= delta <= 0.5 or any(not (1e-3 <= z <= 1e4) for z, _ in zs):
        return None
    z = sum(c / z**2 for z, c in zs) ** -0.5
    try:
        return float(dp_accounting.get_epsilon_gaussian(z, delta))
    except Exception:  # noqa: BLE001 - out of dp-accounting's range: no reference
        return None


def _below(eps: Any, exact: float | None, what: str) -> str | None:
    """Why ``eps`` is no valid ε: not a float >= 0, or below the exact one."""
    if not isinstance(eps, float) or math.isnan(eps) or eps < 0:
        return f"{what} {eps!r} is not an epsilon"
    if exact is not None and eps < exact * (1 - 1e-6) - 1e-9:
        return f"{what} {eps!r} below the exact {exact!r} (an optimistic privacy claim)"
    return None


def _above(z: Any, count: int, delta: float, eps: float, what: str, tol: float = 1e-5):
    """Why a calibrated multiplier ``z`` is wrong: not finite, or its exact ε above
    ``eps``."""
    if not isinstance(z, float) or not math.isfinite(z) or z < 0:
        return f"{what} {z!r} is not a finite noise multiplier"
    if z == 0:
        return None if eps == INF else f"{what} 0 for epsilon {eps!r}"
    exact = exact_epsilon([(z, count)], delta)
    if exact is not None and exact > eps * (1 + tol) + 1e-12:
        return f"{what} {z!r} gives the exact epsilon {exact!r} > {eps!r} asked"
    return None


# ======================================================================================
# lib: privacy (r5)
# ======================================================================================
#: target -> (argument kinds, the defaults, what it returns)
PRIVACY_TARGETS: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "gaussian_sigma": ({"epsilon": "eps", "delta": "delta", "sensitivity": "pos"}, {}),
    "calibrate_noise_multiplier": ({"epsilon": "eps", "delta": "delta", "count": "count"}, {}),
    "closed_form_noise_multiplier": (
        {"epsilon": "eps", "delta": "delta", "count": "count"},
        {},
    ),
    "ledger.record+epsilon": (
        {"sigma": "nonneg", "sensitivity": "pos", "count": "count", "delta": "delta"},
        {},
    ),
    "ledger.record_noise_multiplier": (
        {"noise_multiplier": "nonneg", "count": "count", "delta": "delta"},
        {},
    ),
    "epsilon_of_releases": (
        {"sigma": "nonneg", "sensitivity": "pos", "count": "count", "delta": "delta"},
        {},
    ),
    "release_epsilon": ({"sigma": "nonneg", "sensitivity": "pos", "delta": "delta"}, {}),
    "epsilon_with": ({"sigma": "nonneg", "sigma2": "nonneg", "delta": "delta"}, {}),
    "aggregate_epsilon": ({"z1": "nonneg", "z2": "nonneg", "delta": "delta"}, {}),
    "BudgetAccountant": (
        {"epsilon": "eps", "delta": "delta", "sigma": "nonneg", "count": "count"},
        {},
    ),
    "mean_sigma": ({"noise_multiplier": "nonneg", "clipping_norm": "pos", "m": "count"}, {}),
    "share_sigma": ({"noise_multiplier": "nonneg", "clipping_norm": "pos", "m": "count"}, {}),
    "summed_noise_multiplier": ({"share_multiplier": "nonneg", "m": "count"}, {}),
    "distributed_gaussian": (
        {"epsilon": "eps", "delta": "delta", "sensitivity": "pos", "min_contributors": "count"},
        {},
    ),
    "grid_sensitivity": ({"sensitivity": "nonneg", "sigma": "pos", "d": "count"}, {}),
    "extra_delta": ({"d": "count", "epsilon": "eps"}, {}),
    "sampled_epsilon": ({"delta": "delta", "tv": "tv"}, {}),
    "noise_scale": ({"sigma": "pos"}, {}),
    "sample": ({"scale2": "pos", "size": "count"}, {}),
    "gaussian_event": ({"z": "nonneg", "count": "count"}, {}),
    "accountants_at": ({"delta": "delta"}, {}),
    "symmetric_gaussian": ({"p": "count", "sigma": "nonneg"}, {}),
    "add_symmetric_gaussian": ({"sigma": "nonneg"}, {}),
    "Release.values": ({"values": "count", "sigma": "nonneg"}, {}),
    "BudgetAccountant.would_spend": ({"epsilon": "eps", "delta": "delta", "sigma": "nonneg"}, {}),
    "ledger.report": ({"sigma": "nonneg", "count": "count", "delta": "delta"}, {}),
    "party_epsilons": ({"sigma": "nonneg", "sigma2": "nonneg", "delta": "delta"}, {}),
    "pld_interval": ({"z": "pos", "count": "count", "delta": "delta"}, {}),
}
#: names a Release (and the ledger) must refuse: field -> (valid, invalid)
RELEASE_TEXT: dict[str, tuple[list[Any], list[Any]]] = {
    "party": (["u", "client-3"], [3, None, b"u", ["u"]]),
    "mechanism": (["m", "dp-calr"], [3, None]),
    "neighbouring": (["replace_one", "add_remove", "zero_out"], ["replace", "", 1, None]),
    "unit": (["sample", "client"], ["user", "", 2]),
    "threat": (["any", "secagg", "fallback"], ["fallbak", "", None, 0]),
    "noise": ([None, "discrete-gaussian-grid", "numpy-float"], [3, b"x"]),
    "step": ([None, 0, 7], [2.5, "1", True]),
}
ACCOUNTANTS = ("rdp", "pld", "closed_form", "analytic")


def _call_privacy(target: str, a: dict[str, Any], acc: str) -> Any:
    from fedspectral.privacy import (
        BudgetAccountant,
        PrivacyLedger,
        Release,
        add_symmetric_gaussian,
        calibrate_noise_multiplier,
        distributed_gaussian,
        gaussian_sigma,
        symmetric_gaussian,
    )
    from fedspectral.privacy import accounting as accm
    from fedspectral.privacy import calibration as cal
    from fedspectral.privacy import client_level as cl
    from fedspectral.privacy import discrete_gaussian as dg
    from fedspectral.privacy import report as rep

    if target == "gaussian_sigma":
        return gaussian_sigma(a["epsilon"], a["delta"], a["sensitivity"])
    if target == "calibrate_noise_multiplier":
        return calibrate_noise_multiplier(a["epsilon"], a["delta"], a["count"], acc)
    if target == "closed_form_noise_multiplier":
        return cal.closed_form_noise_multiplier(a["epsilon"], a["delta"], a["count"])
    if target == "ledger.record+epsilon":
        led = PrivacyLedger()
        led.record("u", "m", sigma=a["sigma"], sensitivity=a["sensitivity"], count=a["count"])
        return led.epsilon(a["delta"], accountant=acc)
    if target == "ledger.record_noise_multiplier":
        led = PrivacyLedger()
        led.record_noise_multiplier("u", "m", a["noise_multiplier"], count=a["count"])
        return led.epsilon(a["delta"], accountant=acc)
    if target == "epsilon_of_releases":
        rel = Release("u", "m", a["sigma"], a["sensitivity"], a["count"])
        return accm.epsilon_of_releases([rel], a["delta"], acc)
    if target == "release_epsilon":
        return rep.release_epsilon(Release("u", "m", a["sigma"], a["sensitivity"]), a["delta"])
    if target == "epsilon_with":
        old = Release("u", "m", a["sigma"], 1.0)
        return rep.epsilon_with([old], Release("u", "m", a["sigma2"], 1.0), a["delta"])
    if target == "aggregate_epsilon":
        return cl.aggregate_epsilon([a["z1"], a["z2"]], a["delta"], acc)
    if target == "BudgetAccountant":
        budget = BudgetAccountant(a["epsilon"], a["delta"], "pld" if acc == "pld" else "rdp")
        budget.spend([Release("u", "m", a["sigma"], 1.0, a["count"])])
        return budget.spent()
    if target == "mean_sigma":
        return cl.mean_sigma(a["noise_multiplier"], a["clipping_norm"], a["m"])
    if target == "share_sigma":
        return cl.share_sigma(a["noise_multiplier"], a["clipping_norm"], a["m"])
    if target == "summed_noise_multiplier":
        return cl.summed_noise_multiplier(a["share_multiplier"], a["m"])
    if target == "distributed_gaussian":
        g = distributed_gaussian(a["epsilon"], a["delta"], a["sensitivity"], a["min_contributors"])
        return g, g.total_sigma(g.min_contributors), g.secagg_sigma(g.min_contributors)
    if target == "grid_sensitivity":
        return dg.grid_sensitivity(a["sensitivity"], a["sigma"], a["d"])
    if target == "extra_delta":
        return dg.extra_delta(a["d"], a["epsilon"])
    if target == "sampled_epsilon":
        import dp_accounting

        def eps_at(d: float) -> float:  # the caller's ideal mechanism: z = 2
            return float(dp_accounting.get_epsilon_gaussian(2.0, d))

        return dg.sampled_epsilon(eps_at, a["delta"], a["tv"])
    if target == "noise_scale":
        return dg.noise_scale(a["sigma"])
    if target == "sample":
        out, var = dg.sample(a["scale2"], a["size"], dg.os_bits())
        return out, float(var)
    if target == "gaussian_event":
        return accm.gaussian_event(a["z"], a["count"])
    if target == "accountants_at":
        return accm.accountants_at(a["delta"])
    if target == "symmetric_gaussian":
        return symmetric_gaussian(a["p"], a["sigma"], np.random.default_rng(0))
    if target == "add_symmetric_gaussian":
        return add_symmetric_gaussian(np.eye(3) * 0.25, a["sigma"], acc_source(acc))
    if target == "Release.values":
        rel = Release("u", "m", a["sigma"], 1.0, values=a["values"], noise=dg.MECHANISM)
        return rep.release_epsilon(rel, 1e-5)
    if target == "BudgetAccountant.would_spend":
        budget = BudgetAccountant(a["epsilon"], a["delta"], "pld" if acc == "pld" else "rdp")
        return budget.would_spend([Release("u", "m", a["sigma"], 1.0)])
    if target == "ledger.report":
        led = PrivacyLedger()
        led.record("u", "m", a["sigma"], 1.0, a["count"])
        return led.report(a["delta"])
    if target == "party_epsilons":
        led = PrivacyLedger()
        led.record("u", "m", a["sigma"], 1.0)
        led.record("v", "m", a["sigma2"], 1.0)
        return rep.party_epsilons(led, a["delta"], "pld" if acc == "pld" else "rdp")
    if target == "pld_interval":
        z = a["z"]
        key = z if getattr(type(z), "__hash__", None) is not None else repr(z)
        return accm.pld_interval({key: a["count"]}, a["delta"])
    raise AssertionError(target)


def acc_source(acc: str) -> Any:
    return {"rdp": "secure", "pld": "secure", "analytic": "opendp"}.get(
        acc, np.random.default_rng(0)
    )


def _privacy_oracle(target: str, a: dict[str, Any], acc: str, res: Any) -> str | None:
    f = {k: _plain_real(v) for k, v in a.items()}
    delta = f.get("delta")
    if target == "gaussian_sigma":
        return _above(res / f["sensitivity"], 1, delta, f["epsilon"], "sigma/Δ")
    if target in ("calibrate_noise_multiplier", "closed_form_noise_multiplier"):
        return _above(res, int(a["count"]), delta, f["epsilon"], "z")
    if target in ("ledger.record+epsilon", "epsilon_of_releases", "release_epsilon"):
        z = f["sigma"] / f["sensitivity"]
        count = int(a.get("count", 1))
        if z == 0:
            return None if res == INF else f"zero noise gave epsilon {res!r}"
        return _below(res, exact_epsilon([(z, count)], delta), f"{acc} epsilon")
    if target == "ledger.record_noise_multiplier":
        z = f["noise_multiplier"]
        if z == 0:
            return None if res == INF else f"zero noise gave epsilon {res!r}"
        return _below(res, exact_epsilon([(z, int(a["count"]))], delta), f"{acc} epsilon")
    if target in ("epsilon_with", "aggregate_epsilon"):
        zs = [f["sigma"], f["sigma2"]] if target == "epsilon_with" else [f["z1"], f["z2"]]
        if min(zs) == 0:
            return None if res == INF else f"zero noise gave epsilon {res!r}"
        return _below(res, exact_epsilon([(z, 1) for z in zs], delta), "composed epsilon")
    if target == "BudgetAccountant":
        why = _below(res, exact_epsilon([(f["sigma"], int(a["count"]))], delta), "spent")
        if why is None and res > f["epsilon"] * (1 + 1e-9):
            why = f"spent {res!r} above the budget {f['epsilon']!r} without a refusal"
        return why
    if target in ("mean_sigma", "share_sigma", "summed_noise_multiplier", "grid_sensitivity"):
        if not (isinstance(res, float) and math.isfinite(res) and res >= 0):
            return f"{target} {res!r} is not a finite scale"
        if target == "mean_sigma":
            want = f["noise_multiplier"] * f["clipping_norm"] / int(a["m"])
        elif target == "share_sigma":
            want = f["noise_multiplier"] * f["clipping_norm"] / math.sqrt(int(a["m"]))
        elif target == "summed_noise_multiplier":
            want = f["share_multiplier"] * math.sqrt(int(a["m"]))
        else:
            return None if res >= f["sensitivity"] else f"{res!r} below the sensitivity"
        return None if math.isclose(res, want, rel_tol=1e-12) else f"{res!r} != {want!r}"
    if target == "distributed_gaussian":
        g, total, sec = res
        if not all(math.isfinite(x) and x >= 0 for x in (g.sigma, g.share_sigma, total, sec)):
            return f"non-finite noise scales {g}"
        # all shares at min_contributors sum to the central sigma, its epsilon as asked
        return _above(sec / f["sensitivity"], 1, delta, f["epsilon"], "secagg sigma/Δ")
    if target == "extra_delta":
        # an upper bound on the delta added (vacuous above 1, never negative or NaN)
        ok = isinstance(res, float) and math.isfinite(res) and res >= 0
        return None if ok else f"extra delta {res!r}"
    if target == "sampled_epsilon":
        base = exact_epsilon([(2.0, 1)], delta)
        return _below(res, base, "sampled epsilon")
    if target == "noise_scale":
        ok = isinstance(res, float) and f["sigma"] <= res <= f["sigma"] * 1.01
        return None if ok else f"noise scale {res!r} for sigma {a['sigma']!r}"
    if target == "sample":
        out, var = res
        if out.dtype != np.int64 or out.shape != (int(a["size"]),):
            return f"sample {out.dtype} {out.shape}"
        return None if var >= f["scale2"] else f"variance {var!r} below {a['scale2']!r}"
    if target == "symmetric_gaussian" or target == "add_symmetric_gaussian":
        ok = np.isfinite(res).all() and np.allclose(res, res.T)
        return None if ok else "not a finite symmetric matrix"
    if target == "Release.values":
        return _below(res, exact_epsilon([(f["sigma"], 1)], 1e-5), "epsilon")
    if target == "BudgetAccountant.would_spend":
        return _below(res, exact_epsilon([(f["sigma"], 1)], delta), "would spend")
    if target == "ledger.report":
        exact = exact_epsilon([(f["sigma"], int(a["count"]))], delta) if f["sigma"] else None
        eps = {k: v for k, v in res.items() if k.startswith("epsilon_")}
        for name, v in eps.items():
            if v is None:
                continue
            why = (
                (None if v == INF else f"{name} epsilon {v!r} for zero noise")
                if (f["sigma"] == 0)
                else _below(v, exact, f"{name} epsilon")
            )
            if why:
                return why
        return None if eps else f"report without epsilons: {str(res)[:200]}"
    if target == "party_epsilons":
        for party, z in (("u", f["sigma"]), ("v", f["sigma2"])):
            v = res.get(party)
            why = (
                (None if v == INF else f"zero noise gave {v!r}")
                if z == 0
                else _below(v, exact_epsilon([(z, 1)], delta), f"{party}'s epsilon")
            )
            if why:
                return why
        return None
    if target == "pld_interval":
        ok = isinstance(res, float) and math.isfinite(res) and res > 0
        return None if ok else f"interval {res!r}"
    return None  # gaussian_event, accountants_at: a result is an answer


@st.composite
def release_text_case(d: st.DrawFn) -> Case:
    """A Release's names, built directly or recorded, then composed."""
    field = d(st.sampled_from(sorted(RELEASE_TEXT)))
    good, bad = RELEASE_TEXT[field]
    value = d(st.sampled_from(good + bad))
    how = d(st.sampled_from(["Release", "record", "epsilon_of_releases", "budget", "replace"]))

    def call(folder: Path) -> Any:
        from fedspectral.privacy import BudgetAccountant, PrivacyLedger, Release
        from fedspectral.privacy.accounting import epsilon_of_releases

        kw = {"party": "u", "mechanism": "m", "sigma": 2.0, "sensitivity": 1.0, field: value}
        # the view a release of this threat tag holds under ("secagg": not the fallback's)
        view = "secagg" if value == "secagg" and field == "threat" else "fallback"
        if how == "record":
            led = PrivacyLedger(unit=None)
            led.record(**kw)
            return led.epsilon(1e-5, unit=led.releases[0].unit, threat=view)
        rel = Release(**kw)
        if how == "epsilon_of_releases":
            return epsilon_of_releases([rel], 1e-5)
        if how == "budget":
            b = BudgetAccountant(10.0, 1e-5)
            b.spend([rel])
            return b.spent()
        led = PrivacyLedger(unit=None)
        old = led.record("u", "m", 2.0, 1.0, unit=rel.unit)
        led.replace(old, rel)
        return led.epsilon(1e-5, unit=rel.unit, threat=view)

    def oracle(res: Any, folder: Path) -> str | None:
        return _below(res, exact_epsilon([(2.0, 1)], 1e-5), "epsilon")

    return Case(
        "lib: privacy (r5)",
        "lib",
        func=call,
        oracle=oracle,
        names=[field],
        must_fail=_same_in(value, bad),
        timeout=60,
        note=f"{how}: Release {field}={value!r}",
    )


#: what an error about each argument may call it
ALIASES = {
    "epsilon": ["epsilon"],
    "delta": ["delta"],
    "sensitivity": ["sensitivity"],
    "count": ["count"],
    "sigma": ["sigma"],
    "sigma2": ["sigma"],
    "noise_multiplier": ["noise_multiplier", "noise multiplier"],
    "z1": ["round_multipliers"],
    "z2": ["round_multipliers"],
    "m": ["contributors", "asked"],
    "share_multiplier": ["share_multiplier"],
    "clipping_norm": ["clipping_norm"],
    "min_contributors": ["min_contributors"],
    "d": ["d must", "d="],
    "p": ["p must", "p="],
    "size": ["size"],
    "scale2": ["scale2", "variance"],
    "tv": ["tv must", "total variation"],
    "values": ["values"],
    "z": ["z must", "z=", "noise multiplier"],
}


@st.composite
def privacy_case(d: st.DrawFn) -> Case:
    target = d(st.sampled_from(sorted(PRIVACY_TARGETS)))
    kinds, _ = PRIVACY_TARGETS[target]
    acc = d(st.sampled_from(ACCOUNTANTS))
    if target == "calibrate_noise_multiplier" and acc not in ("rdp", "pld"):
        acc = "rdp"  # the invertible accountants
    args = {k: d(valid_values(kind)) for k, kind in kinds.items()}
    bad = d(st.sampled_from([None, *sorted(kinds)]))
    if bad is not None:
        args[bad] = d(any_value(kinds[bad]))
    valid = {k: validity(kind, args[k]) for k, kind in kinds.items()}
    if target == "gaussian_event" and _plain_real(args["z"]) == INF:
        valid["z"] = None  # documented: no release
    if target == "Release.values" and args["values"] is None:
        valid["values"] = True  # documented: not recorded
    if target == "extra_delta" and _plain_real(args["epsilon"]) == 0:
        valid["epsilon"] = None  # documented: epsilon >= 0
    if target in ("grid_sensitivity", "extra_delta") and type(args["d"]) is int and args["d"] == 0:
        valid["d"] = None  # no value rounded: nothing added (d >= 0)
    must_fail = False in valid.values()

    def call(folder: Path) -> Any:
        return _call_privacy(target, args, acc)

    def oracle(res: Any, folder: Path) -> str | None:
        return _privacy_oracle(target, args, acc, res)

    names = ["accountant", "PLD", "budget", "total variation"]
    names += ALIASES[bad] if bad is not None else [a for k in kinds for a in ALIASES[k]]
    return Case(
        "lib: privacy (r5)",
        "lib",
        func=call,
        oracle=oracle,
        names=names,
        must_fail=must_fail,
        timeout=90,
        note=f"{target}({', '.join(f'{k}={v!r}' for k, v in args.items())}) acc={acc}",
    )


# ======================================================================================
# lib: secure sampler
# ======================================================================================
def _values(kind: str, sigma: float) -> Any:
    """Values to release, of kind ``kind``, relative to the grid of ``sigma``."""
    from fedspectral.privacy import discrete_gaussian as dg

    try:
        edge = math.ldexp(dg.grid(sigma), 61)  # the largest |value| on the grid
    except (TypeError, ValueError):
        edge = 1e8
    return {
        "small": np.array([0.0, 1.0, -2.5, 1e-3]),
        "matrix": np.arange(12.0).reshape(3, 4) / 7,
        "ints": np.arange(5, dtype=np.int64),
        "uint8": np.arange(5, dtype=np.uint8),
        "float32": np.ones(4, np.float32) / 3,
        "edge": np.array([edge, -edge]),
        "beyond": np.array([1.0, math.nextafter(edge, INF) * 2]),
        "1e10": np.array([1e10]),
        "2**61": np.array([2.0**61, 1.0]),
        "int2**62": np.array([2**62], dtype=np.int64),
        "uint64max": np.array([2**64 - 1], dtype=np.uint64),
        "nan": np.array([1.0, NAN]),
        "inf": np.array([INF, 0.0]),
        "bool": np.array([True, False]),
        "complex": np.array([1 + 2j]),
        "text": np.array(["1.0"]),
        "object": np.array([1.0, None], dtype=object),
        "datetime": np.array(["2020-01-01"], dtype="datetime64[D]"),
        "list": [1.0, 2.0],
        "nested-ragged": [[1.0], [1.0, 2.0]],
        "scalar": 3.0,
        "empty": np.zeros((0, 3)),
        "str": "1.0",
        "0d": np.array(2.0),
    }[kind]


SAMPLER_VALUES = [
    "small", "matrix", "ints", "uint8", "float32", "edge", "beyond", "1e10", "2**61",
    "int2**62", "uint64max", "nan", "inf", "bool", "complex", "text", "object", "datetime",
    "list", "nested-ragged", "scalar", "empty", "str", "0d",
]  # fmt: skip
#: values no secure source may release
SAMPLER_BAD = {
    "nan", "inf", "bool", "complex", "text", "object", "datetime", "nested-ragged", "str",
}  # fmt: skip


@st.composite
def sampler_case(d: st.DrawFn) -> Case:
    source = d(st.sampled_from(["SecureNoise", "add_gaussian:secure", "release", "opendp"]))
    sigma = d(
        st.one_of(
            st.sampled_from([1.0, 0.5, 1e-3, 1e3, 1e-290, 1e290, 2.0**-1000, 2.0**991]),
            st.floats(1e-6, 1e6),
            st.sampled_from([0.0, -1.0, NAN, INF, True, "1", 1 + 0j]),
        )
    )
    kind = d(st.sampled_from(SAMPLER_VALUES))
    if source == "opendp" and kind in ("edge", "beyond", "1e10", "2**61"):
        kind = "small"  # OpenDP's own range: not the grid's
    values = _values(kind, sigma if isinstance(sigma, float) and sigma > 0 else 1.0)
    s_ok = validity("nonneg", sigma)
    sigma0 = _plain_real(sigma) == 0.0
    beyond = False  # a value the secure grid of sigma cannot hold (never clipped)
    if source != "opendp" and s_ok is not False and not sigma0 and kind not in SAMPLER_BAD:
        from fedspectral.privacy import discrete_gaussian as dg

        try:
            top = float(np.max(np.abs(np.asarray(values, dtype=np.float64)), initial=0.0))
            beyond = top > math.ldexp(dg.grid(float(sigma)), 61)
        except (TypeError, ValueError):
            beyond = False
    must_fail = s_ok is False or kind in SAMPLER_BAD or beyond
    if source == "release" and sigma0:
        must_fail = True  # release draws noise: sigma > 0

    def call(folder: Path) -> Any:
        from fedspectral.privacy import OpenDPNoise, SecureNoise, add_gaussian
        from fedspectral.privacy import discrete_gaussian as dg

        if source == "SecureNoise":
            return SecureNoise().add_gaussian(values, sigma)
        if source == "add_gaussian:secure":
            return add_gaussian(values, sigma, "secure")
        if source == "opendp":
            return OpenDPNoise().add_gaussian(values, sigma)
        return dg.release(values, sigma, dg.os_bits())

    def oracle(res: Any, folder: Path) -> str | None:
        from fedspectral.privacy import discrete_gaussian as dg

        x = np.asarray(values, dtype=np.float64)
        if not isinstance(res, np.ndarray) or res.shape != x.shape:
            return f"released {type(res).__name__} {getattr(res, 'shape', '')} for {x.shape}"
        if res.dtype != np.float64 or not np.isfinite(res).all():
            return f"released {res.dtype} values, finite: {bool(np.isfinite(res).all())}"
        s = float(sigma)
        if s == 0:
            return None if np.array_equal(res, x) else "sigma 0 changed the values"
        # 40 sigma: the secure tables cover 14 sigma, OpenDP's tail is Gaussian
        if x.size and float(np.max(np.abs(res - x))) > 40 * s + abs(s) * 1e-6:
            return f"noise {float(np.max(np.abs(res - x))):.3g} for sigma {s:.3g} (clipped?)"
        if source != "opendp" and x.size:
            g = dg.grid(s)
            if not np.array_equal(res / g, np.round(res / g)):
                return "a released value is off the grid"
        return None

    return Case(
        "lib: secure sampler",
        "lib",
        func=call,
        oracle=oracle,
        names=["values", "sigma", "grid", "noise source", "OpenDP"],
        must_fail=must_fail,
        timeout=60,
        note=f"{source} values={kind} sigma={sigma!r}",
    )


# ======================================================================================
# lib: node policy (r5)
# ======================================================================================
#: key -> (values the key takes, values it must refuse); "@led" is an absolute folder of
#: the case, "@file" an absolute file of it
POLICY_VALUES: dict[str, tuple[list[Any], list[Any]]] = {
    "max-epsilon": ([0.5, 2, 4.0, INF], ["1.0", True, -1, 0, NAN, [1.0], -INF]),
    "max-delta": ([1e-5, 1e-4, 0.5], [1, 1.0, 2.0, 0, -1e-5, "1e-5", NAN, True]),
    "max-epsilon-total": ([3.0, 10, INF], [0.0, -3, "10", False, NAN]),
    "max-delta-total": ([1e-4], [1.5, 0.0, "x", NAN]),
    "calibrations": (
        ["analytic", "analytic,classic", "paper", ["rdp", "pld"], "", "analytic, rdp"],
        ["analytc", "analytic,foo", 3, True, ["rdp", 3], "ANALYTIC"],
    ),
    "relations": (["replace_one", "zero_out,add_remove"], ["replace_on", "add-remove", 1]),
    "norm-policies": (["clip", "clip,raise", ""], ["clp", "clip;raise", 0]),
    "methods": (
        ["*", "fedsc:share", "fedsc:train,ldp-pca:query", "*,fedca:train"],
        ["fedsc:shar", "fedsc", "ldp-pca:querry", 7, "fedsc:*"],
    ),
    "allow-nonprivate": ([True, False], ["true", 1, 0, "no", None]),
    "allow-unprotected-weights": ([True, False], ["false", 1]),
    "noise-seed": (["none", ""], [11, 0, "derive", "random", 2.5, True, -5, 2**64, "11"]),
    "relation": (["replace_one", "add_remove", "zero_out"], ["", "foo", 3, "replace-one"]),
    "ledger-dir": (["@led", ""], ["memory", 3, ["x"], True, "relative/x", "@file"]),
    "secagg-roster": ([""], ["simulation", 3, ["a"]]),
    "secagg-identity": ([""], [4, True]),
    "secagg-honest-server": ([True, False], ["yes", 1]),
    "secagg-colluders": ([0, 1, 3], [-1, 2.5, "1", True, 10**30]),
    "simulation": ([False], ["false", 0, None]),
    "max-epsilonn": ([], [1.0]),
    "max_epsilon": ([], [1.0]),
    "noise_seed": ([], [1]),
    "ledger": ([], ["@led"]),
    "": ([], [1]),
}
#: values valid only in a simulation node's policy (``simulation = true``)
SIMULATION_ONLY: dict[str, list[Any]] = {
    "noise-seed": [11, 0, "derive"],
    "ledger-dir": ["memory"],
    "relation": [""],
}


def _same_in(v: Any, pool: list[Any]) -> bool:
    """``v`` is one of ``pool`` (of the same type: 1 is not True, 1.0 not 1)."""
    for b in pool:
        if type(v) is type(b) and (v == b or (isinstance(v, float) and v != v and b != b)):
            return True
    return False


def _toml(v: Any) -> str | None:
    """``v`` as a TOML value (None where TOML has none)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == INF else "-inf" if v == -INF else repr(v))
    if isinstance(v, int):
        return str(v) if abs(v) < 2**63 else None
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        items = [_toml(x) for x in v]
        return None if None in items else "[" + ", ".join(map(str, items)) + "]"
    return None


def _normal_names(v: Any) -> tuple[str, ...]:
    items = v.split(",") if isinstance(v, str) else [str(x) for x in v]
    return tuple(x.strip() for x in items if x.strip())


def _policy_must_fail(policy: dict[str, Any], where: str) -> bool:
    sim = policy.get("simulation") is True
    for k, v in policy.items():
        if _same_in(v, SIMULATION_ONLY.get(k, [])):
            if not sim:
                return True
            continue
        if k == "secagg-roster" and v == "simulation":
            if not (sim and policy.get("noise-seed") == "derive"):
                return True
            continue
        if k == "ledger-dir" and v == "relative/x" and where == "file":
            continue  # resolved against the policy file's folder
        if _same_in(v, POLICY_VALUES[k][1]):
            return True
    return False


@st.composite
def node_policy_case(d: st.DrawFn) -> Case:
    where = d(st.sampled_from(["node", "node", "file"]))
    keys = d(st.lists(st.sampled_from(sorted(POLICY_VALUES)), min_size=1, max_size=3, unique=True))
    policy: dict[str, Any] = {}
    for k in keys:
        good, bad = POLICY_VALUES[k]
        pool = [*bad, *SIMULATION_ONLY.get(k, [])]
        pick_bad = not good or d(st.integers(0, 2)) > 0
        policy[k] = d(st.sampled_from(pool if pick_bad else good))
    if "simulation" not in policy and d(st.integers(0, 2)) == 0:
        policy["simulation"] = d(st.booleans())
    if where == "file" and any(_toml(v) is None for v in policy.values()):
        where = "node"  # not a TOML value
    must_fail = _policy_must_fail(policy, where)

    files: dict[str, bytes | None] = {"led/": None, "afile": b"x"}
    if where == "file":  # the case's folders named relative to the file's: its own folder
        alias = {"@led": "led", "@file": "afile"}
        rel = {k: alias.get(v, v) if isinstance(v, str) else v for k, v in policy.items()}
        body = "".join(f"{json.dumps(k)} = {_toml(v)}\n" for k, v in rel.items())
        files["policy.toml"] = ("[privacy]\n" + body).encode()

    def call(folder: Path) -> Any:
        from fedspectral.fed.flower.node.policy import NodePolicy

        def resolve(v: Any) -> Any:
            if v in ("@led", "@file"):
                return str(folder / ("led" if v == "@led" else "afile"))
            return v

        values = {k: resolve(v) if isinstance(v, str) else v for k, v in policy.items()}
        if where == "file":
            return NodePolicy.from_node({"privacy-policy": str(folder / "policy.toml")}), values
        return NodePolicy.from_node({f"policy-{k}": v for k, v in values.items()}), values

    def oracle(res: Any, folder: Path) -> str | None:
        pol, values = res
        for k, v in values.items():
            got = getattr(pol, k.replace("-", "_"))
            if k in ("calibrations", "relations", "norm-policies", "methods"):
                want: Any = _normal_names(v)
            elif k == "noise-seed":
                want = None if v in ("none", "") else v
            elif k == "ledger-dir" and v not in ("", "memory"):
                want = str(Path(v) if Path(v).is_absolute() else (folder / v).resolve())
            else:
                want = v
            same_type = type(got) is type(want) or (
                type(want) is int and type(got) is float and k.startswith("max-")
            )
            if not same_type or got != want:
                return f"{k} = {v!r} read as {got!r} ({type(got).__name__})"
        return None

    names = [f"policy-{k}" for k in policy] + list(policy) + [k.replace("-", "_") for k in policy]
    names += [repr(v) for v in policy.values() if isinstance(v, str) and v]
    names += [f"key {k!r}" for k in policy]
    return Case(
        "lib: node policy (r5)",
        "lib",
        func=call,
        files=files,
        oracle=oracle,
        names=names,
        must_fail=must_fail,
        timeout=60,
        note=f"{where}: {policy}",
    )


# ======================================================================================
# lib: node data (r5)
# ======================================================================================
DATA_VALUES: dict[str, tuple[list[Any], list[Any]]] = {
    "data-dataset": (["digits"], ["", 3, "DIGITS", "imagenet", True, ["digits"]]),
    "data-root": (["", "@dir"], [3, ["x"], True]),
    "data-limit": ([1, 100, 10**30], [0, -1, 2.5, "10", True, 10.0]),
    "data-shard": (
        ["0/3", "2/3", " 1/3 ", "0/1", "01/03"],
        ["3/3", "1_0/20", "\u0661/\u0663", "\uff11/\uff13", "1/0", "-1/3", "+1/3", "1/3/5"]
        + [3, "1.0/3", "0x1/3", "", "1 /3", "1/3\n2"],
    ),
    "data-id": (["site-1", " s "], ["", " ", "x" * 201, 3, "a\nb", "\x00", True]),
    "data-shards": ([], ["0/3"]),
    "data-limits": ([], [5]),
    "data_shard": ([], ["0/3"]),
    "Data-shard": ([], ["0/3"]),
    "data-": ([], [1]),
}


@st.composite
def node_data_case(d: st.DrawFn) -> Case:
    keys = d(st.lists(st.sampled_from(sorted(DATA_VALUES)), min_size=1, max_size=3, unique=True))
    if "data-dataset" not in keys and d(st.integers(0, 3)) > 0:
        keys.append("data-dataset")
    nc: dict[str, Any] = {}
    must_fail = False
    for k in keys:
        good, bad = DATA_VALUES[k]
        if good and d(st.integers(0, 2)) == 0 or not bad:
            nc[k] = d(st.sampled_from(good))
        else:
            nc[k] = d(st.sampled_from(bad))
            must_fail = True
    if "data-dataset" not in nc and set(nc) & {"data-limit", "data-shard"}:
        must_fail = True  # a selection of no data set
    load = "data-dataset" in nc and not must_fail and nc.get("data-root") in (None, "")

    def call(folder: Path) -> Any:
        from fedspectral.fed.flower.node.data import NodeData, load_node_data

        conf = {k: str(folder) if v == "@dir" else v for k, v in nc.items()}
        spec = NodeData.from_node_config(conf)
        n = len(load_node_data(spec)[0]) if load and spec is not None else None
        return spec, n

    def oracle(res: Any, folder: Path) -> str | None:
        spec, n = res
        if "data-dataset" not in nc:
            return None if spec is None else f"a spec {spec} without data-dataset"
        want = {
            "dataset": nc["data-dataset"],
            "limit": nc.get("data-limit"),
            "shard": (
                tuple(int(x) for x in nc["data-shard"].strip().split("/"))
                if "data-shard" in nc
                else None
            ),
            "data_id": nc.get("data-id", nc["data-dataset"]).strip(),
        }
        for k, v in want.items():
            got = getattr(spec, k)
            if got != v or type(got) is not type(v):
                return f"{k} read as {got!r}, written {v!r}"
        if n is not None:
            from fedspectral.data import load_dataset

            total = len(load_dataset(nc["data-dataset"], "train", download=False))
            sel = min(nc.get("data-limit") or total, total)
            parts = want["shard"][1] if want["shard"] else 1
            i = want["shard"][0] if want["shard"] else 0
            exp = sel // parts + (1 if i < sel % parts else 0)
            if n != exp:
                return f"{n} records served, the config selects {exp}"
        return None

    names = [*nc, *(str(v) for v in nc.values() if isinstance(v, str) and v.strip())]
    names += [f"{k!r}" for k in nc]
    return Case(
        "lib: node data (r5)",
        "lib",
        func=call,
        oracle=oracle,
        names=names,
        must_fail=must_fail,
        timeout=60,
        note=f"{nc}",
    )


# ======================================================================================
# lib: node request (r5)
# ======================================================================================
#: values a config record (or the node's own config) may hold; lists of one type
RECORD_VALUES: list[Any] = [
    0, 1, 3, -1, 2**53, 2**53 + 1, 2**62, -(2**63),
    0.0, 2.5, 3.0, -0.0, NAN, INF, -INF, 1e300, 5e-324,
    True, False, "3", "2.5", "", "x", b"3",
    [1, 2], [1.5], ["a"], [True],
]  # fmt: skip
GOOD_QUERY = {
    "p": 4,
    "k": 1,
    "epsilon": 1.0,
    "delta": 1e-5,
    "calibration": "analytic",
    "norm-policy": "clip",
    "users": 20,
    "seed": 0,
    "spike": 1.0,
}
QUERY_VALUES: dict[str, list[Any]] = {
    "p": [4, 8, 1, 0, -4, 513, 2.0, "4", True, 10**6],
    "k": [1, 2, 0, 5, 1.0, "1", -1],
    "epsilon": [1.0, 2, 0.0, -1.0, NAN, INF, 1e-9, 1e5, "1", True],
    "delta": [1e-5, 1e-4, 0.5, 0.0, 1.0, -1e-5, NAN, "1e-5"],
    "calibration": ["analytic", "classic", "paper", "rdp", "foo", 3, ""],
    "norm-policy": ["clip", "raise", "foo", 0],
    "users": [20, 1, 0, -5, 2.5, "20", True, 10**7, 2**63 - 1],
    "seed": [0, 7, -1, 2.5, "x", 2**63, True],
    "spike": [1.0, 3, 0.0, -1.0, NAN, INF, "1"],
    "request": ["messages", "plan", "plans", "", 3, "release", ["plan"]],
    "vectorisation": ["auto", "isometric", "upper", "foo", 3],
    "model": ["local", "distributed", "foo", 1],
}
#: the query values a node must refuse (before any budget is spent)
QUERY_BAD: dict[str, list[Any]] = {
    "p": [0, -4, 513, 2.0, "4", True, 10**6],
    "k": [0, 5, 1.0, "1", -1],
    "epsilon": [0.0, -1.0, NAN, INF, 1e-9, 1e5, "1", True],
    "delta": [0.5, 0.0, 1.0, -1e-5, NAN, "1e-5"],
    "calibration": ["paper", "foo", 3, ""],
    "norm-policy": ["raise", "foo", 0],
    "users": [0, -5, 2.5, "20", True, 10**7, 2**63 - 1],
    "seed": [-1, 2.5, "x", 2**63, True],
    "spike": [0.0, -1.0, NAN, INF, "1"],
    "request": ["plans", "", 3, "release", ["plan"]],
    "vectorisation": ["foo", 3],
    "model": ["distributed", "foo", 1],
}


@st.composite
def node_request_case(d: st.DrawFn) -> Case:
    what = d(st.sampled_from(["config_int", "config_float", "client_dp", "query", "query"]))
    if what != "query":
        v1, v2 = d(st.sampled_from(RECORD_VALUES)), d(st.sampled_from(RECORD_VALUES))

        def call(folder: Path) -> Any:
            from flwr.app import ConfigRecord

            from fedspectral.fed.flower.node.client_dp import CLIP_KEY, STD_KEY, client_dp_request
            from fedspectral.pca.flower import node as pca_node

            if what == "config_int":
                return pca_node.config_int(ConfigRecord({"users": v1}), "users")
            if what == "config_float":
                return pca_node.config_float(ConfigRecord({"spike": v1}), "spike")

            class Req:
                config = ConfigRecord({CLIP_KEY: v1, STD_KEY: v2})

            return client_dp_request(Req())

        def oracle(res: Any, folder: Path) -> str | None:
            if what == "config_int":
                ok = type(res) is int and res == v1 and type(v1) is int
            elif what == "config_float":  # an integer beyond 2**53: its nearest float
                ok = type(res) is float and type(v1) in (int, float) and res == float(v1)
            else:
                ok = (
                    type(v1) in (int, float)
                    and type(v2) in (int, float)
                    and res == (float(v1), float(v2))
                    and math.isfinite(res[0])
                    and res[0] > 0
                    and math.isfinite(res[1])
                    and res[1] >= 0
                )
            return None if ok else f"{what} read {v1!r}, {v2!r} as {res!r}"

        return Case(
            "lib: node request (r5)",
            "lib",
            func=call,
            oracle=oracle,
            names=["users", "spike", "clip", "std", "client-dp"],
            timeout=60,
            note=f"{what} {v1!r} {v2!r}",
        )
    q = dict(GOOD_QUERY)
    keys = d(st.lists(st.sampled_from(sorted(QUERY_VALUES)), min_size=0, max_size=2, unique=True))
    for k in keys:
        q[k] = d(st.sampled_from(QUERY_VALUES[k]))
    drop = d(st.sampled_from([None, None, None, "users", "seed", "spike", "calibration", "p"]))
    if drop and drop in q:
        del q[drop]
    data = d(st.sampled_from(["synthetic", "synthetic", "file"]))
    pid = d(st.sampled_from([0, 0, 0, 0, 3, 1.7, "1", True, -1]))
    synthetic = ("users", "seed", "spike")  # read only by a node without pca-data
    must_fail = any(
        _same_in(q[k], QUERY_BAD[k])
        for k in keys
        if k in q and (data != "file" or k not in synthetic)
    )
    if drop and (data == "synthetic" or drop not in synthetic):
        must_fail = True
    if data == "file" and q.get("p") != 4:
        must_fail = must_fail or q.get("request") != "plan"
    if q.get("request") == "plan" and not _same_in(q.get("request"), QUERY_BAD["request"]):
        must_fail = False  # a plan answers the node's model, whatever else the query says
    if type(pid) is not int or pid < 0:
        must_fail = True  # the node's own partition-id: an integer >= 0
    files: dict[str, bytes | None] = {"led/": None}
    if data == "file":
        rng = np.random.default_rng(0)
        X = rng.normal(size=(30, 4))
        X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
        buf = io.BytesIO()
        np.save(buf, X)
        files["users.npy"] = buf.getvalue()

    def call(folder: Path) -> Any:
        from flwr.app import ConfigRecord, Context, Message, RecordDict
        from flwr.supercore.task_identity import TaskIdentity

        from fedspectral.fed.flower.node.policy import PolicyRefusal
        from fedspectral.pca.flower import node as pca_node

        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
        nc: dict[str, Any] = {"partition-id": pid, "num-partitions": 1}
        nc["policy-ledger-dir"] = str(folder / "led")
        if data == "file":
            nc["pca-data"] = str(folder / "users.npy")
        ctx = Context(run_id=1, node_id=1, node_config=nc, state=RecordDict(), run_config={})
        msg = Message(
            RecordDict({"ldp-pca": ConfigRecord(q)}),
            dst_node_id=1,
            message_type="query.ldp_pca",
        )
        try:
            reply = pca_node.pca_client_query(msg, ctx)
        except (PolicyRefusal, TypeError, ValueError, KeyError):
            charged = [
                r
                for f in (folder / "led").glob("ledger-*.json")
                for r in json.loads(f.read_text()).get("releases", [])
            ]
            if charged:
                return f"CHARGED {len(charged)} release(s) before refusing"
            raise
        c = reply.content
        if "plan" in c.config_records:
            return ("plan", dict(c.config_records["plan"]))
        msgs = c.array_records["messages"]["messages"].numpy()
        return ("messages", msgs, dict(c.config_records["release"]))

    def oracle(res: Any, folder: Path) -> str | None:
        if isinstance(res, str):
            return res
        if res[0] == "plan":
            return None if res[1].get("model") == "local" else f"plan {res[1]}"
        _, msgs, release = res
        p = int(q["p"])
        n = 30 if data == "file" else int(q["users"])
        if msgs.shape != (n, p * (p + 1) // 2) or not np.isfinite(msgs).all():
            return f"messages of shape {msgs.shape} for {n} users, p = {p}"
        extra = set(release) - {
            "sigma", "users", "partition-id", "vectorisation", "synthetic", "epsilon",
            "epsilon-total",
        }  # fmt: skip
        return f"reply fields {sorted(extra)} beside the release" if extra else None

    names = [*q, "pca-p", "pca-k", "pca-users", "request", "synthetic users", "max-delta"]
    names += ([drop] if drop else []) + ["partition-id"]
    names += ["calibrations", "norm-policies", "epsilon", "vectorisation", "model", "pca-data"]
    from fedspectral.fed.flower.node.policy import PolicyRefusal

    return Case(
        "lib: node request (r5)",
        "lib",
        func=call,
        files=files,
        oracle=oracle,
        names=names,
        must_fail=must_fail,
        allowed=(TypeError, ValueError, KeyError, PolicyRefusal),
        timeout=90,
        note=f"{data} partition-id={pid!r}: {q}",
    )


# ======================================================================================
# script: benchmarks, script: fedsc_sweep
# ======================================================================================
#: never an integer an option means (the harness's pools, and spellings int() reads)
NOT_INT = ["-1", "abc", "", "1.5", "1e3", "nan", "True", "1_0", "\u0663", "0x10", "+", "2**31"]
NOT_INT += ["99999999999999999999", "-99999999999"]
NOT_REAL_ARG = ["nan", "inf", "-inf", "abc", "", "1e400", "0x10", "1_0", "True"]
#: output paths no script may write to (a file, a device, a dangling link, a loop)
BAD_OUT_FILE = ["", "adir", "afile/sub", "/dev/null", "loop", "dangling"]
BAD_OUT_DIR = ["", "afile", "afile/sub", "/dev/null", "loop", "dangling"]
BENCH: dict[str, dict[str, list[str]]] = {
    "augment_perf": {"--threads": [*NOT_INT, "0", "9999"], "--reps": [*NOT_INT, "0", "10001"]},
    "fed_perf": {
        "--repeats": [*NOT_INT, "0", "1001"],
        "--rounds": [*NOT_INT, "0", "101"],
        "--threads": [*NOT_INT, "0", "9999"],
        "--out": BAD_OUT_FILE,
    },
    "fedsc_accuracy": {
        "--out": BAD_OUT_DIR,
        "--seeds": [*NOT_INT, "4294967296"],
        "--methods": ["foo", "fedsc fedsc"],
        "--split": ["foo", "Val"],
        "--val-fraction": [*NOT_REAL_ARG, "0", "1", "-0.2", "1.5"],
        "--set": ["x", "=1", "method.rounds=-1", "nonsense.key=1", "optim.lr=abc"],
        "--jobs": [*NOT_INT, "0", "9999"],
        "--threads": [*NOT_INT, "0", "9999"],
    },
    "flower_overhead": {
        "--config": ["nope.yaml", "adir", "afile", "/dev/zero", ""],
        "--rounds": [*NOT_INT, "0", "1", "101"],
        "--set": ["x", "=1", "method.rounds=-1", "optim.lr=nan"],
        "--out": BAD_OUT_FILE,
        "--isolation": ["process", "subprocess", "thread"],
    },
    "fps_stopping": {"--out": BAD_OUT_FILE},
    "noise_perf": {
        "--repeats": [*NOT_INT, "0", "1001"],
        "--values": [*NOT_INT, "0", "999", "20000001"],
        "--opendp-values": [*NOT_INT, "0", "9", "1000001"],
        "--out": BAD_OUT_FILE,
    },
    "pca_distributed": {
        "--repeats": [*NOT_INT, "0", "1", "10001"],
        "--plan-repeats": [*NOT_INT, "100001"],
        "--coverage-repeats": [*NOT_INT, "100001"],
        "--seed": [*NOT_INT, "4294967296"],
        "--out": BAD_OUT_DIR,
        "--redraw": ["nope.json", "adir", "afile", "/dev/zero", "bad.json", "empty.json"],
    },
    "pca_error_bars": {
        "--repeats": [*NOT_INT, "0", "100001"],
        "--sparse-repeats": [*NOT_INT, "0"],
        "--n-boot": [*NOT_INT, "0", "9", "100001"],
        "--seed": [*NOT_INT, "4294967296"],
        "--out": BAD_OUT_DIR,
    },
    "pca_isometric": {
        "--repeats": [*NOT_INT, "0", "1", "1001"],
        "--seed": [*NOT_INT, "4294967296"],
        "--out": BAD_OUT_DIR,
    },
    "pca_perf": {
        "--n": [*NOT_INT, "0", "100000001"],
        "--p": [*NOT_INT, "0", "1001"],
        "--repeats": [*NOT_INT, "0"],
        "--per-user-n": [*NOT_INT, "0", "10000001"],
        "--fps-p": [*NOT_INT, "10", "2001"],
        "--fps-count": [*NOT_INT, "0", "11"],
        "--fps-admm-only": [*NOT_INT, "10"],
        "--fps-repeats": [*NOT_INT, "0", "101"],
        "--threads": [*NOT_INT, "0", "9999"],
        "--seed": [*NOT_INT, "4294967296"],
        "--parts": ["0", "4", "1 1", "x"],
        "--out": BAD_OUT_FILE,
    },
    "pca_plan_check": {
        "--n": [*NOT_INT, "0", "79", "1000000000000001"],
        "--repeats": [*NOT_INT, "0", "1", "1000001"],
        "--seed": [*NOT_INT, "4294967296"],
    },
    "secagg_cost": {
        "--clients": [*NOT_INT, "0", "4", "101"],
        "--dim": [*NOT_INT, "0", "1025"],
        "--repeats": [*NOT_INT, "0", "1001"],
        "--seeds": [*NOT_INT, "0", "1001"],
        "--out": BAD_OUT_FILE,
    },
}
#: options that do nothing in the mode asked (each refused), per script
BENCH_UNUSED: dict[str, list[list[str]]] = {
    "fedsc_accuracy": [
        ["--table-only", "--jobs", "1"],
        ["--table-only", "--threads", "1"],
        ["--table-only", "--split", "val", "--val-fraction", "0.3"],
        ["--val-fraction", "0.3"],
    ],
    "flower_overhead": [["--isolation", "process"], ["--secure", "--isolation", "subprocess"]],
    "noise_perf": [["--values", "1000"]],
    "pca_distributed": [
        ["--redraw", "afile", "--repeats", "3"],
        ["--redraw", "afile", "--seed", "0"],
        ["--redraw", "afile", "--plan-repeats", "0"],
    ],
    "pca_perf": [
        ["--quick", "--n", "100"],
        ["--quick", "--fps-p", "60", "100"],
        ["--quick", "--per-user-n", "5"],
        ["--parts", "3", "--repeats", "5"],
        ["--parts", "2", "--n", "5"],
        ["--parts", "1", "--per-user-n", "5"],
        ["--parts", "1", "2", "--fps-repeats", "2"],
        ["--parts", "3", "--p", "20"],
        ["--fps-p", "100"],
        ["--n", "100000000", "--p", "10"],
        ["--per-user-n", "10000000", "--p", "100", "--parts", "2"],
    ],
}
#: the output option of each script and a path in the case's folder for it
BENCH_OUT = {
    "fed_perf": "o.json", "fedsc_accuracy": "o", "flower_overhead": "o.json",
    "fps_stopping": "o.json", "noise_perf": "o.json", "pca_distributed": "o",
    "pca_error_bars": "o", "pca_isometric": "o", "pca_perf": "o.json", "secagg_cost": "o.json",
}  # fmt: skip
SCRIPT_FILES: dict[str, bytes | None] = {
    **ODD_FILES,
    "bad.json": b'{"errors": {"local": {"1000": ["x"]}}}',
    "empty.json": b"{}",
}


@st.composite
def bench_case(d: st.DrawFn) -> Case:
    script = d(st.sampled_from(sorted(BENCH)))
    argv: list[str]
    if script in BENCH_UNUSED and d(st.integers(0, 3)) == 0:
        argv = list(d(st.sampled_from(BENCH_UNUSED[script])))
        names = [a for a in argv if a.startswith("--")]
    elif d(st.integers(0, 9)) == 0:
        argv = [d(st.sampled_from(["--bogus", "-x", "--repeats=", "--out"]))]
        names = [argv[0].rstrip("="), "unrecognized", "expected one argument", "ambiguous"]
    else:
        option = d(st.sampled_from(sorted(BENCH[script])))
        value = d(st.sampled_from(BENCH[script][option]))
        argv = [option, *value.split(" ")] if option in ("--parts", "--methods") else [option]
        if option not in ("--parts", "--methods"):
            argv.append(value)
        names = [option, value, "invalid choice"] if value.strip() else [option]
    if script in BENCH_OUT and "--out" not in argv:
        argv += ["--out", BENCH_OUT[script]]
    return Case(
        "script: benchmarks",
        "script",
        argv=[f"benchmarks/{script}.py", *argv],
        files=dict(SCRIPT_FILES),
        names=names,
        must_fail=True,
        timeout=90,
    )


SWEEP_ARGS: list[list[str]] = [
    ["--jobs", "0", "--out", "run"],
    ["--jobs", "abc", "--out", "run"],
    ["--jobs", "100", "--out", "run"],
    ["--nice", "-1", "--out", "run"],
    ["--nice", "20", "--out", "run"],
    ["--nice", "1.5", "--out", "run"],
    ["--grid", "foo", "--out", "run"],
    ["--points", "nope", "--out", "run"],
    ["--points", "x/y", "--out", "run"],
    ["--summarise", "s.md", "--out", "run"],
    ["--summarise", "s.json", "--out", "run"],
    ["--summarise", "s.json", "--out", "nope"],
    ["--summarise", "s.json", "--out", "afile"],
    ["--summarise", "s.json", "--table", "t.md", "--out", "run"],
    ["--summarise", "adir.json", "--out", "run"],
    ["--table", "t.json", "--out", "run"],
    ["--table", "t.md", "--out", "run"],
    ["--plot", "p.json", "--out", "run"],
    ["--plot", "p.png", "--out", "run"],
    ["--plot", "p.png", "--from-summary", "afile"],
    ["--plot", "p.png", "--from-summary", "empty.json"],
    ["--plot", "p.png", "--from-summary", "nope.json"],
    ["--plot", "p.png", "--from-summary", "norun.json"],
    ["--plot", "p.png", "--from-summary", "adir"],
    ["--from-summary", "empty.json", "--out", "run"],
    ["--partial", "x.md", "--out", "run"],
    ["--keep", "empty.json", "--out", "run"],
    ["--keep", "empty.json", "--summarise", "s.json", "--out", "run"],
    ["--keep", "afile", "--table", "t.md", "--out", "run"],
    ["--summarise", "s.json", "--out", "run", "--points", "lr"],
    ["--summarise", "s.json", "--out", "run", "--jobs", "2"],
    ["--summarise", "s.json", "--out", "run", "--nice", "5"],
    ["--summarise", "s.json", "--out", "run", "--device", "cpu"],
    ["--device", "tpu", "--out", "run"],
    ["--device", "", "--out", "run"],
    ["--device", "cuda:99", "--out", "run"],
    [],
    ["--out"],
    ["--bogus"],
]


@st.composite
def sweep_case(d: st.DrawFn) -> Case:
    argv = list(d(st.sampled_from(SWEEP_ARGS)))
    names = [a for a in argv if a.startswith("--")] + [a for a in argv if not a.startswith("-")]
    names += ["required", "unrecognized", "expected one argument", "no finished run"]
    return Case(
        "script: fedsc_sweep",
        "script",
        argv=["scripts/fedsc_sweep.py", *argv],
        files={
            **SCRIPT_FILES,
            "run/": None,
            "adir.json/": None,
            "norun.json": b'{"runs": []}',
        },
        names=names,
        must_fail=True,
        timeout=90,
    )


# ======================================================================================
# cli:pca-bench (reanalyse rows)
# ======================================================================================
def bench_run_files() -> dict[str, bytes]:
    """``pca/pca_bench.json`` and ``pca/fig1.csv`` of a finished quick Figure-1 run, built
    once per process (about 20 s)."""
    if "bench" in _TEMPLATES:
        return _TEMPLATES["bench"]
    import tempfile

    from fedspectral.experiments.pca_bench import BenchConfig
    from fedspectral.experiments.pca_bench import cli as bench_cli

    with tempfile.TemporaryDirectory() as tmp:
        cfg = BenchConfig.quick_config(out=str(Path(tmp) / "pca"), only=("fig1",))
        bench_cli.run_bench(cfg, progress=False)
        out = Path(tmp) / "pca"
        _TEMPLATES["bench"] = {
            f"pca/{f}": (out / f).read_bytes() for f in ("pca_bench.json", "fig1.csv")
        }
    return _TEMPLATES["bench"]


#: column -> (values a row may hold, values the bench cannot have written)
ROW_EDITS: dict[str, tuple[list[str], list[str]]] = {
    "error": (
        ["0", "0.5", "1e-300", " 0.3", "1.0"],
        ["nan", "NaN", "-0.5", "inf", "-inf", "", "abc", "1e400", "100"],
    ),
    "method": ([], ["mystery", "", "LDP_CORRECT", "central_gaussian "]),
    "eps": ([], ["nan", "-1", "0", "abc", "", "3.7", "inf"]),
    "n": ([], ["-1", "0", "1.5", "abc", "", "1e400", "99999999999999999999999", "12345"]),
    "k": ([], ["0", "-5", "abc", "2.5", "999"]),
    "p": ([], ["0", "abc", "21"]),
    "rep": ([], ["-1", "abc", "99"]),
    "panel": ([], ["x", ""]),
    "experiment": ([], ["tables", "x", ""]),
}
ROW_SHAPES = ["duplicate", "drop-row", "drop-column", "extra-column", "empty", "header-only"]
ROW_SHAPES += ["crlf", "nul", "bom"]
#: shapes of the CSV that read as the bench wrote it, or may be refused ("nul" lands in a
#: column no table reads, "bom" renames the first column)
ROW_SHAPES_OK = {"crlf", "extra-column", "nul", "bom"}


@st.composite
def reanalyse_case(d: st.DrawFn) -> Case:
    files: dict[str, bytes | None] = dict(bench_run_files())
    lines = files["pca/fig1.csv"].decode().splitlines()
    header = lines[0].split(",")
    what = d(st.sampled_from(["cell", "cell", "cell", "shape"]))
    row = d(st.integers(1, len(lines) - 1))
    if what == "cell":
        col = d(st.sampled_from(sorted(ROW_EDITS)))
        good, bad = ROW_EDITS[col]
        value = d(st.sampled_from(good + bad))
        cells = lines[row].split(",")
        j = header.index(col)
        if col == "error" and cells[header.index("method")] == "opendp":
            value = d(st.sampled_from(bad))  # OpenDP rows say why a NaN is there
        cells[j] = value
        lines[row] = ",".join(cells)
        must_fail = value in bad
        note = f"line {row + 1}: {col} = {value!r}"
        names = ["fig1.csv", f"line {row + 1}", col, value or "empty"]
    else:
        shape = d(st.sampled_from(ROW_SHAPES))
        if shape == "duplicate":
            lines.insert(row, lines[row])
        elif shape == "drop-row":
            del lines[row]
        elif shape == "drop-column":
            j = header.index("error")
            lines = [",".join(c for i, c in enumerate(ln.split(",")) if i != j) for ln in lines]
        elif shape == "extra-column":
            lines = [ln + (",extra" if i == 0 else ",1") for i, ln in enumerate(lines)]
        elif shape == "empty":
            lines = []
        elif shape == "header-only":
            lines = lines[:1]
        elif shape == "nul":
            lines[row] = lines[row] + "\x00"
        elif shape == "bom":
            lines[0] = "\ufeff" + lines[0]
        must_fail = shape not in ROW_SHAPES_OK
        note = shape
        names = ["fig1.csv", "line", "error", "column", "row", "repeat", "raw errors", "CSV"]
    sep = "\r\n" if what == "shape" and note == "crlf" else "\n"
    files["pca/fig1.csv"] = (sep.join(lines) + (sep if lines else "")).encode()
    return Case(
        "cli:pca-bench (reanalyse rows)",
        "cli",
        argv=["pca-bench", "--reanalyse", "--out", "pca", "--no-progress"],
        files=files,
        names=names + ["nothing was written"],
        must_fail=must_fail,
        timeout=150,
        note=note,
    )


# ======================================================================================
# cli:reproduce (gpu-tflops), cli:audit (seed)
# ======================================================================================
TFLOPS_BAD = ["0", "-1", "nan", "inf", "-inf", "1e300", "1e-300", "abc", "", "0.09", "5001"]
TFLOPS_BAD += ["0x10", "1e400"]  # ("1_0" is 10 to Python's float(), as to the CLI's others)


@st.composite
def gpu_tflops_case(d: st.DrawFn) -> Case:
    value = d(st.sampled_from([*TFLOPS_BAD, "10", "0.1", "5000", "312"]))
    where = d(st.sampled_from(["paper", "paper", "cpu", "quick"]))
    argv = ["reproduce", "fedsc", "--dry-run", "--out", "rep", "--gpu-tflops", value]
    argv += ["--quick"] if where == "quick" else ["--scale", where]
    return Case(
        "cli:reproduce (gpu-tflops)",
        "cli",
        argv=argv,
        names=["--gpu-tflops", value or "''", "gpu_tflops"],
        must_fail=value in TFLOPS_BAD or where != "paper",
        timeout=120,
    )


@st.composite
def audit_seed_case(d: st.DrawFn) -> Case:
    noise = d(st.sampled_from(["secure", "opendp", "fast", None]))
    seed = d(st.sampled_from(["0", "5", "-1", "abc", "1.5", "99999999999999999999", "", None]))
    which = d(st.sampled_from(["ldp-pca", "dp-calr"]))
    argv = ["audit", which, "--samples", "2000"]
    argv += ["--noise", noise] if noise else []
    argv += ["--seed", seed] if seed is not None else []
    bad_seed = seed is not None and seed not in ("0", "5")
    must_fail = bad_seed or (noise in ("secure", "opendp") and seed is not None)
    return Case(
        "cli:audit (seed)",
        "cli",
        argv=argv,
        names=["--seed", "seed", *(x for x in (seed, noise) if x)],
        must_fail=must_fail,
        timeout=240,
        oracle=lambda res, f: (
            None
            if ("PASS" in res["stdout"] or "FAIL" in res["stdout"])
            else ("exit 0 without a verdict")
        ),
    )


# ======================================================================================
# lib: encoder file (r5)
# ======================================================================================
def _encoder_variant(kind: str) -> bytes:
    key = f"enc5:{kind}"
    if key in _TEMPLATES:
        return _TEMPLATES[key]
    import torch
    from fuzz_cases_r3 import _encoder_bytes

    raw = _encoder_bytes("good")
    blob = torch.load(io.BytesIO(raw), weights_only=True)
    sd = blob["state_dict"]
    first = next(k for k, v in sd.items() if v.is_floating_point())
    cfg = blob["config"]

    def save(obj: Any) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    if kind == "int-dtype":
        out = save({**blob, "state_dict": {**sd, first: sd[first].to(torch.int64)}})
    elif kind == "all-int":
        ints = {k: v.to(torch.int32) if v.is_floating_point() else v for k, v in sd.items()}
        out = save({**blob, "state_dict": ints})
    elif kind == "bool-dtype":
        out = save({**blob, "state_dict": {**sd, first: sd[first] > 0}})
    elif kind == "complex-dtype":
        out = save({**blob, "state_dict": {**sd, first: sd[first].to(torch.complex64)}})
    elif kind == "float64":
        out = save({**blob, "state_dict": {**sd, first: sd[first].to(torch.float64)}})
    elif kind == "float16":
        out = save({**blob, "state_dict": {**sd, first: sd[first].to(torch.float16)}})
    elif kind == "plain-pickle":
        out = pickle.dumps({"format": blob.get("format"), "config": cfg})
    elif kind == "evil-pickle":
        out = b"cos\nsystem\n(S'echo owned > owned.txt'\ntR."
    elif kind == "empty":
        out = b""
    elif kind == "text":
        out = b"hello, not a checkpoint\n"
    elif kind == "half":
        out = raw[: len(raw) // 2]
    elif kind == "zip-garbage":
        import zipfile

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("archive/data.pkl", b"garbage")
        out = buf.getvalue()
    elif kind == "npz":
        buf = io.BytesIO()
        np.savez(buf, w=np.ones(3))
        out = buf.getvalue()
    elif kind == "no-model":
        out = save({**blob, "config": {k: v for k, v in cfg.items() if k != "model"}})
    elif kind == "config-list":
        out = save({**blob, "config": [1, 2]})
    elif kind == "state-list":
        out = save({**blob, "state_dict": [1, 2]})
    elif kind == "missing-weight":
        out = save({**blob, "state_dict": {k: v for k, v in sd.items() if k != first}})
    elif kind == "extra-weight":
        out = save({**blob, "state_dict": {**sd, "extra.weight": torch.zeros(2)}})
    elif kind == "wrong-format":
        out = save({**blob, "format": "something-else"})
    elif kind == "inf-weight":
        out = save({**blob, "state_dict": {**sd, first: sd[first] * float("inf")}})
    else:
        out = raw
    _TEMPLATES[key] = out
    return out


ENCODER_KINDS = [
    "good", "int-dtype", "all-int", "bool-dtype", "complex-dtype", "float64", "float16",
    "plain-pickle", "evil-pickle", "empty", "text", "half", "zip-garbage", "npz", "no-model",
    "config-list", "state-list", "missing-weight", "extra-weight", "wrong-format", "inf-weight",
]  # fmt: skip
#: kinds whose weights load as the model's (an exact widening of the same numbers)
ENCODER_OK = {"good", "float16"}


@st.composite
def encoder_r5_case(d: st.DrawFn) -> Case:
    kind = d(st.sampled_from(ENCODER_KINDS))
    name = d(st.sampled_from(["enc.pt", "enc.bin"]))

    def call(folder: Path) -> Any:
        from fedspectral.fed.export import load_encoder

        net = load_encoder(folder / name)
        params = list(net.parameters())
        if (folder / "owned.txt").exists():
            return "CODE RAN"
        return {
            "dtypes": sorted({str(p.dtype) for p in params}),
            "finite": all(bool(p.isfinite().all()) for p in params),
        }

    def oracle(res: Any, folder: Path) -> str | None:
        if res == "CODE RAN" or (folder / "owned.txt").exists():
            return "the file ran code"
        if res["dtypes"] != ["torch.float32"] or not res["finite"]:
            return f"loaded weights {res}"
        return None

    return Case(
        "lib: encoder file (r5)",
        "lib",
        func=call,
        files={name: _encoder_variant(kind)},
        oracle=oracle,
        names=[name, "encoder file"],
        must_fail=kind not in ENCODER_OK and kind != "float64",
        timeout=120,
        note=kind,
    )


STRATEGIES_R5 = {
    "lib: privacy (r5)": lambda: st.one_of(privacy_case(), privacy_case(), release_text_case()),
    "lib: secure sampler": sampler_case,
    "lib: node policy (r5)": node_policy_case,
    "lib: node data (r5)": node_data_case,
    "lib: node request (r5)": node_request_case,
    "script: benchmarks": bench_case,
    "script: fedsc_sweep": sweep_case,
    "cli:pca-bench (reanalyse rows)": reanalyse_case,
    "cli:reproduce (gpu-tflops)": gpu_tflops_case,
    "cli:audit (seed)": audit_seed_case,
    "lib: encoder file (r5)": encoder_r5_case,
}
#: the fast ones among them (well under a second a case)
FAST_R5 = (
    "lib: privacy (r5)",
    "lib: secure sampler",
    "lib: node policy (r5)",
    "lib: node data (r5)",
    "lib: node request (r5)",
)
