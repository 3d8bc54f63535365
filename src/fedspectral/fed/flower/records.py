r"""A :class:`~fedspectral.fed.protocol.Payload` as Flower records, and back.

Wire layout of one message's ``RecordDict``:

``"arrays"`` -- ``ArrayRecord``
    ``Payload.arrays``, one ``Array`` per key.  Flower serialises an ``Array``
    with ``numpy.save`` (dtype, shape, byte order and every bit of the data), so
    the round trip is bit-exact for every numpy dtype that ``numpy.save`` stores
    without pickling (all numeric and boolean dtypes).
``"metrics"`` -- ``MetricRecord``
    ``Payload.metrics`` (``int`` and ``float``; numpy scalars are converted to
    the Python scalar of the same value: a float32 metric becomes the float64
    of the same value).
``"config"`` -- ``ConfigRecord``
    ``Payload.config`` (``int``, ``float``, ``str``, ``bool``).
``"fedspectral"`` -- ``ConfigRecord``
    Metadata of the adapter: the key order of ``arrays`` (so a receiver gets the
    ``state_dict`` order the sender had) and, for a message sent by the server,
    the phase name and round.

Nothing else travels: the adapter moves payloads, it never looks into them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedspectral.fed.protocol import Payload

__all__ = [
    "ARRAYS",
    "CONFIG",
    "META",
    "METRICS",
    "payload_from_recorddict",
    "payload_to_recorddict",
]

ARRAYS = "arrays"
METRICS = "metrics"
CONFIG = "config"
META = "fedspectral"


def _metric_value(key: str, v: Any) -> int | float:
    if isinstance(v, bool | np.bool_):
        raise TypeError(f"metric {key!r} is a bool ({v!r}); metrics are int or float "
                        "(put flags in the payload's config)")
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return float(v)
    raise TypeError(f"metric {key!r} must be an int or a float, got {type(v).__name__} {v!r}")


def _config_value(key: str, v: Any) -> int | float | str | bool:
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return float(v)
    if isinstance(v, str):
        return v
    raise TypeError(f"config {key!r} must be an int, float, str or bool, "
                    f"got {type(v).__name__} {v!r}")


def payload_to_recorddict(payload: Payload, **meta: float | str | bool) -> RecordDict:
    """Encode ``payload`` as a ``RecordDict`` (see the module docstring for the layout).

    Parameters
    ----------
    payload : Payload
        The message to send.
    **meta
        Extra adapter metadata (``phase=``, ``round=``) stored in the
        ``"fedspectral"`` ``ConfigRecord``.

    Raises
    ------
    TypeError
        If ``payload`` is not a :class:`Payload`, an array is not a numpy
        array (or cannot be stored without pickling), or a metric / config
        value has a type the Flower records cannot hold.
    """
    if not isinstance(payload, Payload):
        raise TypeError(f"payload must be a Payload, got {type(payload).__name__}")
    arrays: dict[str, Array] = {}
    for k, a in payload.arrays.items():
        if not isinstance(k, str):
            raise TypeError(f"array keys must be str, got {k!r}")
        arr = np.asarray(a)
        if arr.dtype.hasobject:
            raise TypeError(f"array {k!r} has dtype {arr.dtype}, which needs pickling")
        arrays[k] = Array(arr)
    metrics = {str(k): _metric_value(k, v) for k, v in payload.metrics.items()}
    config = {str(k): _config_value(k, v) for k, v in payload.config.items()}
    m: dict[str, Any] = {"array-keys": list(payload.arrays)}
    m.update({str(k): _config_value(k, v) for k, v in meta.items()})
    return RecordDict({
        ARRAYS: ArrayRecord(arrays, keep_input=True) if arrays else ArrayRecord(),
        METRICS: MetricRecord(metrics),
        CONFIG: ConfigRecord(config),
        META: ConfigRecord(m),
    })


def payload_from_recorddict(rd: RecordDict) -> Payload:
    """Decode a ``RecordDict`` written by :func:`payload_to_recorddict`.

    Raises
    ------
    ValueError
        If a record is missing or the array keys do not match the metadata.
    """
    if not isinstance(rd, RecordDict):
        raise TypeError(f"expected a RecordDict, got {type(rd).__name__}")
    missing = [k for k in (ARRAYS, METRICS, CONFIG, META) if k not in rd]
    if missing:
        raise ValueError(f"not a fedspectral payload: records {missing} missing "
                         f"(has {sorted(rd)})")
    ar = rd.array_records[ARRAYS]
    order = list(rd.config_records[META].get("array-keys", []))
    if sorted(order) != sorted(ar.keys()):
        raise ValueError(f"array keys {sorted(ar.keys())} do not match the declared "
                         f"keys {sorted(order)}")
    arrays = {k: ar[k].numpy() for k in order}
    metrics = dict(rd.metric_records[METRICS])
    config = dict(rd.config_records[CONFIG])
    return Payload(arrays=arrays, metrics=metrics, config=config)


def meta_of(rd: RecordDict) -> dict[str, Any]:
    """The adapter metadata of a message (phase, round, ...), without the array keys."""
    m = dict(rd.config_records[META]) if META in rd else {}
    m.pop("array-keys", None)
    return m


def payloads_equal(a: Payload, b: Payload) -> bool:
    """Bit-exact equality of two payloads (arrays: dtype, shape and bytes; NaN == NaN)."""
    if list(a.arrays) != list(b.arrays) or a.metrics.keys() != b.metrics.keys() \
            or a.config != b.config:
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


def as_plain_mapping(m: Mapping[str, Any]) -> dict[str, Any]:
    """A record's items as a plain ``dict`` (for JSON results)."""
    return {str(k): (list(v) if isinstance(v, list) else v) for k, v in m.items()}
