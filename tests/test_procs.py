"""Stopping child processes the same way on every platform (issue 9, item 6).

The Windows branches are forced on Linux with plain stand-ins for Popen and the
signal module; the POSIX path runs a real child."""

from __future__ import annotations

import signal
import sys
import textwrap
import time

from helpers.procs import node_env

from mqttrl.system.procs import (
    CREATE_NEW_PROCESS_GROUP,
    CTRL_BREAK_EVENT,
    child_popen_kwargs,
    install_stop_handlers,
    request_stop,
)
from mqttrl.trainer import supervisor
from mqttrl.trainer.supervisor import Child


class SentSignals:
    """What a Popen would have been sent."""

    def __init__(self):
        self.sent: list[int] = []

    def send_signal(self, sig: int) -> None:
        self.sent.append(sig)


class FakeSignalModule:
    """A signal module with (or without) Windows' SIGBREAK; records handlers."""

    SIGINT, SIGTERM = 2, 15

    def __init__(self, windows: bool):
        if windows:
            self.SIGBREAK = 21
        self.handlers: dict[int, object] = {}

    def signal(self, sig, handler):
        self.handlers[sig] = handler


def test_windows_children_get_a_process_group_of_their_own():
    """Without it CTRL_BREAK_EVENT cannot be delivered to the child (the defect)."""
    assert child_popen_kwargs("win32") == {"creationflags": CREATE_NEW_PROCESS_GROUP}
    assert CREATE_NEW_PROCESS_GROUP == 0x200
    assert child_popen_kwargs("linux") == {}


def test_stop_requests_per_platform():
    win, posix = SentSignals(), SentSignals()
    request_stop(win, "win32")
    request_stop(posix, "linux")
    assert win.sent == [CTRL_BREAK_EVENT] == [1] and posix.sent == [signal.SIGTERM]


def test_nodes_handle_sigbreak_where_the_platform_has_it():
    stop = object()
    win, posix = FakeSignalModule(windows=True), FakeSignalModule(windows=False)
    assert install_stop_handlers(stop, win) == ["SIGINT", "SIGTERM", "SIGBREAK"]
    assert win.handlers == {2: stop, 15: stop, 21: stop}
    assert install_stop_handlers(stop, posix) == ["SIGINT", "SIGTERM"]


def test_the_supervisor_starts_children_with_the_platform_kwargs(tmp_path, monkeypatch):
    seen = {}

    def fake_popen(argv, **kwargs):
        seen.update(kwargs)
        return SentSignals()

    monkeypatch.setattr(supervisor, "child_popen_kwargs", lambda: child_popen_kwargs("win32"))
    monkeypatch.setattr(supervisor.subprocess, "Popen", fake_popen)
    Child("c", ["x"], tmp_path / "c.log").start()
    assert seen["creationflags"] == CREATE_NEW_PROCESS_GROUP


CHILD = textwrap.dedent(
    """
    import pathlib, sys, time
    from mqttrl.system.procs import install_stop_handlers
    out = pathlib.Path(sys.argv[1])
    stopping = []
    install_stop_handlers(lambda *_: stopping.append(1))
    (out / "ready").write_text("")
    while not stopping:
        time.sleep(0.05)
    (out / "stopped cleanly").write_text("")
    """
)


def test_a_real_child_stops_cleanly_through_the_supervisor(tmp_path):
    child = Child("c", [sys.executable, "-c", CHILD, str(tmp_path)], tmp_path / "c.log", node_env())
    child.start()
    deadline = time.monotonic() + 20
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline and child.alive(), (tmp_path / "c.log").read_text()
        time.sleep(0.05)
    child.stop(timeout=20)
    assert child.proc.returncode == 0 and (tmp_path / "stopped cleanly").exists()


def test_mqttrl_train_stops_on_every_stop_signal_and_restores_sigint(monkeypatch):
    """``mqttrl train`` (the supervisor's own process) handled only SIGINT/SIGTERM, not SIGBREAK."""
    import os
    import threading

    from mqttrl.trainer import run as train

    installed = []
    monkeypatch.setattr(train, "install_stop_handlers", lambda stop: installed.append(stop))
    train._stop_on_signals(threading.Event())
    assert len(installed) == 1  # the SIGBREAK-aware helper, not a SIGINT/SIGTERM pair
    monkeypatch.undo()

    before_int, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    interrupted = threading.Event()
    restore = train._stop_on_signals(interrupted)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert interrupted.wait(5)
    finally:
        restore()
    assert signal.getsignal(signal.SIGINT) is before_int
    assert signal.getsignal(signal.SIGTERM) is before_term  # every handler it installed is put back


def test_mqttrl_train_in_another_thread_installs_no_signal_handler(monkeypatch):
    """Only the main thread may install handlers (``signal.signal`` raises ValueError elsewhere):
    :func:`mqttrl.train` from a thread leaves them alone and is stopped through its ``stop`` event."""
    import threading

    from mqttrl.trainer import run as train

    installed, out = [], {}
    monkeypatch.setattr(train, "install_stop_handlers", lambda stop: installed.append(stop))
    t = threading.Thread(target=lambda: out.setdefault("restore", train._stop_on_signals(threading.Event())))
    t.start()
    t.join(10)
    assert installed == [] and callable(out["restore"])
    out["restore"]()  # and putting nothing back is fine too


class StopStandIn:
    """A Popen whose stop request fails as it does on Windows: CPython 3.11's ``os.kill`` with
    CTRL_BREAK_EVENT where GenerateConsoleCtrlEvent fails (no shared console: Wine, a service) terminates
    the child itself and raises SystemError; a child that exited just before gives an OSError."""

    def __init__(self, error: BaseException | None, dies_on_request: bool = False):
        self.error, self.dies_on_request = error, dies_on_request
        self.returncode: int | None = None
        self.pid = 4242
        self.calls: list[str] = []

    def poll(self):
        return self.returncode

    def send_signal(self, sig):
        self.calls.append("signal")
        if self.dies_on_request:
            self.returncode = 1
        if self.error is not None:
            raise self.error
        self.returncode = 0

    def kill(self):
        self.calls.append("kill")
        if self.returncode is None:
            self.returncode = 1

    def wait(self, timeout=None):
        self.calls.append("wait")
        return self.returncode


def test_a_stop_request_that_cannot_be_sent_says_why():
    assert request_stop(StopStandIn(None), "win32") is None
    why = request_stop(
        StopStandIn(SystemError("<built-in function kill> returned a result with an exception set")), "win32"
    )
    assert why.startswith("SystemError: ")
    assert request_stop(StopStandIn(OSError(6, "The handle is invalid")), "win32").startswith("OSError: ")


def test_a_child_the_console_event_cannot_reach_is_terminated_not_orphaned(tmp_path):
    """The defect (issue 36): under Wine ``mqttrl workers`` ended in "internal error" with a child left
    running; each child's stop now falls back to TerminateProcess and the others are still stopped."""
    raised_and_killed = StopStandIn(SystemError("returned a result with an exception set"), dies_on_request=True)
    not_delivered = StopStandIn(OSError(87, "The parameter is incorrect"))
    children = []
    for i, proc in enumerate([not_delivered, raised_and_killed]):
        c = Child(f"w{i}", ["x"], tmp_path / f"w{i}.log")
        c.proc = proc
        children.append(c)
    supervisor.Supervisor(children).stop()
    assert raised_and_killed.returncode == 1 and "kill" not in raised_and_killed.calls  # already gone
    assert not_delivered.calls[:2] == ["signal", "kill"] and not_delivered.returncode == 1


def test_one_child_failing_to_stop_does_not_leave_the_others_running(tmp_path):
    class Broken(Child):
        def stop(self, timeout=None):
            raise RuntimeError("unexpected")

    procs = [StopStandIn(None), StopStandIn(None)]
    children = [Child("w0", ["x"], tmp_path / "w0.log"), Broken("w1", ["x"], tmp_path / "w1.log")]
    for c, p in zip(children, procs):
        c.proc = p
    supervisor.Supervisor(children).stop()
    assert procs[1].calls == ["kill", "wait"] and procs[0].calls == ["signal", "wait"]
    assert all(p.returncode is not None for p in procs)
