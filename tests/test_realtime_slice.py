"""Where SCHED_FIFO is refused (no root), the control thread asks EEVDF for a short time slice
(``worker.realtime_slice_s``; mqttrl/envs/realtime_os.py ``set_short_slice``), once, and says so in
the refusal's one log line; 0 asks nothing; a granted SCHED_FIFO asks nothing; Windows has no such call."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from mqttrl.envs.realtime_clock import ThreadPriority
from mqttrl.envs.realtime_os import SCHED_ATTR_SYSCALLS, Win32RealTime, set_short_slice


class Refusing:
    """A POSIX system whose SCHED_FIFO is refused; counts the slices asked."""

    available = True
    missing = ""
    timer_result = None

    def __init__(self, refuse: bool = True, slice_why: str | None = None):
        self.refuse, self.slice_why, self.slices = refuse, slice_why, []

    def enter(self):
        return None

    def leave(self):
        return None

    def raise_thread(self, priority):
        return "SCHED_FIFO 10 refused: [Errno 1] Operation not permitted" if self.refuse else None

    def lower_thread(self):
        return None

    def short_slice(self, slice_s):
        self.slices.append(slice_s)
        return self.slice_why


def _prio(system, slice_s: float) -> ThreadPriority:
    p = ThreadPriority(10, platform="linux", slice_s=slice_s)
    p.system = system
    return p


def test_a_refused_raise_asks_for_the_slice_once_and_says_so_in_its_one_line(caplog):
    system = Refusing()
    p = _prio(system, 0.0001)
    with caplog.at_level(logging.INFO, "mqttrl.realtime"):
        for _ in range(5):
            p.high()
            p.low()
    assert system.slices == [0.0001] and p.sliced is True and not p.enabled
    (line,) = [r.getMessage() for r in caplog.records]
    assert "keeps its normal priority" in line and "asks for a 0.1 ms time slice" in line, line


def test_no_slice_when_zero_when_fifo_is_granted_and_a_refused_slice_is_in_the_line(caplog):
    off = Refusing()
    _prio(off, 0.0).high()
    granted = Refusing(refuse=False)
    _prio(granted, 0.0001).high()
    assert off.slices == [] and granted.slices == []
    why = Refusing(slice_why="this kernel takes no custom time slice (Linux 6.12+)")
    p = _prio(why, 0.0002)
    with caplog.at_level(logging.INFO, "mqttrl.realtime"):
        p.high()
    assert p.sliced == why.slice_why
    assert "a 0.2 ms time slice not taken either (this kernel takes no custom time slice" in caplog.text


def test_windows_has_no_slice_call():
    assert Win32RealTime(object()).short_slice(0.0001) == "no such call on Windows"


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine not in SCHED_ATTR_SYSCALLS, reason="Linux only"
)
def test_the_kernel_reads_the_slice_back_on_that_thread_only_and_needs_no_privilege():
    """On a thread of its own: set, read back by sched_getattr (or the kernel's reason: before 6.12);
    without CAP_SYS_NICE too (setpriv), the way a game PC without root runs it."""
    got = []
    t = threading.Thread(target=lambda: got.append(set_short_slice(0.0001)))
    t.start()
    t.join()
    if got[0] == "this kernel takes no custom time slice (Linux 6.12+)":
        pytest.skip(got[0])
    assert got == [None]
    code = (
        "from mqttrl.envs.realtime_clock import ThreadPriority; p = ThreadPriority(10, slice_s=0.0001); "
        "p.high(); print(p.enabled, p.sliced)"
    )
    no_root = ["setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice"]
    if os.geteuid() != 0:
        no_root = []
    r = subprocess.run([*no_root, sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["False", "True"], (r.stdout, r.stderr)
