"""Wire formats: sample batches, weights and JSON control messages.

Every decoder must either return a valid object or raise ``Rejected`` with a
reason; anything else (IndexError, TypeError, RecursionError, ...) would let a
single bad message from the network crash a node.
"""

from __future__ import annotations

import functools
import json
import logging
import resource
import struct
import tracemalloc
import zlib
from types import SimpleNamespace

import attrs
import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqttrl import PROTOCOL_VERSION
from mqttrl.wire import (
    FieldSpec,
    Rejected,
    RejectionCounter,
    SampleBatch,
    SampleSpec,
    WeightsMessage,
    check_compression,
    decode_batch,
    decode_header,
    decode_json,
    decode_weights,
    encode_batch,
    encode_json,
    encode_weights,
    samples,
)
from mqttrl.wire.errors import REASONS
from mqttrl.wire.samples import _PREFIX, ALLOWED_DTYPES, AUTO_MIN_BYTES, MAGIC, MAX_HEADER, _align

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- helpers
def split(payload: bytes) -> tuple[int, int, dict, int]:
    """(protocol, header_len, header, data_start) of an encoded batch."""
    magic, proto, hlen = _PREFIX.unpack_from(payload, 0)
    assert magic == MAGIC
    header = json.loads(payload[_PREFIX.size : _PREFIX.size + hlen])
    return proto, hlen, header, _align(_PREFIX.size + hlen)


def assemble(header: dict | bytes, data: bytes = b"", proto: int = PROTOCOL_VERSION, magic: bytes = MAGIC) -> bytes:
    """Build a batch payload by hand from a header (dict or raw bytes) and a data section."""
    hbytes = header if isinstance(header, bytes) else json.dumps(header).encode()
    start = _align(_PREFIX.size + len(hbytes))
    out = bytearray(start)
    _PREFIX.pack_into(out, 0, magic, proto, len(hbytes))
    out[_PREFIX.size : _PREFIX.size + len(hbytes)] = hbytes
    return bytes(out) + data


def rejected(fn, *args, **kwargs) -> Rejected:
    with pytest.raises(Rejected) as ei:
        fn(*args, **kwargs)
    assert ei.value.reason in REASONS
    return ei.value


def decodes_or_rejects(fn, payload):
    """The property every decoder must have: a result or Rejected, nothing else."""
    try:
        return fn(payload)
    except Rejected as r:
        assert r.reason in REASONS
        return None


def sample_arrays(count: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((count, 4)).astype(np.float32),
        "action": rng.integers(0, 2, count).astype(np.int64),
        "reward": rng.standard_normal(count).astype(np.float32),
        "done": rng.integers(0, 2, count).astype(bool),
    }


SPEC = SampleSpec(
    fields={
        "obs": FieldSpec("float32", (4,)),
        "action": FieldSpec("int64", (), low=0, high=1),
        "reward": FieldSpec("float32"),
        "done": FieldSpec("bool"),
    },
    max_transitions=100,
)


# ---------------------------------------------------------------- sample batches: round trips
@pytest.mark.parametrize("dtype", sorted(ALLOWED_DTYPES))
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 4), (4, 1, 1, 3), (0,), (3, 0)])
def test_batch_round_trip_dtypes_and_shapes(dtype, shape):
    rng = np.random.default_rng(zlib.crc32(f"{dtype}{shape}".encode()))
    if dtype == "bool":
        arr = rng.integers(0, 2, shape).astype(bool)
    elif np.dtype(dtype).kind == "f":
        arr = (rng.standard_normal(shape) * 100).astype(dtype)
    else:
        info = np.iinfo(dtype)
        arr = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    # a second field with an odd size forces padding between arrays
    other = np.arange(shape[0] * 3, dtype=np.uint8).reshape(shape[0], 3)
    payload = encode_batch("run-1", "w.0", 17, 4, {"x": arr, "pad": other}, extra={"k": [1, "a"]})
    b = decode_batch(payload)
    assert isinstance(b, SampleBatch)
    assert (b.run, b.worker, b.seq, b.model_version, b.count) == ("run-1", "w.0", 17, 4, shape[0])
    assert b.protocol == PROTOCOL_VERSION
    assert b.extra == {"k": [1, "a"]}
    assert b.sent_at > 0
    assert list(b.arrays) == ["x", "pad"]
    for name, orig in (("x", arr), ("pad", other)):
        got = b.arrays[name]
        assert got.dtype == orig.dtype and got.shape == orig.shape
        np.testing.assert_array_equal(got, orig)


def test_batch_round_trip_non_contiguous_and_big_endian_input():
    base = np.arange(40, dtype=np.float64).reshape(10, 4)
    strided = base[:, ::2]  # not contiguous
    assert not strided.flags.c_contiguous
    b = decode_batch(encode_batch("r", "w", 0, 0, {"s": strided}))
    np.testing.assert_array_equal(b.arrays["s"], strided)


def test_decoded_arrays_are_read_only_views_into_the_payload():
    arrays = sample_arrays(64)
    payload = encode_batch("r", "w", 1, 2, arrays)
    b = decode_batch(payload)
    raw = np.frombuffer(payload, dtype=np.uint8)
    _, _, header, start = split(payload)
    offsets = {e["name"]: e["offset"] for e in header["arrays"]}
    for name, arr in b.arrays.items():
        assert np.shares_memory(arr, raw), f"{name} was copied"
        assert not arr.flags.writeable and not arr.flags.owndata
        # it is exactly the bytes at its declared offset
        lo = start + offsets[name]
        assert raw[lo : lo + arr.nbytes].tobytes() == arr.tobytes()
        assert arr.ctypes.data == raw.ctypes.data + lo
        with pytest.raises(ValueError):
            arr[...] = 0


def test_decode_from_bytearray_and_memoryview_keeps_zero_copy():
    payload = bytearray(encode_batch("r", "w", 1, 2, sample_arrays(8)))
    b = decode_batch(memoryview(payload))
    # mutate the buffer: a zero-copy view sees it
    obs_before = b.arrays["obs"].copy()
    _, _, header, start = split(bytes(payload))
    off = start + next(e["offset"] for e in header["arrays"] if e["name"] == "obs")
    payload[off : off + 4] = np.float32(12345.0).tobytes()
    assert b.arrays["obs"][0, 0] == np.float32(12345.0) != obs_before[0, 0]


def test_arrays_are_8_byte_aligned():
    arrays = {"a": np.zeros((3, 1), np.uint8), "b": np.ones((3,), np.float64), "c": np.ones((3, 3), np.int16)}
    payload = encode_batch("r", "w", 0, 0, arrays)
    _, _, header, start = split(payload)
    assert start % 8 == 0
    assert all(e["offset"] % 8 == 0 for e in header["arrays"])
    b = decode_batch(payload)
    np.testing.assert_array_equal(b.arrays["b"], 1.0)


@pytest.mark.parametrize(
    "arrays",
    [
        {},
        {"a": np.zeros(3), "b": np.zeros(4)},  # batch axes disagree
        {"a": np.float32(1.0)},  # 0-d: no batch axis
        {"a": np.zeros(3, dtype=np.complex64)},  # dtype not allowed on the wire
        {"a": np.array(["x", "y"])},
    ],
)
def test_encode_batch_refuses_bad_input(arrays):
    with pytest.raises(ValueError):
        encode_batch("r", "w", 0, 0, arrays)


# ---------------------------------------------------------------- SampleSpec.validate
def test_validate_accepts_matching_batch():
    b = decode_batch(encode_batch("r", "w", 0, 0, sample_arrays(10)))
    SPEC.validate(b.arrays, b.count)  # does not raise


def _validate(arrays, count=None):
    count = len(next(iter(arrays.values()))) if count is None else count
    return rejected(SPEC.validate, arrays, count)


def test_validate_missing_field():
    a = sample_arrays()
    del a["reward"]
    r = _validate(a)
    assert r.reason == "missing_field" and "reward" in r.detail


def test_validate_unknown_field():
    a = sample_arrays()
    a["secret"] = np.zeros(5, np.float32)
    r = _validate(a)
    assert r.reason == "unknown_field" and "secret" in r.detail


@pytest.mark.parametrize("field,bad", [("obs", np.float64), ("action", np.int32), ("done", np.uint8)])
def test_validate_dtype(field, bad):
    a = sample_arrays()
    a[field] = a[field].astype(bad)
    r = _validate(a)
    assert r.reason == "dtype" and field in r.detail


@pytest.mark.parametrize(
    "field,shape",
    [("obs", (5, 3)), ("obs", (5,)), ("obs", (5, 4, 1)), ("reward", (5, 1)), ("reward", (4,))],
)
def test_validate_shape(field, shape):
    a = sample_arrays()
    a[field] = np.zeros(shape, a[field].dtype)
    r = _validate(a, count=5)
    assert r.reason == "shape" and field in r.detail


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("field", ["obs", "reward"])
def test_validate_non_finite(field, value):
    a = sample_arrays()
    a[field] = a[field].copy()
    a[field].flat[3] = value
    r = _validate(a)
    assert r.reason == "non_finite" and field in r.detail


def test_validate_non_finite_after_wire_round_trip():
    a = sample_arrays()
    a["obs"][2, 1] = np.nan
    b = decode_batch(encode_batch("r", "w", 0, 0, a))  # decoding itself does not judge values
    assert np.isnan(b.arrays["obs"][2, 1])
    assert rejected(SPEC.validate, b.arrays, b.count).reason == "non_finite"


@pytest.mark.parametrize("value", [-1, 2, 2**40])
def test_validate_out_of_range(value):
    a = sample_arrays()
    a["action"][1] = value
    r = _validate(a)
    assert r.reason == "out_of_range" and "action" in r.detail


def test_validate_in_range_bounds_are_inclusive():
    a = sample_arrays()
    a["action"][:] = [0, 1, 0, 1, 1]
    SPEC.validate(a, 5)


def test_validate_oversize_and_empty():
    a = sample_arrays(101)
    assert _validate(a).reason == "oversize"
    a = sample_arrays(100)
    SPEC.validate(a, 100)  # exactly the limit is fine
    e = {k: v[:0] for k, v in sample_arrays().items()}
    assert _validate(e, count=0).reason == "bad_header"


# ---------------------------------------------------------------- decode_batch rejections
GOOD_HEADER = {
    "run": "r",
    "worker": "w",
    "seq": 3,
    "model_version": 1,
    "count": 2,
    "sent_at": 1.5,
    "arrays": [{"name": "a", "dtype": "float32", "shape": [2, 2], "offset": 0}],
}
GOOD_DATA = np.arange(4, dtype=np.float32).tobytes()


def test_hand_assembled_payload_decodes():
    b = decode_batch(assemble(GOOD_HEADER, GOOD_DATA))
    np.testing.assert_array_equal(b.arrays["a"], [[0, 1], [2, 3]])
    assert b.sent_at == 1.5


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"M",
        b"MQS",
        b"XXXXXXXXXXXXXXXXXXXX",
        b"\x00" * 100,
        b"PK\x03\x04" + b"\x00" * 40,
        json.dumps({"a": 1}).encode(),
    ],
)
def test_decode_garbage(payload):
    assert rejected(decode_batch, payload).reason == "garbage"


def test_decode_bad_magic_on_otherwise_valid_payload():
    good = encode_batch("r", "w", 0, 0, sample_arrays())
    assert rejected(decode_batch, b"MQSC" + good[4:]).reason == "garbage"


def test_decode_truncated_at_every_point():
    payload = encode_batch("r", "w", 5, 1, sample_arrays(7))
    _, _, header, start = split(payload)
    last = max(header["arrays"], key=lambda e: e["offset"])
    dtype = np.dtype(last["dtype"])
    needed = start + last["offset"] + int(np.prod(last["shape"])) * dtype.itemsize
    assert needed <= len(payload)
    for cut in range(len(payload)):
        if cut < needed:
            r = rejected(decode_batch, payload[:cut])
            expect = "garbage" if cut < 4 else "truncated"
            assert r.reason == expect, (cut, r)
        else:  # only trailing alignment padding removed: still the same batch
            b = decode_batch(payload[:cut])
            np.testing.assert_array_equal(b.arrays["obs"], decode_batch(payload).arrays["obs"])


def test_decode_truncated_is_also_safe_for_memoryview_input():
    payload = encode_batch("r", "w", 5, 1, sample_arrays(3))
    for cut in range(0, len(payload) - 8, 3):
        decodes_or_rejects(decode_batch, memoryview(payload)[:cut])


@pytest.mark.parametrize("proto", [0, 2, 255])
def test_decode_protocol_version(proto):
    good = encode_batch("r", "w", 0, 0, sample_arrays())
    bad = good[:4] + bytes([proto]) + good[5:]
    r = rejected(decode_batch, bad)
    assert r.reason == "protocol_version" and str(proto) in r.detail


@pytest.mark.parametrize(
    "header",
    [
        b"not json at all",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'"a string"',
        b"{" * 5000,
        b"[" * 30000 + b"]" * 30000,  # deeply nested: must not raise RecursionError
    ],
)
def test_decode_bad_header_not_json(header):
    r = rejected(decode_batch, assemble(header, GOOD_DATA))
    assert r.reason == "bad_header"


def _mutated(**changes):
    h = json.loads(json.dumps(GOOD_HEADER))
    for k, v in changes.items():
        if k.startswith("a_"):
            h["arrays"][0][k[2:]] = v
        elif v is ...:
            del h[k]
        else:
            h[k] = v
    return assemble(h, GOOD_DATA)


@pytest.mark.parametrize(
    "changes",
    [
        {"run": 5},
        {"run": ...},
        {"worker": None},
        {"worker": ["w"]},
        {"seq": "3"},
        {"seq": -1},
        {"seq": 1.5},
        {"seq": True},
        {"seq": ...},
        {"model_version": None},
        {"model_version": 2**63},
        {"epoch": -1},
        {"epoch": "3"},
        {"epoch": None},
        {"epoch": 2**63},
        {"epoch": 1.0},
        {"incarnation": 7},
        {"incarnation": None},
        {"incarnation": ["a"]},
        {"incarnation": "x" * 65},
        {"count": -2},
        {"count": 2**40},
        {"sent_at": "now"},
        {"sent_at": True},
        {"sent_at": 10**400},  # an int too big for a float
        {"arrays": []},
        {"arrays": {"a": 1}},
        {"arrays": ...},
        {"arrays": [1]},
        {"arrays": [GOOD_HEADER["arrays"][0]] * 65},
        {"extra": [1]},
        {"extra": "x"},
        {"a_name": ""},
        {"a_name": 7},
        {"a_name": "n" * 65},
        {"a_offset": 4},
        {"a_offset": -8},
        {"a_offset": "0"},
        {"a_offset": None},
        {"a_offset": True},
    ],
)
def test_decode_bad_header_wrong_types(changes):
    r = rejected(decode_batch, _mutated(**changes))
    assert r.reason == "bad_header", r


def test_decode_duplicate_array_name():
    h = json.loads(json.dumps(GOOD_HEADER))
    h["arrays"].append(dict(h["arrays"][0]))
    assert rejected(decode_batch, assemble(h, GOOD_DATA)).reason == "bad_header"


def test_decode_sent_at_non_finite():
    # json.dumps writes Infinity/NaN, which json.loads accepts: the decoder must check
    for v in (float("inf"), float("nan")):
        assert rejected(decode_batch, _mutated(sent_at=v)).reason == "bad_header"


@pytest.mark.parametrize("dtype", ["object", "complex64", "<U3", "float128", "", None, 3, ["float32"], {"a": 1}])
def test_decode_dtype_not_allowed(dtype):
    r = rejected(decode_batch, _mutated(a_dtype=dtype))
    assert r.reason == "dtype"


@pytest.mark.parametrize("shape", [[], [2] * 9, "2,2", [2, -1], [2, 2.0], [2, True], [2, 2**31], None, [[2], 2]])
def test_decode_bad_shape(shape):
    assert rejected(decode_batch, _mutated(a_shape=shape)).reason == "shape"


def test_rows_that_disagree_with_count_are_refused_by_the_spec():
    """decode_batch only bounds-checks (a pool field may have its own rows); the spec refuses."""
    batch = decode_batch(_mutated(count=1, a_shape=[2, 2]))
    spec = SampleSpec({name: FieldSpec(arr.dtype.name, arr.shape[1:]) for name, arr in batch.arrays.items()})
    assert rejected(spec.validate, batch.arrays, batch.count).reason == "shape"


def test_pool_fields_and_references():
    frames = np.arange(3 * 4, dtype=np.uint8).reshape(3, 2, 2)
    spec = SampleSpec(
        {
            "frames": FieldSpec("uint8", (2, 2), per_transition=False, max_rows=4),
            "ref": FieldSpec("int32", (2,), low=0, ref="frames"),
        }
    )
    ok = {"frames": frames, "ref": np.array([[0, 1], [1, 2]], np.int32)}
    batch = decode_batch(encode_batch("r", "w", 0, 0, ok, count=2))
    assert batch.count == 2
    spec.validate(batch.arrays, batch.count)
    assert rejected(spec.validate, {**ok, "ref": np.array([[0, 1], [1, 3]], np.int32)}, 2).reason == "out_of_range"
    assert rejected(spec.validate, {**ok, "ref": np.array([[0, -1], [1, 2]], np.int32)}, 2).reason == "out_of_range"
    too_many = np.zeros((5, 2, 2), np.uint8)
    assert rejected(spec.validate, {**ok, "frames": too_many}, 2).reason == "oversize"
    with pytest.raises(ValueError, match="disagree"):
        encode_batch("r", "w", 0, 0, ok)  # rows differ and no count given


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_pool_batch_on_the_wire(codec):
    """DQN's frames: a pool of 9 unique frames, 4 transitions referring into it by row."""
    rng = np.random.default_rng(2)
    spec = SampleSpec(
        {
            "obs_ref": FieldSpec("int32", (4,), ref="frames"),  # before its pool: checked after every shape
            "frames": FieldSpec("uint8", (84, 84), per_transition=False, max_rows=16),
            "action": FieldSpec("int64", (), low=0, high=5),
        }
    )
    arrays = {
        "obs_ref": np.array([[0, 1, 2, 3], [1, 2, 3, 4], [5, 6, 7, 8], [6, 7, 8, 8]], np.int32),
        "frames": (rng.random((9, 84, 84)) < 0.05).astype(np.uint8) * 200,
        "action": np.array([0, 5, 2, 1]),
    }
    b = decode_batch(encode_batch("r", "w", 0, 0, arrays, count=4, compression=codec))
    assert b.count == 4 and b.arrays["frames"].shape == (9, 84, 84)
    spec.validate(b.arrays, b.count)
    for bad in (9, -1, 2**31 - 1):  # a reference past the pool, or negative (numpy would wrap it)
        refs = arrays["obs_ref"].copy()
        refs[3, 2] = bad
        r = rejected(spec.validate, {**arrays, "obs_ref": refs}, 4)
        assert r.reason == "out_of_range" and "obs_ref" in r.detail and "9 rows of frames" in r.detail
    # the pool's own rows are free (up to max_rows); the transitions' are the count
    spec.validate({**arrays, "frames": arrays["frames"][:9]}, 4)
    assert rejected(spec.validate, {**arrays, "frames": arrays["frames"][:0]}, 4).reason == "out_of_range"
    assert rejected(spec.validate, arrays, 3).reason == "shape"
    assert rejected(spec.validate, {**arrays, "frames": np.zeros((17, 84, 84), np.uint8)}, 4).reason == "oversize"


def test_a_reference_must_name_an_integer_field_of_the_spec():
    with pytest.raises(ValueError, match="pool"):
        SampleSpec({"r": FieldSpec("int32", ref="pool")})
    with pytest.raises(ValueError, match="integer"):
        SampleSpec({"p": FieldSpec("uint8", per_transition=False), "r": FieldSpec("float32", ref="p")})


def test_big_endian_input_goes_on_the_wire_little_endian():
    be = np.arange(6, dtype=">f4").reshape(3, 2)
    b = decode_batch(encode_batch("r", "w", 0, 0, {"x": be}))
    assert b.arrays["x"].dtype == np.float32
    np.testing.assert_array_equal(b.arrays["x"], be)


def test_decode_array_beyond_data():
    assert rejected(decode_batch, _mutated(a_shape=[2, 3])).reason == "truncated"
    assert rejected(decode_batch, _mutated(a_offset=8)).reason == "truncated"
    assert rejected(decode_batch, _mutated(a_shape=[2, 2**30, 2**30])).reason == "truncated"


def test_decode_header_length_beyond_payload_and_limit():
    good = encode_batch("r", "w", 0, 0, sample_arrays())
    too_long = good[:5] + struct.pack("<I", len(good)) + good[9:]
    assert rejected(decode_batch, too_long).reason == "truncated"
    huge = good[:5] + struct.pack("<I", MAX_HEADER + 1) + good[9:]
    assert rejected(decode_batch, huge).reason == "bad_header"


def test_decode_oversize():
    good = encode_batch("r", "w", 0, 0, sample_arrays(50))
    r = rejected(decode_batch, good, max_bytes=len(good) - 1)
    assert r.reason == "oversize"
    decode_batch(good, max_bytes=len(good))


# ---------------------------------------------------------------- compression
CODEC_NAMES = ["zstd", "lz4"]


def compressible(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Data with repeats in it (like frames), so that every codec shrinks it."""
    rng = np.random.default_rng(seed)
    sparse = rng.random(shape) < 0.1  # mostly zeros, as most of a game frame is background
    if dtype == "bool":
        return sparse
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * sparse).astype(dtype)
    return (rng.integers(1, 4, shape) * sparse).astype(dtype)


def compressed_payload(header_changes: dict, body: bytes, arrays=None) -> bytes:
    """A hand-built compressed batch: GOOD_HEADER with ``arrays`` entries and ``header_changes``."""
    h = json.loads(json.dumps(GOOD_HEADER))
    if arrays is not None:
        h["arrays"] = arrays
    h.update(header_changes)
    return assemble(h, body)


@functools.cache
def zeros_frame(codec: str, size: int, store_size: bool = True) -> bytes:
    """``size`` zero bytes compressed, made in 1 MiB pieces (never ``size`` bytes in memory);
    ``store_size=False`` leaves the content size out of the frame's own header."""
    chunk, parts = bytes(1 << 20), []
    pieces = [chunk[: min(len(chunk), size - i)] for i in range(0, size, len(chunk))]
    if codec == "zstd":
        c = zstandard.ZstdCompressor(level=1, write_content_size=store_size).compressobj(size=size)
        parts += [c.compress(p) for p in pieces]
        parts.append(c.flush())
    else:
        c = lz4.frame.LZ4FrameCompressor()
        parts.append(c.begin(source_size=size if store_size else 0))  # 0: no size in the frame
        parts += [c.compress(p) for p in pieces]
        parts.append(c.flush())
    return b"".join(parts)


def compress(codec: str, data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=1).compress(data) if codec == "zstd" else lz4.frame.compress(data)


@pytest.mark.parametrize("codec", ["none", *CODEC_NAMES])
@pytest.mark.parametrize("dtype", ["uint8", "bool", "float32", "int64"])
def test_compressed_round_trip_each_codec_and_dtype(codec, dtype):
    arrays = {
        "x": compressible(dtype, (64, 4, 12, 12)),
        "odd": compressible("uint8", (64, 3), seed=1),  # odd size: padding between arrays
        "action": np.arange(64, dtype=np.int64) % 3,
    }
    payload = encode_batch("r", "w", 5, 2, arrays, extra={"k": 1}, incarnation="ab", epoch=9, compression=codec)
    raw_size = sum(_align(a.nbytes) for a in arrays.values())
    _, _, header, start = split(payload)
    if codec == "none":
        assert "codec" not in header and "raw_size" not in header  # the format without compression is unchanged
        assert len(payload) == start + raw_size
    else:
        assert (header["codec"], header["raw_size"]) == (codec, raw_size)
        assert len(payload) < start + raw_size
    # the header is readable without decompressing
    h = decode_header(payload)
    assert (h.run, h.worker, h.incarnation, h.seq, h.epoch, h.count, h.raw_size) == ("r", "w", "ab", 5, 9, 64, raw_size)
    assert h.codec == codec
    b = decode_batch(payload)
    assert (b.seq, b.model_version, b.count, b.extra, b.incarnation, b.epoch) == (5, 2, 64, {"k": 1}, "ab", 9)
    assert list(b.arrays) == list(arrays)
    for name, orig in arrays.items():
        got = b.arrays[name]
        assert got.dtype == orig.dtype and got.shape == orig.shape
        np.testing.assert_array_equal(got, orig)
        assert not got.flags.writeable  # read-only, compressed or not
        assert got.ctypes.data % 8 == 0


@pytest.mark.parametrize("codec", CODEC_NAMES)
@pytest.mark.parametrize("level", [None, 0, 1, 3, 9])
def test_compression_levels(codec, level):
    if codec == "zstd" and level == 0:
        level = -1  # a fast level
    arrays = {"x": compressible("uint8", (32, 84, 84))}
    b = decode_batch(encode_batch("r", "w", 0, 0, arrays, compression=codec, level=level))
    np.testing.assert_array_equal(b.arrays["x"], arrays["x"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"compression": "gzip"},
        {"compression": "zstd", "level": 23},
        {"compression": "zstd", "level": 1.5},
        {"compression": "lz4", "level": 17},
        {"compression": "lz4", "level": -1},
        {"compression": "lz4", "level": True},
    ],
)
def test_encode_refuses_unknown_codec_and_bad_level(kwargs):
    with pytest.raises(ValueError):
        encode_batch("r", "w", 0, 0, sample_arrays(), **kwargs)


def test_auto_compresses_pixel_batches_only():
    small = encode_batch("r", "w", 0, 0, sample_arrays(128), compression="auto")
    assert "codec" not in split(small)[2]
    just_below = {"x": np.zeros((AUTO_MIN_BYTES - 8,), np.uint8)}
    assert "codec" not in split(encode_batch("r", "w", 0, 0, just_below, compression="auto"))[2]
    frames = {"obs": compressible("uint8", (64, 4, 16, 16))}  # 64 KiB exactly
    assert frames["obs"].nbytes == AUTO_MIN_BYTES
    payload = encode_batch("r", "w", 0, 0, frames, compression="auto")
    assert split(payload)[2]["codec"] == "zstd"
    np.testing.assert_array_equal(decode_batch(payload).arrays["obs"], frames["obs"])


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_data_that_does_not_shrink_goes_raw(codec):
    noise = {"x": np.random.default_rng(3).integers(0, 256, (64, 1024), dtype=np.uint8)}
    payload = encode_batch("r", "w", 0, 0, noise, compression=codec)
    assert "codec" not in split(payload)[2]
    np.testing.assert_array_equal(decode_batch(payload).arrays["x"], noise["x"])


def test_a_codec_that_is_not_installed(monkeypatch):
    """Encoding: a clear error naming the package. Decoding: a counted refusal, reason "codec"."""
    payload = encode_batch("r", "w", 0, 0, {"x": compressible("uint8", (64, 32))}, compression="lz4")
    monkeypatch.setitem(samples._modules, "lz4", None)
    with pytest.raises(ValueError, match=r"pip install 'mqttrl\[lz4\]'"):
        encode_batch("r", "w", 0, 0, sample_arrays(), compression="lz4")
    with pytest.raises(ValueError, match="lz4"):
        check_compression("lz4")
    check_compression("zstd")
    r = rejected(decode_batch, payload)
    assert r.reason == "codec" and "lz4" in r.detail
    assert decode_header(payload).seq == 0  # the header still reads
    monkeypatch.setitem(samples._modules, "zstd", None)  # "auto" without zstandard: raw
    assert (
        "codec" not in split(encode_batch("r", "w", 0, 0, {"x": np.zeros((1 << 17,), np.uint8)}, compression="auto"))[2]
    )


@pytest.mark.parametrize("codec", ["brotli", "", "ZSTD", 3, None, ["zstd"]])
def test_unknown_codec_in_header(codec):
    r = rejected(decode_batch, compressed_payload({"codec": codec, "raw_size": 16}, compress("zstd", GOOD_DATA)))
    assert r.reason == ("codec" if isinstance(codec, str) else "bad_header"), r


@pytest.mark.parametrize("raw_size", [None, "16", -1, 1.5, True, 2**63])
def test_compressed_raw_size_must_be_an_integer(raw_size):
    changes = {"codec": "zstd"} if raw_size is None else {"codec": "zstd", "raw_size": raw_size}
    assert rejected(decode_batch, compressed_payload(changes, compress("zstd", GOOD_DATA))).reason == "bad_header"


def test_uncompressed_raw_size_if_given_must_match():
    decode_batch(compressed_payload({"codec": "none", "raw_size": 16}, GOOD_DATA))
    assert rejected(decode_batch, compressed_payload({"raw_size": 15}, GOOD_DATA)).reason == "bad_header"


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_decompression_bomb_declared_is_refused_before_decompressing(codec):
    """1 GiB of zeros in a few KiB, honestly declared: refused on the declared size alone."""
    bomb = zeros_frame(codec, 1 << 30)
    assert len(bomb) < 8 << 20
    payload = compressed_payload(
        {"codec": codec, "raw_size": 1 << 30, "count": 1},
        bomb,
        [{"name": "a", "dtype": "uint8", "shape": [1, 1 << 30], "offset": 0}],
    )
    tracemalloc.start()
    try:
        r = rejected(decode_batch, payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.reason == "decompression_bomb" and str(1 << 30) in r.detail
    assert peak < 1 << 20
    # the cap is max_raw_bytes (default: max_bytes), whatever the compressed size
    assert rejected(decode_batch, payload, max_raw_bytes=(1 << 30) - 1).reason == "decompression_bomb"


@pytest.mark.parametrize("declared", [4096, 1 << 20])
@pytest.mark.parametrize("store_size", [True, False])
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_decompression_bomb_with_a_lying_header_is_never_allocated(codec, store_size, declared):
    """The header says 4 KiB (or 1 MiB); the data holds 1 GiB of zeros, with or without its true
    size in the frame. Decompression stops one byte past what was declared (zstd: the frame's
    own size, or a window too big for the declared size, is refused first): the refusal costs
    kilobytes, not a gigabyte."""
    bomb = zeros_frame(codec, 1 << 30, store_size)
    if codec == "zstd":
        assert (zstandard.get_frame_parameters(bomb).content_size == 1 << 30) == store_size
    else:
        assert lz4.frame.get_frame_info(bomb)["content_size"] == (1 << 30 if store_size else 0)
    payload = compressed_payload(
        {"codec": codec, "raw_size": declared, "count": 1},
        bomb,
        [{"name": "a", "dtype": "uint8", "shape": [1, declared], "offset": 0}],
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    try:
        r = rejected(decode_batch, payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.reason == "decompression_bomb", r
    assert peak < 2 * len(bomb) + declared + (1 << 20), peak  # lz4 copies the unread input; never the output
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert grew < 256 << 20, grew
    assert decode_header(payload).raw_size == declared  # a ledger can still read who sent it


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_raw_size_that_does_not_match_the_data(codec):
    data = compressible("float32", (2, 2)).tobytes()  # 16 bytes, as GOOD_HEADER's array
    ok = compressed_payload({"codec": codec, "raw_size": 16}, compress(codec, data))
    np.testing.assert_array_equal(decode_batch(ok).arrays["a"].tobytes(), data)
    # declares more than the data holds
    long = [{"name": "a", "dtype": "float32", "shape": [2, 4], "offset": 0}]
    r = rejected(decode_batch, compressed_payload({"codec": codec, "raw_size": 32}, compress(codec, data), long))
    assert r.reason == "bad_compression" and "16" in r.detail
    # declares less than the data holds
    short = [{"name": "a", "dtype": "float32", "shape": [2, 1], "offset": 0}]
    r = rejected(decode_batch, compressed_payload({"codec": codec, "raw_size": 8}, compress(codec, data), short))
    assert r.reason == "decompression_bomb"
    # declares less than its arrays need, or more than they need
    assert (
        rejected(decode_batch, compressed_payload({"codec": codec, "raw_size": 8}, compress(codec, data))).reason
        == "truncated"
    )
    r = rejected(
        decode_batch, compressed_payload({"codec": codec, "raw_size": 1 << 20}, compress(codec, bytes(1 << 20)))
    )
    assert r.reason == "bad_header"


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_truncated_and_garbage_compressed_bodies(codec):
    arrays = {"x": compressible("uint8", (64, 64))}
    payload = encode_batch("r", "w", 0, 0, arrays, compression=codec)
    _, _, header, start = split(payload)
    assert header["codec"] == codec
    for cut in range(start, len(payload) - 1, max(1, (len(payload) - start) // 97)):
        r = rejected(decode_batch, payload[:cut])
        assert r.reason in ("truncated", "bad_compression"), (cut, r)
    rng = np.random.default_rng(7)
    frame = payload[start:]
    for body in (
        b"\0" * 64,
        rng.bytes(len(frame)),
        frame[:4] + rng.bytes(len(frame) - 4),  # the magic, then noise
        compress("lz4" if codec == "zstd" else "zstd", arrays["x"].tobytes()),  # the other codec's frame
        frame + b"junk",  # bytes after the frame
        frame + frame,  # a second frame
    ):
        r = rejected(decode_batch, payload[:start] + body)
        assert r.reason in ("bad_compression", "decompression_bomb"), r


def test_compressed_decode_is_bounded_by_max_raw_bytes_not_max_bytes():
    arrays = {"x": np.zeros((256, 1024), np.uint8)}
    payload = encode_batch("r", "w", 0, 0, arrays, compression="zstd")
    assert len(payload) < 4096
    assert rejected(decode_batch, payload, max_bytes=4096).reason == "decompression_bomb"  # max_raw_bytes=max_bytes
    decode_batch(payload, max_bytes=4096, max_raw_bytes=256 * 1024)
    assert rejected(decode_batch, payload, max_raw_bytes=256 * 1024 - 1).reason == "decompression_bomb"


# ---------------------------------------------------------------- sample batches: fuzzing
@FUZZ
@given(st.binary(max_size=600))
def test_fuzz_decode_batch_arbitrary_bytes(data):
    decodes_or_rejects(decode_batch, data)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_decode_batch_bytes_after_magic(data):
    # start with our magic and protocol so the fuzzer gets past the first check
    payload = MAGIC + bytes([PROTOCOL_VERSION]) + struct.pack("<I", len(data)) + data
    decodes_or_rejects(decode_batch, payload)


VALID_PAYLOAD = encode_batch("r", "w", 9, 2, sample_arrays(6), extra={"x": 1}, incarnation="a1b2c3", epoch=17)
_PIXELS = {**sample_arrays(6), "frames": compressible("uint8", (6, 4, 16, 16)), "flag": compressible("bool", (6, 3))}
#: the same kind of batch, compressed with each codec (the fuzzers start from any of them)
VALID_PAYLOADS = {
    "none": VALID_PAYLOAD,
    **{c: encode_batch("r", "w", 9, 2, _PIXELS, incarnation="a1b2c3", epoch=17, compression=c) for c in CODEC_NAMES},
}
assert all(split(VALID_PAYLOADS[c])[2]["codec"] == c for c in CODEC_NAMES)


@FUZZ
@given(
    st.sampled_from(sorted(VALID_PAYLOADS)),
    st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 2**20),
)
def test_fuzz_decode_batch_byte_flips_and_truncation(base, flips, cut):
    payload = VALID_PAYLOADS[base]
    buf = bytearray(payload)
    for pos, val in flips:
        buf[pos % len(buf)] = val
    decodes_or_rejects(decode_batch, bytes(buf[: cut % (len(buf) + 1)]))
    decodes_or_rejects(decode_batch, bytes(buf))


@FUZZ
@given(
    st.sampled_from(CODEC_NAMES),
    st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), max_size=6),
    st.integers(0, 2**20),
    st.binary(max_size=64),
)
def test_fuzz_compressed_body(codec, flips, cut, tail):
    """Flipped, cut and extended frames under an intact header: an exact decode or a refusal."""
    payload = VALID_PAYLOADS[codec]
    _, _, _, start = split(payload)
    body = bytearray(payload[start:])
    for pos, val in flips:
        body[pos % len(body)] = val
    body = bytes(body[: cut % (len(body) + 1)]) + tail
    result = decodes_or_rejects(decode_batch, payload[:start] + body)
    if result is not None:  # whatever decodes has exactly the arrays' bytes
        assert {k: v.shape for k, v in result.arrays.items()} == {k: v.shape for k, v in _PIXELS.items()}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
HEADER_KEYS = [
    "run",
    "worker",
    "incarnation",
    "seq",
    "epoch",
    "model_version",
    "count",
    "sent_at",
    "arrays",
    "extra",
    "codec",
    "raw_size",
]
ENTRY_KEYS = ["name", "dtype", "shape", "offset"]


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("top"), st.sampled_from(HEADER_KEYS), json_values),
            st.tuples(st.just("entry"), st.sampled_from(ENTRY_KEYS), json_values),
            st.tuples(st.just("del"), st.sampled_from(HEADER_KEYS), st.none()),
            st.tuples(st.just("delentry"), st.sampled_from(ENTRY_KEYS), st.none()),
            st.tuples(st.just("shape"), st.integers(0, 3), st.integers(-5, 2**33)),
            st.tuples(st.just("top"), st.just("codec"), st.sampled_from(["none", *CODEC_NAMES])),
            st.tuples(st.just("top"), st.just("raw_size"), st.integers(-1, 2**40)),
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
    st.sampled_from(sorted(VALID_PAYLOADS)),
)
def test_fuzz_decode_batch_header_mutations(mutations, pad_data, base):
    _, _, header, start = split(VALID_PAYLOADS[base])
    data = VALID_PAYLOADS[base][start:]
    for op, key, value in mutations:
        entry = (
            header["arrays"][0]
            if isinstance(header.get("arrays"), list) and header["arrays"] and isinstance(header["arrays"][0], dict)
            else None
        )
        if op == "top":
            header[key] = value
        elif op == "del":
            header.pop(key, None)
        elif entry is not None and op == "entry":
            entry[key] = value
        elif entry is not None and op == "delentry":
            entry.pop(key, None)
        elif entry is not None and op == "shape" and isinstance(entry.get("shape"), list):
            shape = entry["shape"]
            if shape:
                shape[key % len(shape)] = value
    payload = assemble(json.dumps(header).encode(), data + (b"\0" * 64 if pad_data else b""))
    result = decodes_or_rejects(decode_batch, payload)
    if result is not None:  # whatever decodes must be internally consistent
        for arr in result.arrays.values():
            assert arr.ndim >= 1
            assert arr.dtype.name in ALLOWED_DTYPES
        # and validating it against a spec can only accept or reject; what it accepts has count rows
        if decodes_or_rejects(lambda a: SPEC.validate(a, result.count) or True, result.arrays):
            assert all(arr.shape[0] == result.count for arr in result.arrays.values())


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(sorted(ALLOWED_DTYPES)),
        st.tuples(st.integers(0, 3), st.integers(0, 3)),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 6),
    st.integers(0, 2**62),
)
def test_fuzz_batch_round_trip(fields, count, seq):
    rng = np.random.default_rng(seq % 2**32)
    arrays = {}
    for dtype, (d1, d2) in fields.items():
        shape = (count,) + ((d1,) if d1 else ()) + ((d2,) if d1 and d2 else ())
        arrays[f"f_{dtype}"] = (rng.random(shape) * 100).astype(dtype)
    incarnation = f"{seq % 4096:x}"
    b = decode_batch(encode_batch("r", "w", seq, seq // 3, arrays, incarnation=incarnation, epoch=seq // 7))
    assert b.seq == seq and b.count == count and (b.incarnation, b.epoch) == (incarnation, seq // 7)
    for k, v in arrays.items():
        np.testing.assert_array_equal(b.arrays[k], v)
        assert b.arrays[k].dtype == v.dtype


# ---------------------------------------------------------------- inference requests
@pytest.mark.parametrize(
    "dtype,wire", [("uint8", "uint8"), ("bool", "bool"), ("float32", "float32"), ("float64", "float32")]
)
def test_inference_requests_keep_the_observations_dtype(dtype, wire):
    from mqttrl.wire import decode_request, encode_request, request_spec

    obs = compressible(dtype, (5, 4, 10, 10))
    payload = encode_request("r", "w", 7, 3, obs, "mqttrl/r/infer/reply/w")
    assert split(payload)[2]["arrays"][0]["dtype"] == wire
    req = decode_request(payload, request_spec((4, 10, 10), wire))
    assert req.obs.dtype == np.dtype(wire) and (req.id, req.seq, req.count) == (7, 7, 5)
    np.testing.assert_array_equal(req.obs, obs.astype(wire))
    other = "float32" if wire != "float32" else "uint8"
    assert rejected(decode_request, payload, request_spec((4, 10, 10), other)).reason == "dtype"
    assert request_spec((4, 10, 10)).fields["obs"].dtype == "float32"  # the default, for vector envs


# ---------------------------------------------------------------- weights
def weights(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "l1.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "l1.bias": rng.standard_normal(8).astype(np.float32),
        "steps": np.array([3, 4], dtype=np.int64),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
    }


def test_weights_round_trip():
    t = weights()
    payload = encode_weights(7, "dqn", "run-x", t, info={"obs_norm": False, "n": 3}, published_at=123.25, epoch=42)
    m = decode_weights(payload)
    assert isinstance(m, WeightsMessage)
    assert (m.version, m.algorithm, m.run, m.published_at, m.epoch) == (7, "dqn", "run-x", 123.25, 42)
    assert m.order == (42, 7)
    assert m.info == {"obs_norm": False, "n": 3}
    assert set(m.tensors) == set(t)
    for k, v in t.items():
        assert m.tensors[k].dtype == v.dtype
        np.testing.assert_array_equal(m.tensors[k], v)


def test_a_decoded_record_encodes_to_what_decodes_back_the_same():
    """The records decode whole and encode whole: a weights message's and a batch's ``encode()``
    decode back to the same record (the wire dtype and the codec as asked)."""
    t = weights()
    m = WeightsMessage(7, "dqn", "run-x", t, {"n": 3}, 123.25, 42)
    same = decode_weights(m.encode())  # (safetensors orders its metadata as it likes: the bytes may differ)
    assert (same.ref, same.algorithm, same.run, same.info, same.published_at) == (
        m.ref,
        "dqn",
        "run-x",
        {"n": 3},
        123.25,
    )
    assert all(np.array_equal(same.tensors[k], v) for k, v in t.items())
    back = decode_weights(m.encode("float16"))
    assert (back.ref, back.info, back.published_at) == (m.ref, {"n": 3}, 123.25)
    np.testing.assert_allclose(back.tensors["l1.weight"], t["l1.weight"], rtol=1e-3)
    arrays = {"obs": np.arange(12, dtype=np.float32).reshape(4, 3), "act": np.arange(4, dtype=np.int64)}
    batch = SampleBatch("run-x", "w1", 5, 7, 4, arrays, extra={"k": 1}, incarnation="ab12", epoch=42)
    got = decode_batch(batch.encode("zstd"))
    assert (got.run, got.worker, got.seq, got.model_version, got.count, got.extra, got.incarnation, got.epoch) == (
        "run-x",
        "w1",
        5,
        7,
        4,
        {"k": 1},
        "ab12",
        42,
    )
    assert got.sent_at > 0 and all(np.array_equal(got.arrays[k], v) for k, v in arrays.items())
    assert decode_batch(attrs.evolve(got, sent_at=0.0).encode()).arrays.keys() == arrays.keys()


def _tensor_region(payload: bytes) -> tuple[int, dict]:
    hlen = int.from_bytes(payload[:8], "little")
    return 8 + hlen, json.loads(payload[8 : 8 + hlen])


@pytest.mark.parametrize("name", ["l1.weight", "l1.bias", "steps", "half"])
def test_weights_checksum_mismatch_on_flipped_tensor_byte(name):
    payload = bytearray(encode_weights(1, "dqn", "r", weights()))
    base, header = _tensor_region(bytes(payload))
    lo, hi = header[name]["data_offsets"]
    pos = base + (lo + hi) // 2
    payload[pos] ^= 0x01  # a single bit
    r = rejected(decode_weights, bytes(payload))
    assert r.reason == "checksum", r


def test_weights_checksum_mismatch_when_metadata_edited():
    payload = encode_weights(1, "dqn", "r", weights())
    base, header = _tensor_region(payload)
    header["__metadata__"]["checksum"] = "0" * 32
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    bad = len(hb).to_bytes(8, "little") + hb + payload[base:]
    assert rejected(decode_weights, bad).reason == "checksum"


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_weights_non_finite(value):
    t = weights()
    t["l1.bias"][2] = value
    r = rejected(decode_weights, encode_weights(1, "dqn", "r", t))
    assert r.reason == "non_finite" and "l1.bias" in r.detail


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"1234567",
        b"\xff" * 8,
        b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"x" * 16,
        b"\x02\x00\x00\x00\x00\x00\x00\x00" + b"[]",
        b"\x02\x00\x00\x00\x00\x00\x00\x00{}",
        b"\x06\x00\x00\x00\x00\x00\x00\x00" + b"[" * 3 + b"]" * 3,
    ],
)
def test_weights_garbage(payload):
    r = rejected(decode_weights, payload)
    assert r.reason in ("garbage", "truncated", "bad_header")
    if len(payload) >= 8 and payload[8:10] == b"{}":
        assert r.reason == "bad_header"  # JSON but no metadata


def test_weights_deeply_nested_header_is_rejected():
    body = b"[" * 20000 + b"]" * 20000
    assert rejected(decode_weights, len(body).to_bytes(8, "little") + body).reason == "garbage"


def test_weights_truncated_everywhere():
    payload = encode_weights(2, "dqn", "r", weights())
    for cut in range(0, len(payload)):
        r = rejected(decode_weights, payload[:cut])
        assert r.reason in ("truncated", "garbage"), (cut, r)


def test_weights_other_rejections():
    payload = encode_weights(2, "dqn", "r", weights())
    base, header = _tensor_region(payload)

    def with_meta(**changes):
        h = json.loads(json.dumps(header))
        for k, v in changes.items():
            if v is ...:
                h["__metadata__"].pop(k)
            else:
                h["__metadata__"][k] = v
        hb = json.dumps(h).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        return len(hb).to_bytes(8, "little") + hb + payload[base:]

    assert decode_weights(with_meta()).version == 2  # re-assembly itself is sound
    assert rejected(decode_weights, with_meta(format="other")).reason == "garbage"
    assert rejected(decode_weights, with_meta(protocol="99")).reason == "protocol_version"
    for bad in (
        {"version": "x"},
        {"version": "-1"},
        {"version": ...},
        {"algorithm": ...},
        {"checksum": ...},
        {"info": "[1]"},
        {"info": "{"},
        {"published_at": "soon"},
        {"info": "[" * 5000 + "]" * 5000},
    ):
        assert rejected(decode_weights, with_meta(**bad)).reason == "bad_header", bad
    assert rejected(decode_weights, payload, max_bytes=len(payload) - 1).reason == "oversize"


WEIGHTS_PAYLOAD = encode_weights(3, "dqn", "r", weights(), info={"a": [1, 2]})


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_decode_weights_arbitrary_bytes(data):
    decodes_or_rejects(decode_weights, data)
    # also with a plausible header length in front
    decodes_or_rejects(decode_weights, len(data).to_bytes(8, "little") + data)


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(WEIGHTS_PAYLOAD) - 1), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, len(WEIGHTS_PAYLOAD)),
)
def test_fuzz_decode_weights_byte_flips_and_truncation(flips, cut):
    buf = bytearray(WEIGHTS_PAYLOAD)
    for pos, val in flips:
        buf[pos] = val
    result = decodes_or_rejects(decode_weights, bytes(buf))
    decodes_or_rejects(decode_weights, bytes(buf[:cut]))
    if result is not None:  # anything accepted is finite and matches its checksum
        for arr in result.tensors.values():
            if arr.dtype.kind == "f":
                assert np.isfinite(arr).all()


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["format", "protocol", "version", "epoch", "algorithm", "run", "checksum", "published_at", "info", "other"]
        ),
        json_values,
        min_size=1,
        max_size=4,
    )
)
def test_fuzz_decode_weights_metadata_mutations(changes):
    base, header = _tensor_region(WEIGHTS_PAYLOAD)
    header["__metadata__"].update(changes)
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    decodes_or_rejects(decode_weights, len(hb).to_bytes(8, "little") + hb + WEIGHTS_PAYLOAD[base:])


# ---------------------------------------------------------------- JSON control messages
def test_json_round_trip_and_required_keys():
    msg = {"worker": "w0", "env_steps": np.int64(5), "ret": np.float32(1.5), "ok": True}
    out = decode_json(encode_json(msg), required={"worker": str, "env_steps": int, "ret": (int, float)})
    assert out == {"worker": "w0", "env_steps": 5, "ret": 1.5, "ok": True}


def test_json_rejections():
    assert rejected(decode_json, b"\xff\x00").reason == "garbage"
    assert rejected(decode_json, b"{not json").reason == "garbage"
    assert rejected(decode_json, b"[" * 50000 + b"]" * 50000).reason == "garbage"
    assert rejected(decode_json, b'{"a": NaN}').reason == "garbage"
    assert rejected(decode_json, b'{"a": Infinity}').reason == "garbage"
    assert rejected(decode_json, b"[1, 2]").reason == "bad_header"
    assert rejected(decode_json, b'{"a": 1}', required={"b": int}).reason == "bad_header"
    assert rejected(decode_json, b'{"b": "1"}', required={"b": int}).reason == "bad_value"
    assert rejected(decode_json, b'{"b": true}', required={"b": int}).reason == "bad_value"
    assert rejected(decode_json, b'{"b": 1e999}', required={"b": float}).reason == "non_finite"
    assert rejected(decode_json, b'{"b": 1}', max_bytes=3).reason == "oversize"
    with pytest.raises(ValueError):
        encode_json({"a": float("nan")})
    with pytest.raises(TypeError):
        encode_json({"a": object()})


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_decode_json_arbitrary_bytes(data):
    decodes_or_rejects(lambda p: decode_json(p, required={"a": int, "b": (int, float), "c": str}), data)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), json_values, max_size=4),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
    st.integers(0, 300),
)
def test_fuzz_decode_json_mutations(obj, flips, cut):
    buf = bytearray(json.dumps(obj).encode())
    for pos, val in flips:
        if buf:
            buf[pos % len(buf)] = val
    for payload in (bytes(buf), bytes(buf[:cut])):
        out = decodes_or_rejects(lambda p: decode_json(p, required={"a": int, "b": (int, float)}), payload)
        if out is not None:
            assert isinstance(out["a"], int) and not isinstance(out["a"], bool)
            assert isinstance(out["b"], (int, float))


# ---------------------------------------------------------------- RejectionCounter
def test_rejection_counter_counts_by_reason_and_rate_limits_logs(caplog, monkeypatch):
    clock = [1000.0]
    import mqttrl.wire.errors as errors

    monkeypatch.setattr(errors, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    logger = logging.getLogger("test.rejections")
    counter = RejectionCounter(logger, log_every=5.0)
    with caplog.at_level(logging.WARNING, logger="test.rejections"):
        for _ in range(10):
            counter.add(Rejected("garbage", "junk"), "samples from w1")
        for _ in range(3):
            counter.add(Rejected("non_finite", "nan"), "samples from w2")
        assert counter.snapshot() == {"garbage": 10, "non_finite": 3}
        assert counter.total == 13
        lines = [r.getMessage() for r in caplog.records if r.name == "test.rejections"]
        # one line per reason within the window
        assert len(lines) == 2
        assert "garbage" in lines[0] and "samples from w1" in lines[0]
        assert "non_finite" in lines[1]
        caplog.clear()
        clock[0] += 5.1  # window over: the next one logs, with the count it skipped
        counter.add(Rejected("garbage", "junk"), "samples from w1")
        lines = [r.getMessage() for r in caplog.records if r.name == "test.rejections"]
        assert len(lines) == 1 and "+9 more" in lines[0]
        caplog.clear()
        clock[0] += 1
        counter.add(Rejected("garbage", "junk"))
        assert not [r for r in caplog.records if r.name == "test.rejections"]
    assert counter.snapshot()["garbage"] == 12
    snap = counter.snapshot()
    snap["garbage"] = 0  # a copy, not the internal state
    assert counter.snapshot()["garbage"] == 12


def test_rejected_requires_a_known_reason():
    with pytest.raises(AssertionError):
        Rejected("bogus", "x")
    r = Rejected("checksum", "bad")
    assert str(r) == "checksum: bad" and r.detail == "bad"


def test_step_rate_uses_the_senders_clock_and_never_goes_negative():
    from mqttrl.wire import Heartbeat, StepRate

    def beat(steps: int, sent: float | None) -> Heartbeat:
        return Heartbeat(model_version=0, env_steps=steps, time=sent)

    r = StepRate()
    assert r.update(beat(0, 100.0), now=5000.0) is None  # one heartbeat: no rate yet
    assert r.update(beat(1000, 102.0), now=5000.0) == pytest.approx(500.0)
    # arrives bunched up right after (same sender second): ignored, not 1e6 steps/s
    assert r.update(beat(1010, 102.05), now=5000.0) == pytest.approx(500.0)
    # the worker restarted and its counter began again
    assert r.update(beat(10, 104.0), now=5000.0) == 0.0
    # a heartbeat without the sender's clock is dated by its arrival
    assert StepRate().update(beat(5, None), now=1.0) is None


@pytest.mark.parametrize("epoch", ["-1", "x", "1.5", str(2**62)])
def test_weights_with_a_bad_epoch_are_refused(epoch):
    base, header = _tensor_region(WEIGHTS_PAYLOAD)
    header["__metadata__"]["epoch"] = epoch
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    assert rejected(decode_weights, len(hb).to_bytes(8, "little") + hb + WEIGHTS_PAYLOAD[base:]).reason == "bad_header"


def test_weights_without_an_epoch_are_epoch_zero():
    """A learner from before epochs: its weights still decode (and any epoch'd learner's win)."""
    base, header = _tensor_region(WEIGHTS_PAYLOAD)
    header["__metadata__"].pop("epoch", None)
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    assert decode_weights(len(hb).to_bytes(8, "little") + hb + WEIGHTS_PAYLOAD[base:]).epoch == 0


def test_an_inference_request_is_encoded_from_the_record_its_decoder_returns():
    from mqttrl.wire import InferenceRequest, decode_request, encode_request, request_spec

    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    sent = InferenceRequest(7, "mqttrl/r/infer/w/reply", obs, 7, "w", "s1", model_version=3, run="r")

    def fields(r):
        return {k: v for k, v in attrs.asdict(r).items() if k != "obs"}

    got = decode_request(sent.encode(), request_spec((3,)))
    assert fields(got) == fields(sent) and np.array_equal(got.obs, obs)
    assert fields(decode_request(got.encode(), request_spec((3,)))) == fields(sent)  # the round trip holds
    old = encode_request("r", "w", 7, 3, obs, "mqttrl/r/infer/w/reply", server="s1")
    assert fields(decode_request(old, request_spec((3,)))) == fields(sent)


def test_an_inference_reply_is_encoded_from_the_record_its_decoder_returns():
    from mqttrl.wire import InferenceReply, InferenceRequest, decode_reply, encode_reply

    q = np.arange(4, dtype=np.float32).reshape(2, 2)
    sent = InferenceReply(7, 3, {"q": q}, 2, seq=9, run="r", server="s1")
    got = decode_reply(sent.encode())
    assert (got.id, got.model_version, got.epoch, got.seq, got.run, got.server) == (7, 3, 2, 9, "r", "s1")
    assert np.array_equal(got.outputs["q"], q)
    again = decode_reply(got.encode())  # the round trip holds
    assert (again.id, again.seq, again.server) == (7, 9, "s1")
    request = InferenceRequest(7, "x", np.zeros((2, 1), np.float32), 9, "w", model_version=3, run="r")
    old = decode_reply(encode_reply("r", "s1", request, 3, {"q": q}, epoch=2))
    assert (old.id, old.model_version, old.epoch, old.seq, old.server) == (7, 3, 2, 9, "s1")
