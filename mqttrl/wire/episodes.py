"""Finished episodes (``episodes/<worker>``, QoS 1): one message per sample batch.

A message per episode cost a worker up to a third of its throughput, so a worker sends the
episodes a batch finished together. Telemetry (returns, the best model by training returns),
``mqttrl status`` and ``mqttrl train``'s ``episodes.csv`` read them. A single episode object (an
older worker's message) is taken too; one bad episode refuses the whole message.
"""

from __future__ import annotations

import attrs

from .control import decode_json, encode_json
from .errors import Rejected
from .record import JsonRecord, from_json, wire_field

#: more episodes than this in one message is not a batch's worth
MAX_EPISODES = 10000


@attrs.define
class EpisodeStats(JsonRecord):
    """One finished episode."""

    episode_return: float = wire_field("the sum of its rewards", key="return")
    length: int = wire_field("its steps")
    env: int | None = wire_field("which of the worker's envs played it", None)
    terminated: bool | None = wire_field("ended by the game (not cut by a time limit)", None)
    model_version: int | None = wire_field("the model version that played its last step", None)
    env_steps: int | None = wire_field("the worker's env steps when it ended", None)
    time: float | None = wire_field("the worker's wall clock when it ended", None)
    demo: bool | None = wire_field("a person played it (docs/demonstrations.md)", None, omit_none=True)

    def point_fields(self) -> dict[str, float | int]:
        """The fields of telemetry's ``episode`` point (docs/telemetry.md's table, held by a test)."""
        fields: dict[str, float | int] = {"return": self.episode_return, "length": self.length}
        if self.model_version is not None:
            fields["model_version"] = self.model_version
        if self.env_steps is not None:
            fields["env_steps"] = self.env_steps
        return fields


@attrs.define
class EpisodeReport:
    """A worker's episodes of one batch."""

    episodes: list[EpisodeStats]
    worker: str | None = None

    def encode(self) -> bytes:
        return encode_json({"worker": self.worker, "episodes": [e.to_json() for e in self.episodes]})

    @classmethod
    def decode(cls, payload: bytes) -> EpisodeReport:
        """The report in ``payload``, or :class:`Rejected`: a bad episode refuses them all."""
        obj = decode_json(payload)
        items = obj.get("episodes", [obj])
        if not isinstance(items, list) or len(items) > MAX_EPISODES:
            raise Rejected("bad_value", f"episodes must be a list of at most {MAX_EPISODES}")
        episodes = []
        for item in items:
            if not isinstance(item, dict):
                raise Rejected("bad_value", "an episode is not an object")
            e = from_json(EpisodeStats, item)
            if e.length < 0:
                raise Rejected("bad_value", f"episode length {e.length} is negative")
            episodes.append(e)
        worker = obj.get("worker")
        return cls(episodes, worker if isinstance(worker, str) else None)


def decode_episodes(payload: bytes, max_episodes: int = 10000) -> list[dict]:
    """Deprecated: :meth:`mqttrl.wire.episodes.EpisodeReport.decode` is the record; this gives its
    episodes as the dicts older callers read."""
    import warnings

    warnings.warn(
        "mqttrl.wire.decode_episodes is deprecated; use mqttrl.wire.EpisodeReport.decode",
        DeprecationWarning,
        stacklevel=2,
    )
    return [e.to_json() for e in EpisodeReport.decode(payload).episodes]
