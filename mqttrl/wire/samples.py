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

**Compression.** The array data (never the header, which stays readable without
decompressing) may be one zstd or lz4 frame; the header then names the ``codec`` and the
``raw_size`` of the array data it decompresses to (offsets are into that). Both keys are
absent when the data is raw. The decoder checks the declared size against the arrays and
against ``max_raw_bytes`` before decompressing, and never lets a frame write more than
``raw_size + 1`` bytes, whatever its own header says: a decompression bomb is refused
(``decompression_bomb``) without being allocated.
"""

from __future__ import annotations

import json
import math
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

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
#: what ``compression`` may be: "auto" picks zstd for array data of at least AUTO_MIN_BYTES
COMPRESSIONS = ("auto", "none", "zstd", "lz4")
CODECS = ("zstd", "lz4")
#: "auto" compresses from here up (pixel batches); below, compressing costs more than it saves
AUTO_MIN_BYTES = 64 * 1024
#: the levels each codec takes (level=None: the first number, a fast level)
LEVELS = {"zstd": (1, -7, 22), "lz4": (0, 0, 16)}
_INSTALL = {"zstd": "zstandard (pip install zstandard)", "lz4": "lz4 (pip install 'mqttrl[lz4]')"}


def codec_available(codec: str) -> bool:
    """Whether this process can compress and decompress with ``codec`` ("none" always)."""
    return codec == "none" or _codec_module(codec) is not None


def check_compression(compression: str) -> None:
    """Raise ValueError unless ``compression`` is a known choice whose package is installed here."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r} is not one of {', '.join(COMPRESSIONS)}")
    if compression in CODECS and not codec_available(compression):
        raise ValueError(f"compression {compression!r} needs the package {_INSTALL[compression]}")


_modules: dict[str, Any] = {}


def _codec_module(codec: str) -> Any:
    """The codec's package, imported on first use; None where it is not installed (Any: zstandard or
    lz4.frame, whose APIs differ, so each caller uses its own)."""
    if codec not in _modules:
        try:
            if codec == "zstd":
                import zstandard

                _modules[codec] = zstandard
            else:
                import lz4.frame

                _modules[codec] = lz4.frame
        except ImportError:
            _modules[codec] = None
    return _modules[codec]


_local = threading.local()  # zstd compression contexts, one per thread and level


def _compress(codec: str, pieces: list, size: int, level: int) -> bytes:
    """One frame of ``pieces`` (``size`` bytes in all), streamed: the raw data is never joined."""
    mod = _codec_module(codec)
    if codec == "zstd":
        cache = _local.__dict__.setdefault("zstd", {})
        cctx = cache.get(level) or cache.setdefault(level, mod.ZstdCompressor(level=level))
        c = cctx.compressobj(size=size)  # the frame records its content size
        return b"".join([c.compress(p) for p in pieces] + [c.flush()])
    c = mod.LZ4FrameCompressor(compression_level=level)
    return b"".join([c.begin(source_size=size)] + [c.compress(p) for p in pieces] + [c.flush()])


def _decompress(codec: str, data: memoryview, raw_size: int) -> bytes:
    """Decompress one frame into exactly ``raw_size`` bytes, never allocating more than
    ``raw_size + 1`` for the output (plus the codec's window, bounded by ``raw_size`` too)."""
    mod = _codec_module(codec)
    limit = raw_size + 1  # one byte more than declared is enough to know it lied
    try:
        if codec == "zstd":
            # the window a frame may ask for is bounded by what it declares it holds (a frame of
            # N bytes needs no window past N); zstd.decompress() would trust the frame's own
            # content size, so the output is read through a stream reader, at most `limit` bytes
            window = 1 << max(10, (raw_size - 1).bit_length())
            frame = mod.get_frame_parameters(data)
            if frame.content_size != mod.CONTENTSIZE_UNKNOWN and frame.content_size != raw_size:
                raise Rejected(
                    "decompression_bomb" if frame.content_size > raw_size else "bad_compression",
                    f"zstd frame holds {frame.content_size} bytes, the header declares {raw_size}",
                )
            if frame.window_size > window:
                raise Rejected("decompression_bomb", f"zstd frame asks for a {frame.window_size}-byte window")
            dctx = mod.ZstdDecompressor(max_window_size=window)
            with dctx.stream_reader(data, read_across_frames=True) as reader:
                out = reader.read(limit)
                while len(out) < limit and (more := reader.read(limit - len(out))):
                    out += more  # rare: read() normally fills the request at once
            trailing = False
        else:
            size = mod.get_frame_info(data)["content_size"]  # 0: not recorded
            if size and size != raw_size:
                raise Rejected(
                    "decompression_bomb" if size > raw_size else "bad_compression",
                    f"lz4 frame holds {size} bytes, the header declares {raw_size}",
                )
            dec = mod.LZ4FrameDecompressor()
            out = dec.decompress(data, max_length=limit)
            if len(out) <= raw_size and not dec.eof:
                raise Rejected("bad_compression", f"lz4 frame ends early ({len(out)} of {raw_size} bytes)")
            trailing = bool(dec.unused_data)
    except Rejected:
        raise
    except Exception as exc:  # zstd.ZstdError, lz4's RuntimeError, ...: garbage in the frame
        raise Rejected("bad_compression", f"{codec} data does not decompress ({type(exc).__name__}: {exc})") from None
    if len(out) > raw_size:
        raise Rejected("decompression_bomb", f"{codec} data decompresses past its declared {raw_size} bytes")
    if len(out) < raw_size:
        raise Rejected("bad_compression", f"{codec} data decompresses to {len(out)} bytes, declared {raw_size}")
    if trailing:
        raise Rejected("bad_compression", f"bytes after the {codec} frame")
    return out


@attrs.frozen
class FieldSpec:
    """What one field of a batch looks like (shape excludes the leading axis).

    A field has one row per transition, unless ``per_transition`` is false: then it is a
    pool of any number of rows (at most ``max_rows``) that other fields refer to (DQN's
    frames). ``ref`` names such a pool: each value of this integer field is a row index into
    it, so must be ``0 <= value < rows of the pool`` (the bound depends on the batch; ``low``
    and ``high`` still apply on top).
    """

    dtype: str
    shape: tuple[int, ...] = ()
    #: inclusive bounds for integer fields (e.g. discrete actions), or None
    low: float | None = None
    high: float | None = None
    #: False: a pool field, whose leading axis is its own (not the transition count)
    per_transition: bool = True
    #: at most this many rows (any field; meant for pools)
    max_rows: int | None = None
    #: the name of the field this integer field holds row indices into
    ref: str | None = None
    #: a batch may leave this field out (one added to a format later: older senders' batches
    #: lack it, and a sender may omit it when it says nothing, as a batch with no takeover does)
    optional: bool = False


@attrs.frozen
class SampleSpec:
    """The fields an algorithm expects in every batch, used to validate input."""

    fields: Mapping[str, FieldSpec]
    max_transitions: int = 65536

    def __attrs_post_init__(self) -> None:
        for name, spec in self.fields.items():
            if spec.ref is not None:
                if spec.ref not in self.fields:
                    raise ValueError(f"field {name!r} refers to {spec.ref!r}, which is not a field of this spec")
                if np.dtype(spec.dtype).kind not in "iu":
                    raise ValueError(f"field {name!r} refers to rows of {spec.ref!r} but is not an integer field")

    def validate(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Raise :class:`Rejected` unless ``arrays`` matches this spec exactly: names, dtypes,
        shapes (``count`` rows, or for a pool at most ``max_rows``), finite floats, ``low``/``high``
        bounds and, for a ``ref`` field, row indices into its pool."""
        if count < 1 or count > self.max_transitions:
            raise Rejected(
                "oversize" if count > 0 else "bad_header",
                f"batch of {count} transitions (allowed 1..{self.max_transitions})",
            )
        missing = {k for k, f in self.fields.items() if not f.optional} - set(arrays)
        if missing:
            raise Rejected("missing_field", f"missing {sorted(missing)}")
        extra = set(arrays) - set(self.fields)
        if extra:
            raise Rejected("unknown_field", f"unexpected {sorted(extra)}")
        present = {k: f for k, f in self.fields.items() if k in arrays}
        for name, spec in present.items():  # shapes first: a ref is checked against a pool's checked rows
            arr = arrays[name]
            if arr.dtype != np.dtype(spec.dtype):
                raise Rejected("dtype", f"{name} is {arr.dtype}, expected {spec.dtype}")
            rows = count if spec.per_transition else arr.shape[0] if arr.ndim else -1
            if arr.shape != (rows, *spec.shape):
                raise Rejected("shape", f"{name} has shape {arr.shape}, expected {(rows, *spec.shape)}")
            if spec.max_rows is not None and rows > spec.max_rows:
                raise Rejected("oversize", f"{name} has {rows} rows (allowed {spec.max_rows})")
        for name, spec in present.items():
            arr = arrays[name]
            if spec.ref is not None and arr.size:
                pool = len(arrays[spec.ref])
                if arr.min() < 0 or arr.max() >= pool:
                    raise Rejected("out_of_range", f"{name} refers outside the {pool} rows of {spec.ref}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise Rejected("non_finite", f"{name} contains NaN or inf")
            if spec.low is not None and arr.size and arr.min() < spec.low:
                raise Rejected("out_of_range", f"{name} below {spec.low}")
            if spec.high is not None and arr.size and arr.max() > spec.high:
                raise Rejected("out_of_range", f"{name} above {spec.high}")

    def describe(self) -> dict:
        return {
            k: {"dtype": v.dtype, "shape": list(v.shape), **({"optional": True} if v.optional else {})}
            for k, v in self.fields.items()
        }


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

    def encode(self, compression: str = "none", level: int | None = None) -> bytes:
        """This batch on the wire (:func:`encode_batch`; ``sent_at`` is stamped now, ``protocol``
        is this release's), what :func:`decode_batch` reads back."""
        return encode_batch(
            self.run,
            self.worker,
            self.seq,
            self.model_version,
            self.arrays,
            self.extra,
            self.incarnation,
            self.epoch,
            self.count,
            compression,
            level,
        )


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
    compression: str = "none",
    level: int | None = None,
) -> bytes:
    """Encode named arrays into one payload. ``count`` is the number of transitions; without it,
    all arrays must share their leading axis, which is the count.

    ``compression`` ("none", "zstd", "lz4", or "auto": zstd for array data of at least
    :data:`AUTO_MIN_BYTES`) compresses the array data, not the header, at ``level`` (None: the
    codec's fast default, see :data:`LEVELS`). Data that does not shrink by at least 1/8 goes raw
    (the header then names no codec). ValueError for a codec that is not installed here."""
    _check_encode_args(compression, level, incarnation)
    count = _batch_count(arrays, count)
    entries, blobs, size = _array_entries(arrays)
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
    pieces = _padded_pieces(blobs)
    codec = _pick_codec(compression, size)
    if codec != "none" and size:
        packed = _compress(codec, pieces, size, LEVELS[codec][0] if level is None else level)
        if len(packed) <= size - size // 8:  # else raw: it costs nothing to decode
            header["codec"], header["raw_size"] = codec, size
            pieces = [packed]
    return _frame(header, pieces)


def _check_encode_args(compression: str, level: int | None, incarnation: str) -> None:
    """ValueError for a sender's mistake (unknown codec, level out of range, overlong id) before any work."""
    check_compression(compression)
    if level is not None and compression in CODECS:
        _, lo, hi = LEVELS[compression]
        if not isinstance(level, int) or isinstance(level, bool) or not lo <= level <= hi:
            raise ValueError(f"{compression} level {level!r} is not an integer in [{lo}, {hi}]")
    if len(incarnation) > MAX_INCARNATION:
        raise ValueError(f"incarnation id of {len(incarnation)} characters (at most {MAX_INCARNATION})")


def _batch_count(arrays: Mapping[str, np.ndarray], count: int | None) -> int:
    """The transition count: ``count`` if given, else the one leading axis all arrays share."""
    if not arrays:
        raise ValueError("a batch needs at least one array")
    counts = {a.shape[0] if a.ndim else -1 for a in arrays.values()}
    if -1 in counts or (count is None and len(counts) != 1):
        raise ValueError(f"arrays disagree on the batch axis: { {k: v.shape for k, v in arrays.items()} }")
    return counts.pop() if count is None else count


def _array_entries(arrays: Mapping[str, np.ndarray]) -> tuple[list[dict], list[np.ndarray], int]:
    """Each array as the wire holds it (contiguous, little-endian, an allowed dtype), its header
    entry at an 8-aligned offset, and the size of the array data in all."""
    entries = []
    blobs = []
    offset = 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if not arr.dtype.isnative:  # the wire is little-endian (numpy's native order on every host we run)
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.dtype.name not in ALLOWED_DTYPES:
            raise ValueError(f"dtype {arr.dtype} of {name} cannot go on the wire")
        entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape), "offset": offset})
        blobs.append(arr)
        offset = _align(offset + arr.nbytes)
    return entries, blobs, offset


def _padded_pieces(blobs: list[np.ndarray]) -> list:
    """The array data in order, each padded to 8 bytes, as byte views: joined once, into the payload."""
    pieces: list = []
    for arr in blobs:
        pieces.append(arr.reshape(-1).view(np.uint8))
        if arr.nbytes % 8:
            pieces.append(bytes(_align(arr.nbytes) - arr.nbytes))
    return pieces


def _pick_codec(compression: str, size: int) -> str:
    """The codec to try: ``compression``, with "auto" meaning zstd for large data (pixels) and none below."""
    if compression == "auto":
        return "zstd" if size >= AUTO_MIN_BYTES and codec_available("zstd") else "none"
    return compression


def _frame(header: dict, pieces: list) -> bytes:
    """Prefix, JSON header padded to 8, then the data pieces: the payload, joined once."""
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    start = _align(_PREFIX.size + len(hbytes))
    out = bytearray(start)
    _PREFIX.pack_into(out, 0, MAGIC, PROTOCOL_VERSION, len(hbytes))
    out[_PREFIX.size : _PREFIX.size + len(hbytes)] = hbytes
    return b"".join([out, *pieces])


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


@attrs.frozen
class BatchHeader:
    """A batch's header, read without touching (or decompressing) its array data."""

    run: str
    worker: str
    incarnation: str
    seq: int
    epoch: int
    model_version: int
    count: int
    sent_at: float
    protocol: int
    extra: Mapping[str, object]
    #: "none", or the codec the array data is compressed with
    codec: str
    #: bytes of array data: as sent ("none"), or once decompressed
    raw_size: int
    #: the array entries as they came (decode_batch checks them)
    arrays: list
    #: where the array data starts in the payload
    data_start: int


def decode_header(payload: bytes | memoryview, max_bytes: int = 64 * 1024 * 1024) -> BatchHeader:
    """Read and check a batch's header only (run, worker, incarnation, seq, codec, ...): what a
    ledger needs, without decompressing anything. Raises :class:`Rejected` with a reason."""
    proto, hlen = _read_prefix(payload, max_bytes)
    header = _header_json(payload, hlen)
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
    codec, raw_size = _data_codec(header, len(payload) - start)
    return BatchHeader(
        run=run,
        worker=worker,
        incarnation=incarnation,
        seq=seq,
        epoch=epoch,
        model_version=version,
        count=count,
        sent_at=float(sent_at),
        protocol=proto,
        extra=extra,
        codec=codec,
        raw_size=raw_size,
        arrays=entries,
        data_start=start,
    )


def _read_prefix(payload: bytes | memoryview, max_bytes: int) -> tuple[int, int]:
    """(protocol, header length) from the fixed prefix, once size, magic, protocol and the header's
    bounds are checked: nothing past the prefix is read before that."""
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
    return proto, hlen


def batch_protocol(payload: bytes | memoryview) -> int | None:
    """The protocol byte of what looks like a sample batch (its magic first), else None: how a
    receiver names the version of a batch it cannot read (a sender of another protocol)."""
    if len(payload) < _PREFIX.size or bytes(payload[:4]) != MAGIC:
        return None
    return _PREFIX.unpack_from(payload, 0)[1]


def _header_json(payload: bytes | memoryview, hlen: int) -> dict:
    """The header's JSON object; garbage (bad UTF-8, not JSON, too deep, not an object) is a bad_header."""
    try:
        header = json.loads(bytes(payload[_PREFIX.size : _PREFIX.size + hlen]))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested JSON
        raise Rejected("bad_header", f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise Rejected("bad_header", "header is not an object")
    return header


def _data_codec(header: dict, data_len: int) -> tuple[str, int]:
    """(codec, raw_size) of the ``data_len`` bytes of array data: raw, or a known codec's frame."""
    if data_len < 0:
        raise Rejected("truncated", "no room for array data")
    codec = header.get("codec", "none")
    if not isinstance(codec, str):
        raise Rejected("bad_header", f"codec {codec!r} is not a string")
    if codec == "none":
        if "raw_size" in header and _int(header, "raw_size") != data_len:
            raise Rejected("bad_header", f"raw_size {header['raw_size']} of uncompressed data of {data_len} bytes")
        return codec, data_len
    if codec in CODECS:
        raw_size = _int(header, "raw_size")
        if not data_len:
            raise Rejected("truncated", f"{codec} data is empty")
        return codec, raw_size
    raise Rejected("codec", f"unknown codec {codec[:32]!r} (this node knows {', '.join(CODECS)})")


def decode_batch(
    payload: bytes | memoryview, max_bytes: int = 64 * 1024 * 1024, max_raw_bytes: int | None = None
) -> SampleBatch:
    """Decode and bounds-check a batch. Raises :class:`Rejected` with a reason.

    ``max_bytes`` bounds the payload; ``max_raw_bytes`` (default: ``max_bytes``) bounds the array
    data once decompressed. A compressed batch's declared size is checked against its arrays
    and that cap before anything is decompressed, and decompression stops one byte past the
    declared size. Raw data comes back as read-only views of ``payload`` (no copy); compressed
    data as read-only views of its one decompressed buffer."""
    h = decode_header(payload, max_bytes)
    max_raw = max_bytes if max_raw_bytes is None else max_raw_bytes
    if h.codec != "none" and h.raw_size > max_raw:
        raise Rejected("decompression_bomb", f"{h.codec} data declares {h.raw_size} bytes, limit {max_raw}")
    layout, end = _array_layout(h.arrays, h.raw_size)
    body = _array_data(payload, h, end)
    arrays: dict[str, np.ndarray] = {}
    for name, dt, shape, off in layout:
        arrays[name] = np.frombuffer(body, dtype=dt, count=math.prod(shape), offset=off).reshape(shape)
    return SampleBatch(
        run=h.run,
        worker=h.worker,
        seq=h.seq,
        model_version=h.model_version,
        count=h.count,
        arrays=arrays,
        sent_at=h.sent_at,
        protocol=h.protocol,
        extra=h.extra,
        incarnation=h.incarnation,
        epoch=h.epoch,
    )


def _array_layout(entries: list, data_len: int) -> tuple[list[tuple[str, np.dtype, list, int]], int]:
    """Each header entry checked (unique name, allowed dtype, sane shape, aligned offset, inside the
    ``data_len`` bytes of data) as (name, dtype, shape, offset); and where the last array ends."""
    layout = []
    names: set[str] = set()
    end = 0
    for e in entries:
        if not isinstance(e, dict):
            raise Rejected("bad_header", "array entry is not an object")
        name, dtype, shape, off = e.get("name"), e.get("dtype"), e.get("shape"), e.get("offset")
        if not isinstance(name, str) or not name or len(name) > 64 or name in names:
            raise Rejected("bad_header", f"bad or duplicate array name {name!r}")
        names.add(name)
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
        end = max(end, off + nbytes)
        layout.append((name, dt, shape, off))
    return layout, end


def _array_data(payload: bytes | memoryview, h: BatchHeader, end: int) -> memoryview:
    """The array data as one buffer: a view of ``payload`` when raw, else its bounded decompression."""
    start, data_len = h.data_start, h.raw_size
    if h.codec == "none":
        return memoryview(payload)[start:] if data_len else memoryview(b"")
    if data_len > _align(end):  # our encoder sends exactly the arrays, padded to 8
        raise Rejected("bad_header", f"{h.codec} data declares {data_len} bytes, its arrays need {end}")
    if not codec_available(h.codec):
        raise Rejected("codec", f"data compressed with {h.codec}, which needs {_INSTALL[h.codec]} here")
    return memoryview(_decompress(h.codec, memoryview(payload)[start:], data_len))
