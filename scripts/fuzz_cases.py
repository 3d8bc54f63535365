"""Case strategies of the fuzzing harness (:mod:`scripts.fuzz`): one Hypothesis strategy
per entry point, each drawing a :class:`Case` with the input, the strings an error must
name, whether the input is known to be invalid, and an oracle for a success."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st


@dataclass
class Case:
    """One input.  ``kind`` ``"cli"``: ``argv`` run by ``fedspectral.cli.main`` in
    ``files``' folder; ``"script"``: the script ``argv[0]`` (relative to the repository)
    run as ``__main__`` with ``argv[1:]``; ``"lib"``: ``func(folder)`` called.
    ``names``: strings one of which an error message must contain; ``must_fail``: the
    input is known invalid; ``oracle(result, folder)`` returns a reason when a success is
    wrong."""

    entry: str
    kind: str
    argv: list[str] = field(default_factory=list)
    func: Callable[[Path], Any] | None = None
    files: dict[str, bytes | None] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    must_fail: bool = False
    oracle: Callable[[Any, Path], str | None] | None = None
    timeout: float = 60.0
    note: str = ""
    allowed: tuple[type[BaseException], ...] = (TypeError, ValueError)

    def describe(self) -> str:
        what = " ".join(self.argv) if self.kind != "lib" else ""
        if self.note:
            what = f"{what} [{self.note}]" if what else self.note
        return f"{self.entry}: {what}"[:400]


# ======================================================================================
# value pools
# ======================================================================================
BAD_REALS = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e400",
    "-1e400",
    "abc",
    "",
    "1e308",
    "5e-324",
    "-0",
    "0x10",
    "1_0",
    "True",
    "1e-300",
    "10" * 40,
]
BAD_INTS = [
    "-1",
    "0",
    "1.5",
    "abc",
    "",
    "1e9",
    "99999999999999999999",
    "2**31",
    "nan",
    "True",
    "-99999999999",
]
SMALL_FLOATS = [5e-324, 1e-300, 1e-200, 1e-20, 1e-15, 1e-5, 0.5]


def reals() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(
            [
                0.0,
                -1.0,
                1e-300,
                5e-324,
                1e300,
                1.7e308,
                1e-7,
                1e4,
                2e4,
                0.999,
                1.0,
                math.inf,
                math.nan,
                -math.inf,
            ]
        ),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def junk() -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            None,
            True,
            "1.0",
            "abc",
            b"x",
            [1.0],
            {"a": 1},
            10**400,
            np.float32(0.5),
            np.int64(3),
            -3,
            2**70,
            object(),
        ]
    )


def any_value() -> st.SearchStrategy[Any]:
    return st.one_of(reals(), junk(), st.integers(-10, 10**6))


# ======================================================================================
# CLI strategies
# ======================================================================================
def _mutations(options: dict[str, list[str]], known_bad: dict[str, set[str]]):
    """Draw 1-2 options of ``options`` to replace by values of their pools."""

    @st.composite
    def draw(d: st.DrawFn) -> tuple[dict[str, str], bool, list[str]]:
        keys = d(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=2, unique=True))
        out, bad, names = {}, False, []
        for k in keys:
            v = d(st.sampled_from(options[k]))
            out[k] = v
            if v in known_bad.get(k, set()):
                bad = True
            names += [k.lstrip("-"), k]
            if v.strip():
                names.append(v)
        return out, bad, names

    return draw()


def _argv(base: dict[str, str | None], muts: dict[str, str]) -> list[str]:
    merged = {**base, **muts}
    out: list[str] = []
    for k, v in merged.items():
        out += [k] if v is None else [k, v]
    return out


NUM_BAD = {"nan", "inf", "-inf", "-1", "1e400", "-1e400", "abc", "", "0x10", "True", "10" * 40}
INT_BAD = {"-1", "1.5", "abc", "", "2**31", "nan", "True", "-99999999999"}


@st.composite
def pca_plan_case(d: st.DrawFn) -> Case:
    base = {
        "--p": "5",
        "--k": "1",
        "--epsilon": "1",
        "--delta": "1e-5",
        "--eigengap": "0.01",
        "--target-error": "0.3",
        "--n-sim": "50",
    }
    opts = {
        "--p": BAD_INTS + ["100000", "2"],
        "--k": BAD_INTS + ["5", "4"],
        "--epsilon": BAD_REALS + ["1e-7", "2e4"],
        "--delta": BAD_REALS + ["1", "2"],
        "--eigengap": BAD_REALS + ["1e-200", "0.5"],
        "--target-error": BAD_REALS + ["1e-200", "2"],
        "--n-sim": BAD_INTS + ["10000000", "49"],
        "--seed": BAD_INTS,
        "--confidence": BAD_REALS + ["1", "0.999999"],
        "--calibration": ["foo", "", "classic", "paper"],
        "--model": ["foo", "distributed", "per-holder"],
        "--holders": BAD_INTS + ["1", "1000000000"],
    }
    bad = {
        k: NUM_BAD | {"0", "-0"} for k in ("--epsilon", "--delta", "--eigengap", "--target-error")
    }
    bad |= {k: INT_BAD | {"0"} for k in ("--p", "--k", "--n-sim")}
    bad["--seed"] = INT_BAD
    bad["--calibration"] = {"foo", ""}
    bad["--model"] = {"foo"}
    muts, must_fail, names = d(_mutations(opts, bad))
    if "--model" in muts:
        names += ["holders"]  # the distributed models need --holders
    files: dict[str, bytes | None] = {}
    argv = ["pca-plan"] + _argv(base, muts)
    # a spectrum replaces --eigengap: not when the eigengap is the mutated value (its
    # must_fail would outlive the value it came from)
    if "--eigengap" not in muts and d(st.booleans()):
        content = d(
            st.sampled_from(
                [
                    b"0.2 0.1 0.1 0.05 0.05",
                    b"abc",
                    b"",
                    b"0.2 0.1",
                    b"1e-300 0 0 0 0",
                    b"0.5 0.5 0.5 0.5 0.5",
                    b"nan 1 1 1 1",
                    b"0.2\n0.1\n0.1\n0.05\n0.05\n",
                    b"\x00\xff\xfe",
                    b"-0.1 0.1 0.1 0.1 0.1",
                    b"1e400 0 0 0 0",
                ]
            )
        )
        kind = d(st.sampled_from(["file", "missing", "dir", "devzero"]))
        path = {"file": "spec.txt", "missing": "nope.txt", "dir": "adir", "devzero": "/dev/zero"}[
            kind
        ]
        if kind == "file":
            files["spec.txt"] = content
        elif kind == "dir":
            files["adir/"] = None
        i = argv.index("--eigengap")
        argv[i : i + 2] = ["--spectrum", path]
        names += ["spectrum", path]
        must_fail = (
            must_fail
            or kind != "file"
            or content
            not in (b"0.2 0.1 0.1 0.05 0.05", b"0.2\n0.1\n0.1\n0.05\n0.05\n", b"1e-300 0 0 0 0")
        )
    oracle = None
    if d(st.booleans()):
        argv.append("--json")
        oracle = _strict_json
    return Case(
        "cli:pca-plan",
        "cli",
        argv=argv,
        files=files,
        names=names,
        must_fail=must_fail,
        oracle=oracle,
        timeout=90,
    )


def _strict_json(res: dict, folder: Path) -> str | None:
    def no_constant(x: str) -> Any:
        raise ValueError(f"not JSON: {x}")

    try:
        json.loads(res["stdout"], parse_constant=no_constant)
    except ValueError as exc:
        return f"--json output is not strict JSON ({exc})"
    return None


@st.composite
def audit_case(d: st.DrawFn) -> Case:
    which = d(st.sampled_from(["ldp-pca", "dp-calr"]))
    base = {"--samples": "2000", "--epsilon": "2", "--delta": "1e-5"}
    opts = {
        "--epsilon": BAD_REALS + ["0.999", "1e-7"],
        "--delta": BAD_REALS + ["1"],
        "--samples": BAD_INTS + ["100000000", "10"],
        "--calibration": ["foo", "", "classic", "paper", "pld", "closed_form", "noclip"],
        "--violation": BAD_REALS + ["5"],
        "--alpha": BAD_REALS + ["1", "0.5"],
        "--seed": BAD_INTS,
        "--neighbouring": ["foo", "replace_one"],
        "--json": ["", "adir", "nofolder/x.json", "/dev/null", "afile/x.json"],
    }
    bad = {k: NUM_BAD | {"0", "-0"} for k in ("--epsilon", "--delta", "--violation", "--alpha")}
    bad["--samples"] = INT_BAD | {"0"}
    bad["--seed"] = INT_BAD
    bad["--calibration"] = {"foo", ""}
    bad["--neighbouring"] = {"foo"}
    bad["--json"] = {"", "adir", "afile/x.json"}
    muts, must_fail, names = d(_mutations(opts, bad))
    files = {"adir/": None, "afile": b"x"}
    return Case(
        "cli:audit",
        "cli",
        argv=["audit", which] + _argv(base, muts),
        files=files,
        names=names,
        must_fail=must_fail,
        timeout=120,
        oracle=_audit_oracle,
    )


def _audit_oracle(res: dict, folder: Path) -> str | None:
    if "PASS" not in res["stdout"] and "FAIL" not in res["stdout"]:
        return "exit 0 without a verdict"
    return None


#: a read-only folder is no obstacle to root (this harness may run as root)
RO = [] if os.geteuid() == 0 else ["ro"]
ODD_PATHS = ["", "afile", "afile/sub", "/dev/null", "loop", "dangling", "/proc/nope/x", *RO]
ODD_FILES: dict[str, bytes | None] = {
    "afile": b"x",
    "adir/": None,
    "loop": b"@loop",
    "dangling": b"@dangling",
    "ro/": None,
}


def setup_odd(folder: Path) -> None:
    if (folder / "loop").exists() or (folder / "loop").is_symlink():
        (folder / "loop").unlink()
        os.symlink("loop", folder / "loop")
    if (folder / "dangling").exists():
        (folder / "dangling").unlink()
        os.symlink("nowhere/deeper", folder / "dangling")
    if (folder / "ro").is_dir():
        os.chmod(folder / "ro", 0o555)


@st.composite
def demo_case(d: st.DrawFn) -> Case:
    opts = {
        "--rounds": BAD_INTS,
        "--max-train": BAD_INTS,
        "--epsilon": BAD_REALS + ["1e-7"],
        "--delta": BAD_REALS + ["1"],
        "--out": ODD_PATHS,
    }
    bad = {
        "--rounds": INT_BAD | {"0"},
        "--max-train": INT_BAD | {"0"},
        "--epsilon": NUM_BAD | {"0", "1e-7", "-0"},
        "--delta": NUM_BAD | {"0", "1", "-0"},
        "--out": set(ODD_PATHS) - {"/proc/nope/x"},
    }
    muts, must_fail, names = d(_mutations(opts, bad))
    argv = ["demo"] + _argv({}, muts)
    if d(st.booleans()) or not must_fail:
        argv += ["--skip-pca", "--skip-fed"]
        names += ["skip"]
        must_fail = True
    return Case(
        "cli:demo",
        "cli",
        argv=argv,
        files=dict(ODD_FILES),
        names=names,
        must_fail=must_fail,
        timeout=150,
    )


@st.composite
def pca_bench_case(d: st.DrawFn) -> Case:
    opts = {
        "--repeats": BAD_INTS,
        "--sparse-repeats": BAD_INTS + ["1000000000"],
        "--jobs": BAD_INTS + ["100000"],
        "--seed": BAD_INTS,
        "--out": ODD_PATHS,
        "--only": ["foo", ""],
    }
    bad = {k: INT_BAD | {"0"} for k in ("--repeats", "--sparse-repeats", "--jobs")}
    bad["--seed"] = INT_BAD
    bad["--out"] = {"", "afile", "afile/sub", "/dev/null", "loop", "dangling", *RO}
    bad["--only"] = {"foo", ""}
    muts, must_fail, names = d(_mutations(opts, bad))
    files = dict(ODD_FILES)
    argv = ["pca-bench", "--quick", "--no-progress"] + _argv({}, muts)
    if not must_fail or d(st.booleans()):
        # --reanalyse of a folder whose results it cannot rebuild: must not destroy them
        stored = json.dumps({"results": {"fig1": {"x": 1}}}).encode()
        content = d(
            st.sampled_from([stored, b"[]", b"{", b"", json.dumps({"results": {}}).encode()])
        )
        files = {**files, "run/pca_bench.json": content}
        argv = ["pca-bench", "--reanalyse", "--out", "run", "--no-progress"]
        names = ["run", "pca_bench.json", "reanalyse", "csv", "CSV"]
        must_fail = True
    return Case(
        "cli:pca-bench",
        "cli",
        argv=argv,
        files=files,
        names=names,
        must_fail=must_fail,
        timeout=150,
    )


@st.composite
def reproduce_case(d: st.DrawFn) -> Case:
    opts = {
        "--seeds": BAD_INTS + ["1000000000"],
        "--methods": ["foo", "", ",", "fedsc,foo"],
        "--jobs": BAD_INTS,
        "--out": ODD_PATHS,
        "--configs": ["nope", "afile", "badcfg", ""],
        "--set": ["x", "method.rounds=-1", "name=../up", "=1", "method.rounds=["],
        "--scale": ["foo"],
        "--tier": ["foo"],
    }
    bad = {
        "--seeds": INT_BAD | {"0", "1000000000"},
        "--methods": {"foo", "", ",", "fedsc,foo"},
        "--jobs": INT_BAD | {"0"},
        "--out": {"", "afile", "afile/sub", "/dev/null", "loop", "dangling", *RO},
        "--configs": {"nope", "afile", "badcfg", ""},
        "--set": {"x", "method.rounds=-1", "name=../up", "=1", "method.rounds=["},
        "--scale": {"foo"},
        "--tier": {"foo"},
    }
    muts, must_fail, names = d(_mutations(opts, bad))
    files = {**ODD_FILES, "badcfg/fmnist_fedsc.yaml": b"a: [\n"}
    argv = ["reproduce", "fedsc", "--quick", "--dry-run"] + _argv({}, muts)
    if d(st.booleans()):
        blob = d(st.sampled_from([b"[]", b'{"config": 5}', b"{", b"", b"null"]))
        files["rr/some_run/results.json"] = blob
        argv = ["reproduce", "fedsc", "--quick", "--dry-run", "--out", "rr"]
        names = ["results.json", "rr", "some_run"]
        must_fail = False  # a plan that ignores the foreign file, or a clear error
    return Case(
        "cli:reproduce",
        "cli",
        argv=argv,
        files=files,
        names=names,
        must_fail=must_fail,
        timeout=150,
        oracle=None,
    )


@st.composite
def export_case(d: st.DrawFn) -> Case:
    run = d(st.sampled_from(["nope", "afile", "adir", "run", "loop", "/dev/zero"]))
    files = dict(ODD_FILES)
    if run == "run":
        files["run/results.json"] = d(st.sampled_from([b"[]", b"{}", b"{", b'{"config": 5}']))
        if d(st.booleans()):
            files["run/checkpoint.pt"] = d(st.sampled_from([b"", b"garbage", b"PK\x03\x04"]))
    out = d(st.sampled_from(["enc.pt", "", "afile/x.pt", "adir", "/dev/null/x"]))
    return Case(
        "cli:export",
        "cli",
        argv=["export", run, "--out", out],
        files=files,
        names=[run, out, "--out", "results.json", "checkpoint", "run_dir", "RUN_DIR"],
        must_fail=True,
        timeout=120,
    )


@st.composite
def top_case(d: st.DrawFn) -> Case:
    argv = d(
        st.sampled_from(
            [
                ["frobnicate"],
                ["--frob"],
                ["train", "--nope"],
                ["audit"],
                ["pca-plan"],
                ["audit", "foo"],
                ["export"],
                ["train", "--config"],
                ["pca-plan", "--p"],
            ]
        )
    )
    return Case(
        "cli:(parser)",
        "cli",
        argv=argv,
        names=[t.lstrip("-") for t in argv] + ["required", "argument", "invalid choice"],
        must_fail=True,
        timeout=60,
    )


# ------------------------------------------------------------------------- config (YAML)
GOOD_CONFIG = {
    "name": "fz",
    "data": {"dataset": "digits"},
    "partition": {"scheme": "class", "num_clients": 5, "classes_per_client": 2},
    "model": {
        "backbone": "small_cnn",
        "norm": "group",
        "width": 8,
        "projector_hidden": 64,
        "projector_out": 32,
    },
    "method": {"name": "fedsc", "rounds": 1, "local_epochs": 1, "views": 1},
    "optim": {"lr": 0.05, "batch_size": 64},
    "eval": {"every": 1, "knn_k": 20},
    "run": {"seed": 0, "progress": False},
}
CONFIG_BAD = {
    "method.rounds": [-1, 0, 1.5, "two", None, 10**9, True],
    "method.views": [0, -2, 100000, "x"],
    "method.name": ["nope", 5, ""],
    "optim.lr": [-1.0, 0.0, ".nan", 1e30, "x"],
    "optim.batch_size": [0, -5, 10**9, 2.5],
    "optim.weight_decay": [1e300, -1.0, ".inf"],
    "optim.min_lr": [1.0],
    "model.width": [-8, 0, 10**8, "w"],
    "model.backbone": ["foo", 3],
    "data.dataset": ["imagenet", 7, ""],
    "data.max_train": [0, -1, "x"],
    "data.val_fraction": [1.5, -0.1, ".nan"],
    "partition.num_clients": [0, -1, 10**6],
    "partition.classes_per_client": [0, 11, -1],
    "eval.knn_k": [0, -1, 10**7],
    "dp.enabled": ["maybe", 2],
    "dp.epsilon": [0, -1, ".inf", 1e-9],
    "dp.delta": [0, 1, 2, -1e-5],
    "dp.sigma": [0, -1, 1e300],
    "run.seed": [-1, "s", 1.5],
    "run.device": ["cuda:99", "tpu", 5],
    "name": ["../escaped", "", "a/b", "x\x00y"],
    "nonsense.key": [1],
    "method.params": [5, "x"],
}


def _set_key(cfg: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        cfg = cfg.setdefault(k, {})
    cfg[keys[-1]] = value


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, str) and v.startswith("."):
        return v  # .nan, .inf: YAML floats
    return json.dumps(v)


@st.composite
def config_case(d: st.DrawFn) -> Case:
    import copy

    cfg = copy.deepcopy(GOOD_CONFIG)
    form = d(
        st.sampled_from(
            [
                "value",
                "value",
                "value",
                "duplicate",
                "syntax",
                "alias",
                "tag",
                "empty",
                "list",
                "binary",
                "set",
                "out",
                "resume",
            ]
        )
    )
    files: dict[str, bytes | None] = {}
    out = "out"
    names: list[str] = ["config", "cfg.yaml"]
    argv_extra: list[str] = []
    if form == "value" or form == "set":
        key = d(st.sampled_from(sorted(CONFIG_BAD)))
        val = d(st.sampled_from(CONFIG_BAD[key]))
        if form == "value":
            _set_key(cfg, key, "__MARK__")
            text = json.dumps(cfg, indent=1).replace('"__MARK__"', _yaml_scalar(val))
        else:
            text = json.dumps(cfg, indent=1)
            argv_extra = ["--set", f"{key}={_yaml_scalar(val).strip(chr(34))}"]
        if key == "optim.min_lr":
            _set_key(cfg, "optim.lr", 0.05)
        names += [key, key.split(".")[-1], str(val)]
        body = text.encode()
        form = f"{form} {key}={val!r}"
    elif form == "duplicate":
        body = json.dumps(cfg, indent=1).replace('"rounds": 1', '"rounds": 1, "rounds": 2').encode()
        names += ["rounds", "duplicate"]
    elif form == "syntax":
        body = d(st.sampled_from([b"a: [\n", b"\tname: x\n", b"name: : :\n", b"{", b"]"]))
        names += ["line", "column"]
    elif form == "alias":
        n = d(st.integers(4, 9))
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        for i in range(1, n):
            lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
        body = ("\n".join(lines) + "\n").encode()
        names += ["alias", "aliases", "anchor"]
    elif form == "tag":
        body = b"name: !!python/object/apply:os.system ['echo pwned > pwned']\n"
        names += ["tag", "python", "constructor"]
    elif form == "empty":
        body = d(st.sampled_from([b"", b"   \n", b"# only a comment\n", b"null\n"]))
        names += ["empty", "mapping"]
    elif form == "list":
        body = b"- 1\n- 2\n"
        names += ["mapping", "list"]
    elif form == "out":  # a good config, an output path that cannot take the results
        body = json.dumps(cfg).encode()
        out = d(
            st.sampled_from(
                [
                    "",
                    "afile",
                    "afile/sub",
                    "/dev/null",
                    "loop",
                    "dangling",
                    "loop/sub",
                    "dangling/sub",
                    *RO,
                ]
            )
        )
        files.update(ODD_FILES)
        names += ["out", "output", out or "''"]
        form = f"out {out!r}"
    elif form == "resume":  # a good config resumed from a folder holding something else
        body = json.dumps(cfg).encode()
        files["out/checkpoint.pt"] = d(st.sampled_from([b"", b"garbage", b"PK\x03\x04x"]))
        if d(st.booleans()):
            files["out/results.json"] = json.dumps({"config": {"name": "other"}}).encode()
        argv_extra = ["--resume"]
        names += ["checkpoint", "out", "resume", "results.json"]
        form = "resume from a foreign or broken folder"
    else:
        body = b"\xff\xfe\x00name: x\n"
        names += ["UTF-8", "utf-8", "decode"]
    return Case(
        "config (train)",
        "cli",
        argv=["train", "--config", "cfg.yaml", "--out", out, "--quiet"] + argv_extra,
        files={**files, "cfg.yaml": body},
        names=names,
        must_fail=True,
        timeout=120,
        note=form,
    )


# ======================================================================================
# data files
# ======================================================================================
def _idx(a: np.ndarray, magic: int | None = None) -> bytes:
    magic = magic if magic is not None else (2051 if a.ndim == 3 else 2049)
    head = magic.to_bytes(4, "big") + b"".join(int(x).to_bytes(4, "big") for x in a.shape)
    return head + a.astype(np.uint8).tobytes()


FM_NAMES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


@st.composite
def idx_case(d: st.DrawFn) -> Case:
    n = d(st.integers(1, 8))
    size = d(st.sampled_from([28, 28, 28, 32, 1]))
    labels = np.array(d(st.lists(st.integers(0, 255), min_size=n, max_size=n)))
    if d(st.booleans()):
        labels = labels % 10
    rng = np.random.default_rng(n)
    x = rng.integers(0, 256, size=(n, size, size), dtype=np.uint8)
    defect = d(
        st.sampled_from(
            [
                "none",
                "none",
                "truncate",
                "not_gzip",
                "magic",
                "count",
                "header",
                "missing_labels",
                "empty",
            ]
        )
    )
    img, lab = gzip.compress(_idx(x)), gzip.compress(_idx(labels))
    if defect == "truncate":
        img = img[: len(img) // 2]
    elif defect == "not_gzip":
        img = b"not gzip"
    elif defect == "magic":
        lab = gzip.compress(_idx(labels, 2051))
    elif defect == "count":
        lab = gzip.compress(_idx(np.append(labels, 1)))
    elif defect == "header":
        img = gzip.compress(_idx(x)[:-3])
    elif defect == "empty":
        img = b""
    split = d(st.sampled_from(["train", "test"]))
    files: dict[str, bytes | None] = {f"root/{FM_NAMES[split][0]}": img}
    if defect != "missing_labels":
        files[f"root/{FM_NAMES[split][1]}"] = lab
    valid = defect == "none" and size == 28 and labels.max() < 10

    def call(folder: Path) -> Any:
        from fedspectral.data import load_dataset

        return load_dataset("fashion_mnist", split, root=folder / "root")

    def oracle(res: Any, folder: Path) -> str | None:
        got_x = (res.images[:, 0].numpy() * 255).round().astype(np.uint8)
        if not (np.array_equal(got_x, x) and np.array_equal(res.labels.numpy(), labels)):
            return "the loaded split differs from the files written"
        return None

    return Case(
        "data: idx .gz",
        "lib",
        func=call,
        files=files,
        must_fail=not valid,
        oracle=oracle,
        names=list(FM_NAMES[split]) + ["root"],
        allowed=(TypeError, ValueError, FileNotFoundError),
        note=f"{split} n={n} size={size} max label={labels.max()} defect={defect}",
    )


@st.composite
def npz_case(d: st.DrawFn) -> Case:
    kind = d(
        st.sampled_from(
            [
                "float",
                "float16",
                "int",
                "bool",
                "str",
                "object",
                "complex",
                "3d",
                "empty",
                "nan",
                "huge",
                "1d",
                "bigint",
            ]
        )
    )
    rng = np.random.default_rng(1)
    base = rng.normal(size=(40, 4)) / 4
    arr: Any = {
        "float": base,
        "float16": base.astype(np.float16),
        "int": (base * 10).astype(np.int64),
        "bool": base > 0,
        "str": base.astype(str),
        "object": base.astype(object),
        "complex": base.astype(complex),
        "3d": base.reshape(40, 2, 2),
        "empty": np.zeros((0, 4)),
        "nan": np.where(base > 0.3, np.nan, base),
        "huge": base * 1e308,
        "1d": base[:, 0],
        "bigint": np.full((40, 4), 2**62, dtype=np.int64),
    }[kind]
    buf = io.BytesIO()
    np.savez(buf, X=arr, allow_pickle=True) if kind == "object" else np.savez(buf, X=arr)
    valid = kind in ("float", "float16", "int", "bool", "huge", "bigint")

    def call(folder: Path) -> Any:
        from fedspectral.pca import LocalDPPCA

        with np.load(folder / "data.npz", allow_pickle=False) as z:
            X = z["X"]
        return LocalDPPCA(2, 1.0, 1e-5, random_state=0).fit(X)

    return Case(
        "data: npz",
        "lib",
        func=call,
        files={"data.npz": buf.getvalue()},
        must_fail=not valid,
        oracle=_orthonormal,
        names=[
            "X",
            "dtype",
            "pickle",
            "shape",
            "2D",
            "finite",
            "NaN",
            "row",
            "sample",
            "complex",
            "feature",
        ],
        note=f"npz array {kind}",
    )


def _orthonormal(res: Any, folder: Path) -> str | None:
    C = res.components_
    if not np.isfinite(C).all():
        return "components are not finite"
    if not np.allclose(C @ C.T, np.eye(len(C)), atol=1e-8):
        return "components are not orthonormal"
    return None


# ======================================================================================
# library strategies
# ======================================================================================
@st.composite
def ledger_case(d: st.DrawFn) -> Case:
    party = d(st.one_of(st.just("u"), junk()))
    sigma, sens = d(reals()), d(st.one_of(reals(), st.just(1.0)))
    count = d(st.one_of(st.integers(1, 10**6), junk(), st.just(0)))
    delta = d(st.one_of(st.sampled_from(SMALL_FLOATS), reals(), junk()))
    acc = d(st.sampled_from(["rdp", "pld", "closed_form", "analytic", "foo"]))
    action = d(st.sampled_from(["epsilon", "epsilon", "merge_self", "from_dict", "releases"]))
    blob = d(
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), reals()),
            lambda c: st.one_of(
                st.lists(c, max_size=3),
                st.dictionaries(
                    st.sampled_from(
                        [
                            "unit",
                            "releases",
                            "aborted",
                            "party",
                            "sigma",
                            "sensitivity",
                            "mechanism",
                        ]
                    ),
                    c,
                    max_size=4,
                ),
            ),
            max_leaves=8,
        )
    )

    def call(folder: Path) -> Any:
        from fedspectral.privacy import PrivacyLedger
        from fedspectral.privacy.accounting import epsilon_of_releases

        if action == "from_dict":
            return ("from_dict", PrivacyLedger.from_dict(blob))
        if action == "releases":
            return ("releases", epsilon_of_releases(blob, delta, acc))
        led = PrivacyLedger()
        led.record(party, "m", sigma=sigma, sensitivity=sens, count=count)
        if action == "merge_self":
            led.merge(led)
            return ("merged", led)
        return ("epsilon", led.epsilon(delta, accountant=acc), led.releases[0])

    def oracle(res: Any, folder: Path) -> str | None:
        import dp_accounting

        if res[0] == "merged":
            return "merge(itself) accepted"
        if res[0] == "from_dict":
            from fedspectral.privacy import PrivacyLedger

            if PrivacyLedger.from_dict(res[1].to_dict()).to_dict() != res[1].to_dict():
                return "from_dict/to_dict round trip differs"
            return None
        if res[0] == "releases":
            return None if (isinstance(res[1], float) and res[1] >= 0) else f"eps {res[1]!r}"
        eps, rel = res[1], res[2]
        if not isinstance(rel.party, str) or rel.party != party:
            return f"party stored as {rel.party!r}"
        z = rel.noise_multiplier
        if z == 0:
            return None if eps == math.inf else f"zero noise gave epsilon {eps!r}"
        if not (isinstance(eps, float) and math.isfinite(eps) and eps >= 0):
            return f"epsilon {eps!r} for noise multiplier {z!r}"
        if rel.count == 1 and 1e-3 < z < 1e3:
            exact = float(dp_accounting.get_epsilon_gaussian(z, float(delta)))
            if eps < exact * (1 - 1e-6) - 1e-9:
                return f"{acc} epsilon {eps!r} below the exact {exact!r}"
        return None

    return Case(
        "lib: ledger",
        "lib",
        func=call,
        oracle=oracle,
        names=[
            "party",
            "sigma",
            "sensitivity",
            "count",
            "delta",
            "accountant",
            "itself",
            "noise multiplier",
            "release",
            "ledger",
            "PLD",
            "epsilon",
            "unit",
            "key",
            "mechanism",
            repr(party),
            "Z_MIN",
        ],
        note=f"{action} party={party!r} sigma={sigma!r} sens={sens!r} count={count!r} "
        f"delta={delta!r} acc={acc} blob={str(blob)[:80]}",
    )


@st.composite
def mechanism_case(d: st.DrawFn) -> Case:
    what = d(st.sampled_from(["gaussian_sigma", "calibrate", "correlation", "symmetric"]))
    eps = d(st.one_of(st.sampled_from([0.1, 1.0, 5.0, 1e-6, 1e4, 1e-7, 2e4]), reals(), junk()))
    delta = d(st.one_of(st.sampled_from(SMALL_FLOATS), reals(), junk()))
    sens = d(st.one_of(st.just(1.0), reals()))
    count = d(st.one_of(st.integers(1, 1000), st.just(0), junk()))
    method = d(st.sampled_from(["analytic", "classic", "rdp", "pld", "closed_form", "x"]))
    p = d(st.one_of(st.integers(1, 20), st.sampled_from([10**6, 0, -1]), junk()))

    def call(folder: Path) -> Any:
        from fedspectral.fed.correlation import calibrate_correlation_sigma
        from fedspectral.privacy import (
            calibrate_noise_multiplier,
            gaussian_sigma,
            symmetric_gaussian,
        )

        if what == "gaussian_sigma":
            return gaussian_sigma(eps, delta, sens, method, force=True)
        if what == "calibrate":
            return calibrate_noise_multiplier(eps, delta, count, method)
        if what == "correlation":
            return calibrate_correlation_sigma(eps, delta, count, 4.0, 100, method)
        return symmetric_gaussian(p, 1.0, np.random.default_rng(0))

    def oracle(res: Any, folder: Path) -> str | None:
        import dp_accounting

        from fedspectral.privacy import PrivacyLedger

        if what == "symmetric":
            return None if np.allclose(res, res.T) else "not symmetric"
        if not (isinstance(res, float) and math.isfinite(res) and res >= 0):
            return f"sigma {res!r}"
        if math.isinf(float(eps)):
            return None if res == 0 else f"epsilon inf gave sigma {res!r}"
        if what == "gaussian_sigma" and method == "analytic":
            got = float(dp_accounting.get_epsilon_gaussian(res / float(sens), float(delta)))
            if got > float(eps) * (1 + 1e-5):
                return f"sigma {res!r} gives epsilon {got!r} > {eps!r}"
        if what == "calibrate" and method in ("rdp", "pld") and res > 0:
            led = PrivacyLedger()
            led.record_noise_multiplier("u", "g", res, count=int(count))
            got = led.epsilon(float(delta), accountant=method)
            if got > float(eps) * (1 + 1e-5):
                return f"z {res!r} gives {method} epsilon {got!r} > {eps!r}"
        return None

    return Case(
        "lib: mechanisms",
        "lib",
        func=call,
        oracle=oracle,
        timeout=90,
        names=[
            "epsilon",
            "delta",
            "sensitivity",
            "method",
            "count",
            "accountant",
            "releases",
            "p",
            "sigma",
            "entries",
            "PLD",
            "range",
            "calibration",
        ],
        note=f"{what} eps={eps!r} delta={delta!r} sens={sens!r} count={count!r} "
        f"method={method} p={p!r}",
    )


@st.composite
def estimator_case(d: st.DrawFn) -> Case:
    n, p = d(st.integers(1, 30)), d(st.integers(1, 6))
    scale = d(st.sampled_from([1.0, 1e-300, 1e300, 1.7e308, 5e-324]))
    with np.errstate(over="ignore"):
        X = np.random.default_rng(n * 7 + p).normal(size=(n, p)) * scale
    k = d(st.one_of(st.integers(1, 3), junk()))
    eps = d(st.one_of(st.sampled_from([1.0, math.inf, 0.1]), reals(), junk()))
    delta = d(st.one_of(st.just(1e-5), st.sampled_from(SMALL_FLOATS), reals(), junk()))
    rs = d(st.one_of(st.just(0), junk(), st.just(-1)))
    extra = d(st.sampled_from(["none", "transform", "interval", "privacy", "sparse"]))
    n_boot = d(st.one_of(st.just(20), st.sampled_from([10**15, 9, 10**6]), junk()))

    def call(folder: Path) -> Any:
        from fedspectral.pca import LocalDPPCA, LocalDPSparsePCA

        cls = LocalDPSparsePCA if extra == "sparse" else LocalDPPCA
        kw = {"max_iter": 50} if extra == "sparse" else {}
        est = cls(k, eps, delta, random_state=rs, **kw).fit(X)
        if extra == "transform":
            return est, est.transform(X)
        if extra == "interval":
            return est, est.error_interval(n_boot=n_boot, random_state=0)
        if extra == "privacy":
            return est, est.privacy_
        return est, None

    def oracle(res: Any, folder: Path) -> str | None:
        est, out = res
        why = _orthonormal(est, folder)
        if why:
            return why
        if extra == "transform" and scale <= 1.0 and not np.isfinite(out).all():
            return "transform of moderate rows is not finite"
        if extra == "privacy":
            bad = [
                k
                for k, v in out.items()
                if k.startswith("epsilon_")
                and v is not None
                and not (isinstance(v, float) and v >= 0)
            ]
            if bad:
                return f"privacy_ {bad}"
        return None

    return Case(
        "lib: estimators",
        "lib",
        func=call,
        oracle=oracle,
        timeout=120,
        names=[
            "n_components",
            "epsilon",
            "delta",
            "random_state",
            "n_boot",
            "X",
            "calibration",
            "range",
        ],
        note=f"{extra} X {n}x{p} scale {scale} k={k!r} eps={eps!r} delta={delta!r} "
        f"rs={rs!r} n_boot={n_boot!r}",
    )


@st.composite
def aggregator_case(d: st.DrawFn) -> Case:
    p = d(st.one_of(st.integers(1, 5), st.sampled_from([10**6, 0, True, 2.5])))
    m = d(
        st.lists(
            st.sampled_from([0.0, 1.0, -1e308, 1e308, 1.7e308, 5e-324, math.nan]),
            min_size=1,
            max_size=15,
        )
    )
    action = d(st.sampled_from(["roundtrip", "merge", "self", "eq", "batch"]))
    rows, cols = d(st.integers(1, 3000)), d(st.integers(1, 3000))

    def call(folder: Path) -> Any:
        import dataclasses

        from fedspectral.pca import CovarianceAggregator, perturb_batch

        if action == "batch":
            return ("batch", perturb_batch(np.zeros((rows, cols)), 1.0, 1e-5, rng=0).shape)
        a = CovarianceAggregator(p)
        msg = np.resize(np.array(m), a.n_packed)
        a.add(msg)
        if action == "roundtrip":
            b = CovarianceAggregator.from_dict(json.loads(json.dumps(a.to_dict())))
            return ("roundtrip", a == b, dataclasses.asdict(a)["_count"])
        if action == "self":
            a.merge(a)
            return ("self",)
        b = CovarianceAggregator(p)
        if action == "merge":
            b.add(msg)
            c = CovarianceAggregator(p).add_batch(np.vstack([msg, msg]))
            a.merge(b)
            return ("merge", a == c)
        return ("eq", a == b)

    def oracle(res: Any, folder: Path) -> str | None:
        if res[0] == "roundtrip" and not (res[1] and res[2] == 1):
            return "to_dict/from_dict or asdict lost state"
        if res[0] == "self":
            return "merge into itself accepted"
        if res[0] == "eq" and res[1]:
            return "an aggregator holding a message equals an empty one"
        if res[0] == "batch" and res[1] != (rows, cols * (cols + 1) // 2):
            return f"shape {res[1]}"
        return None

    return Case(
        "lib: aggregator",
        "lib",
        func=call,
        oracle=oracle,
        names=["p", "message", "itself", "MAX_P", "X", "MAX_BATCH_ENTRIES", "NaN", "float64"],
        note=f"{action} p={p!r} msg={m[:4]} batch {rows}x{cols}",
    )


@st.composite
def planner_case(d: st.DrawFn) -> Case:
    p = d(st.one_of(st.integers(2, 8), st.sampled_from([100000, 1, True])))
    k = d(st.one_of(st.integers(1, 3), junk()))
    gap = d(st.one_of(st.sampled_from([0.01, 1e-200, 5e-324, 1.0]), reals()))
    target = d(st.one_of(st.sampled_from([0.3, 1e-200, 2.0]), reals()))
    n_sim = d(st.one_of(st.just(50), st.sampled_from([10**7, 49, 10**5]), junk()))
    spectrum = d(
        st.one_of(
            st.none(),
            st.sampled_from(
                ["abc", [0.3, 0.1], [1e-300, 0, 0, 0, 0], np.array([10**400] * 5, dtype=object)]
            ),
        )
    )
    conf = d(st.sampled_from([0.9, 0.999, 1e-9, 1.0]))
    rs = d(st.one_of(st.just(0), junk()))

    def call(folder: Path) -> Any:
        from fedspectral.pca.planner import required_users

        kw = {"spectrum": spectrum} if spectrum is not None else {"eigengap": gap}
        return required_users(
            p,
            k,
            1.0,
            1e-5,
            target_error=target,
            n_sim=n_sim,
            confidence=conf,
            random_state=rs,
            **kw,
        )

    def oracle(res: Any, folder: Path) -> str | None:
        if res.status not in ("ok", "unreachable", "above_random_level"):
            return f"status {res.status}"
        if res.status == "ok" and not (isinstance(res.n, int) and res.n >= 1):
            return f"n {res.n!r}"
        # inf rates are Python floats here; the CLI's --json is checked there
        with contextlib.suppress(ValueError):
            json.dumps(res.to_dict(), allow_nan=False)
        return None

    return Case(
        "lib: planner",
        "lib",
        func=call,
        oracle=oracle,
        timeout=120,
        names=[
            "p",
            "k",
            "eigengap",
            "target_error",
            "n_sim",
            "spectrum",
            "confidence",
            "random_state",
            "trace",
            "eigen-gap",
            "MAX_SIM_ENTRIES",
        ],
        note=f"p={p!r} k={k!r} gap={gap!r} target={target!r} n_sim={n_sim!r} "
        f"spectrum={str(spectrum)[:40]} conf={conf} rs={rs!r}",
    )


STRATEGIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    "cli:pca-plan": pca_plan_case,
    "cli:audit": audit_case,
    "cli:demo": demo_case,
    "cli:pca-bench": pca_bench_case,
    "cli:reproduce": reproduce_case,
    "cli:export": export_case,
    "cli:(parser)": top_case,
    "config (train)": config_case,
    "data: idx .gz": idx_case,
    "data: npz": npz_case,
    "lib: ledger": ledger_case,
    "lib: mechanisms": mechanism_case,
    "lib: estimators": estimator_case,
    "lib: aggregator": aggregator_case,
    "lib: planner": planner_case,
}
#: the fast subset: entry points whose cases take well under a second each
FAST = (
    "cli:pca-plan",
    "cli:(parser)",
    "data: idx .gz",
    "data: npz",
    "lib: ledger",
    "lib: mechanisms",
    "lib: estimators",
    "lib: aggregator",
    "lib: planner",
)
