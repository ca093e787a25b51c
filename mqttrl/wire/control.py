"""JSON control messages: the codec every record (:mod:`mqttrl.wire.record`) is written in."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from .errors import Rejected

if TYPE_CHECKING:
    from .heartbeat import Heartbeat

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


def decode_episodes(payload: bytes, max_episodes: int = 10000) -> list[dict]:
    """Deprecated: :meth:`mqttrl.wire.episodes.EpisodeReport.decode` is the record; this gives its
    episodes as the dicts older callers read."""
    import warnings

    from .episodes import EpisodeReport

    warnings.warn(
        "mqttrl.wire.decode_episodes is deprecated; use mqttrl.wire.EpisodeReport.decode",
        DeprecationWarning,
        stacklevel=2,
    )
    return [e.to_json() for e in EpisodeReport.decode(payload).episodes]


class StepRate:
    """Env steps per second from a worker's heartbeats, timed by the sender's clock.

    Heartbeats can arrive bunched up (QoS 0 after a stall), so receive times would give
    absurd rates; heartbeats less than 0.1 s apart by the sender's clock are skipped, and a
    counter that went back (a restarted worker) reads as 0.
    """

    def __init__(self) -> None:
        self.rate: float | None = None
        self._last: tuple[float, int] | None = None

    def update(self, heartbeat: Heartbeat, now: float) -> float | None:
        sent = heartbeat.time if heartbeat.time is not None else now
        steps = heartbeat.env_steps
        if self._last is None or sent > self._last[0] + 0.1:
            if self._last is not None:
                self.rate = max(0.0, (steps - self._last[1]) / (sent - self._last[0]))
            self._last = (sent, steps)
        return self.rate
