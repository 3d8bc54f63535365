"""Cost of the secure noise source and of DP-CalR's batch-independence probe.

Measured side by side in one run, interleaved, on the same machine:

1. One LDP-PCA device message at ``p = 50`` (``perturb``: 1275 noised numbers) with the
   secure source (OpenDP's floating-point-safe Gaussian mechanism, OS entropy) against
   the fast path (seeded numpy).  Prints the median time of each and their ratio.
2. One DP-CalR release (``dp_correlation``, small CNN + projector of the default config
   on 64 Fashion-MNIST-sized images, V = 5) with and without the probe, and the probe's
   own time from the release's ``stats``.

Usage::

    nice .venv/bin/python benchmarks/noise_perf.py [--repeats 30]

Writes ``results/bench/noise_perf.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _median_seconds(fn, repeats: int) -> float:
    xs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def bench_messages(repeats: int, p: int = 50) -> dict:
    from fedspectral.pca.local import perturb
    from fedspectral.privacy import SecureNoise

    rng = np.random.default_rng(0)
    x = rng.standard_normal(p)
    x /= np.linalg.norm(x)
    secure = SecureNoise()
    perturb(x, 1.0, 1e-5, rng=secure)  # warm the OpenDP measurement cache
    fast, sec = [], []
    for _ in range(repeats):  # interleaved
        fast.append(_median_seconds(lambda: perturb(x, 1.0, 1e-5, rng=rng), 5))
        sec.append(_median_seconds(lambda: perturb(x, 1.0, 1e-5, rng=secure), 1))
    f, s = statistics.median(fast), statistics.median(sec)
    return {
        "p": p,
        "entries": p * (p + 1) // 2,
        "fast_seconds": f,
        "secure_seconds": s,
        "ratio_secure_over_fast": s / f,
    }


def bench_probe(repeats: int) -> dict:
    from fedspectral.config import ExperimentConfig
    from fedspectral.fed.correlation import dp_correlation
    from fedspectral.fed.methods import build_method

    cfg = ExperimentConfig()
    net = build_method(cfg).build_net()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 28, 28, generator=g)
    rng = np.random.default_rng(0)
    on, off, probe = [], [], []
    for _ in range(repeats):
        stats: dict = {}
        t = time.perf_counter()
        dp_correlation(
            net, x, None, 5, 4.0, 0.01, None, rng, 64, stats=stats, check_independence=True
        )
        on.append(time.perf_counter() - t)
        probe.append(stats["probe_seconds"])
        t = time.perf_counter()
        dp_correlation(net, x, None, 5, 4.0, 0.01, None, rng, 64, check_independence=False)
        off.append(time.perf_counter() - t)
    a, b, c = statistics.median(on), statistics.median(off), statistics.median(probe)
    return {
        "images": 64,
        "views": 5,
        "release_with_probe_seconds": a,
        "release_without_probe_seconds": b,
        "probe_seconds": c,
        "probe_share_of_release": c / a,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", default="results/bench/noise_perf.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    res = {
        "messages": bench_messages(args.repeats),
        "probe": bench_probe(max(3, args.repeats // 3)),
    }
    m, pr = res["messages"], res["probe"]
    print(
        f"LDP-PCA message, p = {m['p']} ({m['entries']} numbers): fast {m['fast_seconds'] * 1e3:.3f} ms, "
        f"secure {m['secure_seconds'] * 1e3:.2f} ms, ratio {m['ratio_secure_over_fast']:.0f}x"
    )
    print(
        f"DP-CalR release on {pr['images']} images x {pr['views']} views: "
        f"{pr['release_without_probe_seconds'] * 1e3:.1f} ms without the probe, "
        f"{pr['release_with_probe_seconds'] * 1e3:.1f} ms with it; probe "
        f"{pr['probe_seconds'] * 1e3:.2f} ms ({100 * pr['probe_share_of_release']:.1f} %)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(res, fh, indent=2)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
