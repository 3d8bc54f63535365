"""RunState: what the checkpoint, the callbacks and the Flower hand-back carry.

Its dict form is the checkpoint's state (``fedspectral-checkpoint/2``, unchanged), read
back through the checkpoint file into an equal state; a state that does not fit the
config, or whose records do not match its round, is refused before a file is written or
a loaded state used."""

from __future__ import annotations

import numpy as np
import pytest

from fedspectral.fed.checkpoint import load_checkpoint, save_checkpoint
from fedspectral.fed.protocol import ServerState
from fedspectral.fed.records import PhaseRecord, RoundRecord
from fedspectral.fed.run_state import RunState
from fedspectral.kinds import PhaseKind

IDS = ["client-0", "client-1"]


def _record(rnd: int) -> RoundRecord:
    train = PhaseRecord(
        kind=PhaseKind.TRAIN,
        participants=tuple(IDS),
        failures={},
        bytes_down={"client-0": 10, "client-1": 10},
        bytes_up={"client-0": 5, "client-1": 5},
        seconds=0.1,
        seconds_clients=0.05,
        metrics={"train_loss": 0.5},
    )
    return RoundRecord(
        rnd, tuple(IDS), {"train": train}, train.bytes_down, train.bytes_up
    ).with_values(epsilon_rdp=0.0, seconds_round=0.2)


def _state() -> RunState:
    server = ServerState(
        weights={"w": np.arange(6, dtype=np.float32).reshape(2, 3)},
        arrays={"A": np.eye(2)},
        clients=list(IDS),
        client_sizes={c: 5 for c in IDS},
    )
    st = RunState.fresh(server, IDS)
    st.ledger.record("client-0", "fedsc/dp-calr", 0.3, 0.1, 1, "zero_out", 1)
    st.client_ledger.record_noise_multiplier("client-1", "flower/x", 2.0, step=1, unit="client")
    st.clients["client-0"]["fedsc.cache"] = np.ones(3)
    st.records.append(_record(1))
    st.round, st.elapsed, st.initial = 1, 0.2, {"knn_backbone": 0.1}
    return st


def test_a_state_travels_through_a_checkpoint_unchanged(tmp_path) -> None:
    st = _state()
    assert list(st.to_dict()) == [  # the checkpoint's keys, in the order written before
        "round",
        "server",
        "clients",
        "ledger",
        "client_ledger",
        "records",
        "elapsed",
        "initial",
    ]
    save_checkpoint(tmp_path / "c.pt", st.to_dict(), "f" * 16)
    back = RunState.from_dict(load_checkpoint(tmp_path / "c.pt", "f" * 16), 3, IDS)
    assert (back.round, back.elapsed, back.initial) == (1, 0.2, {"knn_backbone": 0.1})
    assert back.records == st.records
    assert np.array_equal(back.server.weights["w"], st.server.weights["w"])
    assert back.server.weights["w"].dtype == np.float32
    assert np.array_equal(back.clients["client-0"]["fedsc.cache"], np.ones(3))
    assert back.clients["client-1"] == {}
    assert back.ledger.to_dict() == st.ledger.to_dict()
    assert back.client_ledger.to_dict() == st.client_ledger.to_dict()
    # a state written before client-level ledgers existed reads with an empty one
    old = st.to_dict()
    del old["client_ledger"], old["initial"]
    back = RunState.from_dict(old, 3, IDS)
    assert back.client_ledger.unit == "client" and not len(back.client_ledger)
    assert back.initial is None and "initial" not in back.to_dict()


def test_an_inconsistent_state_is_refused_before_writing_or_use() -> None:
    st = _state()
    st.round = 2  # one record for two rounds
    with pytest.raises(ValueError, match="1 round records for round 2"):
        st.to_dict()
    good = _state().to_dict()
    with pytest.raises(ValueError, match=r"names client\(s\) \[.client-1.\]"):
        RunState.from_dict(good, 3, ["client-0", "client-9"])
    with pytest.raises(ValueError, match="outside 0..0"):
        RunState.from_dict(good, 0, IDS)


def test_a_record_reads_back_as_written_and_a_malformed_one_is_refused() -> None:
    rec = _record(1)
    d = rec.to_dict()
    assert list(d) == [  # the key order results.json and rounds lines have always had
        "round",
        "sampled",
        "phases",
        "bytes_down",
        "bytes_up",
        "bytes_down_total",
        "bytes_up_total",
        "epsilon_rdp",
        "seconds_round",
    ]
    assert (d["bytes_down_total"], d["bytes_up_total"]) == (20, 10)
    assert RoundRecord.from_dict(d, 1, IDS) == rec
    assert RoundRecord.from_dict(d).to_dict() == d
    with pytest.raises(ValueError, match="the record of round 2 says round 1"):
        RoundRecord.from_dict(d, 2)
    for broken, match in (
        ({**d, "bytes_up_total": 11}, "no valid bytes_up"),
        ({k: v for k, v in d.items() if k != "seconds_round"}, "lacks the number seconds_round"),
        ({**d, "phases": {"train": {**d["phases"]["train"], "kind": "x"}}}, "the kind 'x'"),
        ({**d, "phases": {"train": {**d["phases"]["train"], "seconds": "1"}}}, "valid seconds"),
    ):
        with pytest.raises(ValueError, match=match):
            RoundRecord.from_dict(broken, 1)
