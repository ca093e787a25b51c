"""Weights: safetensors bytes with version, algorithm and checksum in the metadata.

safetensors is a plain header + raw tensors format: loading it runs no code,
unlike pickle or ``torch.load``. The numpy API is used so that torch-free
workers can read the same message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import attrs
import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from .. import PROTOCOL_VERSION
from .errors import Rejected
from .model_ref import EPOCH_LIMIT, ModelRef

FORMAT = "mqttrl.weights"

#: what float32 tensors may travel as (``learner.weights_dtype``); workers cast them back to float32
WIRE_DTYPES = ("float32", "float16", "bfloat16")
#: the largest finite float16: a tensor with a bigger magnitude goes in float32
_FLOAT16_MAX = float(np.finfo(np.float16).max)


@attrs.frozen
class WeightsMessage:
    version: int
    algorithm: str
    run: str
    tensors: Mapping[str, np.ndarray]
    #: algorithm-specific JSON-able extras (e.g. observation normalisation settings)
    info: Mapping[str, object] = attrs.field(factory=dict)
    published_at: float = 0.0
    #: the learner incarnation that published them; a newer epoch wins even with a lower version
    epoch: int = 0

    @property
    def ref(self) -> ModelRef:
        """Which model these weights are: newer weights compare greater, across learner restarts too."""
        return ModelRef(self.epoch, self.version)

    @property
    def order(self) -> tuple[int, int]:
        """(epoch, version): :attr:`ref` as a tuple (kept for older callers)."""
        return (self.epoch, self.version)

    def encode(self, wire_dtype: str = "float32") -> bytes:
        """This message on the wire (:func:`encode_weights`), its float32 tensors sent as
        ``wire_dtype``; what :func:`decode_weights` reads back."""
        return encode_weights(
            self.version, self.algorithm, self.run, self.tensors, self.info, self.published_at, self.epoch, wire_dtype
        )

    def newer_than(self, current: WeightsMessage | ModelRef | tuple[int, int] | None) -> bool:
        """Whether these weights replace ``current`` (weights, a :class:`ModelRef`, an ``(epoch,
        version)`` pair, or None: nothing yet): the one "newest weights win" rule of every receiver,
        ``self.ref > current.ref``."""
        return current is None or self.ref > ModelRef.of(current)


def newer(offered: tuple[int, int], current: tuple[int, int]) -> bool:
    """Whether weights ordered ``(epoch, version)`` replace the model at ``current``.

    A learner that restarts (from an older checkpoint, or with a fresh run directory) opens a new
    epoch, so its weights win even when their version number went back; weights of an older epoch
    (a retained copy a broker restored) never replace newer ones.
    """
    return ModelRef.of(offered) > ModelRef.of(current)


def checksum(tensors: Mapping[str, np.ndarray]) -> str:
    """A digest of names, dtypes, shapes and bytes, in name order."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.data)
    return h.hexdigest()


def encode_weights(
    version: int,
    algorithm: str,
    run: str,
    tensors: Mapping[str, np.ndarray],
    info: Mapping[str, object] | None = None,
    published_at: float = 0.0,
    epoch: int = 0,
    wire_dtype: str = "float32",
) -> bytes:
    """``wire_dtype`` "float16" or "bfloat16" sends float32 tensors in half the bytes; the
    metadata names each cast tensor (``cast``), and :func:`decode_weights` casts it back."""
    tensors, cast = narrow(tensors, wire_dtype)
    meta = {
        "format": FORMAT,
        "protocol": str(PROTOCOL_VERSION),
        "version": str(int(version)),
        "epoch": str(int(epoch)),
        "algorithm": algorithm,
        "run": run,
        "checksum": checksum(tensors),
        "published_at": repr(float(published_at)),
        "info": json.dumps(dict(info or {}), separators=(",", ":")),
    }
    if cast:
        meta["cast"] = json.dumps(cast, separators=(",", ":"), sort_keys=True)
    return st_save(tensors, metadata=meta)


def narrow(tensors: Mapping[str, np.ndarray], wire_dtype: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors as they travel: float32 ones in ``wire_dtype`` (bfloat16 as its uint16 bit
    pattern, which safetensors' numpy API can carry), and which were cast to what."""
    if wire_dtype not in WIRE_DTYPES:
        raise ValueError(f"weights wire dtype {wire_dtype!r}: use one of {', '.join(WIRE_DTYPES)}")
    out: dict[str, np.ndarray] = {}
    cast: dict[str, str] = {}
    for name, value in tensors.items():
        arr = np.ascontiguousarray(value)
        if wire_dtype != "float32" and arr.dtype == np.float32:
            if wire_dtype == "bfloat16":
                arr, cast[name] = _to_bfloat16_bits(arr), "bfloat16"
            elif arr.size == 0 or float(np.abs(arr).max()) <= _FLOAT16_MAX:
                arr, cast[name] = arr.astype(np.float16), "float16"
        out[name] = arr
    return out, cast


def _to_bfloat16_bits(arr: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as uint16 bit patterns."""
    bits = arr.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def widen(tensors: dict[str, np.ndarray], cast: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Back to float32: each tensor the metadata names as cast. Raises :class:`Rejected` for a
    cast that names a tensor that is not there or a dtype that does not match."""
    for name, how in cast.items():
        arr = tensors.get(name)
        if how == "float16" and arr is not None and arr.dtype == np.float16:
            tensors[name] = arr.astype(np.float32)
        elif how == "bfloat16" and arr is not None and arr.dtype == np.uint16:
            tensors[name] = (arr.astype(np.uint32) << 16).view(np.float32)
        else:
            raise Rejected("bad_header", f"weights say tensor {name!r} was cast to {how!r}, which it is not")
    return tensors


def _metadata(payload: bytes) -> dict[str, str]:
    """Read the safetensors header without touching tensor data."""
    if len(payload) < 8:
        raise Rejected("truncated", f"only {len(payload)} bytes")
    hlen = int.from_bytes(payload[:8], "little")
    if hlen > 100_000_000 or 8 + hlen > len(payload):
        raise Rejected("garbage", "not a safetensors payload (bad header length)")
    try:
        header = json.loads(bytes(payload[8 : 8 + hlen]))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: deeply nested JSON
        raise Rejected("garbage", "safetensors header is not JSON") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        raise Rejected("bad_header", "weights carry no metadata")
    return meta


def decode_weights(payload: bytes, max_bytes: int = 512 * 1024 * 1024) -> WeightsMessage:
    """Decode and verify a weights message. Raises :class:`Rejected`."""
    if len(payload) > max_bytes:
        raise Rejected("oversize", f"{len(payload)} bytes, limit {max_bytes}")
    meta = _metadata(payload)
    if meta.get("format") != FORMAT:
        raise Rejected("garbage", f"format {meta.get('format')!r} is not {FORMAT}")
    if meta.get("protocol") != str(PROTOCOL_VERSION):
        raise Rejected("protocol_version", f"protocol {meta.get('protocol')!r}, expected {PROTOCOL_VERSION}")
    try:
        version = int(meta["version"])
        epoch = int(meta.get("epoch", "0"))
        published_at = float(meta.get("published_at", "0"))
        info = json.loads(meta.get("info", "{}"))
        cast = json.loads(meta.get("cast", "{}"))
        algorithm, run, digest = meta["algorithm"], meta["run"], meta["checksum"]
    except (KeyError, ValueError, TypeError, RecursionError) as exc:
        raise Rejected("bad_header", f"weights metadata incomplete ({exc})") from None
    if version < 0 or not 0 <= epoch < EPOCH_LIMIT or not isinstance(info, dict) or not isinstance(cast, dict):
        raise Rejected("bad_header", "negative version, epoch out of range or bad info")
    try:
        tensors = st_load(bytes(payload))
    except Exception as exc:  # safetensors raises its own error types
        raise Rejected("truncated", f"safetensors could not read the tensors ({exc})") from None
    if checksum(tensors) != digest:
        raise Rejected("checksum", "tensor data does not match its checksum")
    tensors = widen(tensors, cast)
    for name, arr in tensors.items():
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise Rejected("non_finite", f"tensor {name} contains NaN or inf")
    return WeightsMessage(
        version=version,
        algorithm=algorithm,
        run=run,
        tensors=tensors,
        info=info,
        published_at=published_at,
        epoch=epoch,
    )
