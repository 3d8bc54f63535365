"""How much of a Flower simulation round's extra time is fedspectral's own adapter.

Runs the CPU config (``configs/fmnist_fedsc.yaml``, 10 clients) with the in-process
runner and with :class:`~fedspectral.fed.flower.apps.runner.FlowerRunner` over the tests'
in-process fake grid (``tests/flower/test_adapter.py``'s ``FakeGrid``: every message goes
through the real ClientApp and Flower's record serialisation, but nothing crosses a
process or waits for a poll), alternating, and prints each run's round times and the
seconds spent in FedSC's ``client_phase`` (the method's work) and, on the fake grid, in
the ClientApp's handler (``_handle``). The fake grid's round minus the in-process round is
what the adapter costs (ClientApp checks, configuration, records, state); what
``benchmarks/flower_overhead.py`` measures on top of that is Flower's transport.

Usage::

    .venv/bin/python scripts/flower_adapter_overhead.py [--rounds 6] [--pairs 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "flower")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run (>= 3)")
    ap.add_argument("--pairs", type=int, default=2, help="in-process / fake-grid pairs")
    args = ap.parse_args(argv)
    if args.rounds < 3 or args.pairs < 1:
        raise SystemExit(f"--rounds must be >= 3 and --pairs >= 1, got {args.rounds}, {args.pairs}")

    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    from test_adapter import FakeGrid  # tests/flower/test_adapter.py

    import fedspectral.fed.flower.apps.client_app as ca
    from fedspectral.fed.flower.apps.runner import FlowerRunner
    from fedspectral.fed.methods.fedsc import FedSC
    from fedspectral.fed.simulation import Simulation
    from fedspectral.fed.validation import load_config

    r = args.rounds
    overrides = [f"method.rounds={r}", f"eval.every={r}", "eval.linear_probe=false"]
    overrides.append("run.progress=false")
    seconds: dict[str, float] = {}

    def timed(name, f):
        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t

        return g

    FedSC.client_phase = timed("client_phase", FedSC.client_phase)
    ca._handle = timed("handler", ca._handle)
    steady: dict[str, list[float]] = {"in-process": [], "fake grid": []}
    for _ in range(args.pairs):
        for name in steady:
            seconds.clear()
            cfg = load_config(ROOT / "configs" / "fmnist_fedsc.yaml", overrides)
            if name == "in-process":
                res = Simulation(cfg).run()
            else:
                res = FlowerRunner(cfg, FakeGrid(10), round_timeout=60, node_wait=5.0).run()
            rounds = [rec["seconds_round"] for rec in res["records"]]
            steady[name] += rounds[1:-1]  # round 1 (one-off costs) and the evaluated last out
            spent = ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
            print(f"{name:<10} rounds {' '.join(f'{x:.2f}' for x in rounds)} s; {spent}")
    m_in, m_fake = (statistics.mean(v) for v in steady.values())
    print(
        f"steady rounds (2 to {r - 1}): in-process {m_in:.3f} s, fake grid {m_fake:.3f} s; "
        f"the adapter adds {m_fake - m_in:.3f} s a round ({m_fake / m_in:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
