"""Fuzzing harness: bad input at every entry point, each case in its own process.

Hypothesis strategies draw cases for every ``fedspectral`` subcommand (argument vectors),
the scripts of ``benchmarks/`` and ``scripts/fedsc_sweep.py`` (run as ``__main__``, their
errors classified like the CLI's: exit 2 and one ``error:`` line),
config files (YAML text for ``train``), data files (Fashion-MNIST idx ``.gz`` and
``.npz`` arrays) and the library (ledger, mechanisms and calibration, estimators, the
aggregator, the planner).  Each case runs in a child process forked from this one (the
heavy imports are done once, before the first fork) with a wall-clock timeout, a memory
limit (``resource.setrlimit(RLIMIT_AS)``: the child's size at the fork plus
``--mem-gib``) and its own working folder, and is classified as issue 24 does:

``ok``        a correct result, or a clear error: CLI exit 2 with ``fedspectral <cmd>:
              error:`` (or argparse's usage line), no traceback, the message naming the
              value or key given, no file written; library: ``TypeError``/``ValueError``
              (``FileNotFoundError`` for missing data) naming the parameter or value
``wrong``     silently wrong: success where the input is known to be invalid, or a result
              an oracle refutes (strict JSON, ε against the exact single-release ε,
              loaded data against the bytes written, orthonormal components, ...)
``partial``   an error after a file was written
``hang``      no answer within the timeout
``crash``     a traceback, exit 1, a signal, an exception other than the documented ones
              (``MemoryError`` included: a size without a bound)
``unclear``   an error whose message names neither the value nor the parameter, or is
              longer than 2000 characters

Usage::

    python scripts/fuzz.py                 # fast subset (about 40 cases)
    nice -n 10 python scripts/fuzz.py --long --cases 600 --report fuzz.json

The table printed at the end counts cases by entry point and class; ``--show CLASS``
prints the non-OK cases of that class with their input and output.  ``tests/test_fuzz.py``
runs the fast subset in ``make test``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
CLASSES = ("ok", "wrong", "partial", "hang", "crash", "unclear")
MAX_MESSAGE = 2000


# the sibling modules, importable once scripts/ is on sys.path (also when loaded by a test)
from fuzz_cases import FAST, STRATEGIES, Case, setup_odd  # noqa: E402
from fuzz_cases_r3 import FAST_R3, STRATEGIES_R3  # noqa: E402
from fuzz_cases_r5 import FAST_R5, STRATEGIES_R5  # noqa: E402

STRATEGIES = {**STRATEGIES, **STRATEGIES_R3, **STRATEGIES_R5}
FAST = (*FAST, *FAST_R3, *FAST_R5)


def _collector(strategy: Any, got: list[Case], n: int, at: int) -> Callable[[], None]:
    """A Hypothesis test that appends ``n`` drawn cases to ``got`` (run, not asserted)."""

    @seed(at)
    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case: Case) -> None:
        got.append(case)

    return collect


def draw_cases(entries: tuple[str, ...], per_entry: int, base_seed: int) -> list[Case]:
    """``per_entry`` cases of each entry point, drawn by Hypothesis from ``base_seed``."""
    out: list[Case] = []
    for i, name in enumerate(entries):
        got: list[Case] = []
        collect = _collector(STRATEGIES[name](), got, per_entry, base_seed * 1000 + i)
        collect()
        out += got[:per_entry]
    return out


# ======================================================================================
# running a case
# ======================================================================================
def _prepare(case: Case, folder: Path) -> set[str]:
    for rel, content in case.files.items():
        path = folder / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content or b"")
    setup_odd(folder)
    if case.kind != "lib" and not (folder / "configs").exists():
        os.symlink(ROOT / "configs", folder / "configs")  # commands run from the repo root
    return _listing(folder)


def _listing(folder: Path) -> set[str]:
    """Every path under ``folder`` with its size and modification time (a rewritten file
    counts as written)."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        for f in filenames + dirnames:
            path = os.path.join(dirpath, f)
            try:
                st_ = os.lstat(path)
                stamp = "" if f in dirnames else f" ({st_.st_size} B, {st_.st_mtime_ns})"
            except OSError:
                stamp = ""
            out.add(os.path.relpath(path, folder) + stamp)
    return out


def _vmsize() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(case: Case, folder: Path, result: Path, mem_bytes: int) -> None:
    """Runs in the forked child: limits, then the case; never returns."""
    os.setsid()
    limit = _vmsize() + mem_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.chdir(folder)
    if "torch" in sys.modules:  # a forked OpenMP pool is unusable: parallel regions stay
        sys.modules["torch"].set_num_threads(1)  # on this thread
    out_fd = os.open(folder.parent / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_fd = os.open(folder.parent / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", 0), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", 0), write_through=True)
    code = 0
    try:
        if case.kind in ("cli", "script"):
            try:
                code = _main(case)
            except SystemExit as exc:  # as the interpreter: a message is printed, exit 1
                code = 0 if exc.code is None else exc.code
                if not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
            except BaseException:  # noqa: BLE001 - any escape is the finding
                traceback.print_exc()
                code = 1
            rec: dict[str, Any] = {"code": code}
        else:
            try:
                value = case.func(folder)
            except case.allowed as exc:
                rec = {"error": type(exc).__name__, "message": str(exc)}
            except BaseException as exc:  # noqa: BLE001 - any other exception is a crash
                rec = {
                    "crash": type(exc).__name__,
                    "message": str(exc)[:2000],
                    "traceback": traceback.format_exc()[-3000:],
                }
            else:
                reason = None
                if case.oracle is not None:
                    try:
                        reason = case.oracle(value, folder)
                    except BaseException as exc:  # noqa: BLE001
                        reason = f"oracle failed: {type(exc).__name__}: {exc}"
                rec = {"value": repr(value)[:300], "oracle": reason}
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with _suppress():
                stream.flush()  # modules may hold the original streams (same fds)
        result.write_text(json.dumps(rec))
    finally:
        os._exit(code if case.kind != "lib" else 0)


def _main(case: Case) -> int:
    """Run a ``cli`` case (``fedspectral.cli.main``) or a ``script`` case (the script
    ``argv[0]``, relative to the repository, run as ``__main__`` with ``argv[1:]``)."""
    if case.kind == "cli":
        from fedspectral import cli

        return int(cli.main(list(case.argv)) or 0)
    import runpy

    script = ROOT / case.argv[0]
    sys.argv = [str(script), *case.argv[1:]]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def run_case(case: Case, mem_gib: float = 3.0, keep: bool = False) -> dict[str, Any]:
    """Fork, run ``case`` in the child, classify (module docstring)."""
    base = Path(tempfile.mkdtemp(prefix="fedspectral-fuzz-"))
    folder = base / "work"
    folder.mkdir()
    before = _prepare(case, folder)
    result = base / "result.json"
    t0 = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(case, folder, result, int(mem_gib * 2**30))
    status = None
    while time.monotonic() - t0 < case.timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        with _suppress():
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = None  # timed out: a hang
    seconds = time.monotonic() - t0
    rec = json.loads(result.read_text()) if result.exists() else {}
    res = {
        "entry": case.entry,
        "case": case.describe(),
        "seconds": round(seconds, 2),
        "stdout": _read(base / "stdout"),
        "stderr": _read(base / "stderr"),
    }
    after = _listing(folder) if folder.exists() else before
    res["written"] = sorted(after - before)
    res.update(classify(case, status, rec, res))
    if not keep:
        _rmtree(base)
    return res


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-6000:]
    except OSError:
        return ""


def _rmtree(path: Path) -> None:
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            with _suppress():
                os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(path, ignore_errors=True)


def _names_ok(message: str, names: list[str]) -> bool:
    low = message.lower()
    return not names or any(n and n.lower() in low for n in names)


def classify(case: Case, status: int | None, rec: dict, res: dict) -> dict[str, str]:
    """The class of a finished case and a one-line reason."""
    if status is None:
        return {"class": "hang", "why": f"no answer in {case.timeout:.0f} s"}
    if os.WIFSIGNALED(status):
        return {"class": "crash", "why": f"killed by signal {os.WTERMSIG(status)}"}
    code = os.WEXITSTATUS(status)
    if case.kind == "lib":
        return _classify_lib(case, rec, res)
    err = res["stderr"]
    if "Traceback (most recent call last)" in err:
        return {"class": "crash", "why": "traceback: " + err.strip().splitlines()[-1][:200]}
    if code == 0:
        if case.must_fail:
            return {"class": "wrong", "why": "exit 0 on input known to be invalid"}
        why = case.oracle(res, Path(".")) if case.oracle else None
        return {"class": "wrong", "why": why} if why else {"class": "ok", "why": "exit 0"}
    if case.argv[:1] == ["audit"] and code == 1 and "error:" not in err:
        return {"class": "ok", "why": "audit verdict FAIL (exit 1)"}
    if code != 2:
        return {"class": "crash", "why": f"exit {code}: {err.strip()[-200:]}"}
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    msg = "\n".join(lines) or err
    if not lines:
        return {"class": "unclear", "why": f"exit 2 without an error line: {err[-200:]}"}
    if res["written"]:
        return {"class": "partial", "why": f"error after writing {res['written'][:5]}: {msg[:200]}"}
    if len(msg) > MAX_MESSAGE:
        return {"class": "unclear", "why": f"a {len(msg)}-character message"}
    if not _names_ok(msg, case.names):
        return {"class": "unclear", "why": f"names none of {case.names[:6]}: {msg[:250]}"}
    return {"class": "ok", "why": msg[:200]}


def _classify_lib(case: Case, rec: dict, res: dict) -> dict[str, str]:
    if not rec:
        return {
            "class": "crash",
            "why": "the child died without a result " + res["stderr"].strip()[-200:],
        }
    if "crash" in rec:
        return {"class": "crash", "why": f"{rec['crash']}: {rec['message'][:200]}"}
    if "error" in rec:
        msg = rec["message"]
        if res["written"]:
            return {"class": "partial", "why": f"error after writing {res['written'][:5]}"}
        if len(msg) > MAX_MESSAGE:
            return {"class": "unclear", "why": f"a {len(msg)}-character message"}
        if not _names_ok(msg, case.names):
            return {
                "class": "unclear",
                "why": f"{rec['error']} naming none of {case.names[:6]}: {msg[:250]}",
            }
        return {"class": "ok", "why": f"{rec['error']}: {msg[:200]}"}
    if case.must_fail:
        return {"class": "wrong", "why": f"accepted invalid input: {rec['value'][:200]}"}
    if rec.get("oracle"):
        return {"class": "wrong", "why": rec["oracle"][:300]}
    return {"class": "ok", "why": "result checked"}


# ======================================================================================
# the run and the table
# ======================================================================================
def preload() -> None:
    """Import what the cases use once, before the first fork (the children share it)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import fedspectral.cli
    import fedspectral.data
    import fedspectral.fed.correlation
    import fedspectral.pca
    import fedspectral.pca.planner
    import fedspectral.privacy  # noqa: F401


def run(
    entries: tuple[str, ...],
    per_entry: int,
    base_seed: int = 0,
    mem_gib: float = 3.0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    cases = draw_cases(entries, per_entry, base_seed)
    out = []
    for i, case in enumerate(cases):
        res = run_case(case, mem_gib)
        out.append(res)
        if progress:
            print(
                f"[{i + 1}/{len(cases)}] {res['class']:<8} {res['seconds']:6.1f}s "
                f"{case.describe()[:110]}",
                flush=True,
            )
            if res["class"] != "ok":
                print(f"           -> {res['why'][:220]}", flush=True)
    return out


def table(results: list[dict[str, Any]]) -> str:
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        counts[r["entry"]][r["class"]] += 1
    width = max(len(e) for e in counts) if counts else 10
    head = f"| {'entry point':<{width}} | " + " | ".join(f"{c:>7}" for c in CLASSES) + " | total |"
    lines = [head, "|" + "-" * (width + 2) + "|" + "|".join(["-" * 9] * len(CLASSES)) + "|-------|"]
    for e in sorted(counts):
        c = counts[e]
        lines.append(
            f"| {e:<{width}} | "
            + " | ".join(f"{c[k]:>7}" for k in CLASSES)
            + f" | {sum(c.values()):>5} |"
        )
    tot: Counter = sum(counts.values(), Counter())
    lines.append(
        f"| {'all':<{width}} | "
        + " | ".join(f"{tot[k]:>7}" for k in CLASSES)
        + f" | {sum(tot.values()):>5} |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--long", action="store_true", help="every entry point (slow ones too)")
    ap.add_argument(
        "--cases",
        type=int,
        default=None,
        help="total cases, spread evenly over the entry points (default: 40 fast, 600 long)",
    )
    ap.add_argument("--only", default=None, help="comma-separated entry points")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mem-gib",
        type=float,
        default=3.0,
        help="memory a case may add to the forked process (default 3 GiB)",
    )
    ap.add_argument("--report", default=None, help="write every result to this JSON file")
    ap.add_argument("--show", default=None, help="print the cases of this class (or 'bad')")
    args = ap.parse_args(argv)
    entries = tuple(STRATEGIES) if args.long else FAST
    if args.only:
        entries = tuple(e.strip() for e in args.only.split(","))
        unknown = [e for e in entries if e not in STRATEGIES]
        if unknown:
            ap.error(f"unknown entry points {unknown}; known: {list(STRATEGIES)}")
    total = args.cases or (600 if args.long else 40)
    per = max(1, math.ceil(total / len(entries)))
    preload()
    t0 = time.time()
    results = run(entries, per, args.seed, args.mem_gib)
    print(f"\n{len(results)} cases in {time.time() - t0:.0f} s\n")
    print(table(results))
    if args.report:
        Path(args.report).write_text(json.dumps(results, indent=1))
    show = args.show or "bad"
    bad = [r for r in results if (r["class"] != "ok" if show == "bad" else r["class"] == show)]
    for r in bad:
        print(f"\n[{r['class']}] {r['case']}\n    {r['why']}")
    return 0 if all(r["class"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
