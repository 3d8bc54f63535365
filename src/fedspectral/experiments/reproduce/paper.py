"""The paper's numbers (the FedSC paper, Jing et al., ICML 2024: Table 2 and the DP tables,
linear evaluation, %), the paper's setup, and the labels of the methods and metrics."""

from __future__ import annotations

import math

#: the pseudo-method of the untrained-network rows (each run's ``initial`` evaluation)
UNTRAINED = "untrained"

#: display order of the methods (the paper's Table 2 order); registered methods not
#: listed here are appended in registry order
METHOD_ORDER = (
    "fedavg_byol",
    "fedavg_sc",
    "fedu",
    "fedema",
    "fedx",
    "fedca",
    "fedsc",
    "central_sc",
)
METHOD_LABELS: dict[str, str] = {
    "fedavg_byol": "FedAvg+BYOL",
    "fedavg_sc": "FedAvg+SC",
    "fedu": "FedU",
    "fedema": "FedEMA",
    "fedx": "FedX",
    "fedca": "FedCA",
    "fedsc": "FedSC",
    "fedsc_stable": "FedSC, stable (tracked cross term, server lr 0.5)",
    "central_sc": "Centralized SC",
    "untrained": "untrained network (initial weights)",
}
CENTRAL = "central_sc"
METRICS: dict[str, str] = {
    "linear_probe": "linear probe on backbone features",
    "knn_backbone": "KNN on backbone features h",
    "knn_projector": "KNN on projector outputs z",
}

# --------------------------------------------------------------------------------------
# the paper's numbers (the FedSC paper: Table 2, the DP tables; linear evaluation, %)
# --------------------------------------------------------------------------------------
_T2_COLS = (
    ("SVHN", "5/5"),
    ("CIFAR-10", "10/10"),
    ("CIFAR-100", "20/20"),
    ("SVHN", "2/5"),
    ("CIFAR-10", "2/10"),
    ("CIFAR-100", "4/20"),
)
_T2_ROWS: dict[str, tuple[tuple[float, float] | None, ...]] = {
    "fedavg_byol": (
        (87.85, 0.49),
        (68.14, 0.51),
        (43.54, 1.12),
        (87.10, 0.79),
        (65.28, 0.83),
        (38.77, 1.04),
    ),
    "fedavg_sc": (
        (90.52, 0.42),
        (77.82, 0.82),
        (56.24, 0.19),
        (89.89, 0.94),
        (75.36, 0.36),
        (42.95, 0.52),
    ),
    "fedu": (
        (87.92, 0.31),
        (68.39, 0.69),
        (43.81, 0.98),
        (87.40, 0.75),
        (65.52, 0.51),
        (39.11, 0.92),
    ),
    "fedema": (
        (91.87, 0.30),
        (68.78, 0.25),
        (44.18, 0.73),
        (88.97, 0.82),
        (65.93, 0.63),
        (39.78, 1.20),
    ),
    "fedx": (
        (74.60, 0.72),
        (59.17, 0.93),
        (39.70, 0.39),
        (73.34, 0.88),
        (57.42, 0.91),
        (33.54, 0.67),
    ),
    "fedca": (
        (89.92, 0.14),
        (78.22, 0.22),
        (52.35, 0.09),
        (89.28, 0.44),
        (77.22, 0.65),
        (51.58, 0.18),
    ),
    "fedsc": (
        (91.78, 0.49),
        (80.06, 0.35),
        (58.35, 0.15),
        (91.03, 0.58),
        (77.12, 0.44),
        (56.64, 0.65),
    ),
    "central_sc": ((93.17, 0.13), (90.21, 0.08), (64.32, 0.05), None, None, None),
}
#: ``PAPER_TABLE2[method][(dataset, participation)] = (mean, std)`` (paper Table 2)
PAPER_TABLE2: dict[str, dict[tuple[str, str], tuple[float, float]]] = {
    m: {c: v for c, v in zip(_T2_COLS, row, strict=True) if v is not None}
    for m, row in _T2_ROWS.items()
}
#: ``PAPER_DP[delta][epsilon][(dataset, participation)] = (mean, std)`` for FedSC with
#: DP-CalR (paper Tables 3, 4 and 5); ``epsilon = inf`` is the Table 2 FedSC number
PAPER_DP: dict[float, dict[float, dict[tuple[str, str], tuple[float, float]]]] = {
    1e-2: {
        3.0: {
            ("SVHN", "5/5"): (90.90, 0.52),
            ("CIFAR-10", "10/10"): (79.21, 0.59),
            ("SVHN", "2/5"): (90.00, 0.72),
            ("CIFAR-10", "2/10"): (76.97, 0.64),
        },
        6.0: {
            ("SVHN", "5/5"): (91.32, 0.87),
            ("CIFAR-10", "10/10"): (79.42, 0.63),
            ("SVHN", "2/5"): (90.12, 0.61),
            ("CIFAR-10", "2/10"): (77.08, 0.46),
            ("CIFAR-100", "20/20"): (57.10, 0.82),
            ("CIFAR-100", "4/20"): (54.87, 0.62),
        },
        12.0: {("CIFAR-100", "20/20"): (57.63, 0.57), ("CIFAR-100", "4/20"): (55.76, 0.58)},
    },
    1e-4: {
        3.0: {
            ("SVHN", "2/5"): (89.95, 0.81),
            ("CIFAR-10", "2/10"): (76.75, 0.62),
            ("CIFAR-100", "4/20"): (54.22, 0.72),
        },
        8.0: {
            ("SVHN", "2/5"): (90.12, 0.61),
            ("CIFAR-10", "2/10"): (77.08, 0.46),
            ("CIFAR-100", "4/20"): (54.87, 0.62),
        },
    },
}
for _d in PAPER_DP.values():
    _d[math.inf] = dict(PAPER_TABLE2["fedsc"])

#: the paper's setup (paper Sec. 6 and appendix; where the official code differs, see
#: docs/fedsc.md §6, "Deviations from the paper and the official code")
PAPER_SETUP: dict[str, str] = {
    "data": "SVHN (5 clients x 2 classes, |D_j| = 10,000), CIFAR-10 (10 x 1, 5,000), "
    "CIFAR-100 (20 x 5, 2,500); 32x32 colour images",
    "model": "ResNet-20 (Fixup, widened x8, 512-d) for SVHN and CIFAR-10, ResNet-50 for "
    "CIFAR-100; projector 512-1024-512",
    "training": "T = 200 rounds, E = 5 local epochs, B = 512 (256 for CIFAR-100), V = 2 "
    "views for training, 5 for sharing, SGD lr 0.03 with cosine decay, "
    "mu = 4 (CIFAR) / 2 (SVHN)",
    "DP": "sharing from round 101 or 151 (some every second round); sigma 0.0018-0.04 "
    "(paper Table 5)",
    "evaluation": "linear probe (Adam 3e-3, 200 epochs) on the full test split",
}
