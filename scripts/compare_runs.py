"""Are two sets of runs the same computation?  The behaviour proof of refactors.

    python scripts/compare_runs.py BEFORE AFTER NAME [NAME ...]

compares ``BEFORE/NAME`` with ``AFTER/NAME`` for each NAME (folders written by
``fedspectral train --out``): every field of ``results.json`` except wall-clock
seconds, library versions and the output path, and every tensor of
``checkpoint.pt`` (loaded with ``weights_only=True``) with ``torch.equal``, plus
the checkpoint's JSON metadata field by field (its digest is a hash over text that
holds wall-clock seconds, so it is left out).  Prints one line per run and
``IDENTICAL`` or ``DIFFERENT``; exit status 0 only when identical.
"""

import json
import re
import sys
from pathlib import Path

import torch

# ignored: wall-clock seconds, library versions, the output folder (the run's own path),
# and in a Flower run: when each message started, each reply's seconds, Flower's random
# node ids
IGN = re.compile(
    r"(seconds[^/]*$|^/versions/|^/config/run/out$|^/meta/elapsed$"
    r"|/reply_seconds/|/started_at$|^/flower/nodes/)"
)


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


if len(sys.argv) < 4:
    sys.exit(__doc__)
a_dir, b_dir = sys.argv[1], sys.argv[2]
ok = True
for m in sys.argv[3:]:
    ra = dict(flat(json.loads(Path(f"{a_dir}/{m}/results.json").read_text())))
    rb = dict(flat(json.loads(Path(f"{b_dir}/{m}/results.json").read_text())))
    keys = set(ra) | set(rb)
    ign = sorted(k for k in keys if IGN.search(k))
    diff = [
        k
        for k in sorted(keys - set(ign))
        if ra.get(k, "<missing>") != rb.get(k, "<missing>")
        and not (
            isinstance(ra.get(k), str)
            and ra.get(k, "").replace(a_dir, "X") == str(rb.get(k, "")).replace(b_dir, "X")
        )
    ]

    def ckpt(d, m=m):
        raw = torch.load(f"{d}/{m}/checkpoint.pt", weights_only=True)
        meta = json.loads(raw.pop("meta"))  # JSON text: compared field by field
        raw.pop("digest")  # a hash over the meta text, which holds the wall-clock seconds
        out = dict(tensors(raw))
        out.update({"/meta" + k: ("scalar", v) for k, v in flat(meta)})
        return out

    ca, cb = ckpt(a_dir), ckpt(b_dir)
    nt = sum(isinstance(v, torch.Tensor) for v in ca.values())
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
    nm = sum(k.startswith("/meta") for k in ca)
    print(
        f"{m}: results.json {len(keys) - len(ign)} fields equal of {len(keys)} "
        f"({len(diff)} differ; {len(ign)} ignored: wall-clock seconds, versions, out path, "
        f"Flower message times and node ids); "
        f"checkpoint {nt} tensors torch.equal, {nm} meta fields, {len(tdiff)} differ"
    )
    for k in diff[:10]:
        print("   results", k, ra.get(k), rb.get(k))
    for k in tdiff[:10]:
        print("   ckpt", k, str(ca.get(k))[:80], str(cb.get(k))[:80])
    ok &= not diff and not tdiff
print("IDENTICAL" if ok else "DIFFERENT")
sys.exit(0 if ok else 1)
