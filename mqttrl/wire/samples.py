"""Sample batches: a versioned header and named numpy arrays as raw buffers.

Layout (all integers little-endian)::

    b"MQSB"  u8 protocol  u32 header_len  header (UTF-8 JSON)  pad to 8
    array data, each array starting at an 8-byte aligned offset

The header holds run, worker, the worker process's incarnation id, sequence
number (counted per incarnation), the learner epoch and model version the batch
was made with, transition count and, per array, name/dtype/shape/offset. Decoding maps each array onto
the payload with ``np.frombuffer`` (no copy) after checking every bound, then
:meth:`SampleSpec.validate` checks names, dtypes, shapes and finiteness
against what the algorithm expects.
"""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Mapping

import attrs
import numpy as np

from .. import PROTOCOL_VERSION
from .errors import Rejected

MAGIC = b"MQSB"
_PREFIX = struct.Struct("<4sBI")
#: dtypes allowed on the wire; anything else is rejected before numpy sees it.
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "float16", "float32", "float64"]
)
MAX_HEADER = 64 * 1024
MAX_DIMS = 8
MAX_INCARNATION = 64


@attrs.frozen
class FieldSpec:
    """What one field of a batch looks like (shape excludes the leading axis).

    A field has one row per transition, unless ``per_transition`` is false: then it is a
    pool of at most ``max_rows`` rows that other fields refer to (DQN's frames). ``ref``
    names such a pool: each value of this integer field must be a row of it.
    """

    dtype: str
    shape: tuple[int, ...] = ()
    #: inclusive bounds for integer fields (e.g. discrete actions), or None
    low: float | None = None
    high: float | None = None
    per_transition: bool = True
    max_rows: int | None = None
    ref: str | None = None


@attrs.frozen
class SampleSpec:
    """The fields an algorithm expects in every batch, used to validate input."""

    fields: Mapping[str, FieldSpec]
    max_transitions: int = 65536

    def validate(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Raise :class:`Rejected` unless ``arrays`` matches this spec exactly."""
        if count < 1 or count > self.max_transitions:
            raise Rejected(
                "oversize" if count > 0 else "bad_header",
                f"batch of {count} transitions (allowed 1..{self.max_transitions})",
            )
        missing = set(self.fields) - set(arrays)
        if missing:
            raise Rejected("missing_field", f"missing {sorted(missing)}")
        extra = set(arrays) - set(self.fields)
        if extra:
            raise Rejected("unknown_field", f"unexpected {sorted(extra)}")
        for name, spec in self.fields.items():
            arr = arrays[name]
            if arr.dtype != np.dtype(spec.dtype):
                raise Rejected("dtype", f"{name} is {arr.dtype}, expected {spec.dtype}")
            rows = count if spec.per_transition else arr.shape[0] if arr.ndim else -1
            if arr.shape != (rows, *spec.shape):
                raise Rejected("shape", f"{name} has shape {arr.shape}, expected {(rows, *spec.shape)}")
            if spec.max_rows is not None and rows > spec.max_rows:
                raise Rejected("oversize", f"{name} has {rows} rows (allowed {spec.max_rows})")
            if spec.ref is not None and arr.size and arr.max() >= len(arrays[spec.ref]):
                raise Rejected("out_of_range", f"{name} refers past the {len(arrays[spec.ref])} rows of {spec.ref}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise Rejected("non_finite", f"{name} contains NaN or inf")
            if spec.low is not None and arr.size and arr.min() < spec.low:
                raise Rejected("out_of_range", f"{name} below {spec.low}")
            if spec.high is not None and arr.size and arr.max() > spec.high:
                raise Rejected("out_of_range", f"{name} above {spec.high}")

    def describe(self) -> dict:
        return {k: {"dtype": v.dtype, "shape": list(v.shape)} for k, v in self.fields.items()}


@attrs.frozen
class SampleBatch:
    """A decoded batch. Arrays may be read-only views into the payload."""

    run: str
    worker: str
    seq: int
    model_version: int
    count: int
    arrays: Mapping[str, np.ndarray]
    sent_at: float = 0.0
    protocol: int = PROTOCOL_VERSION
    extra: Mapping[str, object] = attrs.field(factory=dict)
    #: the sending process (a restarted worker is a new incarnation under the same name)
    incarnation: str = ""
    #: the learner epoch of the model that made the batch (0: none given)
    epoch: int = 0


def _align(n: int) -> int:
    return (n + 7) & ~7


def encode_batch(
    run: str,
    worker: str,
    seq: int,
    model_version: int,
    arrays: Mapping[str, np.ndarray],
    extra: Mapping[str, object] | None = None,
    incarnation: str = "",
    epoch: int = 0,
    count: int | None = None,
) -> bytes:
    """Encode named arrays into one payload. ``count`` is the number of transitions; without it,
    all arrays must share their leading axis, which is the count."""
    if len(incarnation) > MAX_INCARNATION:
        raise ValueError(f"incarnation id of {len(incarnation)} characters (at most {MAX_INCARNATION})")
    if not arrays:
        raise ValueError("a batch needs at least one array")
    counts = {a.shape[0] if a.ndim else -1 for a in arrays.values()}
    if -1 in counts or (count is None and len(counts) != 1):
        raise ValueError(f"arrays disagree on the batch axis: { {k: v.shape for k, v in arrays.items()} }")
    if count is None:
        count = counts.pop()
    entries = []
    offset = 0
    blobs = []
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.name not in ALLOWED_DTYPES:
            raise ValueError(f"dtype {arr.dtype} of {name} cannot go on the wire")
        entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "offset": offset})
        blobs.append((offset, arr))
        offset = _align(offset + arr.nbytes)
    header = {
        "run": run,
        "worker": worker,
        "incarnation": incarnation,
        "seq": int(seq),
        "epoch": int(epoch),
        "model_version": int(model_version),
        "count": int(count),
        "sent_at": time.time(),
        "arrays": entries,
    }
    if extra:
        header["extra"] = dict(extra)
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    start = _align(_PREFIX.size + len(hbytes))
    out = bytearray(start + offset)
    _PREFIX.pack_into(out, 0, MAGIC, PROTOCOL_VERSION, len(hbytes))
    out[_PREFIX.size : _PREFIX.size + len(hbytes)] = hbytes
    for off, arr in blobs:
        out[start + off : start + off + arr.nbytes] = arr.tobytes()
    return bytes(out)


def _int(header: dict, key: str, lo: int = 0, hi: int = 2**62) -> int:
    v = header.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise Rejected("bad_header", f"{key}={v!r} is not an integer in [{lo}, {hi}]")
    return v


def _finite(x: int | float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an integer too large for a float
        return False


def decode_batch(payload: bytes | memoryview, max_bytes: int = 64 * 1024 * 1024) -> SampleBatch:
    """Decode and bounds-check a batch. Raises :class:`Rejected` with a reason."""
    n = len(payload)
    if n > max_bytes:
        raise Rejected("oversize", f"{n} bytes, limit {max_bytes}")
    if n < _PREFIX.size:
        raise Rejected("garbage" if n < 4 or bytes(payload[:4]) != MAGIC else "truncated", f"only {n} bytes")
    magic, proto, hlen = _PREFIX.unpack_from(payload, 0)
    if magic != MAGIC:
        raise Rejected("garbage", "not a sample batch (bad magic)")
    if proto != PROTOCOL_VERSION:
        raise Rejected("protocol_version", f"protocol {proto}, this node speaks {PROTOCOL_VERSION}")
    if hlen > MAX_HEADER:
        raise Rejected("bad_header", f"header of {hlen} bytes exceeds {MAX_HEADER}")
    if _PREFIX.size + hlen > n:
        raise Rejected("truncated", f"header needs {hlen} bytes, payload has {n - _PREFIX.size}")
    try:
        header = json.loads(bytes(payload[_PREFIX.size : _PREFIX.size + hlen]))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested JSON
        raise Rejected("bad_header", f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise Rejected("bad_header", "header is not an object")
    run, worker = header.get("run"), header.get("worker")
    if not isinstance(run, str) or not isinstance(worker, str):
        raise Rejected("bad_header", "run and worker must be strings")
    seq = _int(header, "seq")
    version = _int(header, "model_version")
    epoch = _int(header, "epoch") if "epoch" in header else 0
    incarnation = header.get("incarnation", "")
    if not isinstance(incarnation, str) or len(incarnation) > MAX_INCARNATION:
        raise Rejected("bad_header", f"incarnation must be a string of at most {MAX_INCARNATION} characters")
    count = _int(header, "count", 0, 2**31)
    sent_at = header.get("sent_at", 0.0)
    if not isinstance(sent_at, (int, float)) or isinstance(sent_at, bool) or not _finite(sent_at):
        raise Rejected("bad_header", "sent_at must be a finite number")
    entries = header.get("arrays")
    if not isinstance(entries, list) or not entries or len(entries) > 64:
        raise Rejected("bad_header", "arrays must be a list of 1..64 entries")
    extra = header.get("extra", {})
    if not isinstance(extra, dict):
        raise Rejected("bad_header", "extra must be an object")
    start = _align(_PREFIX.size + hlen)
    data_len = n - start
    if data_len < 0:
        raise Rejected("truncated", "no room for array data")
    body = memoryview(payload)[start:] if data_len else memoryview(b"")
    arrays: dict[str, np.ndarray] = {}
    for e in entries:
        if not isinstance(e, dict):
            raise Rejected("bad_header", "array entry is not an object")
        name, dtype, shape, off = e.get("name"), e.get("dtype"), e.get("shape"), e.get("offset")
        if not isinstance(name, str) or not name or len(name) > 64 or name in arrays:
            raise Rejected("bad_header", f"bad or duplicate array name {name!r}")
        if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:  # a list/dict is unhashable
            raise Rejected("dtype", f"{name}: dtype {dtype!r} not allowed on the wire")
        if (
            not isinstance(shape, list)
            or not 1 <= len(shape) <= MAX_DIMS
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in shape)
        ):
            raise Rejected("shape", f"{name}: bad shape {shape!r}")
        if not isinstance(off, int) or isinstance(off, bool) or off < 0 or off % 8:
            raise Rejected("bad_header", f"{name}: bad offset {off!r}")
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if off + nbytes > data_len:
            raise Rejected("truncated", f"{name} needs bytes {off}..{off + nbytes}, payload has {data_len}")
        arr = np.frombuffer(body, dtype=dt, count=math.prod(shape), offset=off).reshape(shape)
        arrays[name] = arr
    return SampleBatch(
        run=run,
        worker=worker,
        seq=seq,
        model_version=version,
        count=count,
        arrays=arrays,
        sent_at=float(sent_at),
        protocol=proto,
        extra=extra,
        incarnation=incarnation,
        epoch=epoch,
    )
