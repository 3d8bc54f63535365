"""Cost of the secure noise source, side by side with numpy and OpenDP, in one run.

Measured interleaved on the same machine (the minimum over repeats: the machine is
shared, the minimum is the least disturbed run):

1. **Per value.**  The secure source (:class:`fedspectral.privacy.SecureNoise`: a
   discrete Gaussian on a grid, Philox keyed from OS entropy) on ``--values`` values
   (default 10^6) against numpy's ``standard_normal`` on as many (the issue's ratio,
   target <= 10, goal <= 5), and against ``x + sigma * standard_normal`` (what the fast
   source does); OpenDP's exact sampler (:class:`fedspectral.privacy.OpenDPNoise`, what
   ``"secure"`` was before) per value on ``--opendp-values`` values.
2. **Client-level DP replies** (:func:`fedspectral.fed.flower.node.client_dp.privatise_update`,
   clip + noise of every float weight): the default FedSC network and a 10^6-weight
   model, fast vs secure vs OpenDP.  OpenDP on the large model is estimated from its
   measured per-value time unless ``--opendp-full``.
3. **LDP-PCA device messages** (:func:`fedspectral.pca.local.perturb`) at p = 50 and
   p = 400, fast vs secure vs OpenDP.
4. One DP-CalR release with and without the batch-independence probe (its share).

Usage::

    nice .venv/bin/python benchmarks/noise_perf.py [--repeats 7] [--values 1000000]

Writes ``results/bench/noise_perf.json``; the figures quoted in docs/performance.md are
committed in ``docs/results/noise_perf.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)


def _best(fn, repeats: int) -> float:
    xs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return min(xs)


def bench_per_value(n: int, n_opendp: int, repeats: int) -> dict:
    from fedspectral.privacy import OpenDPNoise, SecureNoise

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n)
    secure = SecureNoise()
    secure.add_gaussian(x[:10], 1.0)  # build the sampling tables once
    normal, fast, sec = [], [], []
    for _ in range(repeats):  # interleaved
        normal.append(_best(lambda: rng.standard_normal(n), 1))
        fast.append(_best(lambda: x + 0.7 * rng.standard_normal(n), 1))
        sec.append(_best(lambda: secure.add_gaussian(x, 0.7), 1))
    od = OpenDPNoise()
    xo = x[:n_opendp]
    od.add_gaussian(xo[:10], 0.7)
    t_od = _best(lambda: od.add_gaussian(xo, 0.7), max(1, repeats // 3))
    per = {
        "numpy_standard_normal": min(normal) / n,
        "fast_source": min(fast) / n,
        "secure_source": min(sec) / n,
        "opendp": t_od / n_opendp,
    }
    return {
        "values": n,
        "opendp_values": n_opendp,
        "seconds_per_value": per,
        "ratio_secure_over_standard_normal": per["secure_source"] / per["numpy_standard_normal"],
        "ratio_secure_over_fast": per["secure_source"] / per["fast_source"],
        "ratio_opendp_over_secure": per["opendp"] / per["secure_source"],
    }


def _reply(state: dict[str, np.ndarray]):
    from fedspectral.fed.protocol import Payload

    return Payload.with_weights(state)


def bench_replies(repeats: int, per_value_opendp: float, opendp_full: bool) -> list[dict]:
    from fedspectral.config import ExperimentConfig
    from fedspectral.fed.flower.node.client_dp import privatise_update
    from fedspectral.fed.methods import build_method
    from fedspectral.privacy import OpenDPNoise, SecureNoise

    net = build_method(ExperimentConfig()).build_net()
    default = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
    rng = np.random.default_rng(0)
    big = {
        "layer1.weight": rng.standard_normal((1000, 800)).astype(np.float32),
        "layer2.weight": rng.standard_normal((200, 1000)).astype(np.float32),
    }
    out = []
    for name, state in (("default FedSC network", default), ("10^6-weight model", big)):
        ref = {
            k: np.asarray(v, dtype=np.float64)
            for k, v in state.items()
            if np.issubdtype(v.dtype, np.floating)
        }
        moved = {k: v + np.float32(0.01) for k, v in state.items()}
        reply = _reply(moved)
        weights = int(sum(v.size for v in ref.values()))
        secure = SecureNoise()
        privatise_update(reply, ref, 1.0, 0.01, secure)  # tables
        f = _best(functools.partial(privatise_update, reply, ref, 1.0, 0.01, rng), repeats)
        s = _best(functools.partial(privatise_update, reply, ref, 1.0, 0.01, secure), repeats)
        if opendp_full or weights <= 250_000:
            od = OpenDPNoise()
            o = _best(functools.partial(privatise_update, reply, ref, 1.0, 0.01, od), 1)
            measured = True
        else:
            o = f + weights * per_value_opendp
            measured = False
        out.append(
            {
                "model": name,
                "weights": weights,
                "fast_seconds": f,
                "secure_seconds": s,
                "opendp_seconds": o,
                "opendp_measured": measured,
                "ratio_secure_over_fast": s / f,
                "ratio_opendp_over_secure": o / s,
            }
        )
    return out


def bench_messages(repeats: int) -> list[dict]:
    from fedspectral.pca.local import perturb
    from fedspectral.privacy import OpenDPNoise, SecureNoise

    rng = np.random.default_rng(0)
    out = []
    for p in (50, 400):
        x = rng.standard_normal(p)
        x /= np.linalg.norm(x)
        secure, od = SecureNoise(), OpenDPNoise()
        perturb(x, 1.0, 1e-5, rng=secure)
        perturb(x, 1.0, 1e-5, rng=od)  # warm the OpenDP measurement cache
        f = _best(functools.partial(perturb, x, 1.0, 1e-5, rng=rng), 5 * repeats)
        s = _best(functools.partial(perturb, x, 1.0, 1e-5, rng=secure), 5 * repeats)
        o = _best(functools.partial(perturb, x, 1.0, 1e-5, rng=od), max(1, repeats // 2))
        out.append(
            {
                "p": p,
                "entries": p * (p + 1) // 2,
                "fast_seconds": f,
                "secure_seconds": s,
                "opendp_seconds": o,
                "ratio_secure_over_fast": s / f,
                "ratio_opendp_over_secure": o / s,
            }
        )
    return out


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
    a, b, c = min(on), min(off), min(probe)
    return {
        "images": 64,
        "views": 5,
        "release_with_probe_seconds": a,
        "release_without_probe_seconds": b,
        "probe_seconds": c,
        "probe_share_of_release": c / a,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=_args.count(1, 1000), default=7, help="<= 1000")
    ap.add_argument(
        "--values", type=_args.count(1000, 20_000_000), default=1_000_000, help="<= 2e7"
    )
    ap.add_argument(
        "--opendp-values",
        type=_args.count(10, 1_000_000),
        default=20_000,
        help="values OpenDP's sampler is timed on (<= --values, <= 1e6)",
    )
    ap.add_argument("--opendp-full", action="store_true", help="run OpenDP on the large model")
    ap.add_argument("--skip-probe", action="store_true")
    ap.add_argument("--out", type=_args.out_file, default="results/bench/noise_perf.json")
    args = ap.parse_args(argv)
    if args.opendp_values > args.values:
        ap.error(
            f"argument --opendp-values: must be <= --values {args.values} (OpenDP is timed "
            f"on the first of them), got {args.opendp_values}"
        )
    torch.set_num_threads(1)
    pv = bench_per_value(args.values, args.opendp_values, args.repeats)
    per = pv["seconds_per_value"]
    print(
        f"per value over {pv['values']:,} values: numpy standard_normal "
        f"{per['numpy_standard_normal'] * 1e9:.1f} ns, "
        f"fast source {per['fast_source'] * 1e9:.1f} ns, "
        f"secure {per['secure_source'] * 1e9:.1f} ns, OpenDP {per['opendp'] * 1e6:.1f} us "
        f"(on {pv['opendp_values']:,})"
    )
    print(
        f"  ratio secure / standard_normal = {pv['ratio_secure_over_standard_normal']:.2f} "
        f"(target <= 10, goal <= 5); secure / fast = {pv['ratio_secure_over_fast']:.2f}; "
        f"OpenDP / secure = {pv['ratio_opendp_over_secure']:.0f}"
    )
    replies = bench_replies(args.repeats, per["opendp"], args.opendp_full)
    for r in replies:
        est = "" if r["opendp_measured"] else " (estimated from its per-value time)"
        print(
            f"client-level DP reply, {r['model']} ({r['weights']:,} weights): fast "
            f"{r['fast_seconds'] * 1e3:.1f} ms, secure {r['secure_seconds'] * 1e3:.1f} ms "
            f"(x{r['ratio_secure_over_fast']:.2f}), OpenDP {r['opendp_seconds']:.2f} s{est}"
        )
    messages = bench_messages(args.repeats)
    for m in messages:
        print(
            f"LDP-PCA message, p = {m['p']} ({m['entries']:,} numbers): fast "
            f"{m['fast_seconds'] * 1e3:.3f} ms, secure {m['secure_seconds'] * 1e3:.3f} ms "
            f"(x{m['ratio_secure_over_fast']:.1f}), OpenDP {m['opendp_seconds'] * 1e3:.1f} ms"
        )
    res = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "per_value": pv,
        "replies": replies,
        "messages": messages,
    }
    if not args.skip_probe:
        pr = bench_probe(max(3, args.repeats // 2))
        res["probe"] = pr
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
