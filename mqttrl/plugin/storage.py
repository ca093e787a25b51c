"""The storage contract: :class:`Point`, :class:`Storage`, and the InfluxDB line-protocol form of a point.

A storage plugin registers a factory with ``mqttrl_register_storages``; the
telemetry node (``mqttrl-telemetry --storage NAME``) builds one storage per
``--storage`` and feeds it points. See :class:`Storage` for exactly how.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

import attrs

#: what a field value may be; ``None`` means "not known yet" and is skipped by the built-in storages
FieldValue = float | int | bool | str | None


@attrs.frozen
class Point:
    """One measurement at one time, as in docs/telemetry.md.

    ``measurement`` names the table (``"episode"``, ``"learner"``, ``"worker"``, ...);
    ``tags`` are indexed string labels (always ``run``, often ``worker``);
    ``fields`` are the values: ``int`` (counters, versions), ``float`` (rates,
    returns), ``bool`` or ``str``, or ``None`` for a field that is not known yet
    (telemetry sends the same field names every time, so a schema stays stable);
    ``time`` is seconds since the epoch (float) when telemetry received the data.
    """

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    #: seconds since the epoch
    time: float


@runtime_checkable
class Storage(Protocol):
    """A telemetry sink, as built by a factory registered with ``mqttrl_register_storages``.

    The telemetry node calls, from its one main-loop thread (never concurrently):

    * :meth:`write` with a batch of points: the aggregates every
      ``interval_s`` (2 s by default), and the points of each incoming message
      (episodes, learner metrics, evaluations, best-model events) as it is handled;
    * :meth:`close` exactly once, at shutdown, after a last :meth:`write`.

    Optionally a storage has an integer ``pending`` attribute (points accepted but not
    yet stored; :class:`PendingStorage`): telemetry reports the sum as the ``pending_points``
    field. And optionally a ``run_config(config: dict) -> None`` method (:class:`ConfiguredStorage`):
    telemetry calls it, from the same loop, with the run's resolved config (the learner's retained
    ``config`` message, as ``RunConfig.to_dict()`` gives it) when it arrives and whenever it changes.
    """

    def write(self, points: list[Point]) -> None:
        """Take a batch of points (one or more; a list the storage may keep, never modified afterwards).

        Runs on telemetry's message loop, so it must return quickly (milliseconds): a
        storage that talks to a server should queue the points and send them from its
        own thread. It must not raise for a transient failure (server down, timeout):
        keep the points and retry, dropping the oldest only past a bound, and log it.
        An exception is logged by telemetry and the batch is lost for this storage
        (other storages still get it).
        """

    def close(self) -> None:
        """Flush what is pending (a bounded wait) and release files, threads and connections.

        Called once; no :meth:`write` follows.
        """


# ---- a storage's optional members, each its own protocol (``isinstance``, not attribute probes)
@runtime_checkable
class PendingStorage(Storage, Protocol):
    """A storage that says how many points it holds that are not stored yet."""

    @property
    def pending(self) -> int: ...


@runtime_checkable
class ConfiguredStorage(Storage, Protocol):
    """A storage that takes the run's resolved config (a run's hyperparameters beside its points)."""

    def run_config(self, config: dict) -> None:
        """The run's config (``RunConfig.to_dict()``), when it arrives and whenever it changes."""


def pending_points(storages: Iterable[Storage]) -> int:
    """Points accepted by ``storages`` and not stored yet (those that say)."""
    return sum(int(s.pending) for s in storages if isinstance(s, PendingStorage))


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
