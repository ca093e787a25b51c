"""The real-time seam, the same steps on each platform (tests/test_realtime_priority_contract.py).

Run as a script by Linux's python and by the Windows CPython under Wine: enter real time and raise
the control thread (:class:`~mqttrl.envs.realtime_clock.ThreadPriority`'s ``high``), read the
priority back from the OS, run the anchored clock (:class:`~mqttrl.envs.realtime_clock.ControlClock`,
the worker's spin) at ``HZ`` for ``SECONDS`` while raised, read the priority on a game's helper
thread (:class:`~mqttrl.envs.realtime_guard.Deadline`), lower the thread, read both back, leave
real time, and print what it saw as one JSON line. Under Wine the timers are Linux's: the period
errors say nothing about a Windows PC's jitter.
"""

from __future__ import annotations

import json
import platform
import sys
import time

from mqttrl.envs.realtime_clock import ControlClock, ThreadPriority
from mqttrl.envs.realtime_guard import Deadline
from mqttrl.observe.timing import PeriodStats

HZ = 50.0
SECONDS = 2.0
#: the worker's spin (``worker.realtime_spin_s``'s default)
SPIN_S = 0.0003


def run_clock(hz: float, seconds: float) -> dict:
    """The anchored clock for ``seconds``: how late its periods ended (µs) and how long they took."""
    stats = PeriodStats()
    clock = ControlClock(hz, stats=stats, spin_s=SPIN_S)
    n = round(hz * seconds)
    late = []
    clock.start()
    t0 = clock.anchor
    for _ in range(n):
        end = clock.period_end
        late.append(clock.wait() - end)
    took = time.perf_counter() - t0
    late.sort()
    us = lambda q: round(late[min(n - 1, int(q * n))] * 1e6, 1)  # noqa: E731
    return {
        "periods": stats.periods,
        "took_s": round(took, 4),
        "late_us": {"p50": us(0.5), "p99": us(0.99), "max": round(late[-1] * 1e6, 1)},
        "overruns": stats.overruns,
        "skipped": stats.skipped,
        "spun_s": round(stats.spin_s, 4),
    }


def main() -> None:
    priority = ThreadPriority(10)
    seen = {"platform": sys.platform, "system": platform.system(), "enabled": priority.enabled}
    seen["before"] = priority.level()
    priority.high()
    seen["raised"], seen["high"] = priority.raised, priority.level()
    seen["timer"] = priority.system.timer_result  # timeBeginPeriod's result (Windows), else None
    seen["clock"] = run_clock(HZ, SECONDS)
    game = Deadline(10.0)  # a game's reads run on its helper thread, at the caller's priority
    seen["helper_high"] = game.call("read_obs", priority.level)
    priority.low()
    seen["low"] = priority.level()
    seen["helper_low"] = game.call("read_obs", priority.level)
    game.close()
    priority.high()  # again, as every period does
    seen["again"] = priority.level()
    priority.close()
    seen["closed"] = priority.level()
    seen["timer_after"] = priority.system.timer_result
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
