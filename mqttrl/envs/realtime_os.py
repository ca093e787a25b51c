"""The OS side of a real-time worker's control thread: its priority and the system timer, per platform.

:class:`~mqttrl.envs.realtime_clock.ThreadPriority` is the seam; it asks one of these:

- :class:`PosixRealTime` (Linux): ``SCHED_FIFO`` at the configured priority for the period's
  deadline, ``SCHED_OTHER`` for its chores. Linux sleeps on high-resolution timers already:
  there is no timer to enter. Where ``SCHED_FIFO`` is refused (no root), :meth:`PosixRealTime.short_slice`
  asks the EEVDF scheduler (Linux 6.12+) for a short time slice for the control thread
  (``sched_setattr``'s ``sched_runtime`` under ``SCHED_OTHER``, no privilege needed): its virtual
  deadline comes first, so when its sleep ends it preempts ordinary threads sooner; its share of
  the CPU (its nice) is unchanged.
- :class:`Win32RealTime` (Windows): ``SetThreadPriority(GetCurrentThread(),
  THREAD_PRIORITY_TIME_CRITICAL)`` for the deadline, ``THREAD_PRIORITY_NORMAL`` for the chores,
  and, while the worker plays in real time, the system timer at 1 ms (``winmm.timeBeginPeriod(1)``,
  ``timeEndPeriod(1)`` when it leaves; Windows' default tick is ~15.6 ms). The process's priority
  class is left as it is: a ``TIME_CRITICAL`` thread runs at base priority 15 in every class but
  ``REALTIME``, so ``HIGH_PRIORITY_CLASS`` would not lift the control thread at all, only the
  worker's other threads (MQTT, helpers) above the game's.

The wait itself is :class:`~mqttrl.envs.realtime_clock.ControlClock`'s ``time.sleep`` then a spin:
CPython 3.11+ sleeps on Windows on a waitable timer made with
``CREATE_WAITABLE_TIMER_HIGH_RESOLUTION`` (Windows 10 1803+, the plain one before), so mqttrl makes
no timer of its own; the 1 ms timer period still helps where the high-resolution one is missing and
for every other wait of the process (events, queues, the game's reads).

Every call's result is checked: a failure comes back as one line of text (the caller logs it once
and the worker plays on at the ordinary priority), never an exception. The Windows calls go through
:class:`Win32Calls` (ctypes); tests hand :class:`Win32RealTime` a fake with the same methods, so
the Windows branch runs on Linux.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("mqttrl.realtime")

THREAD_PRIORITY_NORMAL = 0
THREAD_PRIORITY_TIME_CRITICAL = 15
#: GetThreadPriority's failure value
THREAD_PRIORITY_ERROR_RETURN = 0x7FFFFFFF
#: timeBeginPeriod's success; TIMERR_NOCANDO (97): the period is out of range
TIMERR_NOERROR = 0
#: the system timer period a real-time worker asks for, in ms (the smallest Windows grants)
TIMER_PERIOD_MS = 1
#: sched_setattr / sched_getattr per machine (Linux)
SCHED_ATTR_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
#: the custom slices EEVDF accepts (it clamps to these), ns
SLICE_MIN_NS, SLICE_MAX_NS = 100_000, 100_000_000


def _sched_attr_type() -> Any:
    import ctypes

    class SchedAttr(ctypes.Structure):
        _fields_ = [
            ("size", ctypes.c_uint32),
            ("sched_policy", ctypes.c_uint32),
            ("sched_flags", ctypes.c_uint64),
            ("sched_nice", ctypes.c_int32),
            ("sched_priority", ctypes.c_uint32),
            ("sched_runtime", ctypes.c_uint64),
            ("sched_deadline", ctypes.c_uint64),
            ("sched_period", ctypes.c_uint64),
            ("sched_util_min", ctypes.c_uint32),
            ("sched_util_max", ctypes.c_uint32),
        ]

    return SchedAttr


def set_short_slice(slice_s: float) -> str | None:
    """The calling thread (``SCHED_OTHER``, its nice kept) asks EEVDF for a ``slice_s`` time slice
    (Linux 6.12+; clamped to 0.1-100 ms); why not, as one line. Read back: an older kernel accepts
    the call and ignores the slice."""
    import ctypes
    import threading

    calls = SCHED_ATTR_SYSCALLS.get(os.uname().machine)
    if calls is None:
        return f"no sched_setattr number for {os.uname().machine}"
    want = min(SLICE_MAX_NS, max(SLICE_MIN_NS, round(slice_s * 1e9)))
    libc = ctypes.CDLL(None, use_errno=True)
    attr_t = _sched_attr_type()
    nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # this thread's; lowering it needs privilege
    attr = attr_t(size=ctypes.sizeof(attr_t), sched_policy=os.SCHED_OTHER, sched_nice=nice, sched_runtime=want)
    if libc.syscall(calls[0], 0, ctypes.byref(attr), 0) != 0:
        return f"sched_setattr refused: {os.strerror(ctypes.get_errno())}"
    back = attr_t()
    if libc.syscall(calls[1], 0, ctypes.byref(back), ctypes.sizeof(attr_t), 0) != 0 or back.sched_runtime != want:
        return "this kernel takes no custom time slice (Linux 6.12+)"
    return None


class PosixRealTime:
    """``SCHED_FIFO``/``SCHED_OTHER`` through ``os.sched_setscheduler`` (Linux)."""

    #: what the seam logs when this OS has no such call (macOS)
    missing = "this OS has no sched_setscheduler"

    def __init__(self) -> None:
        self.available = hasattr(os, "sched_setscheduler")
        #: the timer period entered (Windows only; None here)
        self.timer_result: int | None = None

    def enter(self) -> str | None:
        return None

    def leave(self) -> None:
        return None

    def raise_thread(self, priority: int) -> str | None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, ValueError) as e:
            return f"SCHED_FIFO {priority} refused: {e}; needs root or CAP_SYS_NICE"
        return None

    def lower_thread(self) -> str | None:
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError as e:
            return str(e)
        return None

    def short_slice(self, slice_s: float) -> str | None:
        """The calling thread asks for a ``slice_s`` time slice (see :func:`set_short_slice`); why not."""
        try:
            return set_short_slice(slice_s)
        except (OSError, AttributeError) as e:
            return str(e)

    def level(self) -> str:
        """The calling thread's class as the OS reads it back: ``high`` (``SCHED_FIFO``), ``normal``."""
        if not self.available:
            return "normal"
        policy = os.sched_getscheduler(0)
        return {os.SCHED_FIFO: "high", os.SCHED_OTHER: "normal"}.get(policy, f"policy {policy}")


class Win32Calls:
    """The Windows API calls :class:`Win32RealTime` makes, through ctypes (Windows only: loading the
    DLLs elsewhere raises ``OSError``). Each returns the call's own result."""

    def __init__(self) -> None:
        import ctypes
        from ctypes import wintypes

        self._ctypes = ctypes
        k32 = ctypes.WinDLL("kernel32", use_last_error=True)
        winmm = ctypes.WinDLL("winmm")
        k32.GetCurrentThread.restype = wintypes.HANDLE
        k32.GetCurrentThread.argtypes = []
        k32.SetThreadPriority.restype = wintypes.BOOL
        k32.SetThreadPriority.argtypes = [wintypes.HANDLE, ctypes.c_int]
        k32.GetThreadPriority.restype = ctypes.c_int
        k32.GetThreadPriority.argtypes = [wintypes.HANDLE]
        for name in ("timeBeginPeriod", "timeEndPeriod"):
            getattr(winmm, name).restype = wintypes.UINT
            getattr(winmm, name).argtypes = [wintypes.UINT]
        self._k32, self._winmm = k32, winmm

    def time_begin_period(self, ms: int) -> int:
        return int(self._winmm.timeBeginPeriod(ms))

    def time_end_period(self, ms: int) -> int:
        return int(self._winmm.timeEndPeriod(ms))

    def set_thread_priority(self, level: int) -> bool:
        """On the calling thread (``GetCurrentThread``'s pseudo handle)."""
        return bool(self._k32.SetThreadPriority(self._k32.GetCurrentThread(), level))

    def get_thread_priority(self) -> int:
        return int(self._k32.GetThreadPriority(self._k32.GetCurrentThread()))

    def last_error(self) -> int:
        return int(self._ctypes.get_last_error())


class Win32RealTime:
    """Thread priority and the system timer on Windows, through ``calls`` (a :class:`Win32Calls`
    or a test's fake). :meth:`enter` raises the timer resolution once; :meth:`leave` gives it back."""

    available = True
    missing = ""

    def __init__(self, calls: Any):
        self.calls = calls
        #: timeBeginPeriod's result while entered (TIMERR_NOERROR: granted), else None
        self.timer_result: int | None = None

    def enter(self) -> str | None:
        """The system timer at :data:`TIMER_PERIOD_MS`; why not, as one line."""
        if self.timer_result is not None:
            return None
        result = self.calls.time_begin_period(TIMER_PERIOD_MS)
        if result != TIMERR_NOERROR:
            return f"timeBeginPeriod({TIMER_PERIOD_MS}) returned {result}; the system timer keeps its period"
        self.timer_result = result
        return None

    def leave(self) -> None:
        """The timer period back (only a period that was granted is ended: the calls must pair)."""
        if self.timer_result is None:
            return
        self.timer_result = None
        result = self.calls.time_end_period(TIMER_PERIOD_MS)
        if result != TIMERR_NOERROR:
            log.warning("real time: timeEndPeriod(%d) returned %d", TIMER_PERIOD_MS, result)

    def _set(self, level: int, name: str) -> str | None:
        if self.calls.set_thread_priority(level):
            return None
        return f"SetThreadPriority({name}) failed: Windows error {self.calls.last_error()}"

    def short_slice(self, slice_s: float) -> str | None:
        return "no such call on Windows"

    def raise_thread(self, priority: int) -> str | None:
        return self._set(THREAD_PRIORITY_TIME_CRITICAL, "THREAD_PRIORITY_TIME_CRITICAL")

    def lower_thread(self) -> str | None:
        return self._set(THREAD_PRIORITY_NORMAL, "THREAD_PRIORITY_NORMAL")

    def level(self) -> str:
        """``high`` (TIME_CRITICAL), ``normal``, or the number ``GetThreadPriority`` read back."""
        value = self.calls.get_thread_priority()
        return {THREAD_PRIORITY_TIME_CRITICAL: "high", THREAD_PRIORITY_NORMAL: "normal"}.get(value, f"priority {value}")


def real_time_os(platform: str, win32: Any = None) -> tuple[PosixRealTime | Win32RealTime, str | None]:
    """The platform's implementation and, where it could not be loaded, why (one line); ``win32``:
    the Windows calls to use (default :class:`Win32Calls`)."""
    if platform != "win32":
        return PosixRealTime(), None
    try:
        return Win32RealTime(win32 if win32 is not None else Win32Calls()), None
    except (OSError, AttributeError) as e:
        return PosixRealTime(), f"the Windows calls could not be loaded ({e})"
