"""Telemetry points and their InfluxDB line-protocol form (shared by storage plugins)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs


@attrs.frozen
class Point:
    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, float | int | bool | str]
    #: seconds since the epoch
    time: float


def _esc_key(s: str) -> str:
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def _field_value(v) -> str | None:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}i"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else None  # InfluxDB has no NaN/inf
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return None


def to_line(p: Point) -> str | None:
    """One line of line protocol with nanosecond time, or None if no field is writable."""
    fields = []
    for k, v in p.fields.items():
        fv = _field_value(v)
        if fv is not None:
            fields.append(f"{_esc_key(k)}={fv}")
    if not fields:
        return None
    tags = "".join(f",{_esc_key(k)}={_esc_key(str(v))}" for k, v in sorted(p.tags.items()) if str(v) != "")
    return f"{_esc_key(p.measurement)}{tags} {','.join(fields)} {int(p.time * 1e9)}"
