"""Cost of FedSC's secure sum in process, and the noise it removes from R_-j.

Measured side by side in one run, interleaved, on the same machine:

1. One secure sum of J packed correlation summands (d = 128: D = 8256 numbers each) by
   :func:`fedspectral.fed.releases.in_process_secure_sum`: the exact float64 sum, the
   quantised integer sum, and the five-stage exchange of :mod:`fedspectral.fed.secagg`
   (X25519, ChaCha20 masks, Shamir, Ed25519 consistency signatures), with no dropout,
   with two clients absent, and unauthenticated (``honest_server=True``: the same
   stages without signatures, i.e. the cost of the defence against an active server).
   Prints the median time of each and the ratios to the exact sum.
2. The noise in the R_-j a client contrasts against in the first sharing round, plain
   against secure aggregation with distributed noise (sigma / sqrt(m_min - 1), m_min =
   J), at the same sigma_plain: FedSC's own handlers on a linear encoder (J clients of
   50 samples, d = 16), the R_-j each trained client receives minus that of the
   noise-free run of the same seed.  Prints the mean Frobenius norms and their ratio
   (expected sqrt(m_min - 1)).

Usage::

    nice .venv/bin/python benchmarks/secagg_cost.py [--clients 10] [--dim 128] [--repeats 5]

Writes ``results/bench/secagg_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fedspectral.fed import secagg
from fedspectral.fed.releases import SecureSumSpec, in_process_secure_sum
from fedspectral.fed.secagg_primitives import dequantise, quantisation_scale, quantise
from fedspectral.fed.secagg_server import secure_sum

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)


def _unauthenticated(
    inputs: dict[str, np.ndarray], spec: SecureSumSpec, cids: list[str], mode: str, session: bytes
) -> tuple[np.ndarray, list[str], dict]:
    """``in_process_secure_sum``'s "secagg" path without identity keys."""
    scale = quantisation_scale(spec.bound, len(cids), spec.bits)
    q = {c: quantise(x, scale, spec.bound, spec.bits) for c, x in inputs.items()}
    params = secagg.SecAggParams(
        tuple(cids), spec.min_contributors, spec.length, spec.bits, session
    )
    total, contributors = secure_sum(q, params, honest_server=True)
    return dequantise(total, scale, spec.bits), contributors, {}


def _r_minus_noise(clients: int, seeds: int) -> tuple[float, float]:
    """Mean Frobenius norm of the noise in the R_-j of round 1 (against the noise-free
    run of the same seed), plain and secure, same sigma_plain."""
    from types import SimpleNamespace

    import torch

    from fedspectral.config import ExperimentConfig
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.protocol import run_round
    from fedspectral.fed.simulation import InProcessTransport
    from fedspectral.fed.weights import net_to_arrays
    from fedspectral.privacy import PrivacyLedger

    class Data:
        def __init__(self, x):
            self.images = x

        def __len__(self):
            return int(self.images.shape[0])

    sizes = {f"c{i}": 50 for i in range(clients)}
    norms: dict[str, list[float]] = {"plain": [], "secure": []}
    for seed in range(seeds):
        got = {}
        for name, secure, sigma in (
            ("zero", False, 0.0),
            ("plain", False, 0.02),
            ("secure", True, 0.02),
        ):
            cfg = ExperimentConfig(name="bench")
            cfg.method.name, cfg.method.rounds, cfg.method.clients_per_round = "fedsc", 1, 2
            cfg.method.params = {
                "mu": 1.0,
                "share_views": 1,
                "alpha": "fixed",
                "alpha_start": 0.5,
                "secure_aggregation": secure,
            }
            cfg.partition.num_clients, cfg.model.projector_out = clients, 16
            cfg.optim.batch_size, cfg.run.seed = 25, seed
            if sigma:
                cfg.dp.enabled, cfg.dp.sigma = True, sigma
            torch.manual_seed(0)
            net = torch.nn.Linear(8, 16, bias=False)
            r = np.random.default_rng(1)
            data = {
                c: Data(torch.from_numpy(r.normal(size=(n, 8)).astype(np.float32) / 3))
                for c, n in sizes.items()
            }
            fed = SimpleNamespace(clients=data, augment=lambda x, g: x)
            method = build_method(cfg)
            sim = SimpleNamespace(
                cfg=cfg,
                fed=fed,
                net=net,
                method=method,
                tolerate_failures=False,
                secure_sum_mode="exact",
            )
            state = method.init_server_state(net_to_arrays(net), sizes)
            seen: dict[str, np.ndarray] = {}
            make_loss = method.make_loss

            def spy(payload, rt, make_loss=make_loss, seen=seen):
                seen[rt.cid] = np.asarray(payload.arrays["R_minus"], dtype=np.float64)
                return make_loss(payload, rt)

            method.make_loss = spy
            run_round(
                method,
                state,
                1,
                ["c0", "c1"],
                InProcessTransport(sim, {c: {} for c in sizes}),
                PrivacyLedger(),
            )
            got[name] = seen
        for c in got["zero"]:
            for name in ("plain", "secure"):
                norms[name].append(float(np.linalg.norm(got[name][c] - got["zero"][c])))
    return statistics.mean(norms["plain"]), statistics.mean(norms["secure"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--clients",
        type=_args.count(5, 100),
        default=10,
        help="J, 5-100 (two absent clients must leave m_min = J // 2 + 1 contributors)",
    )
    ap.add_argument(
        "--dim", type=_args.count(1, 1024), default=128, help="d, 1-1024 (d(d+1)/2 numbers)"
    )
    ap.add_argument("--repeats", type=_args.count(1, 1000), default=5, help="<= 1000")
    ap.add_argument(
        "--seeds", type=_args.count(1, 1000), default=20, help="seeds of the R_-j noise, <= 1000"
    )
    ap.add_argument("--out", type=_args.out_file, default="results/bench/secagg_cost.json")
    a = ap.parse_args(argv)
    j, d = a.clients, a.dim
    length = d * (d + 1) // 2
    rng = np.random.default_rng(0)
    cids = [f"c{i}" for i in range(j)]
    mu, sigma = 2.0, 0.01
    q = 1.0 / j
    bound = q * (math.sqrt(2) * mu + 24 * sigma)
    summands = {c: rng.uniform(-bound / 2, bound / 2, length) for c in cids}
    m_min = j // 2 + 1
    spec = SecureSumSpec("x", length, m_min, bound, 64, "bench")
    dropped = {c: v for c, v in summands.items() if c not in cids[:2]}
    cases = {
        "exact": (summands, "exact"),
        "quantised": (summands, "quantised"),
        "secagg": (summands, "secagg"),
        "secagg_2_dropouts": (dropped, "secagg"),
        "secagg_unauthenticated": (summands, "unauthenticated"),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    err = {}
    for _ in range(a.repeats):  # interleaved
        for name, (inputs, mode) in cases.items():
            t = time.perf_counter()
            run = _unauthenticated if mode == "unauthenticated" else in_process_secure_sum
            total, contributors, _ = run(inputs, spec, cids, mode, b"bench")
            times[name].append(time.perf_counter() - t)
            ref = sum(inputs[c] for c in contributors)
            err[name] = float(np.max(np.abs(total - ref)))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"secure sum of {j} summands of {length} numbers (median of {a.repeats}):")
    for k, v in med.items():
        print(f"  {k:24s} {v * 1e3:9.2f} ms  x{v / med['exact']:8.1f}  max |error| {err[k]:.2e}")

    # noise in R_-j through the real code paths (FedSC's handlers, in-process transport)
    mp, ms = _r_minus_noise(j, a.seeds)
    print(
        f"noise in R_-j, first sharing round (J = m_min = {j}, d = 16, {a.seeds} seeds, "
        f"real FedSC handlers on a linear encoder): plain {mp:.4g}, secure {ms:.4g}, "
        f"ratio {mp / ms:.3f} (sqrt(m_min - 1) = {math.sqrt(j - 1):.3f})"
    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "clients": j,
                "dim": d,
                "length": length,
                "repeats": a.repeats,
                "median_seconds": med,
                "max_abs_error": err,
                "noise_norm": {"plain": mp, "secure": ms, "ratio": mp / ms},
            },
            indent=2,
        )
    )
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
