r"""``fedspectral pca-bench``: the locally private PCA experiments of the LDP-PCA paper.

Reproduces, on the paper's synthetic models and on an offline real-data analogue,
the experiments of Wang & Xu (IJCAI 2019, Section 6) with, on every figure,
non-private PCA (the limit), central-model Gaussian PCA, OpenDP's central ε-DP
PCA and Algorithm 1 with the paper's and with the correct calibration -- the latter
both with the paper's plain upper-triangle message (``ldp_correct``) and with the
isometric one (``ldp_isometric``, the library's default: same σ, same ε, off-diagonal
noise variance halved), side by side on the same data and the same noise draws.

Experiments (``--only``)
------------------------
``fig1``
    Seed Figure 1: error :math:`\|\hat V\hat V^\top - VV^\top\|_F` against ``n`` on
    the spiked model :math:`\Sigma = (\lambda VV^\top + I)/(5p(\lambda+1))`, λ = 1,
    δ = 1e-4, for ``k`` x ``ε`` at p = 40, and for p ∈ {20, 40, 80} at one (k, ε).
    Up to ``n_rows_max`` (1e5) the users' rows are sampled and every method runs on
    them; beyond it :math:`S = X^\top X/n` is drawn directly from its Wishart
    distribution :math:`W_p(\Sigma, n)/n` (exactly the distribution of the
    second moment of ``n`` Gaussian rows) so that ``n`` can reach 1e10 -- which is
    needed to see Algorithm 1's error fall at all: in this model the eigen-gap is
    :math:`\lambda/(5p(\lambda+1))` = 1/400 at p = 40, far below the noise of
    :math:`\hat S` at the paper's n = 1e5.  No row of this model exceeds norm 1 in
    practice (largest observed norm is reported), so clipping never acts and the
    Wishart draw is exact.  Algorithm 1 runs in the aggregate-noise mode
    (one symmetric :math:`N(0, n\sigma_1^2)` draw for the sum of the users'
    noise: the same distribution of :math:`\hat S` as per-user noise).
    OpenDP needs rows, so it runs only up to ``opendp_max_n`` and with
    ``opendp_repeats`` repeats (its noise cannot be seeded).
``tables``
    (Correct calibration with the library's default isometric message; the central
    Gaussian baseline everywhere releases its matrix with the isometric packing too.)
    Seed Tables 1-2: row-sparse model, k = 10, n = 2000, p = 400,
    s ∈ {15, 20, 40, 80}, ε ∈ {0.5, 1, 2, ∞}: Algorithm 2
    (:class:`~fedspectral.pca.LocalDPSparsePCA`, λ = "auto") against Algorithm 1
    on the same data *and the same noise*; also at ``sparse_n_large`` (Wishart
    draw of :math:`S`), where the signal is above the noise.  At ε = ∞, λ = "auto"
    would be 0 (Algorithm 1); there we use the non-private rule
    :math:`\lambda = c\,\bar S_{jj}\sqrt{\log p/n}` (:math:`\bar S_{jj}` the mean
    diagonal of :math:`S`, c = :data:`~fedspectral.pca.LAM_AUTO_CONSTANT`).
``real``
    Fashion-MNIST average-pooled to 7 x 7 = 49 features, rows of norm 1
    (:func:`~fedspectral.pca.real_data.load_fashion_mnist_pooled`), n = 60 000:
    error against ε of the private estimates to the non-private top-k subspace of
    the same data (uncentred for our methods and OpenDP with origin 0; centred for
    OpenDP's default PCA, which centres the data).

Outputs (all atomic, under ``--out``): ``pca_bench.json`` (config, versions,
timings, aggregated results, trend checks), one CSV of raw errors per experiment,
PNG figures and ``README_table.md``.  A short table is printed to stdout.

The package, one concern per module: :mod:`~.config` (:class:`BenchConfig`, its
validation, labels), :mod:`~.tasks` (one data set per task, every method on it; running
them), :mod:`~.analysis` (aggregation and trend checks), :mod:`~.plots`, :mod:`~.tables`
(``README_table.md``, the stdout summary) and :mod:`~.cli` (options, run, write,
``--reanalyse``).
"""

from __future__ import annotations

from fedspectral.experiments.pca_bench.analysis import (
    RANDOM_FRACTION,
    RESOLVED_FRACTION,
    analyse_fig1,
    analyse_real,
    analyse_tables,
    isometric_ratio_summary,
)
from fedspectral.experiments.pca_bench.cli import (
    add_arguments,
    config_from_args,
    config_from_payload,
    reanalyse,
    run,
    run_bench,
    write_outputs,
)
from fedspectral.experiments.pca_bench.config import (
    COLORS,
    EXPERIMENTS,
    INF,
    LABELS,
    BenchConfig,
    validate,
)
from fedspectral.experiments.pca_bench.tables import markdown_tables, summary_text
from fedspectral.experiments.pca_bench.tasks import OPENDP_AMAX

__all__ = [
    "COLORS",
    "EXPERIMENTS",
    "INF",
    "LABELS",
    "OPENDP_AMAX",
    "RANDOM_FRACTION",
    "RESOLVED_FRACTION",
    "BenchConfig",
    "add_arguments",
    "analyse_fig1",
    "analyse_real",
    "analyse_tables",
    "config_from_args",
    "config_from_payload",
    "isometric_ratio_summary",
    "markdown_tables",
    "reanalyse",
    "run",
    "run_bench",
    "summary_text",
    "validate",
    "write_outputs",
]
