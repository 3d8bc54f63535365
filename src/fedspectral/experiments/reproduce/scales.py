"""The settings and scales of a reproduction: a Table 2 column or a mechanism tier's
setting (:class:`Setting`), a scale's settings, seeds, base configs and DP tables
(:class:`Scale`, :data:`SCALES`)."""

from __future__ import annotations

from dataclasses import dataclass

from fedspectral.experiments.reproduce.paper import CENTRAL
from fedspectral.experiments.reproduce.tiers import TierSetting


@dataclass(frozen=True)
class Setting:
    """One column of Table 2: a class split and a participation.

    ``prefix`` names the base configs (``<prefix>_<method>.yaml``) and ``paper`` the
    paper's column this setting mirrors (``(dataset, participation)``).
    """

    key: str
    prefix: str
    num_clients: int
    classes_per_client: int
    clients_per_round: int | None
    paper: tuple[str, str]
    #: a tier's setting (:mod:`~fedspectral.experiments.reproduce.tiers`): its split
    #: scheme and overrides; ``None`` for the Table 2 settings
    tier: TierSetting | None = None

    @property
    def full(self) -> bool:
        return self.clients_per_round is None or self.clients_per_round >= self.num_clients

    @property
    def participation(self) -> str:
        k = self.num_clients if self.full else self.clients_per_round
        return f"{k}/{self.num_clients}"

    @property
    def label(self) -> str:
        t = self.tier
        if t is not None and t.scheme == "dirichlet":
            return f"{self.num_clients} clients, Dirichlet({t.dirichlet_alpha:g})"
        steps = "" if t is None or t.local_steps is None else f", {t.local_steps} step(s)/round"
        return f"{self.num_clients}x{self.classes_per_client} cls, {self.participation}{steps}"

    def overrides_for(self, method: str) -> tuple[str, ...]:
        """The tier's overrides of this setting for ``method`` (none for Table 2)."""
        t = self.tier
        if t is None:
            return ()
        extra = (
            t.fedsc_overrides
            if method == "fedsc"
            else t.central_overrides
            if method == CENTRAL
            else ()
        )
        return (*t.overrides, *extra)


@dataclass(frozen=True)
class Scale:
    """A reproduction scale: settings, seeds, base-config names and reductions.

    ``reductions`` are ``key=value`` overrides applied to every base config before
    the grid's own (stated in the report); ``dp`` lists ``(delta, epsilons,
    setting keys)`` of the DP tables.
    """

    name: str
    settings: tuple[Setting, ...]
    seeds: int
    config_patterns: tuple[str, ...]
    reductions: tuple[str, ...] = ()
    dp: tuple[tuple[float, tuple[float, ...], tuple[str, ...]], ...] = ()
    dp_methods: tuple[str, ...] | None = None
    description: str = ""


#: overrides of the CPU base configs applied by every CPU run.  Empty: the configs
#: ``configs/fmnist_*.yaml`` are the protocol chosen on the validation split
#: (docs/fedsc_tuning.md), and the core tier (10 seeds: about 30 min wall with --jobs 2 on
#: two idle cores) fits 90 minutes with them as they are.
CPU_REDUCTIONS: tuple[str, ...] = ()

_CPU_SETTINGS = (
    Setting("10x1-full", "fmnist", 10, 1, None, ("CIFAR-10", "10/10")),
    Setting("10x1-2of10", "fmnist", 10, 1, 2, ("CIFAR-10", "2/10")),
    Setting("5x2-full", "fmnist", 5, 2, None, ("SVHN", "5/5")),
    Setting("5x2-2of5", "fmnist", 5, 2, 2, ("SVHN", "2/5")),
)
_PAPER_SETTINGS = (
    Setting("svhn-5x2-full", "svhn", 5, 2, None, ("SVHN", "5/5")),
    Setting("cifar10-10x1-full", "cifar10", 10, 1, None, ("CIFAR-10", "10/10")),
    Setting("cifar100-20x5-full", "cifar100", 20, 5, None, ("CIFAR-100", "20/20")),
    Setting("svhn-5x2-2of5", "svhn", 5, 2, 2, ("SVHN", "2/5")),
    Setting("cifar10-10x1-2of10", "cifar10", 10, 1, 2, ("CIFAR-10", "2/10")),
    Setting("cifar100-20x5-4of20", "cifar100", 20, 5, 4, ("CIFAR-100", "4/20")),
)
SCALES: dict[str, Scale] = {
    "cpu": Scale(
        "cpu",
        _CPU_SETTINGS,
        3,
        ("{prefix}_{method}.yaml", "{prefix}_fedsc.yaml", "{prefix}.yaml"),
        reductions=CPU_REDUCTIONS,
        dp=((1e-2, (3.0, 6.0), ("10x1-full", "10x1-2of10")), (1e-4, (3.0, 8.0), ("10x1-2of10",))),
        description="Fashion-MNIST on CPU (the CIFAR-10 analogue is 10 clients x 1 class, the "
        "SVHN analogue 5 clients x 2 classes)",
    ),
    "paper": Scale(
        "paper",
        _PAPER_SETTINGS,
        3,
        ("{prefix}_{method}.yaml", "{prefix}_fedsc.yaml", "{prefix}.yaml"),
        dp=(
            (
                1e-2,
                (3.0, 6.0),
                ("svhn-5x2-full", "cifar10-10x1-full", "svhn-5x2-2of5", "cifar10-10x1-2of10"),
            ),
            (1e-2, (6.0, 12.0), ("cifar100-20x5-full", "cifar100-20x5-4of20")),
            (1e-4, (3.0, 8.0), ("svhn-5x2-2of5", "cifar10-10x1-2of10", "cifar100-20x5-4of20")),
        ),
        description="the paper's datasets and models (GPU)",
    ),
    "quick": Scale(
        "quick",
        (Setting("5x2-full", "digits", 5, 2, None, ("SVHN", "5/5")),),
        1,
        ("digits_smoke.yaml",),
        reductions=(
            "method.rounds=2",
            "data.max_train=600",
            "eval.every=1",
            "eval.probe_epochs=30",
        ),
        dp=((1e-2, (3.0,), ("5x2-full",)),),
        description="smoke run: scikit-learn digits (8x8), 2 rounds, 1 seed",
    ),
}
