"""JSON control messages: the codec every record (:mod:`mqttrl.wire.record`) is written in."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import Rejected

MAX_JSON = 1024 * 1024


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_default).encode()


def _default(o: Any) -> Any:
    try:  # numpy scalars
        return o.item()
    except AttributeError:
        raise TypeError(f"{type(o).__name__} is not JSON serialisable") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def decode_json(
    payload: bytes, required: dict[str, type | tuple[type, ...]] | None = None, max_bytes: int = MAX_JSON
) -> dict:
    """Parse a JSON object and check required keys and their types.

    NaN/Infinity literals are refused: metrics and episode returns must be finite.
    """
    if len(payload) > max_bytes:
        raise Rejected("oversize", f"{len(payload)} bytes, limit {max_bytes}")
    try:
        obj = json.loads(bytes(payload), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested JSON
        raise Rejected("garbage", f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise Rejected("bad_header", "JSON message is not an object")
    for key, typ in (required or {}).items():
        if key not in obj:
            raise Rejected("bad_header", f"missing key {key!r}")
        value = obj[key]
        if not isinstance(value, typ) or (isinstance(value, bool) and typ in (int, float, (int, float))):
            raise Rejected("bad_value", f"{key}={value!r} is not {typ}")
        if isinstance(value, float) and not math.isfinite(value):
            raise Rejected("non_finite", f"{key} is not finite")
    return obj
