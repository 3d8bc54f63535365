"""FedSC with secure aggregation on Flower's simulation runtime (``flwr run``, Ray) --
``fedspectral train --engine flower``'s path -- against the in-process secure run.

configs/digits_smoke.yaml (5 clients), 2 rounds, ``secure_aggregation: true``, noise
off: the share phase travels as the five stages of query.secagg messages, the sum is
the exact modular sum of the quantised summands, so the run equals the in-process
five-stage exchange (``Simulation(secure_sum="secagg")``) bit for bit, and the plain
in-process run to float tolerance (the quantisation step is 2^-60 here).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedspectral.fed.flower.apps.engine import run_flower_simulation
from fedspectral.fed.flower.node.secure_sum import SECAGG, STAGES
from fedspectral.fed.simulation import CHECKPOINT, Simulation, load_run_state

pytestmark = pytest.mark.slow

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "digits_smoke.yaml"


def _cfg(secure: bool = True):
    from fedspectral.fed.validation import load_config

    return load_config(
        str(SMOKE),
        [
            f"method.params.secure_aggregation={str(secure).lower()}",
            "method.rounds=2",
            "run.threads=1",
            "eval.test_size=200",
        ],
    )


def test_flower_secure_run_equals_in_process_secure_run(tmp_path) -> None:
    sim = Simulation(_cfg(), secure_sum="secagg")
    ref = sim.run()
    res = run_flower_simulation(_cfg(), out_dir=tmp_path)
    st = load_run_state(tmp_path / CHECKPOINT, _cfg()).server
    assert res["engine"] == "flower" and set(st.arrays) == {"A"}
    for k, w in sim.state.server.weights.items():
        assert np.array_equal(st.weights[k], w), k
    assert np.array_equal(st.arrays["A"], sim.state.server.arrays["A"])
    assert [r["knn_projector"] for r in res["records"]] == [
        r["knn_projector"] for r in ref["records"]
    ]
    clients = [f"client-{i}" for i in range(5)]
    for r in res["records"]:
        assert r["phases"]["share"]["kind"] == "secure_sum"
        assert r["phases"]["share"]["contributors"] == clients
    assert [
        (m["phase"], m["kind"], m["sent"], m["answered"]) for m in res["flower"]["messages"]
    ] == [*[(f"share/{s}", SECAGG, 5, 5) for s in STAGES], ("train", "train", 5, 5)] * 2
    # and the plain in-process run, to float tolerance (quantisation only)
    plain = Simulation(_cfg(False))
    plain.run()
    for k, w in plain.state.server.weights.items():
        np.testing.assert_allclose(st.weights[k], w, rtol=1e-4, atol=1e-6, err_msg=k)
