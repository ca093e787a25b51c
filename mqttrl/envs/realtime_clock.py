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

The wait sleeps to ``spin_s`` before the period's end, then spins (reads the clock) to it: a
sleeping thread wakes up late by the OS timer's slack and the scheduler's wake-up latency, a
spinning one does not; the spin's CPU time is counted (``spin_s`` in :class:`PeriodStats`).

No threads; ``now`` and ``sleep`` are injectable so tests run on a fake clock.
:class:`ThreadPriority` raises the control thread's scheduling priority where the OS allows it
(and, on Windows, the system timer's resolution: :mod:`mqttrl.envs.realtime_os`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from mqttrl.envs.realtime_os import PosixRealTime, real_time_os
from mqttrl.observe.timing import PeriodStats

CLOCK_MODES = ("elastic", "strict")

log = logging.getLogger("mqttrl.realtime")


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
        spin_s: float = 0.0,
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
        #: the last this many seconds of a wait are spun, not slept (on the real clock only: an
        #: injected ``now`` may stand still while nobody sleeps)
        self.spin_s = spin_s if now is time.perf_counter else 0.0
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
            t2 = self._sleep_until(end, t)
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
                t2 = self._sleep_until(end, t)
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

    def _sleep_until(self, end: float, t: float) -> float:
        """Sleep (then spin the last ``spin_s``) until ``end``; the time it returns at."""
        if self.spin_s <= 0.0:
            if end > t:
                self.sleep(end - t)
            return self.now()
        if end - t > self.spin_s:
            self.sleep(end - t - self.spin_s)
        t_spin = now = self.now()
        while now < end:
            now = self.now()
        self.stats.spin_s += now - t_spin
        return now

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


class ThreadPriority:
    """The calling thread's scheduling priority, raised for the control period's deadline and
    lowered for the period's chores; on Windows also the system timer's period while it plays.

    :meth:`high` puts the thread in ``SCHED_FIFO`` at ``priority`` (Linux; needs root or
    ``CAP_SYS_NICE``): when its sleep ends it preempts every ordinary thread at once (the learner
    training on the same cores, the game's own threads) instead of waiting for its turn;
    :meth:`low` puts it back in ``SCHED_OTHER`` for the period's chores (messages, a model
    decoded and loaded, a batch encoded), so they never hold a core against other real-time
    threads. The threads a thread starts inherit its policy: the worker starts its helper
    threads while low. On Windows (``platform`` ``win32``) the same two steps are
    ``THREAD_PRIORITY_TIME_CRITICAL`` and ``THREAD_PRIORITY_NORMAL``, and the first :meth:`high`
    also asks for a 1 ms system timer (``timeBeginPeriod``), given back by :meth:`close` or, at
    the latest, when the object is collected or the interpreter exits
    (:mod:`mqttrl.envs.realtime_os`). Where the OS refuses (no privilege, no such call) it says so
    in one log line and does nothing from then on, but for ``slice_s``: where ``SCHED_FIFO`` is
    refused, the thread asks Linux's EEVDF scheduler (6.12+) for this short a time slice instead
    (no privilege needed; 0: not asked), once. ``priority`` 0 does nothing. ``platform`` and
    ``win32`` (the Windows calls) are parameters so tests can run the Windows branch on Linux.
    """

    def __init__(self, priority: int, platform: str = sys.platform, win32: Any = None, slice_s: float = 0.0):
        self.priority = int(priority)
        self.slice_s = float(slice_s)
        #: the short slice asked where the raise was refused: None (not asked), True, or why not
        self.sliced: bool | str | None = None
        self.raised = False
        self.entered = False
        self.system, why = real_time_os(platform, win32) if self.priority > 0 else (PosixRealTime(), None)
        self.enabled = self.priority > 0 and why is None and self.system.available
        if self.priority > 0 and not self.enabled:
            log.info("real time: %s; the control thread keeps its priority", why or self.system.missing)
        #: the timer period is given back however the worker ends (Windows drops it at exit too)
        self._leave = weakref.finalize(self, self.system.leave)

    def high(self) -> None:
        if not self.enabled or self.raised:
            return
        if not self.entered:
            self.entered = True
            why = self.system.enter()
            if why:
                log.info("real time: %s", why)
        why = self.system.raise_thread(self.priority)
        if why:
            self.enabled = False
            log.info(
                "real time: the control thread keeps its normal priority (%s; worker.realtime_priority = 0 "
                "skips the attempt)%s",
                why,
                self._short_slice(),
            )
            return
        self.raised = True

    def _short_slice(self) -> str:
        """Where the raise was refused: a short time slice asked instead (``slice_s``); what it gave, for the log line."""
        if self.slice_s <= 0:
            return ""
        why = self.system.short_slice(self.slice_s)
        self.sliced = why or True
        ms = self.slice_s * 1000
        return f"; a {ms:g} ms time slice not taken either ({why})" if why else f"; it asks for a {ms:g} ms time slice"

    def low(self) -> None:
        if not self.raised:
            return
        why = self.system.lower_thread()
        if why:  # lowering is always allowed; a failure here is worth a line
            log.warning("real time: could not lower the control thread's priority (%s)", why)
            return
        self.raised = False

    def level(self) -> str:
        """The calling thread's priority as the OS reads it back: ``high``, ``normal`` or its own words."""
        return self.system.level()

    def close(self) -> None:
        """The worker leaves real time: the thread's ordinary priority, the system timer's period back."""
        self.low()
        self._leave()
