"""A worker's heartbeat (``heartbeat/<worker>``, QoS 0, every ``worker.heartbeat_interval_s``).

The worker core makes it, the worker node adds its timing and game reports, and the learner
(liveness, progress, fleet timing), telemetry and ``mqttrl status`` read it: all through this one
record. Only the two counters every reader needs are required, so a heartbeat of an older worker
is still one.
"""

from __future__ import annotations

import attrs

from .record import JsonRecord, wire_field


@attrs.define(kw_only=True)
class GameReport(JsonRecord):
    """The game a worker launched (``[env] launch``), as its heartbeat reports it: counts over the
    worker's process (telemetry adds those of its earlier processes)."""

    launches: int | None = wire_field("games started, the first included", None)
    relaunches: int | None = wire_field("games started after the first", None)
    crashes: int | None = wire_field("of the relaunches, those after a crash (not a game over)", None)
    relaunch_s: float | None = wire_field("seconds the relaunches took", None)

    def count(self, name: str) -> int:
        """``launches``, ``relaunches`` or ``crashes``; 0 for a count not given or not a count."""
        return count_of(getattr(self, name))

    def seconds(self) -> float:
        """``relaunch_s``, 0 when not given or negative."""
        return self.relaunch_s if self.relaunch_s is not None and self.relaunch_s >= 0 else 0.0


@attrs.define(kw_only=True)
class Heartbeat(JsonRecord):
    """What a worker has done so far, and how it is doing (fields in the message's order)."""

    worker: str | None = wire_field("the worker's name", None)
    incarnation: str | None = wire_field("this process's id (a restarted worker draws a new one)", None)
    pid: int | None = wire_field("its process id", None)
    epoch: int | None = wire_field("the learner epoch of its model (a restarted learner starts a new one)", None)
    model_version: int = wire_field("the model version its actor runs")
    env_steps: int = wire_field("env steps this worker process took (all its envs)")
    episodes: int | None = wire_field("episodes it finished", None)
    env_restarts: int | None = wire_field("envs this process made afresh after their game crashed", None)
    person_steps: int | None = wire_field(
        "env steps a person played instead of the policy (a takeover; the env reported demo_action)", None
    )
    seq: int | None = wire_field("the sequence number of its last sample batch", None)
    outbox: int | None = wire_field("messages queued for the broker", None)
    dropped: dict | None = wire_field("messages dropped from a full outbox, by kind", None)
    rejected: dict | None = wire_field("messages it refused, by reason", None)
    paused: bool | None = wire_field("held back by flow control or a sync round", None)
    idle: str | None = wire_field("why it idles now (no model, learner away, paused), or null", None)
    paused_s: float | None = wire_field("seconds idled so far", None)
    time: float | None = wire_field("the worker's wall clock when sent (rates use the sender's clock)", None)
    timing: dict | None = wire_field(
        "where its time went since the last heartbeat: per block, seconds and calls", None, omit_none=True
    )
    game: GameReport | None = wire_field(
        "the game it launched (`[env] launch`): `launches`, `relaunches`, of those `crashes` (not a game "
        "over), `relaunch_s` (seconds the relaunches took)",
        None,
        omit_none=True,
    )
    realtime: dict | None = wire_field(
        "a real-time worker's control periods since the last heartbeat (docs/real-time.md)", None, omit_none=True
    )
    act_latency: dict | None = wire_field(
        "capture to action: a histogram of how old observations were when their actions went out",
        None,
        omit_none=True,
    )

    def count(self, name: str) -> int:
        """A counter of the game report (``launches``, ``relaunches``, ``crashes``), 0 for anything not a count."""
        return self.game.count(name) if self.game is not None else 0

    def dropped_total(self) -> int:
        """Messages dropped from a full outbox, all kinds (a bad count reads as 0)."""
        return sum(count_of(v) for v in (self.dropped or {}).values())


def count_of(value: object) -> int:
    """A count from a heartbeat's report, 0 for anything else (a bad field is not worth a refusal)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


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
