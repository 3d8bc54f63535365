"""Payload <-> Flower records: lossless round trip, through Flower's own wire format."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from fedspectral.fed.flower.apps.records import (
    meta_of,
    payload_from_recorddict,
    payload_to_recorddict,
)
from fedspectral.fed.protocol import Payload


def payloads_equal(a: Payload, b: Payload) -> bool:
    """Bit-exact equality of two payloads (arrays: dtype, shape and bytes; NaN == NaN)."""
    if (
        list(a.arrays) != list(b.arrays)
        or a.metrics.keys() != b.metrics.keys()
        or a.config != b.config
    ):
        return False
    for k in a.metrics:
        x, y = a.metrics[k], b.metrics[k]
        if type(x) is not type(y):
            return False
        if not (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))):
            return False
    for k in a.arrays:
        x, y = np.asarray(a.arrays[k]), np.asarray(b.arrays[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def wire(rd: RecordDict) -> RecordDict:
    """Serialise ``rd`` to the bytes Flower sends and inflate it again."""
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(rd).items()}
    out = inflate_object_from_contents(rd.object_id, contents)
    assert isinstance(out, RecordDict)
    return out


def _payload() -> Payload:
    rng = np.random.default_rng(0)
    arrays = {
        "w.conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "w.bn.num_batches_tracked": np.array(7, dtype=np.int64),
        "R_minus_j": rng.standard_normal((5, 5)),  # float64
        "fortran": np.asfortranarray(rng.standard_normal((3, 4))),
        "special": np.array([np.nan, np.inf, -np.inf, -0.0, 5e-324]),
        "half": rng.standard_normal(6).astype(np.float16),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    return Payload(
        arrays=arrays,
        metrics={"num-examples": 600, "loss": 0.123456789012345678, "nan": float("nan")},
        config={
            "lr": 0.05,
            "alpha": 1.0,
            "phase": "share",
            "dp": True,
            "E": 1,
            "release.sigma": 1e-3,
            "release.sensitivity": 0.5,
            "release.mechanism": "fedsc/dp-calr",
        },
    )


@pytest.mark.parametrize("through_wire", [False, True])
def test_round_trip_is_bit_exact(through_wire: bool) -> None:
    p = _payload()
    rd = payload_to_recorddict(p, phase="train", round=3)
    if through_wire:
        rd = wire(rd)
    q = payload_from_recorddict(rd)
    assert payloads_equal(p, q)
    assert list(q.arrays) == list(p.arrays)  # state_dict order kept
    for k, a in p.arrays.items():
        assert q.arrays[k].dtype == a.dtype and q.arrays[k].shape == a.shape
        np.testing.assert_array_equal(q.arrays[k], a)
    assert np.signbit(q.arrays["special"][3])  # -0.0 survives
    assert q.config["dp"] is True and isinstance(q.config["E"], int)
    assert isinstance(q.metrics["num-examples"], int)
    assert q.metrics["loss"] == 0.123456789012345678
    assert meta_of(rd) == {"phase": "train", "round": 3}


def test_empty_payload_round_trip() -> None:
    p = Payload()
    assert payloads_equal(p, payload_from_recorddict(wire(payload_to_recorddict(p))))


def test_payloads_equal_detects_a_flipped_bit() -> None:
    p = _payload()
    q = payload_from_recorddict(payload_to_recorddict(p))
    a = q.arrays["R_minus_j"].copy()
    a.view(np.uint64)[0, 0] ^= 1
    q.arrays["R_minus_j"] = a
    assert not payloads_equal(p, q)


def test_numpy_scalars_become_python_scalars_of_the_same_value() -> None:
    p = Payload(metrics={"a": np.float32(0.1), "n": np.int64(3)}, config={"b": np.bool_(True)})
    q = payload_from_recorddict(payload_to_recorddict(p))
    assert q.metrics["a"] == float(np.float32(0.1)) and type(q.metrics["a"]) is float
    assert q.metrics["n"] == 3 and type(q.metrics["n"]) is int
    assert q.config["b"] is True


@pytest.mark.parametrize(
    "bad",
    [
        Payload(metrics={"flag": True}),
        Payload(metrics={"s": "x"}),
        Payload(config={"none": None}),  # type: ignore[dict-item]
        Payload(config={"l": [1, 2]}),  # type: ignore[dict-item]
        Payload(arrays={"o": np.array([object()])}),
    ],
)
def test_unrepresentable_values_raise_type_error(bad: Payload) -> None:
    with pytest.raises(TypeError):
        payload_to_recorddict(bad)


def test_not_a_payload() -> None:
    with pytest.raises(TypeError, match="Payload"):
        payload_to_recorddict({"arrays": {}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing"):
        payload_from_recorddict(RecordDict())


def test_arrays_travel_packed_in_a_fixed_number_of_objects() -> None:
    """One Flower object is one HTTP request per hop: a message's object count must
    not grow with the number of tensors (a 13-tensor model was 31 objects)."""

    def objects(n: int) -> int:
        arrays = {f"w{i}": np.full((3, i + 1), i, dtype=np.float32) for i in range(n)}
        return len(get_all_nested_objects(payload_to_recorddict(Payload(arrays=arrays))))

    assert objects(1) == objects(13) == objects(50)
    assert objects(13) <= 8


def test_other_dtypes_and_byte_orders_round_trip() -> None:
    arrays = {
        "big": np.arange(5, dtype=">f8"),
        "text": np.array(["ab", "c"]),
        "rec": np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        "when": np.array(["2026-12-01"], dtype="datetime64[D]"),
        "z": np.array([1 + 2j], dtype=np.complex64),
    }
    p = Payload(arrays=arrays)
    q = payload_from_recorddict(wire(payload_to_recorddict(p)))
    assert payloads_equal(p, q)
    assert q.arrays["big"].dtype == np.dtype(">f8")
    assert q.arrays["rec"].dtype == arrays["rec"].dtype


def test_a_layout_that_does_not_match_the_bytes_is_refused() -> None:
    from flwr.app import ConfigRecord

    rd = payload_to_recorddict(_payload())
    meta = dict(rd.config_records["fedspectral"])
    meta["array-layout"] = meta["array-layout"].replace("[4, 3, 3, 3]", "[4, 3, 3, 4]", 1)
    rd["fedspectral"] = ConfigRecord(meta)
    with pytest.raises(ValueError):
        payload_from_recorddict(rd)
    with pytest.raises(TypeError, match="reserved"):
        payload_to_recorddict(Payload(arrays={"packed": np.zeros(2)}))


def test_a_ray_traceback_reason_becomes_the_nodes_own_words() -> None:
    """The simulation runtime's Ray backend sends a ClientApp's whole exception chain as
    the error reason; the server keeps the node's own ``Class: message`` line of it."""
    from fedspectral.fed.flower.apps.records import error_gist

    reason = (
        "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run() "
        '(pid=1)\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "fedspectral.fed.flower.node.policy.PolicyRefusal: refused by the node's policy: "
        "no noise (policy allow-nonprivate: false)\n\nThe above exception was the direct "
        "cause of the following exception:\n\nray::ClientAppActor.run() (pid=1)\n"
        "flwr.clientapp.client_app.ClientAppException: \nException ClientAppException "
        "occurred. Message: refused'>"
    )
    assert error_gist(reason) == (
        "PolicyRefusal: refused by the node's policy: no noise (policy allow-nonprivate: false)"
    )
    one_line = "<class 'faulty_client.InjectedFault'>:<'injected failure'>"
    assert error_gist(one_line) == one_line  # a SuperNode's reason: kept as it is
