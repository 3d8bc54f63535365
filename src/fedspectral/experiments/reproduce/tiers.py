r"""The tiers that test FedSC's mechanism where its theory says it works (issue 45).

The core tier runs the paper's split (10 clients x 1 class) at the CPU protocol's local
epoch, where every federated method drifts far from the round's start.  Seed 001's
Eq. 7 says more: with :math:`\alpha_j = q_j` and a fresh :math:`\tilde R_{-j}`,
:math:`\sum_j q_j\nabla\mathcal L_j` *is* the global gradient at the round's start, and
the error grows with the local drift within a round.  These tiers put that to the test
with paired seeds:

``lowdrift``
    10 x 1 class, **one local step a round** (each client's 300 images as one batch),
    :data:`LOWDRIFT_ROUNDS` rounds; FedSC with :math:`\alpha_j = q_j` (and, planned last,
    its stable variant), FedAvg+SC at the same steps, centralized SC at the same number
    of gradient steps with the union batch (3 000 images: its fair twin), and the
    untrained network (every run's initial weights).
``hetero``
    the heterogeneity most FL papers use: Dirichlet :math:`\alpha = 0.1` and
    :math:`0.5` label splits over 10 clients and the paper's 5 x 2 classes, at the
    protocol's local epoch; FedSC (the protocol's :math:`\alpha` schedule), FedAvg+SC
    and centralized SC on the pooled data; weights averaged by :math:`|D_j|` (the
    clients are unequal).
``drift``
    FedSC (:math:`\alpha_j = q_j`) against FedAvg+SC at 1, 2, 5 local steps a round and
    at the protocol's batch (4 steps), all at the same total number of gradient steps
    (:data:`LOWDRIFT_ROUNDS`); the 1-step point is the ``lowdrift`` runs themselves.
``lowdrift-dp``
    FedSC with DP-CalR at :math:`\varepsilon \in \{3, 6\}` in the ``lowdrift`` setting,
    beside its noise-free runs (the same runs as ``lowdrift``'s) and a noise-free
    late-sharing control.

Every tier evaluates on the whole test split (10 000 images: a KNN accuracy's sampling
error of about :math:`\pm 0.5` points per run, and the same images for every method of a
seed).  The tiers share one ``runs/`` folder (``--out``, default
``results/reproduce/cpu``), so a run two tiers need trains once; each tier's report goes
to ``<out>/<tier>/``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: rounds of the low-drift tier (one gradient step each): chosen on the validation split
#: (docs/results/fedsc_tiers/README.md, "Choosing the rounds")
LOWDRIFT_ROUNDS = 400
#: images a client holds in the CPU protocol (``data.max_train`` 3 000 over 10 clients)
CLIENT_IMAGES = 300
#: evaluation on the whole test split (Fashion-MNIST: 10 000 images)
FULL_TEST = ("eval.test_size=10000",)
#: one gradient step a round: the client's whole data as one batch
ONE_STEP = (
    f"optim.batch_size={CLIENT_IMAGES}",
    f"method.rounds={LOWDRIFT_ROUNDS}",
    "method.weighted=true",
    "eval.every=25",
    *FULL_TEST,
)
#: FedSC's exact gradient alignment (paper Eq. 7)
ALPHA_Q = ("method.params.alpha=q",)
#: the centralized twin of a one-step round: the union of the clients' batches
CENTRAL_UNION = (f"optim.batch_size={10 * CLIENT_IMAGES}",)


@dataclass(frozen=True)
class TierSetting:
    """A setting of a tier: its key and label, the split, and the overrides it applies
    (to every method, to FedSC's rows only, to the centralized run only)."""

    key: str
    num_clients: int
    classes_per_client: int
    scheme: str = "class"
    dirichlet_alpha: float | None = None
    overrides: tuple[str, ...] = ()
    fedsc_overrides: tuple[str, ...] = ()
    central_overrides: tuple[str, ...] = ()
    #: local gradient steps a round (the drift curve's x axis; ``None``: not fixed)
    local_steps: int | None = None


@dataclass(frozen=True)
class Tier:
    """A tier: its settings, methods, default seeds, whether FedSC's stable row runs,
    its DP tables ``(delta, epsilons, setting keys)`` and the paired comparisons its
    report decides (``(a, b)`` row names: ``a - b``)."""

    name: str
    settings: tuple[TierSetting, ...]
    methods: tuple[str, ...]
    seeds: int
    stable: bool = False
    dp: tuple[tuple[float, tuple[float, ...], tuple[str, ...]], ...] = ()
    comparisons: tuple[tuple[str, str], ...] = ()
    description: str = ""


def _steps(k: int) -> TierSetting:
    """10 x 1 class at ``k`` local steps a round, :data:`LOWDRIFT_ROUNDS` steps in all."""
    batch = CLIENT_IMAGES // k
    return TierSetting(
        f"10x1-steps{k}",
        10,
        1,
        overrides=(
            f"optim.batch_size={batch}",
            f"method.rounds={LOWDRIFT_ROUNDS // k}",
            "method.weighted=true",
            f"eval.every={max(1, 25 // k)}",
            *FULL_TEST,
        ),
        fedsc_overrides=ALPHA_Q,
        local_steps=k,
    )


LOWDRIFT = TierSetting(
    "10x1-lowdrift",
    10,
    1,
    overrides=ONE_STEP,
    fedsc_overrides=ALPHA_Q,
    central_overrides=CENTRAL_UNION,
    local_steps=1,
)
#: the protocol's batch (64): 4 local steps a round over 300 images, 100 rounds
PROTOCOL_STEPS = TierSetting(
    "10x1-protocol",
    10,
    1,
    overrides=(
        f"method.rounds={LOWDRIFT_ROUNDS // 4}",
        "method.weighted=true",
        "eval.every=10",
        *FULL_TEST,
    ),
    fedsc_overrides=ALPHA_Q,
    local_steps=4,
)
_HETERO = ("method.weighted=true", *FULL_TEST)

FEDSC_VS = (
    ("fedsc", "fedavg_sc"),
    ("fedsc", "untrained"),
    ("fedavg_sc", "untrained"),
    ("central_sc", "fedsc"),
    ("central_sc", "untrained"),
)

TIER_DEFS: dict[str, Tier] = {
    "lowdrift": Tier(
        "lowdrift",
        (LOWDRIFT,),
        ("central_sc", "fedavg_sc", "fedsc"),
        10,
        stable=True,
        comparisons=(*FEDSC_VS, ("fedsc_stable", "fedavg_sc"), ("fedsc_stable", "fedsc")),
        description="10 clients x 1 class, one local step a round (the client's 300 images "
        "as one batch), FedSC with alpha_j = q_j",
    ),
    "hetero": Tier(
        "hetero",
        (
            TierSetting("dir0.1", 10, 1, "dirichlet", 0.1, _HETERO),
            TierSetting("dir0.5", 10, 1, "dirichlet", 0.5, _HETERO),
            TierSetting("5x2", 5, 2, overrides=_HETERO),
        ),
        ("central_sc", "fedavg_sc", "fedsc"),
        10,
        comparisons=FEDSC_VS,
        description="label heterogeneity at the protocol's local epoch: Dirichlet(0.1) and "
        "Dirichlet(0.5) over 10 clients, 5 clients x 2 classes; size-weighted averaging",
    ),
    "drift": Tier(
        "drift",
        (LOWDRIFT, _steps(2), _steps(5), PROTOCOL_STEPS),
        ("fedavg_sc", "fedsc"),
        5,
        comparisons=(("fedsc", "fedavg_sc"), ("fedsc", "untrained"), ("fedavg_sc", "untrained")),
        description="10 clients x 1 class at 1, 2, 5 and 4 (the protocol's batch) local steps "
        f"a round, {LOWDRIFT_ROUNDS} gradient steps in all, FedSC with alpha_j = q_j",
    ),
    "lowdrift-dp": Tier(
        "lowdrift-dp",
        (LOWDRIFT,),
        ("fedavg_sc", "fedsc"),
        10,
        dp=((1e-5, (3.0, 6.0), (LOWDRIFT.key,)),),
        comparisons=(("fedsc", "fedavg_sc"), ("fedsc", "untrained")),
        description="the low-drift setting with DP-CalR at epsilon 3 and 6 (delta 1e-5, the "
        "CPU configs' delta), sharing from the middle of training as in the paper",
    ),
}
