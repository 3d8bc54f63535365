"""Augmentation cost against a training step (not a test; run it directly).

    .venv/bin/python benchmarks/augment_perf.py [--threads N]

Times, at batch 128 on 28 x 28 one-channel images (Fashion-MNIST shape), the
SimCLR augmentation of one view and of two views (``views(batch, 2)``), and the
forward + backward pass of SmallCNN + projector on 128 and on 2 x 128 images;
prints the ratios. The 3-channel 32 x 32 case (with full colour jitter) is
timed against ResNet-20 likewise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from fedspectral.data.augment import SimCLRAugment
from fedspectral.models import Projector, SSLNet, build_backbone

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)


def _time(fn, reps: int) -> float:
    fn()
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def bench(channels: int, size: int, backbone: str, reps: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(128, channels, size, size)
    aug = SimCLRAugment(size)
    net = SSLNet(
        build_backbone(backbone, channels, norm="group"),
        Projector(build_backbone(backbone, channels).feature_dim, 512, 128),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(batch: torch.Tensor) -> None:
        opt.zero_grad()
        net(batch).square().mean().backward()
        opt.step()

    x2 = torch.cat([x, x])
    t_aug1 = _time(lambda: aug(x, g), reps)
    t_aug2 = _time(lambda: aug.views(x, 2, g), reps)
    t_step1 = _time(lambda: step(x), reps)
    t_step2 = _time(lambda: step(x2), reps)
    print(
        f"{channels}x{size}x{size}, {backbone}: augment 1 view {1e3 * t_aug1:.2f} ms, "
        f"fwd+bwd 128 {1e3 * t_step1:.2f} ms, ratio {t_aug1 / t_step1:.3f}; "
        f"2 views {1e3 * t_aug2:.2f} ms vs fwd+bwd 256 {1e3 * t_step2:.2f} ms, "
        f"ratio {t_aug2 / t_step2:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=_args.threads, default=1, help="torch threads")
    ap.add_argument(
        "--reps", type=_args.count(1, 10_000), default=20, help="timed repetitions (<= 10000)"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    bench(1, 28, "small_cnn", args.reps)
    bench(3, 32, "small_cnn", args.reps)
    bench(3, 32, "resnet20", max(3, args.reps // 4))


if __name__ == "__main__":
    main()
