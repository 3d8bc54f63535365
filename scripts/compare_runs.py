"""Are two sets of runs the same computation?  The behaviour proof of refactors.

Harness: train a fixed list of short runs with two source trees and compare them::

    python scripts/compare_runs.py --before REV | --before-src DIR | --reuse-before DIR
        [--after-src DIR] --out WORKDIR [--only NAME ...] [--list]

trains every run of :data:`RUNS` (configs/digits_smoke.yaml: 5 clients, 2 rounds, 500
training images, KNN on 200 test images; one thread) once with ``PYTHONPATH`` set to the
before source and once with the after source (default: this checkout's ``src``), each a
``nice python -m fedspectral.cli train`` subprocess, into ``WORKDIR/before/NAME`` and
``WORKDIR/after/NAME``, then compares them as below.  ``--before REV`` checks the git
revision out in a temporary detached worktree and uses its ``src``; ``--reuse-before DIR``
trains nothing on the before side and compares against the runs already in ``DIR/NAME``
(a before side written by an earlier call, e.g. ``WORKDIR/before``).  The list covers
every registered method on the in-process engine, FedSC with DP, with secure aggregation
(without and with DP), with partial participation, FedSC interrupted by ``SIGTERM`` once
the checkpoint of round 1 is on disk and resumed with ``--resume``, and FedSC, FedSC with
secure aggregation and DP, and one baseline on ``--engine flower`` (skipped, and said so,
where Flower is not installed).  A run that fails on either side is reported ``FAILED``.

Comparison of finished run folders (written by ``fedspectral train --out``)::

    python scripts/compare_runs.py BEFORE AFTER NAME [NAME ...]

compares ``BEFORE/NAME`` with ``AFTER/NAME`` for each NAME: every field of
``results.json`` except wall-clock seconds, library versions and the output path, and
every tensor of ``checkpoint.pt`` (loaded with ``weights_only=True``) with ``torch.equal``
(same dtype and shape too), plus the checkpoint's JSON metadata field by field (its
digest is a hash over text that holds wall-clock seconds, so it is left out).  Prints one
line per run and ``IDENTICAL`` or ``DIFFERENT``; exit status 0 only when identical.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "digits_smoke.yaml"

# ignored: wall-clock seconds, library versions, the output folder (the run's own path),
# and in a Flower run: when each message started, each reply's seconds, Flower's random
# node ids
IGN = re.compile(
    r"(seconds[^/]*$|^/versions/|^/config/run/out$|^/meta/elapsed$"
    r"|/reply_seconds/|/started_at$|^/flower/nodes/)"
)

# --------------------------------------------------------------------------------------
# the runs
# --------------------------------------------------------------------------------------
#: overrides every run shares: short, one thread, small data; ``eval.initial`` explicit so
#: that trees from before and after its default turned on evaluate the initial weights alike
COMMON = (
    "method.rounds=2",
    "run.threads=1",
    "data.max_train=500",
    "eval.test_size=200",
    "eval.initial=true",
)
DP = ("dp.enabled=true", "dp.epsilon=2.0", "dp.delta=1e-3")
SECURE = ("method.params.secure_aggregation=true",)
FEDCA = ("method.params.public_size=100", "method.params.base_epochs=3")
METHODS = ("fedsc", "fedavg_sc", "fedavg_byol", "fedu", "fedema", "fedx", "fedca", "central_sc")

#: name -> (overrides, engine, interrupted after round 1 and resumed)
RUNS: dict[str, tuple[tuple[str, ...], str, bool]] = {
    **{m: ((f"method.name={m}", *(FEDCA if m == "fedca" else ())), "inprocess", False)
       for m in METHODS},
    "fedsc_dp": (DP, "inprocess", False),
    "fedsc_secure": (SECURE, "inprocess", False),
    "fedsc_secure_dp": (SECURE + DP, "inprocess", False),
    "fedsc_partial": (("method.clients_per_round=3",), "inprocess", False),
    "fedsc_resumed": ((), "inprocess", True),
    "flower_fedsc": ((), "flower", False),
    "flower_fedsc_secure_dp": (SECURE + DP, "flower", False),
    "flower_fedu": (("method.name=fedu",), "flower", False),
}  # fmt: skip

RUN_TIMEOUT_S = 1200


# --------------------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------------------
def flat(x, p=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{p}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from flat(v, f"{p}[{i}]")
    else:
        yield p, x


def tensors(x, p=""):
    if isinstance(x, torch.Tensor):
        yield p, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from tensors(v, f"{p}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from tensors(v, f"{p}[{i}]")
    else:
        yield p, ("scalar", x)


def _ckpt(run: Path) -> dict:
    raw = torch.load(run / "checkpoint.pt", weights_only=True)
    meta = json.loads(raw.pop("meta"))  # JSON text: compared field by field
    raw.pop("digest")  # a hash over the meta text, which holds the wall-clock seconds
    out = dict(tensors(raw))
    out.update({"/meta" + k: ("scalar", v) for k, v in flat(meta)})
    return out


def _results_diff(a_run: Path, b_run: Path, ignore: tuple[str, ...] = ()) -> tuple:
    ra = dict(flat(json.loads((a_run / "results.json").read_text())))
    rb = dict(flat(json.loads((b_run / "results.json").read_text())))
    keys = set(ra) | set(rb)
    ign = sorted(k for k in keys if IGN.search(k) or k in ignore)
    a_dir, b_dir = str(a_run.parent), str(b_run.parent)
    diff = [
        k
        for k in sorted(keys - set(ign))
        if ra.get(k, "<missing>") != rb.get(k, "<missing>")
        and not (
            isinstance(ra.get(k), str)
            and ra.get(k, "").replace(a_dir, "X") == str(rb.get(k, "")).replace(b_dir, "X")
        )
    ]
    return diff, len(keys), len(ign), ra, rb


def _ckpt_diff(ca: dict, cb: dict) -> list[str]:
    tdiff = []
    for k in sorted(set(ca) | set(cb)):
        x, y = ca.get(k), cb.get(k)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if not (x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)):
                tdiff.append(k)
        elif x != y and not IGN.search(
            k.replace("/meta", "", 1) if k.startswith("/meta/records") else k
        ):
            tdiff.append(k)
    return tdiff


def _show(x, y) -> str:
    """What differs between two checkpoint entries, in one short line."""
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return f"{str(x)[:80]} {str(y)[:80]}"
    if x.dtype != y.dtype or x.shape != y.shape:
        return f"{x.dtype} {tuple(x.shape)} != {y.dtype} {tuple(y.shape)}"
    ne = x != y
    gap = (x[ne].double() - y[ne].double()).abs().max().item() if x.is_floating_point() else 1
    return f"{int(ne.sum())} of {x.numel()} elements differ (largest gap {gap:.3g})"


def compare(
    a_run: Path, b_run: Path, label: str, ignore: tuple[str, ...] = ()
) -> tuple[bool, list[str]]:
    """Compare two run folders: (identical, the lines that say so).  ``ignore``: further
    results.json fields (flattened paths) left out."""
    for run in (a_run, b_run):
        for f in ("results.json", "checkpoint.pt"):
            if not (run / f).is_file():
                return False, [f"{label}: DIFFERENT: {run / f} is missing"]
    diff, nkeys, nign, ra, rb = _results_diff(a_run, b_run, ignore)
    ca, cb = _ckpt(a_run), _ckpt(b_run)
    tdiff = _ckpt_diff(ca, cb)
    nt = sum(isinstance(v, torch.Tensor) for v in ca.values())
    nm = sum(k.startswith("/meta") for k in ca)
    lines = [
        (
            f"{label}: results.json {nkeys - nign} fields equal of {nkeys} "
            f"({len(diff)} differ; {nign} ignored: wall-clock seconds, versions, out path, "
            f"Flower message times and node ids{''.join(', ' + k for k in ignore)}); "
            f"checkpoint {nt} tensors torch.equal, {nm} meta fields, {len(tdiff)} differ"
        )
    ]
    lines += [f"   results {k} {ra.get(k)} {rb.get(k)}" for k in diff[:10]]
    lines += [f"   ckpt {k} {_show(ca.get(k), cb.get(k))}" for k in tdiff[:10]]
    if len(diff) > 10 or len(tdiff) > 10:
        lines.append(f"   ... and {max(len(diff) - 10, 0) + max(len(tdiff) - 10, 0)} more")
    return not diff and not tdiff, lines


def compare_folders(a_dir: str, b_dir: str, names: list[str]) -> bool:
    ok = True
    for m in names:
        same, lines = compare(Path(a_dir) / m, Path(b_dir) / m, m)
        print("\n".join(lines), flush=True)
        ok &= same
    return ok


# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------
def _env(src: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env.pop("PYTHONSTARTUP", None)
    return env


def _check_src(src: Path) -> None:
    """The subprocess imports fedspectral from ``src`` (not from an installed copy)."""
    got = subprocess.run(
        [sys.executable, "-c", "import fedspectral; print(fedspectral.__file__)"],
        check=False,
        env=_env(src),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    want = (src / "fedspectral" / "__init__.py").resolve()
    if got.returncode or Path(got.stdout.strip()).resolve() != want:
        sys.exit(f"compare_runs: {src} does not provide fedspectral ({got.stdout}{got.stderr})")


def _train_cmd(name: str, config: Path, out: Path) -> list[str]:
    overrides, engine, _ = RUNS[name]
    cmd = ["nice", sys.executable, "-m", "fedspectral.cli", "train", "--config", str(config)]
    for o in (*COMMON, *overrides):
        cmd += ["--set", o]
    return [*cmd, "--engine", engine, "--out", str(out), "--quiet"]


def _wait(p: subprocess.Popen, timeout: float) -> int:
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the group this script started for the run
        p.wait()
        return -9


def _interrupt_after_round_1(cmd: list[str], env: dict, out: Path, log) -> str | None:
    """Start the run, SIGTERM it once the checkpoint of round 1 is on disk (written with
    ``os.replace``: complete when it exists); None, or why it did not stop at round 1."""
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    ckpt, t0 = out / "checkpoint.pt", time.monotonic()
    while p.poll() is None and not ckpt.exists() and time.monotonic() - t0 < RUN_TIMEOUT_S:
        time.sleep(0.005)
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)  # the CLI unwinds and exits 143
    rc = _wait(p, RUN_TIMEOUT_S)
    if not ckpt.exists():
        return f"no checkpoint after the interrupted run (exit {rc})"
    done = json.loads(torch.load(ckpt, weights_only=True)["meta"])["round"]
    return None if done == 1 else f"the interrupt came after round {done}, not 1"


def train(name: str, src: Path, config: Path, side_dir: Path) -> str | None:
    """Train run ``name`` with ``src`` into ``side_dir/name``; None, or why it failed."""
    out = side_dir / name
    shutil.rmtree(out, ignore_errors=True)
    cmd, env = _train_cmd(name, config, out), _env(src)
    with open(side_dir / f"{name}.log", "w") as log:
        if RUNS[name][2]:
            why = _interrupt_after_round_1(cmd, env, out, log)
            if why:
                return why
            cmd = [*cmd, "--resume"]
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
        rc = _wait(p, RUN_TIMEOUT_S)
    if rc:
        tail = (side_dir / f"{name}.log").read_text().strip().splitlines()[-1:]
        return f"exit {rc}: {' '.join(tail)} (log: {side_dir / name}.log)"
    return None


def _spec(name: str) -> dict:
    overrides, engine, interrupted = RUNS[name]
    return {"set": [*COMMON, *overrides], "engine": engine, "interrupted": interrupted}


def _record_source(side_dir: Path, names: list[str], label: str) -> None:
    """``side_dir/SOURCE.json``: which code trained each run, and with what settings."""
    f = side_dir / "SOURCE.json"
    rec = json.loads(f.read_text()) if f.is_file() else {"runs": {}}
    rec["runs"].update({n: {"source": label, **_spec(n)} for n in names})
    f.write_text(json.dumps(rec, indent=1) + "\n")


def stale_before(before_dir: Path, names: list[str]) -> dict:
    """Runs of a reused before side trained with other settings than :data:`RUNS` now
    has (by its ``SOURCE.json``): name -> why."""
    f = before_dir / "SOURCE.json"
    runs = json.loads(f.read_text())["runs"] if f.is_file() else {}
    out = {}
    for n in names:
        was = {k: runs.get(n, {}).get(k) for k in ("set", "engine", "interrupted")}
        if n in runs and was != _spec(n):
            out[n] = f"the before side was trained with {was}, not {_spec(n)}: train it again"
    return out


def train_side(src: Path, names: list[str], config: Path, side_dir: Path, label: str) -> dict:
    side_dir.mkdir(parents=True, exist_ok=True)
    _record_source(side_dir, names, label)
    failed = {}
    for name in names:
        t0 = time.monotonic()
        why = train(name, src, config, side_dir)
        state = f"FAILED: {why}" if why else "done"
        print(f"  [{side_dir.name}] {name}: {state} ({time.monotonic() - t0:.0f} s)", flush=True)
        if why:
            failed[name] = why
    return failed


# --------------------------------------------------------------------------------------
# the harness
# --------------------------------------------------------------------------------------
def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compare_runs.py",
        description="train the runs of RUNS with two source trees and compare them bit for "
        "bit (or compare finished runs: compare_runs.py BEFORE AFTER NAME ...)",
    )
    before = p.add_mutually_exclusive_group(required=True)
    before.add_argument("--before", metavar="REV", help="git revision of the before side")
    before.add_argument("--before-src", metavar="DIR", type=Path, help="src of the before side")
    before.add_argument(
        "--reuse-before", metavar="DIR", type=Path, help="before runs already trained: DIR/NAME"
    )
    p.add_argument(
        "--after-src", metavar="DIR", type=Path, default=ROOT / "src",
        help="src of the after side (default: this checkout's src)",
    )  # fmt: skip
    p.add_argument("--out", metavar="WORKDIR", type=Path, required=True)
    p.add_argument(
        "--before-only", action="store_true",
        help="train the before side into WORKDIR/before and stop (for later --reuse-before)",
    )  # fmt: skip
    p.add_argument("--only", metavar="NAME", nargs="+", choices=sorted(RUNS), default=None)
    p.add_argument("--config", type=Path, default=SMOKE, help="base config (default: %(default)s)")
    return p


def _flower_available(src: Path) -> bool:
    cmd = [sys.executable, "-c", "import flwr"]
    r = subprocess.run(cmd, check=False, env=_env(src), capture_output=True)
    return r.returncode == 0


def _resolve_before(args, tmp: Path) -> tuple[Path | None, str]:
    if args.reuse_before is not None:
        if not args.reuse_before.is_dir():
            sys.exit(f"compare_runs: --reuse-before {args.reuse_before}: no such folder")
        return None, f"reused {args.reuse_before}"
    if args.before_src is not None:
        return args.before_src.resolve(), f"src {args.before_src.resolve()}"
    try:
        rev = _git("rev-parse", "--verify", f"{args.before}^{{commit}}")
    except (subprocess.CalledProcessError, FileNotFoundError):
        sys.exit(f"compare_runs: --before {args.before}: not a git revision of {ROOT}")
    _git("worktree", "add", "--detach", str(tmp / "before"), rev)
    return tmp / "before" / "src", f"git {args.before} = {rev} (src of a detached worktree)"


def _resume_equals_uninterrupted(side: Path, names: list[str], failed: dict) -> bool:
    """The after side's interrupted-and-resumed FedSC run against its straight run."""
    if not {"fedsc", "fedsc_resumed"} <= set(names) - set(failed):
        return True
    same, lines = compare(
        side / "fedsc", side / "fedsc_resumed", "fedsc_resumed = fedsc (after side)",
        ignore=("/resumed_from",),
    )  # fmt: skip
    print("\n".join(lines), flush=True)
    return same


def harness(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.before_only and args.reuse_before is not None:
        parser.error("--before-only trains the before side: not with --reuse-before")
    names = args.only or list(RUNS)
    after_src = args.after_src.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="compare_runs_"))
    try:
        before_src, label = _resolve_before(args, tmp)
        for src in (before_src, after_src):
            if src is not None:
                _check_src(src)
        skipped = []
        if not _flower_available(after_src):
            skipped = [n for n in names if RUNS[n][1] == "flower"]
            names = [n for n in names if n not in skipped]
        before_dir = args.reuse_before or args.out / "before"
        failed = stale_before(before_dir, names) if before_src is None else {}
        if before_src is not None:
            failed |= train_side(before_src, names, args.config, before_dir, label)
        if args.before_only:
            bad = sorted(failed)
            print(f"before side in {before_dir}" + (f"; FAILED: {bad}" if bad else ""))
            return 1 if bad else 0
        after_label = f"src {after_src}"
        if after_src == (ROOT / "src").resolve():
            dirty = " plus uncommitted changes" if _git("status", "--porcelain", "src") else ""
            after_label += f" (git HEAD = {_git('rev-parse', 'HEAD')}{dirty})"
        todo = [n for n in names if n not in failed]
        failed |= train_side(after_src, todo, args.config, args.out / "after", after_label)
        ok = True
        for name in names:
            if name in failed:
                print(f"{name}: FAILED: {failed[name]}")
                ok = False
                continue
            same, lines = compare(before_dir / name, args.out / "after" / name, name)
            print("\n".join(lines), flush=True)
            ok &= same
        ok &= _resume_equals_uninterrupted(args.out / "after", names, failed)
        for name in skipped:
            print(f"{name}: SKIPPED (Flower is not installed in this environment)")
    finally:
        if (tmp / "before").exists():
            _git("worktree", "remove", "--force", str(tmp / "before"))
        shutil.rmtree(tmp, ignore_errors=True)
    print("IDENTICAL" if ok else "DIFFERENT")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv and not argv[0].startswith("-"):
        if len(argv) < 3:
            sys.exit(__doc__)
        ok = compare_folders(argv[0], argv[1], argv[2:])
        print("IDENTICAL" if ok else "DIFFERENT")
        return 0 if ok else 1
    return harness(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
