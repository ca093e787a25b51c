"""The learner's flow signal (``flow``, retained), which is also its beat.

Re-published every ``beat_s``; workers pause on ``pause`` and idle when they stop hearing it
(the learner or their link is away: ``WorkerCore.should_idle``).
"""

from __future__ import annotations

import attrs

from .record import JsonRecord, wire_field


@attrs.define
class Flow(JsonRecord):
    """Pause or go, and how often the learner says so."""

    pause: bool = wire_field("workers hold their samples back (the learner's inbox is full)", False)
    model_version: int | None = wire_field("the learner's newest model version", None)
    beat_s: float | None = wire_field("seconds between two of these: a worker that hears none for long idles", None)
    time: float | None = wire_field("the learner's wall clock when sent", None)

    @property
    def beat(self) -> float:
        """The beat in seconds, 0 when none was given (or nonsense)."""
        return self.beat_s if self.beat_s is not None and self.beat_s > 0 else 0.0
