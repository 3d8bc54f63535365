"""Overhead of Flower's simulation engine over the in-process runner, side by side.

Runs the same experiment (default ``configs/fmnist_fedsc.yaml``, the CPU config,
shortened to ``--rounds`` rounds with evaluation only at the end) with the
in-process runner, then with :func:`fedspectral.fed.flower.apps.engine.run_flower_simulation`,
then in process again (a sandwich: on a shared machine the load drifts, and the
ratio is taken against the mean of the two in-process runs), in one process,
and prints

* the mean round time of each engine over the rounds after the first (round 1
  pays one-off costs in both engines: first-touch allocations, and in Flower the
  ClientApp processes' imports), the evaluation excluded;
* their ratio (target: Flower / in-process <= 1.3; the script exits 1 when it is missed
  or the weights differ);
* Flower's one-off start-up (Ray, the virtual nodes loading their data) --
  printed, not part of the ratio;
* whether both engines ended with the same global weights.

Usage::

    nice .venv/bin/python benchmarks/flower_overhead.py [--config ...] [--rounds 4]
        [--set key=value ...]

Writes ``results/bench/flower_overhead.json``.

``--deployment`` measures Flower's *deployment* engine instead (what the README's
loopback commands run): a SuperLink and one SuperNode per client on 127.0.0.1
(:class:`fedspectral.fed.flower.deploy.local.LocalDeployment`; each SuperNode in Flower's
``process`` isolation mode with one long-lived :mod:`fedspectral.fed.flower.deploy.node_runtime`
process beside it, or ``--isolation subprocess``: Flower's default, a fresh
``flwr-clientapp`` process per message), ``flwr run flower/`` on the config (default
``configs/digits_smoke.yaml``), and prints the seconds per round beside the
in-process ones (every round, evaluation excluded) and where each phase's time goes::

    nice .venv/bin/python benchmarks/flower_overhead.py --deployment [--rounds 3] \
        [--isolation subprocess]

Each SuperNode is plain ``flower-supernode``, and a SuperNode whose poll found no message
sleeps a fixed 3 s before the next (``flwr/supernode/start_client_internal.py``: no
option sets it), so every message round waits up to 3 s for the last node to look.  The
floor is therefore Flower's: on the same SuperNodes, right after the experiment, the
benchmark runs ``benchmarks/flower_null`` (a Flower app doing nothing: as many message
rounds per round as the experiment's phases, each a ``query.hello`` to every node
through the same ``exchange``) and prints the experiment's mean round over the null
app's (rounds after the first; target <= 1.2, exit status 1 when missed).

Writes ``results/bench/flower_deployment.json``.

``--secure`` times FedSC's share phase through secure aggregation
(``method.params.secure_aggregation=true``: the five stages of
:mod:`fedspectral.fed.secagg`, one round of ``query.secagg`` messages each) beside the
plain share phase (one ``query`` message), same config, in one process: in process
(plain, and the five-stage exchange run in process), then on Flower's simulation
engine (plain, secure), or with ``--deployment`` on two loopback deployments (plain,
secure); it prints the share phase's seconds per round and, for Flower, each stage's::

    nice .venv/bin/python benchmarks/flower_overhead.py --secure [--deployment] \
        [--config configs/digits_smoke.yaml] [--rounds 2]

Writes ``results/bench/flower_secure.json`` (``flower_secure_deployment.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import _args  # noqa: E402  (benchmarks/_args.py: argument checks)

#: the nodes' privacy policy in the deployment runs: the config's FedSC runs without DP
#: and its trained weights leave without client-level DP (this measures the engine's
#: overhead, not a private run), so the policy must allow both
BENCH_POLICY = {"allow-nonprivate": True, "allow-unprotected-weights": True, "simulation": True}
#: a Flower app that does nothing (benchmarks/flower_null): the floor of a deployment round
NULL_APP = REPO / "benchmarks" / "flower_null"


def _check_config(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The config loads with the overrides and the rounds (before any run)."""
    from fedspectral.fed.validation import load_config, validate

    over = [f"method.rounds={args.rounds}", f"eval.every={args.rounds}", *args.overrides]
    what = f"--config {args.config}" + "".join(f" --set {o}" for o in args.overrides)
    _args.config_error(ap, what, lambda: validate(load_config(args.config, over)))


def _round_times(res: dict[str, Any]) -> list[float]:
    """Round times without evaluation (sum of the phases' wall times)."""
    return [sum(ph["seconds"] for ph in r["phases"].values()) for r in res["records"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--config", type=_args.in_file, default=str(REPO / "configs" / "fmnist_fedsc.yaml")
    )
    ap.add_argument(
        "--rounds",
        type=_args.count(1, 100),
        default=4,
        help="rounds of each run (>= 2 but with --secure or --deployment; <= 100)",
    )
    ap.add_argument("--set", dest="overrides", action="append", type=_args.override, default=[])
    ap.add_argument(
        "--out",
        type=_args.out_file,
        default=str(REPO / "results" / "bench" / "flower_overhead.json"),
    )
    ap.add_argument(
        "--deployment",
        action="store_true",
        help="deployment engine (SuperLink + SuperNodes on loopback)",
    )
    ap.add_argument(
        "--isolation",
        choices=("process", "subprocess"),
        default="process",
        help="with --deployment: the SuperNodes' isolation mode (process: one "
        "node runtime per node; subprocess: a process per message)",
    )
    ap.add_argument(
        "--secure",
        action="store_true",
        help="time FedSC's secure share phase (the five-stage exchange) beside the plain one",
    )
    args = ap.parse_args(argv)
    given = _args.given(ap, argv)
    if not args.deployment:
        _args.refuse(ap, given, ("isolation",), "without --deployment")
    if args.rounds < 2 and not (args.secure or args.deployment):
        ap.error(
            f"argument --rounds: must be >= 2 (round 1 is excluded from the ratio), "
            f"got {args.rounds}"
        )
    if (args.secure or args.deployment) and "config" not in given:
        args.config = str(REPO / "configs" / "digits_smoke.yaml")  # their default
    _check_config(ap, args)
    if args.secure:
        return secure(args)
    if args.deployment:
        return deployment(args)

    from fedspectral.fed.flower.apps.engine import run_flower_simulation
    from fedspectral.fed.simulation import CHECKPOINT, Simulation, load_run_state
    from fedspectral.fed.validation import load_config
    from fedspectral.results import versions, write_json

    overrides = [
        f"method.rounds={args.rounds}",
        f"eval.every={args.rounds}",
        "eval.linear_probe=false",
        "run.progress=false",
        *args.overrides,
    ]

    def cfg():
        return load_config(args.config, overrides)

    t = time.perf_counter()
    sim = Simulation(cfg())
    ref = sim.run()
    wall_in = time.perf_counter() - t
    import tempfile

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fedspectral-bench-") as work:
        res = run_flower_simulation(cfg(), out_dir=work)
        wall_fl = time.perf_counter() - t
        fl = load_run_state(Path(work) / CHECKPOINT, cfg())
    ref2 = Simulation(cfg()).run()

    r_in, r_in2, r_fl = _round_times(ref), _round_times(ref2), _round_times(res)
    m_in = statistics.mean(r_in[1:] + r_in2[1:])
    m_fl = statistics.mean(r_fl[1:])
    a, b = sim.state.server.weights, fl.server.weights
    same = a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    out = {
        "config": args.config,
        "overrides": overrides,
        "rounds": args.rounds,
        "inprocess_round_seconds": r_in,
        "inprocess_round_seconds_after": r_in2,
        "flower_round_seconds": r_fl,
        "inprocess_mean_round_seconds": m_in,
        "flower_mean_round_seconds": m_fl,
        "ratio_flower_over_inprocess": m_fl / m_in,
        "flower_startup_seconds": res["timings"]["flower_startup_seconds"],
        "inprocess_wall_seconds": wall_in,
        "flower_wall_seconds": wall_fl,
        "same_global_weights": bool(same),
        "versions": versions(),
    }
    write_json(args.out, out)
    print(f"config {args.config} ({args.rounds} rounds; round 1 and evaluation excluded)")
    print(
        f"  in-process round  {m_in:8.2f} s   {' '.join(f'{x:.2f}' for x in r_in)} | "
        f"after Flower: {' '.join(f'{x:.2f}' for x in r_in2)}"
    )
    print(f"  Flower round      {m_fl:8.2f} s   {' '.join(f'{x:.2f}' for x in r_fl)}")
    ok = m_fl / m_in <= 1.3
    print(
        f"  ratio Flower / in-process = {m_fl / m_in:.3f}  (target <= 1.3: "
        f"{'PASS' if ok else 'FAIL'}; Flower's simulation engine queues each node's "
        f"messages in a loop that waits a fixed 0.1 s between looks, no option sets it)"
    )
    print(
        f"  Flower one-off start-up (Ray, node data loading): "
        f"{res['timings']['flower_startup_seconds']:.1f} s (not in the ratio)"
    )
    print(f"  same global weights: {same}")
    print(f"  written to {args.out}")
    return 0 if ok and same else 1


def _share_seconds(res: dict[str, Any]) -> list[float]:
    return [r["phases"]["share"]["seconds"] for r in res["records"] if "share" in r["phases"]]


def _stage_seconds(res: dict[str, Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for m in res.get("flower", {}).get("messages", []):
        if m["phase"].startswith("share"):
            out.setdefault(m["phase"], []).append(m["seconds"])
    return out


def _deployment_run(config: Path, n: int, work: Path, isolation: str) -> dict[str, Any]:
    import json

    from fedspectral.fed.flower.deploy.local import LocalDeployment

    res_dir = work / "results"
    with LocalDeployment(
        n,
        workdir=work / "deploy",
        isolation=isolation,
        policy=BENCH_POLICY,
    ) as dep:
        status = dep.run(
            REPO / "flower",
            {"config": str(config), "out-dir": str(res_dir), "round-timeout": 600.0},
            timeout=3600,
            done=lambda: (res_dir / "convergence.png").exists(),
        )
    if status != "finished:completed":
        raise SystemExit(f"deployment run ended {status!r} (logs in {work / 'deploy'})")
    return json.loads((res_dir / "results.json").read_text())


def secure(args: argparse.Namespace) -> int:
    """FedSC's share phase, plain and through secure aggregation, side by side."""
    import tempfile

    from fedspectral.config import save_config
    from fedspectral.fed.flower.apps.engine import run_flower_simulation
    from fedspectral.fed.simulation import Simulation
    from fedspectral.fed.validation import load_config
    from fedspectral.results import versions, write_json

    config = args.config  # digits_smoke.yaml unless --config is given (main)
    name = "flower_secure_deployment.json" if args.deployment else "flower_secure.json"
    out_path = args.out
    if out_path == str(REPO / "results" / "bench" / "flower_overhead.json"):
        out_path = str(REPO / "results" / "bench" / name)
    base = [
        f"method.rounds={args.rounds}",
        f"eval.every={args.rounds}",
        "eval.linear_probe=false",
        "run.progress=false",
        *args.overrides,
    ]

    def cfg(sec: bool) -> Any:
        return load_config(config, [*base, f"method.params.secure_aggregation={str(sec).lower()}"])

    runs: dict[str, dict[str, Any]] = {}
    runs["inprocess plain"] = Simulation(cfg(False)).run()
    runs["inprocess secagg"] = Simulation(cfg(True), secure_sum="secagg").run()
    if args.deployment:
        n = int(cfg(False).partition.num_clients)
        for label, sec in (("deployment plain", False), ("deployment secure", True)):
            work = Path(tempfile.mkdtemp(prefix="fedspectral-bench-"))
            save_config(cfg(sec), work / "config.yaml")
            runs[label] = _deployment_run(work / "config.yaml", n, work, args.isolation)
    else:
        runs["flower plain"] = run_flower_simulation(cfg(False))
        runs["flower secure"] = run_flower_simulation(cfg(True))
    out = {
        "config": config,
        "overrides": base,
        "rounds": args.rounds,
        "share_seconds": {k: _share_seconds(r) for k, r in runs.items()},
        "round_seconds": {k: _round_times(r) for k, r in runs.items()},
        "stage_seconds": {k: _stage_seconds(r) for k, r in runs.items() if k.endswith("secure")},
        "versions": versions(),
    }
    write_json(out_path, out)
    print(f"config {config} ({args.rounds} rounds; FedSC's share phase, seconds per round)")
    for k, v in out["share_seconds"].items():
        print(
            f"  {k:<20} share {' '.join(f'{x:7.2f}' for x in v)}   round "
            f"{' '.join(f'{x:7.2f}' for x in out['round_seconds'][k])}"
        )
    for k, st in out["stage_seconds"].items():
        for stage, v in st.items():
            print(f"    {k}: {stage:<26} {' '.join(f'{x:7.2f}' for x in v)}")
    plain = next(
        k for k in out["share_seconds"] if not k.startswith("inprocess") and k.endswith("plain")
    )
    sec = plain.replace("plain", "secure")
    after = 1 if args.rounds > 1 else 0  # round 1 pays the nodes' data loading
    ratio = statistics.mean(out["share_seconds"][sec][after:]) / statistics.mean(
        out["share_seconds"][plain][after:]
    )
    out["ratio_secure_over_plain_share"] = ratio
    write_json(out_path, out)
    print(
        f"  secure / plain share phase ({plain.split()[0]}"
        f"{', round 1 excluded' if after else ''}): {ratio:.2f}"
    )
    print(f"  written to {out_path}")
    return 0


def deployment(args: argparse.Namespace) -> int:
    """In process, then the loopback deployment, same config; seconds per round."""
    import json
    import tempfile

    from fedspectral.config import save_config
    from fedspectral.fed.federation import prepare_federation
    from fedspectral.fed.flower.deploy.local import LocalDeployment
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.simulation import Simulation
    from fedspectral.fed.validation import load_config
    from fedspectral.results import versions, write_json

    config = args.config  # digits_smoke.yaml unless --config is given (main)
    out_path = args.out
    if out_path == str(REPO / "results" / "bench" / "flower_overhead.json"):
        out_path = str(REPO / "results" / "bench" / "flower_deployment.json")
    overrides = [f"method.rounds={args.rounds}", "run.progress=false", *args.overrides]
    cfg = load_config(config, overrides)
    n = len(prepare_federation(cfg, build_method(cfg)).clients)
    ref = Simulation(load_config(config, overrides)).run()
    r_in = _round_times(ref)
    work = Path(tempfile.mkdtemp(prefix="fedspectral-bench-"))
    save_config(cfg, work / "config.yaml")
    res_dir = work / "results"
    t = time.perf_counter()
    with LocalDeployment(
        n,
        workdir=work / "deploy",
        isolation=args.isolation,
        policy=BENCH_POLICY,
    ) as dep:
        t_up = time.perf_counter() - t
        status = dep.run(
            REPO / "flower",
            {"config": str(work / "config.yaml"), "out-dir": str(res_dir), "round-timeout": 600.0},
            timeout=3600,
            done=lambda: (res_dir / "convergence.png").exists(),
        )
        wall = time.perf_counter() - t
        if status != "finished:completed":
            raise SystemExit(f"deployment run ended {status!r} (logs in {work / 'deploy'})")
        res = json.loads((res_dir / "results.json").read_text())
        phases = [{p: ph["seconds"] for p, ph in r["phases"].items()} for r in res["records"]]
        # the floor: a Flower app doing nothing, same SuperNodes, same message rounds
        null_dir = work / "null"
        n_phases = max(len(ph) for ph in phases)
        status = dep.run(
            NULL_APP,
            {"rounds": args.rounds, "phases": n_phases, "out-dir": str(null_dir), "min-nodes": n},
            timeout=1800,
            done=lambda: (null_dir / "null_rounds.json").exists(),
        )
        if not (null_dir / "null_rounds.json").exists():
            raise SystemExit(f"null app run ended {status!r} (logs in {work / 'deploy'})")
        null = json.loads((null_dir / "null_rounds.json").read_text())
    r_dep = _round_times(res)
    r_null = [sum(r) for r in null["rounds"]]
    after = 1 if args.rounds > 1 else 0  # round 1 pays the nodes' data loading
    m_dep = statistics.mean(r_dep[after:])
    m_null = statistics.mean(r_null[after:])
    breakdown = _breakdown(res, work / "deploy", n) if args.isolation == "process" else []
    out = {
        "config": config,
        "overrides": overrides,
        "nodes": n,
        "isolation": args.isolation,
        "inprocess_round_seconds": r_in,
        "deployment_round_seconds": r_dep,
        "deployment_phase_seconds": phases,
        "null_round_seconds": r_null,
        "null_message_round_seconds": null["rounds"],
        "deployment_mean_round_seconds": m_dep,
        "null_mean_round_seconds": m_null,
        "ratio_deployment_over_null": m_dep / m_null,
        "rounds_in_means": f"{after + 1}-{args.rounds}",
        "loadavg": os.getloadavg(),
        "deployment_startup_seconds": t_up,
        "deployment_wall_seconds": wall,
        "phase_breakdown": breakdown,
        "versions": versions(),
    }
    write_json(out_path, out)
    print(
        f"config {config} ({args.rounds} rounds, {n} SuperNodes on 127.0.0.1, "
        f"isolation {args.isolation}, plain flower-supernode; evaluation excluded)"
    )
    print(f"  in-process  s/round: {' '.join(f'{x:.2f}' for x in r_in)}")
    print(f"  deployment  s/round: {' '.join(f'{x:.2f}' for x in r_dep)}")
    for i, ph in enumerate(phases, 1):
        print(f"    round {i}: " + ", ".join(f"{p} {v:.2f} s" for p, v in ph.items()))
    print(
        f"  null app    s/round: {' '.join(f'{x:.2f}' for x in r_null)}  (a Flower app doing "
        f"nothing: {n_phases} message rounds of query.hello per round, same SuperNodes)"
    )
    for i, ph in enumerate(null["rounds"], 1):
        print(f"    round {i}: " + ", ".join(f"{v:.2f} s" for v in ph))
    rounds_used = f"rounds {after + 1}-{args.rounds}" if after else "round 1"
    print(
        f"  deployment round {m_dep:.2f} s / null-app round {m_null:.2f} s = "
        f"{m_dep / m_null:.2f}  ({rounds_used}; target <= 1.2: the floor is Flower's "
        "SuperNode, which sleeps a fixed 3 s after each empty poll; no option sets it)"
    )
    if breakdown:
        print(
            "  where a phase's time goes, seconds (mean over the nodes | the node that "
            "answered last):"
        )
        print(f"    {'phase':<9}{'total':>7}{'push':>6}" + "".join(f"{c:>17}" for c in _PARTS))
        for b in breakdown:
            print(
                f"    {b['phase']:<9}{b['total']:>7.2f}{b['push']:>6.2f}"
                + "".join(f"{b['mean'][c]:>9.2f} |{b['last'][c]:>6.2f}" for c in _PARTS)
            )
        print(
            "    push: ServerApp -> SuperLink; pickup: until the node's runtime has the "
            "task (the SuperNode's idle poll, its download of the message); input: "
            "the runtime pulls the message; ClientApp: the node's computation; output: "
            "reply and context back to the SuperNode; return: until the ServerApp has "
            "the reply (the SuperNode's reply poll, upload, the server's 0.1 s "
            "poll and download)"
        )
    print(f"  SuperLink + SuperNodes start-up {t_up:.1f} s; whole deployment run {wall:.1f} s")
    print(f"  written to {out_path}")
    return 0 if m_dep / m_null <= 1.2 else 1  # as the other benchmarks: 1 on a missed target


_PARTS = ("pickup", "input", "ClientApp", "output", "return")


def _breakdown(res: dict[str, Any], deploy_dir: Path, n: int) -> list[dict[str, Any]]:
    """Per phase: the server's push, then for each node (from its runtime's log) the
    wait until it had the task, its input / ClientApp / output times, and the wait
    until the server had its reply -- the mean over nodes and the last node's."""
    tasks: dict[tuple[str, str], dict[str, float]] = {}
    for i in range(n):
        log = deploy_dir / f"supernode-{i}-runtime.log"
        if not log.exists():
            continue
        for line in log.read_text(errors="replace").splitlines():
            w = line.split()
            if "task" not in w or "started" not in w:
                continue
            k = w.index("task")
            try:
                group = w[k + 2]
                vals = {
                    "start": float(w[w.index("started") + 1]),
                    "input": float(w[w.index("input") + 1]),
                    "ClientApp": float(w[w.index("ClientApp") + 1]),
                    "output": float(w[w.index("output") + 1]),
                }
            except (ValueError, IndexError):
                continue
            tasks[(f"client-{i}", group)] = vals
    out = []
    for m in res.get("flower", {}).get("messages", []):
        if m.get("started_at") is None:
            continue
        group = f"{m['round']}:{m['phase']}"
        per: dict[str, dict[str, float]] = {}
        for cid, r in m["reply_seconds"].items():
            t = tasks.get((cid, group))
            if t is None:
                continue
            t0 = m["started_at"] + m["push_seconds"]
            end = t["start"] + t["input"] + t["ClientApp"] + t["output"]
            per[cid] = {
                "pickup": t["start"] - t0,
                "input": t["input"],
                "ClientApp": t["ClientApp"],
                "output": t["output"],
                "return": m["started_at"] + r - end,
            }
        if not per:
            continue
        last = max(m["reply_seconds"].items(), key=lambda kv: kv[1])[0]
        out.append(
            {
                "phase": group,
                "total": m["seconds"],
                "push": m["push_seconds"],
                "mean": {c: statistics.mean(p[c] for p in per.values()) for c in _PARTS},
                "last": per.get(last, dict.fromkeys(_PARTS, float("nan"))),
            }
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
