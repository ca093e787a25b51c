"""Wire formats: sample batches, weights and JSON control messages.

Every decoder must either return a valid object or raise ``Rejected`` with a
reason; anything else (IndexError, TypeError, RecursionError, ...) would let a
single bad message from the network crash a node.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
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
    decode_batch,
    decode_json,
    decode_weights,
    encode_batch,
    encode_json,
    encode_weights,
)
from mqttrl.wire.errors import REASONS
from mqttrl.wire.samples import _PREFIX, ALLOWED_DTYPES, MAGIC, MAX_HEADER, _align

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


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(VALID_PAYLOAD) - 1), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, len(VALID_PAYLOAD)),
)
def test_fuzz_decode_batch_byte_flips_and_truncation(flips, cut):
    buf = bytearray(VALID_PAYLOAD)
    for pos, val in flips:
        buf[pos] = val
    decodes_or_rejects(decode_batch, bytes(buf[:cut]))
    decodes_or_rejects(decode_batch, bytes(buf))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
HEADER_KEYS = ["run", "worker", "incarnation", "seq", "epoch", "model_version", "count", "sent_at", "arrays", "extra"]
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
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
)
def test_fuzz_decode_batch_header_mutations(mutations, pad_data):
    _, _, header, start = split(VALID_PAYLOAD)
    data = VALID_PAYLOAD[start:]
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
    from mqttrl.wire import StepRate

    r = StepRate()
    assert r.update({"env_steps": 0, "time": 100.0}, now=5000.0) is None  # one heartbeat: no rate yet
    assert r.update({"env_steps": 1000, "time": 102.0}, now=5000.0) == pytest.approx(500.0)
    # arrives bunched up right after (same sender second): ignored, not 1e6 steps/s
    assert r.update({"env_steps": 1010, "time": 102.05}, now=5000.0) == pytest.approx(500.0)
    # the worker restarted and its counter began again
    assert r.update({"env_steps": 10, "time": 104.0}, now=5000.0) == 0.0


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
