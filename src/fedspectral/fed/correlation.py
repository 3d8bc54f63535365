r"""DP-CalR: a client's differentially private correlation matrix (the FedSC paper, Algorithm 2).

Client :math:`j` with data :math:`\mathcal{D}_j` (:math:`n = |\mathcal{D}_j|` samples)
draws :math:`V` augmented views of every sample, clips each representation to norm
:math:`\sqrt{\mu}` and releases

.. math::

    \tilde R_j = \frac{1}{nV}\sum_{\bar x\in\mathcal{D}_j}\sum_{v=1}^{V}
    \check z_v(\bar x)\check z_v(\bar x)^\top + E ,

:math:`E` symmetric Gaussian noise drawn by
:func:`fedspectral.privacy.symmetric_gaussian`.

The release is a :math:`d(d+1)/2`-vector plus iid :math:`N(0,\sigma^2)` noise, shown to
the server as the symmetric matrix it packs (``vectorisation``):

``"isometric"`` (default)
    The vector is :math:`\mathrm{svec}(R_j)` (off-diagonal entries times
    :math:`\sqrt2`, :math:`\|\mathrm{svec}(A)\|_2 = \|A\|_F`); un-packed, :math:`E` has
    variance :math:`\sigma^2` on the diagonal and :math:`\sigma^2/2` off it.  The
    :math:`\sqrt2` is undone inside :func:`dp_correlation`, on the client, before the
    matrix leaves it: the payload is the :math:`d\times d` matrix :math:`\tilde R_j`
    (no packed triangle travels).
``"upper"``
    The vector is the plain upper triangle: :math:`E` has iid :math:`N(0,\sigma^2)`
    upper-triangular entries, lower triangle mirrored.

Deviation from the seed and its official code: they add :math:`N(0,\sigma^2 I)` to all
:math:`d^2` entries independently (not symmetric).  Its symmetric part -- the only part
the FedSC loss sees -- has variance :math:`\sigma^2` on the diagonal and
:math:`\sigma^2/2` off it: the isometric release has exactly that law, as a symmetric
matrix, with the same σ for the same guarantee; ``"upper"`` doubles the off-diagonal
variance (measured Frobenius norm ratio isometric/upper at d = 128:
:math:`\sqrt{(d+1)/(2d)}` = 0.710).

Sensitivity and neighbouring relations
--------------------------------------
One sample contributes :math:`c(\bar x) = \frac1V\sum_v \check z_v\check z_v^\top`,
positive semi-definite with :math:`\|c\|_F \le \operatorname{Tr} c \le \mu`.  For two
PSD matrices :math:`\|c-c'\|_F^2 = \|c\|_F^2 + \|c'\|_F^2 - 2\langle c, c'\rangle \le
2\mu^2`.  The isometric vector's norm *is* the Frobenius norm, and the upper-triangle
norm is at most the Frobenius norm, so the bounds below hold for both
vectorisations; they are attained by the isometric vector for any :math:`z` of norm
:math:`\sqrt\mu` (zero-out) and any orthogonal pair (replace-one), by the upper
triangle only along coordinate axes.  The code always divides by the actual
:math:`nV`.  Hence, with :func:`correlation_sensitivity`:

``"zero_out"`` (default, the paper's analysis)
    One sample replaced by a null sample whose representations are zero (it
    contributes nothing; the dataset keeps its size :math:`n`, which the server
    knows through :math:`q_j`).  :math:`\Delta = \mu/n`, attained by
    :math:`z = \sqrt{\mu}e_1` against the null sample.  The paper's proof is this
    relation: its triangle inequality keeps :math:`1/|\mathcal{D}_j|` fixed.
``"replace_one"``
    One sample replaced by another: :math:`\Delta = \sqrt2\,\mu/n`, attained by
    :math:`z = \sqrt{\mu}e_1` against :math:`z' = \sqrt{\mu}e_2`.
``"add_remove"``
    One real sample added or removed (normaliser :math:`n` vs :math:`n-1`): the
    difference is :math:`(c - \bar c')/n` with :math:`\bar c'` the mean of the other
    samples, so :math:`\Delta = \sqrt2\,\mu/n` (:math:`n` the larger size).  Removing
    a real sample is *not* covered by :math:`\mu/n` (it moves :math:`R` by up to
    :math:`\sqrt2\mu/n`): that is why the default is named zero-out.

The ledger records each release with the same name (``zero_out``, ``replace_one``,
``add_remove``).

Per-sample independence.  These bounds need each representation to depend on its
own sample only.  An encoder that normalises with batch statistics (BatchNorm
without running statistics, in the backbone, the projector or anywhere else)
breaks them: one changed sample moves every other row.  :func:`dp_correlation`
therefore probes the encoder before a private release (a few rows, computed in two
batches that differ only in their other rows) and refuses one whose outputs move.

Privacy (paper Proposition, with :math:`|\mathcal{D}_j|` kept as in its proof): with
noise multiplier :math:`z = \sigma/\Delta`, :math:`T` releases are
:math:`(T/(2z^2) + \sqrt{2T\log(1/\delta)}/z,\ \delta)`-DP; the ledger's ``"rdp"`` and
``"pld"`` accountants give tighter values.  A client reports each release in its reply
(:func:`fedspectral.fed.releases.release_config` with :func:`correlation_sensitivity`, this
module's :data:`MECHANISM` and the relation's :data:`LEDGER_RELATION` label) and the round
loop records it (:func:`fedspectral.fed.releases.record_release`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedspectral.checks import check_choice, check_int, check_real
from fedspectral.fed.losses import clip_norm
from fedspectral.kinds import CLOSED_FORM, RDP, RELATIONS, REPORTED
from fedspectral.privacy import (
    VECTORISATIONS,
    add_symmetric_gaussian,
    as_noise_source,
    calibrate_noise_multiplier,
)
from fedspectral.privacy.calibration import closed_form_noise_multiplier

#: mechanism name used in privacy ledgers
MECHANISM = "fedsc/dp-calr"
#: neighbouring relations understood by :func:`correlation_sensitivity`
SENSITIVITY_RELATIONS = RELATIONS
#: the ledger's label (:class:`~fedspectral.privacy.PrivacyLedger`) of each relation
LEDGER_RELATION = {r: r for r in SENSITIVITY_RELATIONS}
#: the largest client size accepted (exactly representable as a float)
MAX_SAMPLES = 2**53
#: rows of the batch-independence probe and its tolerance (relative to the largest |z|)
PROBE_ROWS = 4
PROBE_TOL = 1e-4
#: the accountants a target epsilon is calibrated by (those a run reports)
CALIBRATION_ACCOUNTANTS = REPORTED

__all__ = [
    "CALIBRATION_ACCOUNTANTS",
    "LEDGER_RELATION",
    "MECHANISM",
    "SENSITIVITY_RELATIONS",
    "VECTORISATIONS",
    "calibrate_correlation_sigma",
    "correlation_sensitivity",
    "dp_correlation",
]


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
def _check_mu(mu: Any) -> None:
    check_real("mu", mu, low=0.0, low_open=True)


def _check_n(n: Any) -> None:
    check_int("n (the client's number of samples)", n, low=1, high=MAX_SAMPLES)


def _check_relation(neighbouring: Any) -> None:
    if neighbouring == "add_remove_exact":
        raise ValueError(
            "neighbouring='add_remove_exact' is now called 'add_remove' (a real "
            "sample added or removed, sqrt(2) mu/n); the paper's relation with "
            "mu/n is 'zero_out'"
        )
    check_choice("neighbouring", neighbouring, SENSITIVITY_RELATIONS)


def _check_vectorisation(vectorisation: Any) -> None:
    check_choice("vectorisation", vectorisation, VECTORISATIONS)


def _check_sigma(sigma: Any) -> None:
    check_real("sigma", sigma, low=0.0)


# ---------------------------------------------------------------------------
# sensitivity, calibration
# ---------------------------------------------------------------------------
def correlation_sensitivity(mu: float, n: int, neighbouring: str = "zero_out") -> float:
    r"""L2 sensitivity of the noiseless DP-CalR output (the released vector, isometric or
    upper triangle: the same bound, module docstring).

    Parameters
    ----------
    mu : float
        Clipping level: every representation has :math:`\|z\|^2 \le \mu`.
    n : int
        The client's number of samples :math:`|\mathcal{D}_j|`.
    neighbouring : {"zero_out", "replace_one", "add_remove"}
        See the module docstring: :math:`\mu/n` (seed, null sample, fixed size),
        :math:`\sqrt2\mu/n`, :math:`\sqrt2\mu/n`.

    Returns
    -------
    float
    """
    _check_mu(mu)
    _check_n(n)
    _check_relation(neighbouring)
    if neighbouring == "zero_out":
        return float(mu) / float(n)
    return math.sqrt(2.0) * float(mu) / float(n)


def calibrate_correlation_sigma(
    epsilon: float,
    delta: float,
    releases: int,
    mu: float,
    n: int,
    accountant: str = RDP,
    neighbouring: str = "zero_out",
) -> float:
    r""":math:`\sigma` such that ``releases`` DP-CalR releases are :math:`(\varepsilon,\delta)`-DP.

    :math:`\sigma = z\cdot\Delta`, with :math:`z` the smallest noise multiplier of
    :func:`fedspectral.privacy.calibrate_noise_multiplier` (``"rdp"``, ``"pld"``) or the
    inverse of the paper's closed form (``"closed_form"``, the largest of the three) and
    :math:`\Delta` from :func:`correlation_sensitivity`.

    Parameters
    ----------
    epsilon : float > 0
    delta : float in (0, 1)
    releases : int >= 1
        Planned number of releases :math:`T_j` of this client.
    mu, n, neighbouring
        As in :func:`correlation_sensitivity`.
    accountant : {"rdp", "pld", "closed_form"}
    """
    _check_mu(mu)
    _check_n(n)
    _check_relation(neighbouring)
    check_choice("accountant", accountant, CALIBRATION_ACCOUNTANTS)
    releases = check_int("releases", releases, low=1)
    if accountant == CLOSED_FORM:
        epsilon = check_real("epsilon", epsilon, low=0.0, low_open=True, allow_inf=True)
        delta = check_real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        z = (
            0.0
            if math.isinf(epsilon)
            else closed_form_noise_multiplier(epsilon, delta, int(releases))
        )
    else:
        z = calibrate_noise_multiplier(epsilon, delta, int(releases), accountant)
    return float(z) * correlation_sensitivity(mu, n, neighbouring)


# ---------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------
def _module_device(encoder: Any, fallback: torch.device) -> torch.device:
    if isinstance(encoder, nn.Module):
        for p in encoder.parameters():
            return p.device
        for b in encoder.buffers():
            return b.device
    return fallback


def _encoder_dtype(encoder: Any) -> torch.dtype | None:
    if isinstance(encoder, nn.Module):
        for p in encoder.parameters():
            if p.is_floating_point():
                return p.dtype
    return None


def batch_dependence(
    encoder: Callable[[Tensor], Tensor], images: Tensor, rows: int = PROBE_ROWS
) -> float:
    r"""How much an encoder's output for a sample moves when the *other* samples of its
    batch change (0 for a per-sample network).

    The first ``rows`` samples :math:`P` are encoded in two batches,
    :math:`[P; 0]` and :math:`[P; Q]` with :math:`Q = 1 - 2P` reversed (companions that
    differ from :math:`P` and from zero), and the largest absolute difference of the
    :math:`P` rows is returned relative to :math:`1 + \max|z|`.  Call it in the mode the
    release uses (``eval``) and without gradients.
    """
    p = images[: max(1, min(rows, images.shape[0]))]
    if p.is_floating_point():
        q = 1.0 - 2.0 * torch.flip(p, dims=[0])
    else:
        q = torch.flip(p, dims=[0]) // 2 + 1
    za = encoder(torch.cat([p, torch.zeros_like(p)]))
    zb = encoder(torch.cat([p, q]))
    if not isinstance(za, Tensor) or not isinstance(zb, Tensor) or za.shape != zb.shape:
        raise ValueError(
            f"encoder must return a tensor of one row per sample, got "
            f"{getattr(za, 'shape', type(za).__name__)}"
        )
    # total on its domain: a non-finite value counts as 0 on both sides (raising here
    # would turn the node's first rows into an oracle for whoever chose the weights)
    a = torch.nan_to_num(za[: p.shape[0]].to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    b = torch.nan_to_num(zb[: p.shape[0]].to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    scale = 1.0 + float(torch.maximum(a.abs().max(), b.abs().max()))
    return float((a - b).abs().max()) / scale


def dp_correlation(
    encoder: Callable[[Tensor], Tensor] | nn.Module,
    images: Tensor,
    augment: Callable[[Tensor, torch.Generator], Tensor] | None,
    n_views: int,
    mu: float,
    sigma: float,
    generator: torch.Generator | None,
    noise_rng: np.random.Generator | Any,
    batch_size: int = 512,
    *,
    device: str | torch.device | None = None,
    stats: dict[str, float] | None = None,
    vectorisation: str = "isometric",
    check_independence: bool | None = None,
) -> np.ndarray:
    r"""DP-CalR (paper Algorithm 2): :math:`\tilde R_j`, the noised mean of clipped :math:`zz^\top`.

    Parameters
    ----------
    encoder : nn.Module or callable
        Maps a batch of images ``(b, ...)`` to representations ``(b, d)`` (FedSC: the
        projector output).  A module is put in ``eval()`` mode for the pass and every
        submodule's previous mode restored afterwards; no copy is made.
    images : Tensor, shape (n, ...)
        The client's (un-augmented) samples.
    augment : callable or None
        ``augment(batch, generator) -> batch`` drawing independent parameters per row;
        called once per batch on the ``n_views`` stacked copies of it.  ``None``: the
        views are the images themselves.
    n_views : int
        :math:`V`, views per sample.
    mu : float
        Rows of :math:`z` are clipped to norm :math:`\sqrt{\mu}`.
    sigma : float
        Noise standard deviation (0: no noise, no privacy).  Calibrate it with
        :func:`calibrate_correlation_sigma` and report the release in the reply
        (:func:`fedspectral.fed.releases.release_config`).
    generator : torch.Generator or None
        Randomness of the augmentations.
    noise_rng : numpy.random.Generator, SecureNoise or "secure"
        Noise source (:mod:`fedspectral.privacy.noise`): seeded numpy in experiments
        and simulations; the secure source (OpenDP, OS entropy, floating-point safe)
        on a device or Flower node.
    batch_size : int
        Samples per forward pass; each pass processes ``n_views * batch_size`` images.
    device : str or torch.device, optional
        Where to run the encoder (default: the module's parameters' device).
    stats : dict, optional
        If given, filled with ``clip_fraction`` (share of the :math:`nV` representations
        that were clipped), ``nonfinite_fraction`` (share with a non-finite entry, replaced
        by the zero row: the release is total), ``n``, ``n_views``, ``sigma`` and
        ``seconds``.
    vectorisation : {"isometric", "upper"}, default "isometric"
        Which :math:`d(d+1)/2`-vector gets iid :math:`N(0,\sigma^2)` noise (module
        docstring); the returned matrix is already un-packed: off-diagonal noise
        variance :math:`\sigma^2/2` (isometric) or :math:`\sigma^2` (upper).
    check_independence : bool, optional
        Probe the encoder for per-sample independence (:func:`batch_dependence`) and
        refuse with ``ValueError`` an encoder whose outputs move with the rest of the
        batch.  Default: whenever ``sigma > 0`` (a private release), since the
        sensitivity needs it.  The probe draws no random numbers.

    Images are cast to the encoder's floating dtype; an ``augment`` must return
    ``n_views`` rows per sample.

    Returns
    -------
    numpy.ndarray, shape (d, d), float64, symmetric
        :math:`\frac{1}{nV}\sum\check z\check z^\top + E`.  The sum is accumulated in
        float64 (clipping included) in inference mode.
    """
    # -- validation before any work -------------------------------------------------
    n_views, noise_src, batch_size = _check_release_args(
        encoder,
        images,
        augment,
        n_views,
        mu,
        sigma,
        generator,
        noise_rng,
        batch_size,
        vectorisation,
    )
    if check_independence is None:
        check_independence = float(sigma) > 0
    _check_n(int(images.shape[0]))

    t0 = time.perf_counter()
    n, v = int(images.shape[0]), int(n_views)
    dev = torch.device(device) if device is not None else _module_device(encoder, images.device)
    modes = [(m, m.training) for m in encoder.modules()] if isinstance(encoder, nn.Module) else []
    if isinstance(encoder, nn.Module):
        encoder.eval()
    enc_dtype = _encoder_dtype(encoder)
    try:
        with torch.inference_mode():
            probe = (
                _probe_independence(encoder, images, dev, enc_dtype) if check_independence else {}
            )
            acc, clipped, nonfinite = _clipped_moment(
                encoder, images, augment, v, mu, generator, batch_size, dev, enc_dtype
            )
    finally:
        for m, was_training in modes:
            m.training = was_training
    r = acc.cpu().numpy() / (n * v)
    r = 0.5 * (r + r.T)  # exact symmetry (the float64 product is symmetric up to rounding)
    if sigma > 0:
        r = add_symmetric_gaussian(r, float(sigma), noise_src, vectorisation=vectorisation)
    if stats is not None:
        stats.update(
            clip_fraction=clipped / (n * v),
            nonfinite_fraction=nonfinite / (n * v),
            n=n,
            n_views=v,
            sigma=float(sigma),
            seconds=time.perf_counter() - t0,
            **probe,
        )
    return r


def _check_release_args(
    encoder: Any,
    images: Any,
    augment: Any,
    n_views: Any,
    mu: Any,
    sigma: Any,
    generator: Any,
    noise_rng: Any,
    batch_size: Any,
    vectorisation: Any,
) -> tuple[int, Any, int]:
    """:func:`dp_correlation`'s arguments checked: ``(n_views, noise source, batch_size)``."""
    if not callable(encoder):
        raise TypeError(f"encoder must be callable, got {type(encoder).__name__}")
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.ndim < 2 or images.shape[0] == 0:
        raise ValueError(
            f"images must be a non-empty batch (n, ...), got shape {tuple(images.shape)}"
        )
    if augment is not None and not callable(augment):
        raise TypeError(f"augment must be callable or None, got {type(augment).__name__}")
    n_views = check_int("n_views", n_views, low=1)
    _check_mu(mu)
    _check_sigma(sigma)
    _check_vectorisation(vectorisation)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    try:
        noise_src = as_noise_source(noise_rng)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"noise_rng: {exc}") from None
    batch_size = check_int("batch_size", batch_size, low=1)
    return n_views, noise_src, batch_size


def _probe_independence(
    encoder: Callable[[Tensor], Tensor],
    images: Tensor,
    dev: torch.device,
    enc_dtype: torch.dtype | None,
) -> dict[str, float]:
    """:func:`batch_dependence` on the first rows; ``ValueError`` above :data:`PROBE_TOL`."""
    tp = time.perf_counter()
    xp = images[:PROBE_ROWS].to(dev)
    if enc_dtype is not None and xp.is_floating_point():
        xp = xp.to(enc_dtype)
    dep = batch_dependence(encoder, xp)
    probe = {"probe_seconds": time.perf_counter() - tp, "batch_dependence": dep}
    if dep > PROBE_TOL:
        raise ValueError(
            f"the encoder's output for a sample changes by {dep:.3g} (relative) "
            f"when the other samples of its batch change: it normalises with "
            f"batch statistics (e.g. BatchNorm without running statistics in the "
            f"backbone or projector), so DP-CalR's per-sample sensitivity does "
            f"not hold; use group, batch_running or no normalisation"
        )
    return probe


#: at most this many views go through the encoder in one forward pass.  Smaller passes
#: fit a CPU's caches better: for a width-8 small CNN (an earlier configs/fmnist_fedsc.yaml)
#: one client's 600 views took 61-63 ms in passes of 256 against 80-103 ms in passes of 512
#: in three runs of benchmarks/fed_perf.py, and 68 against 60 ms in a fourth, so the gain
#: is not settled (at width 4 both take 19 ms).  An encoder that treats every sample
#: alone gives the same output, bit for bit, whatever the pass size (pinned by
#: tests/fed/test_correlation.py)
FORWARD_ROWS = 256


def _per_sample(encoder: Any) -> bool:
    """No module of ``encoder`` normalises with the statistics of its batch (BatchNorm
    without running statistics): then splitting a pass cannot change its output."""
    if not isinstance(encoder, nn.Module):
        return False
    return not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.track_running_stats
        for m in encoder.modules()
    )


def _forward(encoder: Callable[[Tensor], Tensor], views: Tensor, rows: int | None) -> Any:
    """``encoder(views)``, in passes of at most ``rows`` rows (``None``: one pass)."""
    if rows is None or views.shape[0] <= rows:
        return encoder(views)
    parts = [encoder(views[i : i + rows]) for i in range(0, views.shape[0], rows)]
    bad = next((p for p in parts if not isinstance(p, Tensor)), None)
    return bad if bad is not None else torch.cat(parts)  # the caller checks the shape


def _clipped_moment(
    encoder: Callable[[Tensor], Tensor],
    images: Tensor,
    augment: Any,
    v: int,
    mu: float,
    generator: torch.Generator | None,
    batch_size: int,
    dev: torch.device,
    enc_dtype: torch.dtype | None,
) -> tuple[Tensor, int, int]:
    """``(sum of the clipped z z^T in float64, number of clipped rows, number of rows with
    a non-finite entry, replaced by zero)`` over ``v`` views
    of every image, ``batch_size`` images (``v * batch_size`` views) per augmentation
    call, their encoder passes split at :data:`FORWARD_ROWS` views for a per-sample
    encoder."""
    n = int(images.shape[0])
    acc: Tensor | None = None
    clipped = nonfinite = 0
    rows = FORWARD_ROWS if _per_sample(encoder) else None
    for start in range(0, n, batch_size):
        xb = images[start : start + batch_size].to(dev, non_blocking=True)
        if enc_dtype is not None and xb.is_floating_point() and xb.dtype != enc_dtype:
            xb = xb.to(enc_dtype)
        rep = xb.repeat(v, *([1] * (xb.ndim - 1))) if v > 1 else xb
        if augment is not None:
            rep = augment(rep, generator)
            if not isinstance(rep, Tensor) or rep.shape[0] != xb.shape[0] * v:
                raise ValueError(
                    f"augment must return one row per input row ({xb.shape[0] * v} "
                    f"= {v} views x {xb.shape[0]} samples), got "
                    f"{getattr(rep, 'shape', type(rep).__name__)}"
                )
        z = _forward(encoder, rep, rows)
        if not isinstance(z, Tensor) or z.ndim != 2 or z.shape[0] != rep.shape[0]:
            raise ValueError(
                f"encoder must return a ({rep.shape[0]}, d) tensor, got "
                f"{getattr(z, 'shape', type(z).__name__)}"
            )
        z64 = z.to(torch.float64)
        # total: a row with a non-finite entry becomes the zero row (norm 0 <= sqrt(mu)),
        # a data-independent replacement inside the clipping ball, so the sensitivity
        # holds and the release goes ahead instead of an error that depends on the data
        bad = ~torch.isfinite(z64).all(dim=1)
        if bool(bad.any()):
            nonfinite += int(bad.sum())
            z64 = torch.where(bad[:, None], torch.zeros_like(z64), z64)
        clipped += int((torch.linalg.vector_norm(z64, dim=1) > math.sqrt(mu)).sum())
        z64 = clip_norm(z64, mu)
        part = z64.T @ z64
        acc = part if acc is None else acc.add_(part)
    assert acc is not None
    return acc, clipped, nonfinite
