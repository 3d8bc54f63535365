"""Case strategies of the fuzzing harness, round 3 (issue 39): what the third round
reached and the first two did not -- ``export`` of a real run folder, encoder files,
``DistributedDPPCA``'s ``groups``, the BudgetAccountant before a refusal, reproduce's
report folders, sizes in a config, full disks (a fault injected in the case's own
process), Flower run-config values, node policy files and the node's users file.

Each strategy draws a :class:`fuzz_cases.Case`; :mod:`scripts.fuzz` runs them with the
others.  A run folder and an encoder file are built once per process (no training: the
method's untrained weights in a checkpoint with a valid digest) and copied into each
case's folder."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_cases import ODD_FILES, RO, Case
from hypothesis import strategies as st

SMOKE = Path(__file__).resolve().parent.parent / "configs" / "digits_smoke.yaml"
_TEMPLATES: dict[str, dict[str, bytes]] = {}


def run_folder_files(tamper: str = "") -> dict[str, bytes]:
    """The files of a one-round run folder of the smoke config (``run/...``), built once;
    ``tamper`` edits its checkpoint's weights (``"nan"``, ``"shape"``) with a valid digest."""
    if tamper in _TEMPLATES:
        return _TEMPLATES[tamper]
    import yaml

    from fedspectral.config import to_dict
    from fedspectral.fed.checkpoint import save_checkpoint
    from fedspectral.fed.federation import client_ids
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.validation import config_fingerprint, load_config, validate
    from fedspectral.fed.weights import net_to_arrays

    cfg = validate(load_config(SMOKE, ["method.rounds=1", "eval.every=1"]))
    d = to_dict(cfg)
    method = build_method(cfg)
    w = net_to_arrays(method.build_net())
    first = next(iter(w))
    if tamper == "nan":
        w[first] = w[first].copy()
        w[first].flat[0] = np.nan
    elif tamper == "shape":
        w[first] = np.zeros((1, *w[first].shape[1:]), w[first].dtype)
    ids = client_ids(cfg, method)
    from fedspectral.fed.records import PhaseRecord, RoundRecord
    from fedspectral.kinds import PhaseKind

    # the typed record (fed/records.py) of a one-phase round, as the runner writes it
    rec = RoundRecord(
        1,
        (ids[0],),
        {"train": PhaseRecord(PhaseKind.TRAIN, (ids[0],), {}, {}, {}, 0.1, 0.1, {})},
        {},
        {},
        {"seconds_round": 0.1},
    ).to_dict()
    state = {
        "round": 1,
        "server": {"weights": w, "arrays": {}, "info": {"clients": list(ids)}},
        "clients": {c: {} for c in ids},
        "ledger": {"releases": []},
        "client_ledger": {"unit": "client"},
        "records": [rec],
        "elapsed": 0.1,
    }
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(Path(tmp) / "c.pt", state, config_fingerprint(d))
        ckpt = (Path(tmp) / "c.pt").read_bytes()
    _TEMPLATES[tamper] = {
        "run/config.yaml": yaml.safe_dump(d, sort_keys=False).encode(),
        "run/checkpoint.pt": ckpt,
        "run/results.json": json.dumps({"config": d}).encode(),
    }
    return _TEMPLATES[tamper]


def _unchanged_run(res: dict, folder: Path) -> str | None:
    """A successful export leaves the run's own files as they were."""
    own = {f"run/{f}" for f in ("config.yaml", "checkpoint.pt", "results.json")}
    touched = [w for w in res.get("written", []) if w.split(" (")[0] in own]
    return f"the run's files were rewritten: {touched}" if touched else None


@st.composite
def export_run_case(d: st.DrawFn) -> Case:
    tamper = d(st.sampled_from(["", "", "", "nan", "shape"]))
    files: dict[str, bytes | None] = {**ODD_FILES, **run_folder_files(tamper)}
    out = d(
        st.sampled_from(
            [
                "enc.pt",
                "run/enc.pt",
                "run/checkpoint.pt",
                "run/results.json",
                "run/config.yaml",
                "run",
                "dangling",
                "adir",
                "afile/x.pt",
                "/dev/null",
                "ro/x.pt",
                "",
            ]
        )
    )
    run_defect = d(st.sampled_from(["", "", "edited", "config-dir", "ckpt-dir", "no-config"]))
    if run_defect == "edited":
        files["run/config.yaml"] = files["run/config.yaml"].replace(b"rounds: 1", b"rounds: 2")
    elif run_defect == "config-dir":
        del files["run/config.yaml"]
        files["run/config.yaml/"] = None
    elif run_defect == "ckpt-dir":
        del files["run/checkpoint.pt"]
        files["run/checkpoint.pt/"] = None
    elif run_defect == "no-config":
        del files["run/config.yaml"]
    good_out = out in ("enc.pt", "run/enc.pt") or (out == "ro/x.pt" and not RO)
    return Case(
        "cli:export (run)",
        "cli",
        argv=["export", "run", "--out", out],
        files=files,
        names=[out or "--out", "--out", "config.yaml", "checkpoint", "run"],
        must_fail=not good_out or bool(tamper) or bool(run_defect),
        oracle=_unchanged_run,
        timeout=120,
        note=f"tamper={tamper or '-'} run={run_defect or 'ok'}",
    )


def _encoder_bytes(kind: str) -> bytes:
    """An encoder file of kind ``kind``: the export of the template run, or a defect of it
    (built once per kind, in the harness's process)."""
    key = f"encoder:{kind}"
    if key in _TEMPLATES:
        return _TEMPLATES[key]["enc.pt"]
    import tempfile

    import torch

    from fedspectral.fed.export import export_encoder

    with tempfile.TemporaryDirectory() as tmp:
        for rel, data in run_folder_files().items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        good = export_encoder(Path(tmp) / "run", Path(tmp) / "good.pt")
        raw = good.read_bytes()
    blob = torch.load(io.BytesIO(raw), weights_only=True)
    model, sd = blob["config"]["model"], blob["state_dict"]
    first = next(iter(sd))
    variants = {
        "good": blob,
        "no-config": {k: v for k, v in blob.items() if k != "config"},
        "no-state": {k: v for k, v in blob.items() if k != "state_dict"},
        "huge": {**blob, "config": {**blob["config"], "model": {**model, "width": 65536}}},
        "nan": {**blob, "state_dict": {**sd, first: sd[first] * float("nan")}},
        "shape": {**blob, "state_dict": {**sd, first: sd[first][:1]}},
        "list": [1, 2, 3],
    }
    if kind == "truncated":
        out = raw[:500]
    else:
        buf = io.BytesIO()
        torch.save(variants[kind], buf)
        out = buf.getvalue()
    _TEMPLATES[key] = {"enc.pt": out}
    return out


@st.composite
def encoder_file_case(d: st.DrawFn) -> Case:
    kind = d(
        st.sampled_from(
            ["good", "no-config", "no-state", "huge", "nan", "shape", "list", "truncated"]
        )
    )

    def call(folder: Path) -> Any:
        from fedspectral.fed.export import load_encoder

        net = load_encoder(folder / "enc.pt")
        return sum(p.numel() for p in net.parameters())

    return Case(
        "lib: encoder file",
        "lib",
        func=call,
        files={"enc.pt": _encoder_bytes(kind)},
        names=["enc.pt"],
        must_fail=kind != "good",
        timeout=120,
        note=kind,
    )


# ------------------------------------------------------------------------ groups
@st.composite
def groups_case(d: st.DrawFn) -> Case:
    n = 120
    kind = d(
        st.sampled_from(
            [
                "ints",
                "strings",
                "mixed",
                "mixed-object",
                "bools",
                "floats-nan",
                "positional",
                "none",
                "short",
                "one-holder+groups",
                "no-secagg+min",
                "no-secagg+colluders",
                "grid-routed",
                "grid-unrouted",
                "many",
            ]
        )
    )
    m = d(st.integers(1, 6))

    def call(folder: Path) -> Any:
        from fedspectral.pca import DistributedDPPCA

        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, 4))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
        idx = np.arange(n) % m
        groups: Any = idx
        kw: dict[str, Any] = {}
        if kind == "strings":
            groups = [f"h{i}" for i in idx]
        elif kind == "mixed":
            groups = [int(i) if j % 2 else str(i) for j, i in enumerate(idx)]
        elif kind == "mixed-object":
            groups = np.array([int(i) if j % 2 else str(i) for j, i in enumerate(idx)], object)
        elif kind == "bools":
            groups = idx % 2 == 0
        elif kind == "floats-nan":
            groups = idx.astype(float)
            groups[3] = np.nan
        elif kind == "short":
            groups = idx[:-1]
        elif kind == "many":
            groups = np.arange(n)
        est = DistributedDPPCA(2, 1.0, 1e-5, random_state=0)
        if kind == "positional":
            return est.fit(X, groups).holders_
        if kind == "none":
            return est.fit(X).holders_
        if kind == "one-holder+groups":
            return DistributedDPPCA(2, 1.0, 1e-5, one_holder=True).fit(X, groups=groups).holders_
        if kind.startswith("no-secagg"):
            kw = {"min_contributors": 1} if kind.endswith("min") else {"colluders": 1}
            est = DistributedDPPCA(2, 1.0, 1e-5, secure_aggregation=False, random_state=0, **kw)
            return est.fit(X, groups=groups).holders_
        if kind.startswith("grid"):
            import sklearn
            from sklearn.model_selection import GridSearchCV, KFold

            seen: list[list[str]] = []

            def score(e: Any, X: Any, y: Any = None) -> float:
                seen.append(list(e.holders_))
                return float(e.explained_variance_.sum())

            search = GridSearchCV(
                est, {"n_components": [1, 2]}, cv=KFold(2), scoring=score, refit=False
            )
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sklearn.config_context(enable_metadata_routing=kind == "grid-routed"):
                    search.fit(X, groups=groups)
            return {"seen": seen, "m": m}
        return est.fit(X, groups=groups).holders_

    def oracle(res: Any, folder: Path) -> str | None:
        if kind.startswith("grid"):
            bad = [s for s in res["seen"] if len(s) != res["m"]]
            return f"a candidate was fitted with holders {bad[0]}" if bad else None
        want = {"strings": m, "bools": min(m, 2), "many": n}.get(kind, m)
        return None if len(res) == want else f"{len(res)} holders fitted, {want} given"

    must_fail = kind in (
        "mixed",
        "mixed-object",
        "floats-nan",
        "positional",
        "none",
        "short",
        "one-holder+groups",
        "no-secagg+min",
        "no-secagg+colluders",
        "grid-unrouted",
    )
    return Case(
        "lib: groups",
        "lib",
        func=call,
        oracle=oracle,
        names=["groups", "holder", "y ", "secure_aggregation", "one_holder", "NaN"],
        must_fail=must_fail and not (kind == "bools" and m == 1),
        timeout=120,
        note=f"{kind}, {m} holder(s)",
    )


# ------------------------------------------------------------------------ budget
@st.composite
def budget_case(d: st.DrawFn) -> Case:
    defect = d(st.sampled_from(["nan", "inf", "norm-raise", "norm-clip", "3d", "empty", "ok"]))
    estimator = d(st.sampled_from(["LocalDPPCA", "LocalDPSparsePCA"]))
    ids = d(st.booleans())

    def call(folder: Path) -> Any:
        import warnings

        from fedspectral import pca
        from fedspectral.privacy import BudgetAccountant

        X: Any = np.random.default_rng(0).normal(size=(80, 5)) / 5
        if defect == "nan":
            X[7, 1] = np.nan
        elif defect == "inf":
            X[7, 1] = np.inf
        elif defect.startswith("norm"):
            X[7] *= 50
        elif defect == "3d":
            X = X.reshape(80, 5, 1)
        elif defect == "empty":
            X = X[:0]
        acc = BudgetAccountant(epsilon=5.0, delta=1e-5)
        policy = "clip" if defect == "norm-clip" else "raise"
        est = getattr(pca, estimator)(
            2, 1.0, 1e-5, norm_policy=policy, accountant=acc, random_state=0
        )
        kw = {"user_ids": [f"u{i}" for i in range(len(X))]} if ids else {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, **kw)
        except (TypeError, ValueError):
            if acc.spent() > 0:
                return f"SPENT {acc.spent():.3g} before refusing"
            raise
        return acc.spent()

    def oracle(res: Any, folder: Path) -> str | None:
        return res if isinstance(res, str) else None

    return Case(
        "lib: budget",
        "lib",
        func=call,
        oracle=oracle,
        names=["X", "row", "NaN", "norm", "dimension", "2-D", "sample", "user_ids"],
        must_fail=defect not in ("ok", "norm-clip"),
        timeout=120,
        note=f"{estimator} X={defect} user_ids={ids}",
    )


# ------------------------------------------------------------------------ sizes
SIZE_SETS = {
    "run.threads": ["100000", "257", "4"],
    "eval.probe_epochs": ["100000000", "10001", "5"],
    "eval.probe_max_iter": ["100000000"],
    "method.params.share_views": ["1000000", "65", "3"],
    "method.params.share_batch_size": ["100000000"],
    "method.params.temperature": ["1e-300", "0.0009", "0.2"],
    "method.params.base_epochs": ["10000000", "10001", "2"],
    "method.params.dict_size": ["1000000000"],
    "method.params.public_size": ["1000000000"],
    "method.rounds": ["1000000000"],
    "model.width": ["65536000"],
}
_METHOD_OF = {
    "temperature": "fedx",
    "base_epochs": "fedca",
    "dict_size": "fedca",
    "public_size": "fedca",
}
_SMALL = {"4", "5", "3", "0.2", "2"}


@st.composite
def sizes_case(d: st.DrawFn) -> Case:
    key = d(st.sampled_from(sorted(SIZE_SETS)))
    value = d(st.sampled_from(SIZE_SETS[key]))
    sets = [f"{key}={value}"]
    name = key.split(".")[-1]
    if name in _METHOD_OF:
        sets.insert(0, f"method.name={_METHOD_OF[name]}")
    argv = ["train", "--config", str(SMOKE), "--out", "out", "--quiet"]
    for s in sets:
        argv += ["--set", s]
    small = value in _SMALL
    if small:  # a value inside the bound: the config is accepted (a dry check only)
        argv = ["reproduce", "fedsc", "--quick", "--dry-run", "--out", "rep", "--set", sets[-1]]
        if name in _METHOD_OF:
            argv = argv[:-2]  # the grid sets the method itself
    return Case(
        "config (sizes)",
        "cli",
        argv=argv,
        names=[key, name, value],
        must_fail=not small,
        timeout=120,
        note=" ".join(sets),
    )


# ------------------------------------------------------------------------ reproduce
def _tables(scale: str, finished: int, planned: int, tier: str = "core") -> bytes:
    return json.dumps(
        {
            "scale": scale,
            "tier": tier,
            "overrides": [],
            "runs_planned": planned,
            "runs_finished": finished,
        }
    ).encode()


@st.composite
def report_folder_case(d: st.DrawFn) -> Case:
    state = d(
        st.sampled_from(["empty", "quick-report", "cpu-report", "garbage-tables", "summary-dir"])
    )
    extra = d(
        st.sampled_from(
            [[], [], ["--set", "optim.lr=0.01"], ["--tier", "full"], ["--seeds", "2"], "noquick"]
        )
    )
    files: dict[str, bytes | None] = {"rep/": None}
    if state == "quick-report":
        files["rep/REPORT.md"] = b"# finished\n"
        files["rep/tables.json"] = _tables("quick", 4, 4)
    elif state == "cpu-report":
        files["rep/REPORT.md"] = b"# finished\n"
        files["rep/tables.json"] = _tables("cpu", 21, 21)
    elif state == "garbage-tables":
        files["rep/REPORT.md"] = b"# finished\n"
        files["rep/tables.json"] = d(st.sampled_from([b"[]", b"{", b'{"runs_finished": "x"}']))
    elif state == "summary-dir":
        files["rep/summary.json/"] = None
    argv = ["reproduce", "fedsc", "--report-only", "--quiet", "--out", "rep"]
    if extra != "noquick":
        argv.insert(2, "--quick")
        argv += list(extra)
    return Case(
        "cli:reproduce (report)",
        "cli",
        argv=argv,
        files=files,
        names=["rep", "report", "tables.json", "summary.json", "finished", "--report-only"],
        must_fail=True,  # no finished run anywhere: every report-only here is refused
        timeout=150,
        note=state,
    )


# ------------------------------------------------------------------------ full disks
@st.composite
def full_disk_case(d: st.DrawFn) -> Case:
    what = d(st.sampled_from(["audit", "export", "pca-bench", "report"]))
    allow = d(st.integers(0, 4))

    def call(folder: Path) -> Any:
        import os

        from fedspectral import atomic
        from fedspectral.cli import main

        if what == "export":
            for rel, data in run_folder_files().items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(data)
        before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        left = [allow]
        real = os.fsync

        def fsync(fd: int) -> None:
            if left[0] <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            left[0] -= 1
            real(fd)

        atomic.os.fsync = fsync
        try:
            if what == "audit":
                code = main(["audit", "ldp-pca", "--samples", "2000", "--json", "a.json"])
            elif what == "export":
                code = main(["export", "run", "--out", "enc.pt"])
            elif what == "pca-bench":
                from fedspectral.experiments.pca_bench import BenchConfig
                from fedspectral.experiments.pca_bench import cli as bench_cli

                rows = [
                    {"experiment": "tables", "p": 60, "k": 3, "s": s, "n": nn, "rep": 0,
                     "sampling": "wishart", "eps": e, "method": mm, "error": 0.1 + 0.01 * s,
                     "seconds": 0.001}
                    for nn in (2000, 10**10) for s in (6, 12) for e in (1.0, float("inf"))
                    for mm in ("alg1", "alg2", "alg1_paper", "alg2_paper")
                ]  # fmt: skip
                bench_cli._run_tasks = lambda cfg, tasks, progress: {"tables": rows}
                cfg = BenchConfig.quick_config(out=str(folder / "pca"), only=("tables",))
                try:
                    bench_cli.run_bench(cfg, progress=False)
                    code = 0
                except OSError:
                    code = 2
            else:
                from fedspectral.experiments.reproduce import build_plan, summarize
                from fedspectral.experiments.reproduce.report import write_report

                plan = build_plan("fedsc", "cpu", quick=True, out=folder / "rep")
                try:
                    write_report(plan, summarize(plan, {}), {})
                    code = 0
                except OSError:
                    code = 2
        finally:
            atomic.os.fsync = real
        after = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        changed = sorted(str(p.relative_to(folder)) for p in after if before.get(p) != after[p])
        return {"code": code, "changed": changed}

    def oracle(res: Any, folder: Path) -> str | None:
        if res["code"] != 0 and res["changed"]:
            return f"exit {res['code']} on a full disk, but files were left: {res['changed'][:4]}"
        if res["code"] == 0 and allow == 0:
            return "exit 0 although no file could be written"
        return None

    return Case(
        "disk: full",
        "lib",
        func=call,
        oracle=oracle,
        timeout=150,
        note=f"{what}, ENOSPC after {allow} file(s)",
    )


# ------------------------------------------------------------------------ Flower run config
RUN_CONFIG_VALUES: dict[str, list[Any]] = {
    "num-server-rounds": [1.5, "2", -1, 0, 10**12, True],
    "lr": ["x", -0.1, float("nan"), 0],
    "seed": [1.5, -1, "0"],
    "dp": ["false", "true", 1, 0],
    "dp-epsilon": [-1.0, float("inf"), "1"],
    "dp-delta": [2.0, -1e-5],
    "num-clients": [2.7, 0, 10**9],
    "local-epochs": [1.5, 10**9],
    "batch-size": [10**9, 2.5],
    "no-such-key": [1],
    "dp-seed": [1.5, "1"],
    "pca-k": [2.7, "2"],
    "pca-users": [-5, 2.5],
    "resume": ["false", "true", 1],
    "dp-noise-multiplier": [-1.0, float("nan"), "1"],
    "round-timeout": [-1.0, float("nan")],
}
#: values given with another key's: client-level DP on with no clipping norm
RUN_CONFIG_PAIRS = [{"dp-noise-multiplier": 1.0, "dp-clip": 0.0}]


@st.composite
def run_config_case(d: st.DrawFn) -> Case:
    if d(st.integers(0, 9)) == 0:
        rc = dict(d(st.sampled_from(RUN_CONFIG_PAIRS)))
    else:
        key = d(st.sampled_from(sorted(RUN_CONFIG_VALUES)))
        rc = {key: d(st.sampled_from(RUN_CONFIG_VALUES[key]))}

    def call(folder: Path) -> Any:
        from fedspectral.fed.flower.apps import run_config as rcm

        # as the ServerApp reads its run config: the keys, each typed value, client-level
        # DP's options, then the experiment
        rcm.check_keys(rc)
        for k in rc:
            rcm.run_value(rc, k)
        rcm.client_dp_options(rc)
        return rcm.experiment_config(rc, explicit=set(rc))

    names = [k for k in rc] + [repr(v) for v in rc.values()]
    return Case(
        "lib: flower run config",
        "lib",
        func=call,
        names=names,
        must_fail=True,  # every value here is of the wrong type, out of range or unknown
        timeout=60,
        note=" ".join(f"{k}={v!r}" for k, v in rc.items()),
    )


# ------------------------------------------------------------------------ node policy files
POLICY_TEXTS = [
    b"max-epsilon = 0.5\n[privacy]\nmax-delta = 1e-5\n",
    b'[privacy]\nmax-epsilon = 0.5\nledger-dir = "relative/ledgers"\n',
    b"\xff\xfe[privacy]\nmax-epsilon = 0.5\n",
    b"[privacy\nmax-epsilon = 0.5\n",
    b"[privacy]\nmax-epsilon = -1\n",
    b'[privacy]\nmax-epsilon = "high"\n',
    b"[privacy]\nno-such-key = 1\n",
]


@st.composite
def policy_case(d: st.DrawFn) -> Case:
    text = d(st.sampled_from(POLICY_TEXTS))
    where = d(st.sampled_from(["file", "file", "file", "folder", "/dev/zero", "missing"]))
    files: dict[str, bytes | None] = {"policy.toml": text} if where == "file" else {}
    if where == "folder":
        files["adir/"] = None
    path = {"file": "policy.toml", "folder": "adir", "missing": "nope.toml"}.get(where, where)

    def call(folder: Path) -> Any:
        from fedspectral.fed.flower.node.policy import NodePolicy

        return NodePolicy.from_file(path if path.startswith("/") else folder / path)

    relative = b"relative/ledgers" in text and where == "file"

    def oracle(res: Any, folder: Path) -> str | None:
        # a relative ledger-dir is the policy file's folder's, whatever the working dir
        want = (folder / "relative" / "ledgers").resolve()
        got = Path(res.ledger_dir)
        return None if got.is_absolute() and got.resolve() == want else f"ledger-dir {got}"

    return Case(
        "lib: node policy file",
        "lib",
        func=call,
        files=files,
        oracle=oracle,
        names=["policy", path],
        must_fail=not relative,  # the others are refused by a node that fails closed
        allowed=(TypeError, ValueError, OSError),
        timeout=60,
        note=f"{where}: {text[:40]!r}",
    )


# ------------------------------------------------------------------------ users file
def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@st.composite
def users_file_case(d: st.DrawFn) -> Case:
    kind = d(st.sampled_from(["npy", "npz", "text", "1d", "empty", "header", "folder", "wide"]))
    name = "u.npz" if kind == "npz" else "users.npy"
    files: dict[str, bytes | None] = {}
    if kind == "npz":
        buf = io.BytesIO()
        np.savez(buf, X=np.ones((5, 4)))
        files[name] = buf.getvalue()
    elif kind == "folder":
        files[name + "/"] = None
    else:
        files[name] = {
            "npy": _npy(np.ones((5, 4))),
            "text": b"1,2,3,4\n",
            "1d": _npy(np.ones(4)),
            "empty": _npy(np.ones((0, 4))),
            "header": b"\x93NUMPY" + b"\x00" * 40,
            "wide": _npy(np.ones((5, 7))),
        }[kind]

    def call(folder: Path) -> Any:
        from fedspectral.pca.real_data import load_user_rows

        return load_user_rows(folder / name, 4, "node config pca-data").shape

    return Case(
        "lib: users file",
        "lib",
        func=call,
        files=files,
        names=["pca-data"],
        must_fail=kind != "npy",
        timeout=60,
        note=kind,
    )


STRATEGIES_R3 = {
    "cli:export (run)": export_run_case,
    "cli:reproduce (report)": report_folder_case,
    "config (sizes)": sizes_case,
    "disk: full": full_disk_case,
    "lib: budget": budget_case,
    "lib: encoder file": encoder_file_case,
    "lib: flower run config": run_config_case,
    "lib: groups": groups_case,
    "lib: node policy file": policy_case,
    "lib: users file": users_file_case,
}
#: the fast ones among them (well under a second a case once the template is built)
FAST_R3 = ("lib: budget", "lib: users file", "lib: groups")
