"""The control clock of a real-time env: a fixed period on a schedule that stays anchored.

rtgym's "elastic" clock (tmrl's) lets a period end late up to a tolerance and keeps its
schedule; past the tolerance it restarts the schedule from "now", so the time lost is never
made up and the game's timeline and the schedule drift apart for good. This clock keeps the
schedule anchored to its start: a period that ended late is followed by a shorter one (back
on the grid), and a period so late that whole periods went by skips them (counted as
``skipped`` and ``lost_s``) instead of bursting through them. Only a reset or a pause moves the
anchor, and that time is excused (``reset_s``, ``paused_s``), never an overrun.

Two modes:

- ``elastic``: the observation is read as soon as the period's end has passed (late by the
  scheduler's jitter); a period later than ``tolerance`` periods counts as an overrun.
- ``strict``: the observation is read on the grid or not at all: a read later than
  ``tolerance`` waits for the next grid point (a skipped period, counted), so every
  observation is ``k`` whole periods after the last within the tolerance.

No threads; ``now`` and ``sleep`` are injectable so tests run on a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mqttrl.timing import PeriodStats

CLOCK_MODES = ("elastic", "strict")


class ControlClock:
    """``hz`` periods a second; :meth:`wait` sleeps to the end of the current period."""

    def __init__(
        self,
        hz: float,
        mode: str = "elastic",
        tolerance: float = 0.1,
        now: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
        stats: PeriodStats | None = None,
    ):
        if hz <= 0:
            raise ValueError(f"control_hz={hz!r}: must be positive")
        if mode not in CLOCK_MODES:
            raise ValueError(f"clock={mode!r}: must be one of {', '.join(CLOCK_MODES)}")
        self.period = 1.0 / hz
        self.mode = mode
        self.tolerance = tolerance
        self.now = now
        self.sleep = sleep
        self.stats = stats or PeriodStats()
        self.anchor: float | None = None
        #: the grid index of the current period's end: it ends at ``anchor + k * period``
        self.k = 1
        self._paused_at: float | None = None

    # ---- the schedule ------------------------------------------------------------
    def start(self, t: float | None = None) -> None:
        """The schedule starts now (an episode's first observation was just read)."""
        self.anchor = self.now() if t is None else t
        self.k = 1

    @property
    def period_end(self) -> float:
        if self.anchor is None:
            self.start()
        return self.anchor + self.k * self.period

    def remaining(self) -> float:
        """Seconds to the end of the current period (negative: already late)."""
        return self.period_end - self.now()

    def wait(self) -> float:
        """Sleep to the end of the current period and move the schedule to the next one; the
        time the caller may read the observation at. Records the error (how late it is)."""
        end = self.period_end
        t = self.now()
        if t < end:
            self.sleep(end - t)
            t2 = self.now()
            self.stats.wait_s += t2 - t
            t = t2
        late = t - end
        limit = self.tolerance * self.period
        if late > limit:
            self.stats.overruns += 1
            if self.mode == "strict":  # read on the grid: wait for the next grid point
                skip = math.floor(late / self.period) + 1
                end += skip * self.period
                self.k += skip
                self.stats.skipped += skip
                self.stats.lost_s += skip * self.period
                self.sleep(max(0.0, end - t))
                t2 = self.now()
                self.stats.wait_s += t2 - t
                t = t2
                late = t - end
            elif late >= self.period:  # elastic: whole periods went by; skip them, never burst
                skip = math.floor(late / self.period)
                self.k += skip
                self.stats.skipped += skip
                self.stats.lost_s += skip * self.period
        self.stats.record(late)
        self.k += 1
        return t

    # ---- time that is not late -----------------------------------------------------
    def excuse_reset(self, started: float, t: float | None = None) -> None:
        """A reset ran from ``started`` to now: the schedule restarts after it (not an overrun)."""
        t = self.now() if t is None else t
        self.stats.reset_s += max(0.0, t - started)
        self.start(t)

    def pause(self, t: float | None = None) -> None:
        if self._paused_at is None:
            self._paused_at = self.now() if t is None else t

    def resume(self, t: float | None = None) -> None:
        """The game runs again: the schedule restarts now; the paused time is counted."""
        if self._paused_at is None:
            return
        t = self.now() if t is None else t
        self.stats.paused_s += max(0.0, t - self._paused_at)
        self._paused_at = None
        self.start(t)

    @property
    def paused(self) -> bool:
        return self._paused_at is not None
