"""Numbers over seeds: a table cell (mean, sample std) and a paired difference with its
95 % paired t interval."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def as_number(x: Any) -> float:
    if isinstance(x, str):
        return float(x)  # "inf", "nan"
    return float(x)


def seed_cell(values: Sequence[tuple[int, float]]) -> dict[str, Any]:
    """mean and sample standard deviation (ddof = 1; 0 with one value) over seeds."""
    import numpy as np

    vals = [v for _, v in values]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "values": [], "seeds": []}
    arr = np.asarray(vals, dtype=float)
    return {
        "n": n,
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if n > 1 else 0.0,
        "values": [float(v) for v in vals],
        "seeds": [int(s) for s, _ in values],
    }


#: the confidence level of the intervals the report's verdicts use
LEVEL = 0.95


def t_interval(mean: float, se: float, df: int) -> tuple[float, float]:
    """The two-sided :data:`LEVEL` Student t interval ``mean ± t(df) se`` (infinite
    with ``df < 1`` or an infinite ``se``)."""
    from scipy import stats

    if df < 1 or not math.isfinite(se):
        return -math.inf, math.inf
    h = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * se
    return mean - h, mean + h


def paired_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """mean, std, standard error and the 95 % paired t interval (``lo``, ``hi``; df = n - 1)
    of ``a - b`` over the seeds both cells have (unpaired difference of means, df =
    min(n_a, n_b) - 1, when they share no seed)."""
    import numpy as np

    if not a or not b or not a.get("n") or not b.get("n"):
        return None
    va = dict(zip(a["seeds"], a["values"], strict=True))
    vb = dict(zip(b["seeds"], b["values"], strict=True))
    common = sorted(set(va) & set(vb))
    if common:
        d = np.asarray([va[s] - vb[s] for s in common])
        n = len(d)
        sd = float(d.std(ddof=1)) if n > 1 else 0.0
        se = sd / math.sqrt(n) if n > 1 else math.inf
        lo, hi = t_interval(float(d.mean()), se, n - 1)
        return {
            "mean": float(d.mean()),
            "std": sd,
            "n": n,
            "se": se,
            "lo": lo,
            "hi": hi,
            "paired": True,
        }
    se = math.sqrt(
        (a["std"] ** 2 / a["n"] if a["n"] > 1 else math.inf)
        + (b["std"] ** 2 / b["n"] if b["n"] > 1 else math.inf)
    )
    n = min(a["n"], b["n"])
    lo, hi = t_interval(a["mean"] - b["mean"], se, n - 1)
    return {
        "mean": a["mean"] - b["mean"],
        "std": math.nan,
        "n": n,
        "se": se,
        "lo": lo,
        "hi": hi,
        "paired": False,
    }
