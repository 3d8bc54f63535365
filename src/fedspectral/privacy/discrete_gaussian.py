r"""The secure source's mechanism: a discrete Gaussian on a power-of-two grid, vectorised.

**What is released.**  For a float vector :math:`x \in \mathbb{R}^d` and a requested
noise scale :math:`\sigma`, :func:`release` returns

.. math::

    y = g \cdot \bigl(\operatorname{rint}(\operatorname{clip}(x, \pm B) / g) + Z\bigr),
    \qquad Z_j \overset{\text{iid}}{\sim} \mathcal{N}_{\mathbb{Z}}(0, s^2),

where

* the **grid** :math:`g = 2^{\lfloor \log_2 \sigma \rfloor - 34}` is the largest power of
  two :math:`\le \sigma / 2^{34}` (:data:`GRID_BITS`; Google's differential-privacy
  library also ties a power-of-two granularity to :math:`\sigma`), so
  :math:`\sigma / g \in [2^{34}, 2^{35})`;
* :math:`B = 2^{61} g` (:math:`> 2^{26}\sigma`) keeps every integer inside ``int64``;
  clipping is a contraction, so it never increases a sensitivity (and no input makes
  the release fail: values beyond :math:`\pm B` are released as :math:`\pm B` plus
  noise);
* :math:`\mathcal{N}_{\mathbb{Z}}(0, s^2)` is the discrete Gaussian,
  :math:`P[Z = z] \propto e^{-z^2 / 2s^2}` on the integers (Canonne, Kamath, Steinke,
  "The Discrete Gaussian for Differential Privacy", NeurIPS 2020), with
  :math:`s \ge (1 + 2^{-10})\,\sigma / g` (:data:`SLACK`; the exact :math:`s` is
  :func:`noise_scale`);
* :math:`y` is formed in ``int64`` and converted to float64 once: a fixed function of
  the integer vector :math:`\operatorname{rint}(\cdot) + Z`, so the release is
  post-processing of an integer-valued mechanism and its low-order bits carry nothing
  about :math:`x` (the floating-point attack of Mironov, CCS 2012, reads the bits of
  :math:`x + \text{float noise}`; here every output is a multiple of :math:`g`).

**Privacy statement.**

*Sensitivity after rounding.*  If :math:`\lVert x - x'\rVert_2 \le \Delta`, then the
integer vectors :math:`n = \operatorname{rint}(\operatorname{clip}(x)/g)` satisfy
:math:`\lVert n - n'\rVert_2 \le \Delta / g + \sqrt d` (each coordinate moves by at most
1/2 when rounded; clipping is 1-Lipschitz).  So the integer mechanism has sensitivity
:math:`\Delta_g = \Delta + g\sqrt d` in units of the value (:func:`grid_sensitivity`).

*Discrete vs continuous.*  For integer shifts the Rényi divergence of the discrete
Gaussian is at most the continuous one's: :math:`D_\alpha(\mathcal{N}_\mathbb{Z}(\mu, s^2)
\Vert \mathcal{N}_\mathbb{Z}(\nu, s^2)) \le \alpha (\mu - \nu)^2 / 2s^2` (Canonne et al.
2020, Thm. 4 and its proof), and Rényi divergences of independent coordinates add, so the
vector mechanism is :math:`\Delta_g^2 / 2(gs)^2`-zCDP: the Rényi curve of a continuous
Gaussian of noise multiplier :math:`gs / \Delta_g`.

*Calibration.*  :math:`gs / \Delta_g \ge (1 + 2^{-10})\sigma / (\Delta + g\sqrt d)
\ge \sigma / \Delta` whenever :math:`g \sqrt d / \Delta \le 2^{-10}`, i.e. (as
:math:`g \le 2^{-34}\sigma`) whenever :math:`z\sqrt d \le 2^{24}` for the recorded noise
multiplier :math:`z = \sigma / \Delta` and :math:`d` values in one release
(:data:`MAX_Z_SQRT_D`: :math:`z \le 16\,777` at :math:`d = 10^6`, :math:`z \le 530` at
:math:`d = 10^9`).  In that domain the release is *at least as private as* the
continuous Gaussian of :math:`(\sigma, \Delta)` that the ledger records, for every
Rényi order, and the RDP and closed-form (zCDP) accountants of
:mod:`fedspectral.privacy.accounting` stay valid as they are; the 0.1 % of extra noise
standard deviation is the price of the rounding.  (The PLD accountant's figures are
those of the continuous Gaussian; Canonne et al. (§ 2.2, Fig. 1) show the discrete
Gaussian's privacy curve matches it at these scales, but only the Rényi bound is proven
here.)

**How** :math:`Z` **is sampled** (and the :math:`\delta` it adds).
:math:`s \approx 2^{34}` is far too large for a table, and exact rejection sampling
(Canonne et al., Alg. 1-3) needs integers of :math:`\sim 2^{160}` at that scale (what
makes OpenDP's exact sampler cost ~50 µs a value).  Instead

.. math:: Z = X_0 + M X_1 + \dots + M^{L-1} X_{L-1} + M^L X_L, \qquad M = 2^9,

with :math:`X_0, \dots, X_{L-1} \sim \mathcal{N}_\mathbb{Z}(0, a^2)`, :math:`a = 2M`, and
:math:`X_L \sim \mathcal{N}_\mathbb{Z}(0, b^2)` where :math:`b` makes the variances add
up to :math:`s^2` (rounded up).  Each :math:`X` is drawn by Walker's alias method from a
table of the exact pmf (weights computed with :mod:`decimal` to 320 bits, the alias
construction in exact integer arithmetic, thresholds rounded to 128 bits, compared
lazily: 16 bits first, the remaining 112 only on a tie).

*Convolution lemma* (proved here by Poisson summation; cf. Micciancio & Walter, CRYPTO
2017, and the sums of discrete Gaussians of Kairouz, Liu, Steinke, ICML 2021): if
:math:`X \sim \mathcal{N}_\mathbb{Z}(0, a^2)` and :math:`Y \sim
\mathcal{N}_\mathbb{Z}(0, \beta^2)` are independent, then :math:`P[X + MY = z] =
\mathcal{N}_\mathbb{Z}(0, a^2 + M^2\beta^2)(z) \cdot C(1 + \theta(z))`, with
:math:`|\theta(z)| \le \tau = 2\sum_{k\ge1} e^{-2\pi^2 a'^2 k^2}`, :math:`a'^2 = a^2
\beta^2 / (a^2 + M^2 \beta^2)`; hence the pmf ratio to the exact discrete Gaussian lies
in :math:`[(1-\tau)/(1+\tau), (1+\tau)/(1-\tau)]`.  Here :math:`a/M = 2` and
:math:`\beta \ge 4`, so :math:`a'^2 \ge 3.2` and :math:`\tau \le 2^{-90}` per level.

*Total.*  Per value, the sampled :math:`Z` is within total variation
:data:`TV_PER_VALUE` :math:`= 2^{-80}` of :math:`\mathcal{N}_\mathbb{Z}(0, s^2)`
(:math:`\le L \cdot 2^{-88}` from the lemma, :math:`(L+1) 2^{-127}` from the 128-bit
thresholds, :math:`2^{-140}` from the tables' tails, with :math:`L \le 3` in use).
So a release of :math:`d` values that the discrete mechanism makes
:math:`(\varepsilon, \delta)`-DP is :math:`(\varepsilon, \delta + (1 + e^\varepsilon)
\, d \, 2^{-80})`-DP as sampled (:func:`extra_delta`): at :math:`d = 10^7`,
:math:`\varepsilon = 10` that is below :math:`2^{-42}`.

*In the ledger.*  A node's ledger records each release's mechanism
(``noise = "discrete-gaussian-grid"``) and the number of values it drew (``values``), so
each release carries :math:`\tau_i = \text{count} \cdot \text{values} \cdot 2^{-80}`
(:attr:`fedspectral.privacy.accounting.Release.sampler_tv`).  By the hybrid argument the
composition as sampled is within :math:`\tau = \sum_i \tau_i` of the ideal one, so if
the ideal one is :math:`(\varepsilon(\delta'), \delta')`-DP the sampled one is
:math:`(\varepsilon(\delta'), \delta' + (1 + e^{\varepsilon(\delta')})\tau)`-DP.
:func:`sampled_epsilon` turns that into an ε at a target δ:
:math:`\varepsilon_0 = \varepsilon(\delta/2)`, :math:`\eta = (1 + e^{\varepsilon_0})\tau`,
and if :math:`\eta \le \delta/2` the answer is :math:`\varepsilon(\delta - \eta)` (valid
since :math:`\varepsilon(\delta - \eta) \le \varepsilon_0`); otherwise a
``ValueError``.  :func:`fedspectral.privacy.accounting.epsilon_of_releases` does this for
every ledger figure (a release without ``values``, or of another mechanism, has
:math:`\tau_i = 0`, and :math:`\tau = 0` leaves every figure as it was).

**Random bits.**  :func:`os_bits` returns numpy's Philox-4x64-10 counter-mode generator
keyed with 128 bits of ``os.urandom``: fresh key per release, no seed anyone else
chooses, bits at memory speed.  Tests pass a seeded bit generator to :func:`release` and
:func:`sample` instead; nothing on a node does.
"""

from __future__ import annotations

import decimal
import functools
import math
import os
import threading
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from fedspectral.privacy.validate import check_count, check_real, clear_errors, real_values

__all__ = [
    "GRID_BITS",
    "MAX_Z_SQRT_D",
    "MECHANISM",
    "SLACK",
    "TV_PER_VALUE",
    "extra_delta",
    "grid",
    "grid_sensitivity",
    "noise_scale",
    "os_bits",
    "release",
    "sample",
    "sampled_epsilon",
]

#: the mechanism's name as the ledger records it
MECHANISM = "discrete-gaussian-grid"
#: grid g = the largest power of two <= sigma / 2**GRID_BITS
GRID_BITS = 34
#: the noise scale is sigma * (1 + SLACK): it pays for the rounding's sensitivity
SLACK = 2.0**-10
#: the domain of the calibration: z * sqrt(d) <= 2**24 (module docstring)
MAX_Z_SQRT_D = 2.0 ** (GRID_BITS - 10)
#: total variation from the exact discrete Gaussian, per value (module docstring)
TV_PER_VALUE = 2.0**-80

M_BITS = 9
M = 1 << M_BITS  # modulus between levels
A = 2 * M  # scale of the fixed levels (a / M = 2)
TOP_MAX = 2304  # the top level's scale b is at most this (then b >= 4.03 below it)
TAIL = 14  # tables cover |z| <= TAIL * scale: tail mass < 2**-140
W = 320  # bits of the weights
_CHUNK = 1 << 15  # values per vectorised chunk (temporaries stay in cache)
_LOG2_MIN, _LOG2_MAX = -980, 990  # sigma range keeping g and 2**62 g normal floats


def grid(sigma: float) -> float:
    """The grid :math:`g`: the largest power of two :math:`\\le \\sigma / 2^{34}`."""
    s = check_real("sigma", sigma, low=0.0, low_open=True)
    e = math.frexp(s)[1] - 1  # floor(log2 sigma)
    if not _LOG2_MIN <= e <= _LOG2_MAX:
        raise ValueError(
            f"sigma={sigma!r} is outside the secure source's range "
            f"[2**{_LOG2_MIN}, 2**{_LOG2_MAX + 1}) (its grid would leave float64)"
        )
    return math.ldexp(1.0, e - GRID_BITS)


def grid_sensitivity(sensitivity: float, sigma: float, d: int) -> float:
    """:math:`\\Delta + g\\sqrt d`: the L2 sensitivity after rounding ``d`` values to the
    grid of ``sigma`` (module docstring)."""
    sens = check_real("sensitivity", sensitivity, low=0.0)
    return sens + grid(sigma) * math.sqrt(check_count("d", d))


def extra_delta(d: int, epsilon: float) -> float:
    """The :math:`\\delta` a release of ``d`` values adds by being sampled within
    :data:`TV_PER_VALUE` of the exact discrete Gaussian: :math:`(1 + e^\\varepsilon) d
    \\, 2^{-80}`."""
    eps = check_real("epsilon", epsilon, low=0.0, allow_inf=True)
    return (1.0 + math.exp(min(eps, 700.0))) * check_count("d", d) * TV_PER_VALUE


def sampled_epsilon(epsilon_at: Callable[[float], float], delta: float, tv: float) -> float:
    r"""ε at ``delta`` of a mechanism within total variation ``tv`` of an ideal one whose ε
    at any δ is ``epsilon_at(δ)`` (non-increasing in δ): ``epsilon_at(delta)`` itself when
    ``tv == 0``, else :math:`\varepsilon(\delta - \eta)` with :math:`\eta = (1 +
    e^{\varepsilon(\delta/2)})\,\tau` (module docstring); ``ValueError`` if
    :math:`\eta > \delta/2`; a negative ``tv`` (it would make ε optimistic) is refused."""
    if not callable(epsilon_at):
        raise TypeError(f"epsilon_at must be callable, got {type(epsilon_at).__name__}")
    delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    tv = check_real("tv", tv, low=0.0, high=1.0)
    if tv == 0:
        return epsilon_at(delta)
    eps0 = epsilon_at(delta / 2)
    extra = (1.0 + math.exp(eps0)) * tv if eps0 <= 700 else math.inf
    if not extra <= delta / 2:
        raise ValueError(
            f"the sampler's total variation {tv:.3g} adds delta (1 + e^{eps0:.4g}) * "
            f"{tv:.3g} = {extra:.3g}, more than half of delta={delta!r}: no epsilon is "
            f"accounted at this delta (ask at a larger one)"
        )
    # one float below delta - extra (never above its exact value), and never below delta/2
    return epsilon_at(max(delta / 2, math.nextafter(delta - extra, 0.0)))


def os_bits() -> np.random.BitGenerator:
    """Philox-4x64-10 keyed with 128 bits of OS entropy (a fresh key on each call)."""
    return np.random.Philox(key=int.from_bytes(os.urandom(16), "little"))


# -- tables -----------------------------------------------------------------------------


class _Table:
    """Walker alias table of :math:`\\mathcal N_\\mathbb Z(0, v)` for a rational variance."""

    __slots__ = ("alias", "center", "shift", "t16", "tfull", "variance")

    def __init__(self, variance: Fraction) -> None:
        self.variance = variance
        b = math.sqrt(variance)
        radius = math.ceil(TAIL * max(b, 1.0))
        bits = max(4, (2 * radius + 1).bit_length())
        if bits > 16:
            raise AssertionError(f"table of {radius=} beyond 16 bits")  # pragma: no cover
        n = 1 << bits
        self.center = n // 2
        self.shift = np.uint16(16 - bits)
        # exp(-i^2 / 2v) = c**(i*i), c = exp(-1/2v): correctly rounded by decimal
        with decimal.localcontext() as ctx:
            ctx.prec = 160  # digits (> 530 bits)
            c = (-decimal.Decimal(variance.denominator) / (2 * variance.numerator)).exp()
            one = decimal.Decimal(2) ** W
            c_fp = int((c * one).to_integral_value(rounding=decimal.ROUND_FLOOR))
            c2_fp = int((c * c * one).to_integral_value(rounding=decimal.ROUND_FLOOR))
        half = [1 << W]
        rho, step = 1 << W, c_fp  # step = c**(2i+1)
        for _ in range(radius):
            rho = (rho * step) >> W
            step = (step * c2_fp) >> W
            half.append(rho)
        w = [0] * n
        for i, r in enumerate(half):
            w[self.center + i] = r
            w[self.center - i] = r
        self.t16, self.alias, self.tfull = _alias(w)


def _alias(w: list[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Vose's alias construction in exact integer arithmetic; thresholds to 128 bits."""
    n = len(w)
    total = sum(w)
    p = [n * x for x in w]
    small = [i for i in range(n) if p[i] < total]
    large = [i for i in range(n) if p[i] >= total]
    full = 1 << 128
    thr = [full] * n
    alias = list(range(n))
    while small and large:
        lo = small.pop()
        hi = large.pop()
        thr[lo] = (p[lo] << 128) // total
        alias[lo] = hi
        p[hi] -= total - p[lo]
        (small if p[hi] < total else large).append(hi)
    for i in small + large:  # exact arithmetic: what is left has p == total
        if p[i] != total:
            raise AssertionError("alias construction lost mass")  # pragma: no cover
    t16 = np.array([min(t >> 112, 0xFFFF) for t in thr], dtype=np.uint16)
    return t16, np.array(alias, dtype=np.int64), thr


_FIXED: _Table | None = None
_TOPS: dict[Fraction, _Table] = {}
_LOCK = threading.Lock()  # the tables are shared by the process's threads


def _fixed() -> _Table:
    global _FIXED
    with _LOCK:
        if _FIXED is None:
            _FIXED = _Table(Fraction(A * A))
        return _FIXED


def _top(variance: Fraction) -> _Table:
    with _LOCK:
        t = _TOPS.get(variance)
        if t is None:
            if len(_TOPS) >= 32:
                _TOPS.pop(next(iter(_TOPS)))
            t = _TOPS[variance] = _Table(variance)
        return t


@functools.lru_cache(maxsize=64)
def _plan(scale2: Fraction) -> tuple[int, Fraction, Fraction]:
    """(levels L, top variance b^2, total variance) for a requested variance ``scale2``."""
    q = 1 << 32
    levels = 0
    while True:
        fixed = Fraction(A * A * (M ** (2 * levels) - 1), M * M - 1)
        top = (scale2 - fixed) / M ** (2 * levels)
        if top <= TOP_MAX * TOP_MAX:
            break
        levels += 1
    top = Fraction(math.ceil(top * q), q)  # rounded up: never less noise than asked
    return levels, top, fixed + top * M ** (2 * levels)


# -- sampling ---------------------------------------------------------------------------


def _draw(t: _Table, u16: np.ndarray, bits: np.random.BitGenerator) -> np.ndarray:
    """One alias draw per row of ``u16`` (two uniform 16-bit columns: index, threshold):
    the table *index* drawn (intp); the value is the index minus ``t.center``."""
    idx = (u16[:, 0] >> t.shift).astype(np.intp)
    u = u16[:, 1]
    thr = t.t16[idx]
    keep = u < thr
    for j in np.flatnonzero(u == thr):  # probability 2**-16: compare all 128 bits
        extra = bits.random_raw(2)
        u128 = (int(u[j]) << 112) | (int(extra[0]) << 48) | (int(extra[1]) >> 16)
        keep[j] = u128 < t.tfull[idx[j]]
    return np.where(keep, idx, t.alias[idx])


def _sample_into(out: np.ndarray, scale2: Fraction, bits: np.random.BitGenerator) -> Fraction:
    """Add ``out.size`` draws of :func:`sample` to the int64 vector ``out`` in place."""
    levels, top, total = _plan(scale2)
    ttop = _top(top)
    tfix = _fixed() if levels else None
    # Z = sum_i M**i (index_i - center_i): the centres come off once, at the end
    offset = ttop.center * M**levels + sum(M**i for i in range(levels)) * (
        tfix.center if tfix is not None else 0
    )
    words = (2 * (levels + 1) + 3) // 4  # 32 random bits per level and value
    for lo in range(0, out.size, _CHUNK):
        n = min(_CHUNK, out.size - lo)
        u16 = bits.random_raw(n * words).view(np.uint16).reshape(n, 4 * words)
        z = _draw(ttop, u16[:, 0:2], bits)
        if tfix is not None:  # levels > 0
            for level in range(1, levels + 1):
                z *= M
                z += _draw(tfix, u16[:, 2 * level : 2 * level + 2], bits)
        z -= offset
        out[lo : lo + n] += z
    return total


#: the most values :func:`sample` draws at once (2 GiB of int64)
MAX_VALUES = 2**28
#: the largest variance :func:`sample` takes: its draws, within ``TAIL`` standard
#: deviations (2**62 at most), fit int64 (:func:`release` asks for at most about 2**70)
MAX_SCALE2 = 2**116


@clear_errors
def sample(
    scale2: Fraction | float, size: int, bits: np.random.BitGenerator
) -> tuple[np.ndarray, Fraction]:
    """``size`` draws (int64) of :math:`\\mathcal N_\\mathbb Z(0, v)`, :math:`v \\ge`
    ``scale2`` (within :data:`TV_PER_VALUE` per value), and the variance :math:`v`.

    ``bits`` is the bit generator (``random_raw``); :func:`os_bits` on a node."""
    if not isinstance(scale2, Fraction):
        check_real("scale2", scale2, low=0.0, low_open=True)
    s2 = Fraction(scale2)
    if s2 <= 0:
        raise ValueError(f"the variance must be positive, got {scale2!r}")
    if s2 > MAX_SCALE2:
        raise ValueError(
            f"scale2={float(s2):.4g} is above 2**116 (MAX_SCALE2): draws of that variance "
            "do not fit int64"
        )
    out = np.zeros(check_count("size", size, high=MAX_VALUES), dtype=np.int64)
    return out, _sample_into(out, s2, bits)


@functools.lru_cache(maxsize=64)
def _scale2(sigma: float) -> Fraction:
    return (Fraction(float(sigma)) / Fraction(grid(sigma)) * (1 + Fraction(SLACK))) ** 2


@clear_errors
def noise_scale(sigma: float) -> float:
    """The standard deviation :math:`g s` of the noise :func:`release` adds for ``sigma``
    (:math:`\\approx (1 + 2^{-10})\\sigma`)."""
    return grid(sigma) * math.sqrt(_plan(_scale2(sigma))[2])


@clear_errors
def release(values: np.ndarray, sigma: float, bits: np.random.BitGenerator) -> np.ndarray:
    """``values`` released on the grid of ``sigma`` with discrete Gaussian noise (float64,
    the shape of ``values``); see the module docstring.  ``values`` must be finite."""
    x = real_values("values", values)
    sigma = check_real("sigma", sigma, low=0.0, low_open=True)
    g = grid(sigma)
    bound = math.ldexp(g, 61)
    if x.size and not float(np.abs(x).max()) <= bound:  # never clipped silently
        raise ValueError(
            f"values beyond the grid's range for sigma={sigma!r}: the secure source "
            f"represents |value| <= 2**61 grid steps = {bound:.6g} (about 1.3e8 sigma); "
            "scale the values or raise sigma"
        )
    t = x.ravel().copy()
    t *= 1.0 / g  # a power of two: exact
    np.rint(t, out=t)
    n = t.astype(np.int64)
    _sample_into(n, _scale2(sigma), bits)
    out = n.astype(np.float64)
    out *= g
    return out.reshape(x.shape)
