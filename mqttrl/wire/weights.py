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

FORMAT = "mqttrl.weights"


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
    def order(self) -> tuple[int, int]:
        """(epoch, version): newer weights compare greater, across learner restarts too."""
        return (self.epoch, self.version)


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
) -> bytes:
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
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
    return st_save(tensors, metadata=meta)


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
        algorithm, run, digest = meta["algorithm"], meta["run"], meta["checksum"]
    except (KeyError, ValueError, TypeError, RecursionError) as exc:
        raise Rejected("bad_header", f"weights metadata incomplete ({exc})") from None
    if version < 0 or not 0 <= epoch < 2**62 or not isinstance(info, dict):
        raise Rejected("bad_header", "negative version, epoch out of range or bad info")
    try:
        tensors = st_load(bytes(payload))
    except Exception as exc:  # safetensors raises its own error types
        raise Rejected("truncated", f"safetensors could not read the tensors ({exc})") from None
    if checksum(tensors) != digest:
        raise Rejected("checksum", "tensor data does not match its checksum")
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
