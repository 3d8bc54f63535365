r"""A :class:`~fedspectral.fed.protocol.Payload` as Flower records, and back.

Wire layout of one message's ``RecordDict``:

``"arrays"`` -- ``ArrayRecord``
    ``Payload.arrays`` *packed*: one ``Array`` (``"packed"``, ``uint8``) holding the
    raw bytes (C order) of every numeric or boolean array, one after the other; the
    ``"fedspectral"`` record's ``array-layout`` (JSON: key, dtype string with its byte
    order, shape, offset, size) says where each is.  Any other dtype that
    ``numpy.save`` stores without pickling travels as its own ``Array`` under its
    key.  The round trip is bit-exact either way (every bit of the data, dtype and
    shape).  Why packed: Flower moves a message as a tree of objects, one HTTP
    request per object on every hop (ServerApp -> SuperLink -> SuperNode ->
    ClientApp and back), and an ``Array`` is two objects; a model of 13 tensors
    would be 31 objects, packed it is 7 whatever the number of tensors.
``"metrics"`` -- ``MetricRecord``
    ``Payload.metrics`` (``int`` and ``float``; numpy scalars are converted to
    the Python scalar of the same value: a float32 metric becomes the float64
    of the same value).
``"config"`` -- ``ConfigRecord``
    ``Payload.config`` (``int``, ``float``, ``str``, ``bool``).
``"fedspectral"`` -- ``ConfigRecord``
    Metadata of the adapter: the key order of ``arrays`` (so a receiver gets the
    ``state_dict`` order the sender had), the ``array-layout`` of the packed
    arrays and, for a message sent by the server, the phase name and round.

Nothing else travels: the adapter moves payloads, it never looks into them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.app.typing import ConfigRecordValues, MetricRecordValues

from fedspectral.fed.protocol import Payload

__all__ = [
    "ARRAYS",
    "CONFIG",
    "META",
    "METRICS",
    "decode_replies",
    "error_gist",
    "payload_from_recorddict",
    "payload_to_recorddict",
]

ARRAYS = "arrays"
METRICS = "metrics"
CONFIG = "config"
META = "fedspectral"
#: the key of the packed arrays in the ``"arrays"`` record
PACKED = "packed"
# dtype kinds whose raw bytes (with the dtype string) are the whole array
_PACKABLE = "biufcmM"


def _metric_value(key: str, v: Any) -> int | float:
    if isinstance(v, bool | np.bool_):
        raise TypeError(
            f"metric {key!r} is a bool ({v!r}); metrics are int or float "
            "(put flags in the payload's config)"
        )
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
    raise TypeError(
        f"config {key!r} must be an int, float, str or bool, got {type(v).__name__} {v!r}"
    )


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
    layout: list[list[Any]] = []
    parts: list[bytes] = []
    offset = 0
    for k, a in payload.arrays.items():
        if not isinstance(k, str):
            raise TypeError(f"array keys must be str, got {k!r}")
        if k == PACKED:
            raise TypeError(f"array key {PACKED!r} is reserved for the packed arrays")
        arr = np.asarray(a)
        if arr.dtype.hasobject:
            raise TypeError(f"array {k!r} has dtype {arr.dtype}, which needs pickling")
        if arr.dtype.kind in _PACKABLE and arr.dtype.fields is None:
            raw = np.ascontiguousarray(arr).tobytes()
            layout.append([k, arr.dtype.str, list(arr.shape), offset, len(raw)])
            parts.append(raw)
            offset += len(raw)
        else:
            arrays[k] = Array(arr)
    if layout:
        arrays[PACKED] = Array(np.frombuffer(b"".join(parts), dtype=np.uint8))
    metrics: dict[str, MetricRecordValues] = {
        str(k): _metric_value(k, v) for k, v in payload.metrics.items()
    }
    config: dict[str, ConfigRecordValues] = {
        str(k): _config_value(k, v) for k, v in payload.config.items()
    }
    m: dict[str, Any] = {"array-keys": list(payload.arrays), "array-layout": json.dumps(layout)}
    m.update({str(k): _config_value(k, v) for k, v in meta.items()})
    return RecordDict(
        {
            ARRAYS: ArrayRecord(arrays, keep_input=True) if arrays else ArrayRecord(),
            METRICS: MetricRecord(metrics),
            CONFIG: ConfigRecord(config),
            META: ConfigRecord(m),
        }
    )


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
        raise ValueError(f"not a fedspectral payload: records {missing} missing (has {sorted(rd)})")
    ar = rd.array_records[ARRAYS]
    meta = rd.config_records[META]
    keys = meta.get("array-keys", [])
    if not isinstance(keys, list):
        raise ValueError(f"the message's array-keys is not a list: {keys!r:.80}")
    order = [str(k) for k in keys]
    layout = json.loads(str(meta.get("array-layout", "[]")))
    found: dict[str, np.ndarray] = {k: ar[k].numpy() for k in ar if k != PACKED}
    if layout:
        if PACKED not in ar:
            raise ValueError("the message declares packed arrays but carries none")
        buf = ar[PACKED].numpy()
        if buf.dtype != np.uint8 or buf.ndim != 1 or sum(int(e[4]) for e in layout) != buf.size:
            raise ValueError(
                f"packed arrays: {buf.size} bytes of {buf.dtype} do not match the declared layout"
            )
        for key, dtype, shape, off, size in layout:
            a = np.frombuffer(buf, dtype=np.uint8, count=int(size), offset=int(off))
            found[str(key)] = a.view(np.dtype(str(dtype))).reshape(shape).copy()
    if sorted(order) != sorted(found):
        raise ValueError(
            f"array keys {sorted(found)} do not match the declared keys {sorted(order)}"
        )
    arrays = {k: found[k] for k in order}
    # the scalars a payload holds (a list, or bytes, is refused as the sender refuses it)
    metrics = {k: _metric_value(k, v) for k, v in rd.metric_records[METRICS].items()}
    config = {k: _config_value(k, v) for k, v in rd.config_records[CONFIG].items()}
    return Payload(arrays=arrays, metrics=metrics, config=config)


def meta_of(rd: RecordDict) -> dict[str, Any]:
    """The adapter metadata of a message (phase, round, ...), without the array keys."""
    m = dict(rd.config_records[META]) if META in rd else {}
    m.pop("array-keys", None)
    m.pop("array-layout", None)
    return m


# the last "<module.>Class: message" line of a traceback, the class an exception's
_EXC_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Refusal|Fault|Exit)): (.+)$"
)
# wrappers of the simulation runtime's Ray backend around a ClientApp's own exception
_WRAPPERS = ("ClientAppException", "RayTaskError")


def error_gist(reason: str) -> str:
    """A ClientApp error's reason as the node's own words: a traceback (the simulation
    runtime's Ray backend sends the whole chain) becomes its exception's ``Class: message``
    line (the innermost that is not Ray's or Flower's wrapper); any other reason is kept."""
    text = str(reason)
    if "Traceback" not in text and "\n" not in text:
        return text
    found = [m for m in map(_EXC_LINE.match, text.splitlines()) if m]
    own = [m for m in found if not m.group(1).startswith(_WRAPPERS)]
    pick = own or found
    if not pick:
        return text
    return f"{pick[0].group(1)}: {pick[0].group(2)}"


def decode_replies(
    replies: Mapping[Any, Any], cid_of: Mapping[Any, str]
) -> dict[str, Payload | BaseException]:
    """Replies by client id: the decoded payload, or the exception that stands for a
    ClientApp error or an undecodable reply (the round loop treats it as a failure)."""
    out: dict[str, Payload | BaseException] = {}
    for node, r in replies.items():
        cid = cid_of[node]
        if r.has_error():
            out[cid] = RuntimeError(f"ClientApp error {r.error.code}: {error_gist(r.error.reason)}")
        else:
            try:
                out[cid] = payload_from_recorddict(r.content)
            except (ValueError, TypeError) as exc:
                out[cid] = exc
    return out
