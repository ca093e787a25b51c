"""Child processes and stop signals, the same on Linux, macOS and Windows.

On Windows a child only receives ``CTRL_BREAK_EVENT`` when it was started in a
process group of its own (``CREATE_NEW_PROCESS_GROUP``), and Python turns that
event into ``SIGBREAK``, which a node must handle to stop cleanly (flush its
outbox, say "offline"). On POSIX a child shares its parent's process group, so
Ctrl-C in a terminal reaches both, and the supervisor stops it with SIGTERM.
Every function takes the platform (and the signal module) as arguments so
tests can force the Windows branches on Linux.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

#: subprocess.CREATE_NEW_PROCESS_GROUP (the constant exists only on Windows)
CREATE_NEW_PROCESS_GROUP = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x00000200)
#: signal.CTRL_BREAK_EVENT (the constant exists only on Windows)
CTRL_BREAK_EVENT = getattr(signal, "CTRL_BREAK_EVENT", 1)


def child_popen_kwargs(platform: str = sys.platform) -> dict[str, Any]:
    """Extra ``Popen`` arguments so :func:`request_stop` can reach the child."""
    if platform == "win32":
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}
    return {}


def detached_popen_kwargs(platform: str = sys.platform) -> dict[str, Any]:
    """``Popen`` arguments for a helper the terminal's Ctrl-C must not reach (an embedded broker):
    its owner stops it last, after the nodes that use it, so they never see it vanish mid-stop."""
    if platform == "win32":
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def request_stop(proc: Any, platform: str = sys.platform) -> str | None:
    """Ask a child started with :func:`child_popen_kwargs` to stop cleanly. Returns None when the
    request went out, else why it could not be sent (one line); the caller then terminates the child.

    On Windows ``CTRL_BREAK_EVENT`` goes through ``GenerateConsoleCtrlEvent``, which fails when the
    sender has no console the child shares (a supervisor started without one, a Windows service,
    Wine) or the child exited just before; CPython 3.11 then terminates the child itself and raises
    ``SystemError`` (an ``OSError`` set under a result), or raises ``OSError``."""
    try:
        proc.send_signal(CTRL_BREAK_EVENT if platform == "win32" else signal.SIGTERM)
    except (OSError, SystemError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def install_stop_handlers(stop: Callable[..., Any], signal_module: Any = signal) -> list[str]:
    """Call ``stop`` on SIGINT, SIGTERM and, where the platform has it, SIGBREAK (Windows'
    CTRL_BREAK_EVENT, which the supervisor sends). Returns the names installed."""
    installed = []
    for name in ("SIGINT", "SIGTERM", "SIGBREAK"):
        sig = getattr(signal_module, name, None)
        if sig is not None:
            signal_module.signal(sig, stop)
            installed.append(name)
    return installed


class StopSignals:
    """Stops a node on SIGINT, SIGTERM or SIGBREAK (:func:`install_stop_handlers`) and remembers
    which one came first, so its command can exit as docs/cli.md says: 130 for Ctrl-C (SIGINT),
    0 for a stop asked for by a supervisor or service manager (SIGTERM, SIGBREAK)."""

    def __init__(self, stop: Callable[[], Any], signal_module: Any = signal):
        self.received: str | None = None
        #: what a signal calls; a node that is built in stages points it at the stage running now
        self.stop = stop
        install_stop_handlers(self._on_signal, signal_module)

    def _on_signal(self, signum: int, _frame: Any = None) -> None:
        if self.received is None:
            try:
                self.received = signal.Signals(signum).name
            except ValueError:
                self.received = str(signum)
        self.stop()

    @property
    def interrupted(self) -> bool:
        """Ctrl-C stopped the node (exit 130), not a stop request."""
        return self.received == "SIGINT"
