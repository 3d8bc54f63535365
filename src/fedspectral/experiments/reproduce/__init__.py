r"""``fedspectral reproduce fedsc``: regenerate the FedSC paper's tables and figure.

::

    fedspectral reproduce fedsc [--scale cpu|paper] [--tier TIER] [--quick]
                                [--seeds N] [--methods a,b,...] [--jobs 1|2] [--out DIR]
                                [--configs DIR] [--set KEY=VALUE ...]
                                [--dry-run] [--report-only] [--quiet]

Seed 001 (Jing et al., ICML 2024) makes comparative claims; this command runs the
grid that tests them and writes, under ``results/reproduce/<scale>/``:

``runs/<run-name>/``
    one folder per run, exactly what ``fedspectral train`` writes
    (``results.json``, ``rounds.csv``, ``config.yaml``, ``convergence.png``,
    ``checkpoint.pt``) plus ``planned.yaml`` (the config as planned).
``REPORT.md``
    the tables with the paper's numbers beside ours, the scale difference, the
    privacy accounting of every DP run and the paper's observations, each
    *computed* from the runs with the rule used to decide it.
``summary.json``, ``table2.csv``, ``dp.csv``, ``convergence.png``
    the same numbers as data, and the Figure 2 analogue (KNN vs round, FedSC vs
    FedAvg+SC, mean ± std over seeds) drawn from the results files.

The grid (:func:`build_plan`)
-----------------------------
*Tiers.* ``--tier core`` (the default) runs what the paper's central claim needs:
centralized SC, FedAvg+SC and FedSC on 10 clients x 1 class at full and 2/10
participation, 10 seeds (``--seeds 3`` for a quick run; the full tier: 3), no DP;
every run also evaluates its initial weights
(``eval.initial``), which gives the *untrained network* row of the same architecture
and seed.  ``--tier full`` adds every other registered method, the 5 x 2 settings
and the DP tables described below.  The *mechanism tiers* (``--tier lowdrift``,
``hetero``, ``drift``, ``lowdrift-dp``; CPU only) test FedSC where its theory says it
works: one local step a round, label heterogeneity, local steps at equal total steps,
DP-CalR at the decided point (:mod:`~.tiers`; docs/reproduce.md, "Mechanism tiers").

*Table 2 analogue*: every registered method (:data:`fedspectral.fed.methods.METHODS`;
none is skipped unless ``--methods`` leaves it out, and the report says so) on
each *setting* -- a class split (``J`` clients x ``c`` classes) and a
participation (all, or ``K`` of ``J`` per round) -- times the seeds.  Centralized
SC pools all clients' data, so it runs once per dataset and seed and is shown in
the full-participation columns.

*DP tables*: FedSC with DP-CalR at :math:`\varepsilon \in \{3, 6\}`,
:math:`\delta = 10^{-2}` and :math:`\varepsilon \in \{3, 8\}`, :math:`\delta = 10^{-4}`
(the :math:`\varepsilon=\infty` row *is* the Table 2 FedSC run, as in the paper).
Correlation sharing starts at the middle of training (round :math:`\lfloor T/2\rfloor+1`,
the paper's "t > 100" of 200) and :math:`\sigma_j` is calibrated by the privacy core
(:func:`fedspectral.fed.correlation.calibrate_correlation_sigma`, RDP) for the
*worst case* number of releases: one per sharing round (``dp.plan: worst_case``),
which bounds what any client can release whatever the client sampling (under
partial participation a client releases only when sampled, or in the first
sharing round).  The ε actually spent is read from each run's ledger, by RDP and
by PLD.

Scales
------
``cpu``
    Fashion-MNIST on this machine: the CPU configs ``configs/fmnist_*.yaml``
    (loaded, then only what the grid varies is overridden).  They hold the CPU
    protocol chosen on the validation split (docs/fedsc_tuning.md) as they are, so
    :data:`CPU_REDUCTIONS` is empty; the core tier fits the 90-minute budget on
    two cores with ``--jobs 2``.  10 clients x 1 class (the CIFAR-10 analogue) with
    10/10 and 2/10 participation, 5 clients x 2 classes (the SVHN analogue) with
    5/5 and 2/5.
``paper``
    the paper-scale configs ``configs/{svhn,cifar10,cifar100}_*.yaml`` (GPU):
    SVHN 5 x 2, CIFAR-10 10 x 1, CIFAR-100 20 x 5 with the paper's participations.
``--quick``
    a smoke run (< 5 minutes on two cores): scikit-learn's digits, 1 seed, 2
    rounds, every method on one setting and one DP setting.

Base configs are looked up in ``--configs`` (default ``./configs``, else the
repository's) as ``<prefix>_<method>.yaml``, then ``<prefix>_fedsc.yaml``, then
``<prefix>.yaml``; when a method borrows another method's file, only the
``method.params`` keys it declares are kept, and the BYOL-family/FedX/FedCA
baselines train on one pair of views per sample (``method.views: 1``; the
paper-scale FedSC files use ``V = 2``).

Resumability: a run whose ``results.json`` holds the planned config (same
fingerprint) and all its rounds is not run again; a run with a checkpoint resumes
from it; a folder written by a *different* plan stops the command before any run.

The package, one concern per module: :mod:`~.paper` (the paper's numbers and the
labels), :mod:`~.scales` (settings and scales), :mod:`~.tiers` (the mechanism tiers:
``lowdrift``, ``hetero``, ``drift``, ``lowdrift-dp``), :mod:`~.plan`
(:func:`build_plan`), :mod:`~.costs` (the cost model), :mod:`~.execute` (run status,
:func:`execute_plan`), :mod:`~.summary` (:func:`summarize`, ``summary.json``),
:mod:`~.verdicts` (the verdict rules and the claims' registries), :mod:`~.claims` (each
observation of the paper a registered function), :mod:`~.observations` (the CPU
protocol's own checks), :mod:`~.report` (:func:`write_report`, :func:`describe_plan`),
:mod:`~.tiers_figure` (the tiers' figure), :mod:`~.folder` (where the report goes: never
over a finished report with a mostly pending one) and
:mod:`~.cli` (:func:`add_arguments`, :func:`run`).
"""

from __future__ import annotations

from fedspectral.experiments.reproduce.claims import observations
from fedspectral.experiments.reproduce.cli import add_arguments, run
from fedspectral.experiments.reproduce.costs import (
    COSTS,
    estimate_run_seconds,
    unreduced_estimate_seconds,
)
from fedspectral.experiments.reproduce.execute import execute_plan, run_status
from fedspectral.experiments.reproduce.observations import protocol_observations
from fedspectral.experiments.reproduce.paper import (
    CENTRAL,
    METHOD_LABELS,
    METHOD_ORDER,
    METRICS,
    PAPER_DP,
    PAPER_SETUP,
    PAPER_TABLE2,
    UNTRAINED,
)
from fedspectral.experiments.reproduce.plan import (
    CORE_METHODS,
    EXPERIMENTS,
    GRID_KEYS,
    TIERS,
    Plan,
    RunSpec,
    build_plan,
    resolve_base_config,
)
from fedspectral.experiments.reproduce.report import describe_plan, write_report
from fedspectral.experiments.reproduce.scales import CPU_REDUCTIONS, SCALES, Scale, Setting
from fedspectral.experiments.reproduce.summary import (
    collect_results,
    protocol_summary,
    summarize,
)
from fedspectral.experiments.reproduce.verdicts import RULE

__all__ = [
    "CENTRAL",
    "CORE_METHODS",
    "COSTS",
    "CPU_REDUCTIONS",
    "EXPERIMENTS",
    "GRID_KEYS",
    "METHOD_LABELS",
    "METHOD_ORDER",
    "METRICS",
    "PAPER_DP",
    "PAPER_SETUP",
    "PAPER_TABLE2",
    "RULE",
    "SCALES",
    "TIERS",
    "UNTRAINED",
    "Plan",
    "RunSpec",
    "Scale",
    "Setting",
    "add_arguments",
    "build_plan",
    "collect_results",
    "describe_plan",
    "estimate_run_seconds",
    "execute_plan",
    "observations",
    "protocol_observations",
    "protocol_summary",
    "resolve_base_config",
    "run",
    "run_status",
    "summarize",
    "unreduced_estimate_seconds",
    "write_report",
]
