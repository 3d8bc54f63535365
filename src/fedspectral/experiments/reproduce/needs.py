"""What a paper-scale reproduction needs before it starts, and what it will cost.

``fedspectral reproduce fedsc --scale paper`` trains ResNets on CIFAR-10/100 and SVHN
(:data:`~fedspectral.experiments.reproduce.plan.SCALES`), which this project cannot run
on its 2-core CPU and whose data cannot be fetched on a machine without network.  So the
command states, before any run, what the plan needs (:func:`requirements`: the data
files of every dataset it trains on, in the folder the runs read, and the device of its
configs) and refuses (:func:`check_requirements`) when one is missing, naming the
files, the folder and where to get them; ``--dry-run`` prints the same list without
refusing.

The cost (:func:`gpu_estimate`) is a FLOP count, not a measurement: the forward FLOPs
of one image through the run's network (counted by :class:`torch.utils.flop_counter.
FlopCounterMode` on the meta device: no weight is allocated), times the images each
phase of the run processes (local training: two views per image, forward and backward
counted as three forward passes; FedSC's correlation sharing: its views, forward only;
every KNN evaluation and the probe's features: bank plus evaluation images), divided by
a sustained GPU throughput, ``--gpu-tflops`` (default :data:`GPU_TFLOPS`, an assumption
for an A100/H100-class GPU with TF32 convolutions: no GPU was available to measure it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from fedspectral.config import from_dict
from fedspectral.experiments.preflight import check_device
from fedspectral.experiments.reproduce.costs import (
    EXTRA_WORK,
    _bank_size,
    _client_size,
    _eval_images,
    _training_clients,
)
from fedspectral.experiments.reproduce.plan import Plan, RunSpec

__all__ = [
    "GPU_TFLOPS",
    "Requirement",
    "check_requirements",
    "describe_requirements",
    "forward_flops",
    "gpu_estimate",
    "requirements",
    "run_flops",
]

#: sustained TFLOP/s assumed for the estimate (an A100/H100-class GPU training these
#: convnets in float32 with TF32 convolutions: about a third of its TF32 peak).  An
#: assumption, not a measurement; ``--gpu-tflops`` replaces it.
GPU_TFLOPS = 50.0

#: a backward pass costs about two forward passes
TRAIN_PASSES = 3.0


@dataclass(frozen=True)
class Requirement:
    """One thing the plan needs: ``what`` (e.g. ``"cifar10 train split"``), ``where``
    (a folder or a device), ``ok``, and ``fix`` (what to do when it is not)."""

    what: str
    where: str
    ok: bool
    fix: str = ""


def _splits(cfg: Any) -> tuple[str, ...]:
    return ("train",) if cfg.data.eval_split == "val" else ("train", "test")


def requirements(plan: Plan) -> list[Requirement]:
    """The data splits (per dataset, split and data root) and devices the plan's runs use,
    each checked here without loading an image or touching the GPU's memory."""
    from fedspectral.data import default_root, missing_files  # lazy: pulls in torch

    out: list[Requirement] = []
    seen: set[tuple[Any, ...]] = set()
    for spec in plan.runs:
        d = spec.config.data
        for split in _splits(spec.config):
            key = ("data", d.dataset, split, d.root)
            if key in seen:
                continue
            seen.add(key)
            folder, missing, source = missing_files(d.dataset, split, d.root)
            where = str(folder) if folder is not None else "(none: bundled)"
            root = d.root if d.root is not None else f"{default_root()} ($FEDSPECTRAL_DATA)"
            fix = (
                f"put {', '.join(missing)} into {folder} (from {source}), or point the runs "
                f"at a folder holding them: --set data.root=DIR or FEDSPECTRAL_DATA=DIR "
                f"(data root now {root})"
                if missing
                else ""
            )
            out.append(Requirement(f"{d.dataset} {split} split", where, not missing, fix))
    for device in sorted({spec.config.run.device for spec in plan.runs}):
        try:
            check_device(device)
            ok, fix = True, ""
        except ValueError as exc:
            ok, fix = False, str(exc)
        out.append(Requirement(f"device {device!r} (run.device)", device, ok, fix))
    return out


def check_requirements(plan: Plan) -> None:
    """Raise ``ValueError`` listing every unmet :func:`requirements` (before any run or
    folder is made)."""
    bad = [r for r in requirements(plan) if not r.ok]
    if bad:
        lines = "; ".join(f"{r.what} not usable ({r.where}): {r.fix}" for r in bad)
        raise ValueError(
            f"the {plan.scale.name}-scale plan cannot start here ({len(bad)} unmet "
            f"requirement(s)): {lines}. The data must be on disk before the grid starts "
            "(a download at run time fails on a machine without network); "
            "--dry-run lists what the plan needs"
        )


@cache
def _forward_flops(key: str) -> float:
    import json

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fedspectral.data import dataset_info  # lazy: pulls in torch
    from fedspectral.fed.methods.sc import build_ssl_net  # lazy: pulls in torch and dp-accounting

    d = json.loads(key)
    cfg = from_dict({"data": {"dataset": d["dataset"]}, "model": d["model"]})
    info = dataset_info(d["dataset"])
    with torch.device("meta"):
        net = build_ssl_net(cfg)
        x = torch.zeros(2, info.channels, info.size, info.size)
        with FlopCounterMode(display=False) as counter:
            net(x)
    return counter.get_total_flops() / 2.0


def forward_flops(cfg: Any) -> float:
    """Forward FLOPs of one image through ``cfg``'s network (backbone and projector),
    counted on the meta device (multiply-adds count as two)."""
    import dataclasses
    import json

    model = dataclasses.asdict(cfg.model)
    return _forward_flops(json.dumps({"dataset": cfg.data.dataset, "model": model}, default=str))


def run_flops(spec: RunSpec) -> dict[str, float]:
    """FLOPs of one run by phase (``train``, ``share``, ``eval``) and in all (``total``):
    :func:`forward_flops` times the images each phase processes (module docstring)."""
    cfg = spec.config
    f = forward_flops(cfg)
    J = cfg.partition.num_clients
    K = cfg.method.clients_per_round or J
    T, E = cfg.method.rounds, cfg.method.local_epochs
    nj = _client_size(cfg)
    clients = _training_clients(cfg, spec.method, min(K, J))
    train = T * E * clients * nj * 2 * max(1, cfg.method.views) * TRAIN_PASSES * f
    share = 0.0
    if spec.method == "fedsc":
        # the CPU model's seconds per sharing view, in images: uploads x |D_j| x views
        unit = {"share_view_sample": 1.0}
        share = EXTRA_WORK["fedsc"](cfg, unit, nj) * f
    evals = len([t for t in range(1, T + 1) if t % cfg.eval.every == 0 or t == T])
    evals += 1  # the initial weights (the untrained network's row)
    ev = evals * _eval_images(cfg, nj) * f
    if cfg.eval.linear_probe:
        ev += _bank_size(cfg, nj) * f
    return {"train": train, "share": share, "eval": ev, "total": train + share + ev}


def gpu_estimate(plan: Plan, tflops: float = GPU_TFLOPS) -> dict[str, Any]:
    """The plan's FLOPs and GPU hours at ``tflops`` sustained: per run (``runs``:
    name -> hours), in all (``flops``, ``hours``), and the forward FLOPs per image of
    each network (``per_image``: ``"dataset/backbone"`` -> FLOPs)."""
    if not tflops > 0:
        raise ValueError(f"--gpu-tflops must be > 0, got {tflops!r}")
    runs, per_image, flops = {}, {}, 0.0
    for spec in plan.runs:
        fl = run_flops(spec)["total"]
        flops += fl
        runs[spec.name] = fl / (tflops * 1e12) / 3600.0
        c = spec.config
        per_image[f"{c.data.dataset}/{c.model.backbone}"] = forward_flops(c)
    return {
        "tflops": tflops,
        "flops": flops,
        "hours": flops / (tflops * 1e12) / 3600.0,
        "runs": runs,
        "per_image": per_image,
    }


def describe_requirements(plan: Plan, tflops: float = GPU_TFLOPS) -> str:
    """The text ``--scale paper`` prints before it runs: what the plan needs, each
    item found or missing here, and the GPU estimate."""
    est = gpu_estimate(plan, tflops)
    lines = ["  needs (checked on this machine):"]
    for r in requirements(plan):
        mark = "ok     " if r.ok else "MISSING"
        lines.append(f"    [{mark}] {r.what}: {r.where}")
        if not r.ok:
            lines.append(f"              {r.fix}")
    nets = ", ".join(f"{k} {v / 1e9:.2f} GFLOP" for k, v in sorted(est["per_image"].items()))
    worst = max(est["runs"].items(), key=lambda kv: kv[1]) if est["runs"] else ("-", 0.0)
    lines += [
        f"  forward FLOPs per image: {nets}",
        (
            f"  estimated compute: {est['flops']:.3g} FLOP = {est['hours']:.0f} GPU hours at "
            f"{tflops:g} TFLOP/s sustained (--gpu-tflops; an assumption, not measured here) "
            f"on one GPU; the largest run {worst[1]:.1f} h ({worst[0]})"
        ),
    ]
    return "\n".join(lines)
