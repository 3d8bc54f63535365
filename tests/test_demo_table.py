"""The committed table ``fedspectral demo`` prints beside its short run."""

from __future__ import annotations

import json

import pytest

from fedspectral.experiments.demo import committed_table


def test_committed_table_leaves_out_every_other_variant(tmp_path):
    runs = [
        {
            "setting": "10x1-10/10",
            "method": "fedsc",
            "variant": v,
            "seed": s,
            "dp": None,
            "final": {"linear_probe": x},
        }
        for v, s, x in (
            ("main", 0, 0.6),
            ("main", 1, 0.8),
            ("late_start", 0, 0.1),
            ("tracked+server_lr0.5", 0, 0.1),
        )
    ]
    p = tmp_path / "summary.json"
    p.write_text(json.dumps({"runs": runs}))
    table, n = committed_table(p)
    assert n == 2 and table["fedsc"]["linear_probe"] == pytest.approx(0.7)
    assert committed_table(tmp_path / "missing.json") == ({}, 0)
