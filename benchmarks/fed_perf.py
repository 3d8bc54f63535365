"""Performance of the FedSC pillar, measured side by side in one run.

1. Training phase: images per second of FedAvg+SC's client ``train`` handler
   (weights loaded from the payload, local SGD, weights returned) against a bare
   PyTorch loop with the same model, batch, augmentation, loss and optimiser
   (target: ratio >= 0.9).
2. Correlation phase: FedSC's client ``share`` handler (DP-CalR, V_share views per
   sample, clipping, float64 accumulation, noise, release report) against a bare
   inference loop over the same views (forward passes only) (target >= 0.9).
3. Where the share phase's time goes (augmentation, forward passes) per client.
4. Round time and bytes per round of FedSC and FedAvg+SC at the CPU protocol
   (``configs/fmnist_fedsc.yaml``: 300 images per client, V_share = 2; target
   FedSC / FedAvg+SC <= 1.3) and at the seed's proportions (E = 5 local epochs,
   V_share = 5), printed side by side: the median of ``--rounds`` rounds after a
   warm-up round.  The CPU protocol is also timed at V_share = 1, to show what the
   share phase's inherent forward passes cost.
5. The ratio one client's two phases imply alone, ``1 + share / train`` (items 1
   and 2, ours and bare): the floor of item 4 without messages or server work.

Timings alternate between the contenders and the median of ``--repeats`` is kept,
so that load from other processes affects both alike; the phase ratios are taken on
process CPU time (wall-time ratios are reported too: on a shared machine they move
with other processes' load).

Usage::

    nice .venv/bin/python benchmarks/fed_perf.py            # CPU config sizes
    nice .venv/bin/python benchmarks/fed_perf.py --quick    # a smoke run (3 small clients)

Writes ``results/bench/fed_perf.json`` (atomically).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)


def _cfg(
    args: argparse.Namespace,
    method: str = "fedavg_sc",
    epochs: int | None = None,
    share_views: int | None = None,
):
    from fedspectral.config import thaw
    from fedspectral.fed.validation import load_config, validate

    cfg = thaw(
        load_config(
            ROOT / "configs" / "fmnist_fedsc.yaml",
            [f"run.threads={args.threads}", "run.progress=false"],
        )
    )  # an editable copy (a validated config is frozen)
    if method != "fedsc":
        cfg.method.name = method
        cfg.method.params = {"mu": cfg.method.params["mu"]}
    if args.quick:
        cfg.data.max_train = 600
        cfg.partition.num_clients = 3
        cfg.eval.test_size = 200
    if epochs is not None:
        cfg.method.local_epochs = epochs
    if share_views is not None and method == "fedsc":
        cfg.method.params["share_views"] = share_views
    return validate(cfg)


def _per_client(cfg) -> int:
    """Images per client of the config (10 x 1 class split of ``data.max_train``)."""
    return cfg.data.max_train // cfg.partition.num_clients


def _client(cfg, method, n: int):
    """A client runtime holding ``n`` Fashion-MNIST images (one class) and a fresh net."""
    from fedspectral.data import load_dataset
    from fedspectral.data.augment import SimCLRAugment
    from fedspectral.fed.protocol import ClientRuntime, client_generators

    data = load_dataset("fashion_mnist", "train")
    data = data.subset(np.flatnonzero(data.labels.numpy() == 0)[:n])
    torch.manual_seed(0)
    net = method.build_net()
    aug = SimCLRAugment(28, color=cfg.data.color_jitter)
    g, rng = client_generators(0, 1, "client-0", "train")
    return ClientRuntime("client-0", data, net, aug, g, rng, {}, cfg)


def _compare(ours, bare, repeats: int) -> dict:
    """Interleaved timings (after one warm-up each); medians of wall and CPU time.
    ``ratio`` = bare CPU time / our CPU time (= our throughput / bare throughput):
    process CPU time is what the code costs, wall time also counts other processes'
    load on a shared machine (both are reported)."""
    ours(), bare()
    to, tb = [], []
    for _ in range(repeats):
        to.append(ours())
        tb.append(bare())
    r = {
        "ours_s": statistics.median(t[0] for t in to),
        "bare_s": statistics.median(t[0] for t in tb),
        "ours_cpu_s": statistics.median(t[1] for t in to),
        "bare_cpu_s": statistics.median(t[1] for t in tb),
    }
    r["ratio"] = r["bare_cpu_s"] / r["ours_cpu_s"]
    r["ratio_wall"] = r["bare_s"] / r["ours_s"]
    return r


def bench_train(args, out: dict) -> None:
    from fedspectral.fed.losses import SpectralContrastiveLoss
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.protocol import Payload
    from fedspectral.fed.weights import net_to_arrays

    cfg = _cfg(args)
    m = build_method(cfg)
    n = _per_client(cfg)
    rt = _client(cfg, m, n)
    weights = net_to_arrays(rt.net)
    o, b, views = cfg.optim, cfg.optim.batch_size, 2 * cfg.method.views
    steps = n // b
    loss_fn = SpectralContrastiveLoss(m.params.mu)

    def ours() -> tuple[float, float]:
        rt.generator.manual_seed(1)
        t, c = time.perf_counter(), time.process_time()
        m.client_phase("train", 1, Payload.with_weights(weights, config={"lr": o.lr}), rt)
        return time.perf_counter() - t, time.process_time() - c

    def bare() -> float:
        g = torch.Generator().manual_seed(1)
        net = rt.net
        net.train()
        x = rt.data.images
        t, c = time.perf_counter(), time.process_time()
        opt = torch.optim.SGD(
            net.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay
        )
        for _ in range(cfg.method.local_epochs):
            perm = torch.randperm(n, generator=g)
            for s in range(steps):
                xb = x[perm[s * b : (s + 1) * b]]
                z = net(torch.cat([rt.augment(xb, g) for _ in range(views)]))
                loss = loss_fn(list(z.split(b)))
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), o.grad_clip)
                opt.step()
        return time.perf_counter() - t, time.process_time() - c

    imgs = cfg.method.local_epochs * steps * b
    r = _compare(ours, bare, args.repeats)
    r["images"] = imgs
    out["train_phase"] = r
    print(
        f"train phase : ours {imgs / r['ours_s']:8.1f} img/s, bare "
        f"{imgs / r['bare_s']:8.1f} img/s (wall) -> throughput ratio {r['ratio']:.3f} CPU time, "
        f"{r['ratio_wall']:.3f} wall (target >= 0.9)"
    )


def bench_share(args, out: dict) -> None:
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.protocol import Payload
    from fedspectral.fed.weights import net_to_arrays

    cfg = _cfg(args, "fedsc")
    m = build_method(cfg)
    n = _per_client(cfg)
    rt = _client(cfg, m, n)
    weights = net_to_arrays(rt.net)
    v, bs = m.params.share_views, m.params.share_batch_size

    def ours() -> tuple[float, float]:
        rt.generator.manual_seed(1)
        t, c = time.perf_counter(), time.process_time()
        m.client_phase(
            "share", 1, Payload.with_weights(weights, config={"cache_weights": False}), rt
        )
        return time.perf_counter() - t, time.process_time() - c

    def bare() -> float:
        g = torch.Generator().manual_seed(1)
        net = rt.net
        net.eval()
        x = rt.data.images
        t, c = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            for s in range(0, n, bs):
                xb = x[s : s + bs]
                net(rt.augment(xb.repeat(v, 1, 1, 1), g))
        return time.perf_counter() - t, time.process_time() - c

    r = _compare(ours, bare, args.repeats)
    r["views"] = n * v
    out["share_phase"] = r
    print(
        f"share phase : ours {n * v / r['ours_s']:8.1f} views/s, bare "
        f"{n * v / r['bare_s']:8.1f} views/s (wall) -> throughput ratio {r['ratio']:.3f} CPU "
        f"time, {r['ratio_wall']:.3f} wall (target >= 0.9)"
    )
    out["share_breakdown"] = _share_breakdown(rt, n, v, bs, args.repeats)


def _share_breakdown(rt, n: int, v: int, bs: int, repeats: int) -> dict:
    """Where the share phase's time goes: augmentation, the encoder's forward passes
    (eval mode, inference), and the rest (clipping, float64 accumulation, weights), as
    median CPU seconds per client; beside one local epoch of training fwd + bwd."""
    net, x = rt.net, rt.data.images
    net.eval()
    g = torch.Generator().manual_seed(1)
    batches = [x[s : s + bs].repeat(v, 1, 1, 1) for s in range(0, n, bs)]
    views = [rt.augment(b, g) for b in batches]

    def cpu(f) -> float:
        f()
        ts = []
        for _ in range(repeats):
            c = time.process_time()
            f()
            ts.append(time.process_time() - c)
        return statistics.median(ts)

    def aug() -> None:
        for b in batches:
            rt.augment(b, g)

    def fwd() -> None:
        with torch.inference_mode():
            for b in views:
                net(b)

    small = [b[s : s + 256] for b in views for s in range(0, b.shape[0], 256)]

    def fwd_small() -> None:
        with torch.inference_mode():
            for b in small:
                net(b)

    net.train()
    steps = [x[s : s + 64].repeat(2, 1, 1, 1) for s in range(0, n - 63, 64)]

    def train_step() -> None:
        for b in steps:
            net(b).sum().backward()

    out = {
        "augment_s": cpu(aug),
        "forward_s": cpu(fwd),
        "forward_256_s": cpu(fwd_small),
        "train_fwd_bwd_s": cpu(train_step),
    }
    print(
        f"share phase per client ({n} samples x {v} views): augmentation "
        f"{out['augment_s'] * 1e3:.0f} ms, forward passes {out['forward_s'] * 1e3:.0f} ms "
        f"in passes of up to {bs * v} views, {out['forward_256_s'] * 1e3:.0f} ms in passes "
        f"of up to 256; one local epoch's forward + backward passes (2 x {64 * len(steps)} "
        f"views, batches of 64 samples): {out['train_fwd_bwd_s'] * 1e3:.0f} ms"
    )
    return out


def bench_rounds(args, out: dict) -> None:
    from fedspectral.fed.protocol import run_round
    from fedspectral.fed.simulation import InProcessTransport, Simulation
    from fedspectral.privacy import PrivacyLedger

    rows = []
    scales = (
        ("cpu config", None, None),
        ("cpu config, Vsh 1", None, 1),
        ("paper proportions", 5, 5),
    )
    for scale, epochs, vshare in scales:
        runs = {}
        for method in ("fedsc", "fedavg_sc"):
            cfg = _cfg(args, method, epochs, vshare)
            sim = Simulation(cfg)
            sim._setup()
            st = sim._fresh_state()
            runs[method] = {
                "cfg": cfg,
                "sim": sim,
                "server": st.server,
                "transport": InProcessTransport(sim, st.clients),
                "ledger": PrivacyLedger(),
                "times": [],
                "rec": None,
            }
        # the two methods' rounds alternate, so that a change of the machine's load
        # during the run falls on both alike; round 1 warms up (first optimiser step,
        # allocator), rounds 2.. are timed
        for rnd in range(1, args.rounds + 2):
            for r in runs.values():
                t, c = time.perf_counter(), time.process_time()
                rec = run_round(
                    r["sim"].method,
                    r["server"],
                    rnd,
                    r["server"].clients,
                    r["transport"],
                    r["ledger"],
                )
                if rnd > 1:
                    r["times"].append(
                        (
                            time.perf_counter() - t,
                            time.process_time() - c,
                            rec.phases["share"].seconds if "share" in rec.phases else 0.0,
                            rec.phases["train"].seconds,
                        )
                    )
                r["rec"] = rec
        for method, r in runs.items():
            total, cpu, share, train = (statistics.median(x) for x in zip(*r["times"], strict=True))
            rows.append(
                {
                    "scale": scale,
                    "method": method,
                    "local_epochs": r["cfg"].method.local_epochs,
                    "share_views": r["cfg"].method.params.get("share_views"),
                    "clients": len(r["server"].clients),
                    "round_s": total,
                    "round_cpu_s": cpu,
                    "share_s": share,
                    "train_s": train,
                    "bytes_up": r["rec"].bytes_up_total,
                    "bytes_down": r["rec"].bytes_down_total,
                }
            )
    out["rounds"] = rows
    print(
        f"\n{'scale':<18} {'method':<10} {'E':>2} {'Vsh':>3} {'round s':>8} {'CPU s':>8} "
        f"{'share s':>8} {'train s':>8} {'MB up':>7} {'MB down':>8}"
    )
    for r in rows:
        print(
            f"{r['scale']:<18} {r['method']:<10} {r['local_epochs']:>2} "
            f"{r['share_views'] or '-':>3} {r['round_s']:8.1f} {r['round_cpu_s']:8.1f} "
            f"{r['share_s']:8.1f} "
            f"{r['train_s']:8.1f} {r['bytes_up'] / 1e6:7.2f} {r['bytes_down'] / 1e6:8.2f}"
        )
    for scale, _, _ in scales:
        a, b = (
            next(r for r in rows if r["scale"] == scale and r["method"] == m)
            for m in ("fedsc", "fedavg_sc")
        )
        out[f"round_ratio_cpu_{scale.replace(' ', '_').replace(',', '')}"] = (
            a["round_cpu_s"] / b["round_cpu_s"]
        )
        print(
            f"{scale}: FedSC / FedAvg+SC round time {a['round_s'] / b['round_s']:.2f} wall, "
            f"{a['round_cpu_s'] / b['round_cpu_s']:.2f} CPU"
            + (" (target <= 1.3)" if scale == "cpu config" else "")
            + ", "
            f"bytes up {a['bytes_up'] / b['bytes_up']:.3f}, "
            f"bytes down {a['bytes_down'] / b['bytes_down']:.3f}"
        )


def phase_floor(out: dict) -> None:
    """The round ratio that one client's two phases imply alone, ``1 + share / train``
    (CPU time per client, no messages, no server work): from our handlers and from the
    bare PyTorch loops over the same work. The bare figure is the ratio a plain
    implementation of the same protocol would have; the round ratio above it is what
    the round adds (messages, weights, aggregation)."""
    tr, sh = out["train_phase"], out["share_phase"]
    out["phase_ratio_ours"] = 1.0 + sh["ours_cpu_s"] / tr["ours_cpu_s"]
    out["phase_ratio_bare"] = 1.0 + sh["bare_cpu_s"] / tr["bare_cpu_s"]
    print(
        f"one client's phases alone, 1 + share / train: ours "
        f"{out['phase_ratio_ours']:.2f}, bare PyTorch loops {out['phase_ratio_bare']:.2f} "
        f"(the round ratio's floor without messages or server work)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    p.add_argument(
        "--repeats",
        type=_args.count(1, 1000),
        default=3,
        help="interleaved timings of each phase, median kept (<= 1000)",
    )
    p.add_argument(
        "--rounds",
        type=_args.count(1, 100),
        default=2,
        help="timed rounds per method after one warm-up round (median kept; <= 100)",
    )
    p.add_argument(
        "--threads",
        type=_args.threads,
        default=1,
        help="torch threads (1: on a shared 2-core machine more threads oversubscribe)",
    )
    p.add_argument(
        "--out", type=_args.out_file, default=str(ROOT / "results" / "bench" / "fed_perf.json")
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from fedspectral.results import versions, write_json

    out: dict = {"quick": args.quick, "threads": args.threads, "repeats": args.repeats}
    t = time.perf_counter()
    bench_train(args, out)
    bench_share(args, out)
    bench_rounds(args, out)
    phase_floor(out)
    out["seconds"] = time.perf_counter() - t
    out["versions"] = versions()
    write_json(args.out, out)
    print(f"\nwritten {args.out} ({out['seconds']:.0f} s)")
    ok = out["train_phase"]["ratio"] >= 0.9 and out["share_phase"]["ratio"] >= 0.9
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
