"""One line, never a traceback: how every command ends on an error, and its exit code.

``guarded(run)(args)`` runs a command and turns the errors a user can cause (a broker that
is down or misspelled, a bad config, a plugin or an optional package that is missing) into
one line on stderr and a documented exit code (docs/cli.md, "Exit codes"). So are the file
system's refusals: a path that is read-only or not ours is a usage mistake (2), a full disk has a
code of its own (6). Anything else is a bug: one line that says so, and the traceback only when
``MQTTRL_TRACEBACK=1``.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

#: exit codes every command uses (documented in docs/cli.md and README.md)
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed (a node died, a check failed)
EXIT_USAGE = 2  # bad arguments or config (argparse uses 2 too)
EXIT_UNSOLVED = 3  # mqttrl train / evaluate: the budget ended before the target return
EXIT_BROKER = 4  # no broker at the given address (refused, unresolvable, timed out, not allowed)
EXIT_MISSING = 5  # a plugin or an optional package is not installed
EXIT_DISK_FULL = 6  # the disk (or quota) filled: what was written is kept whole (mqttrl.state.atomic)
EXIT_INTERRUPTED = 130  # Ctrl-C

#: importable module -> the extra that installs it (pip install 'mqttrl[EXTRA]')
EXTRAS = {
    "torch": "learner",
    "rich": "learner",
    "influxdb_client": "telemetry",
    "matplotlib": "plots",
    "amqtt": "embedded",
    "minatar": "minatar",
    "ale_py": "atari",
    "cv2": "atari",
    "Box2D": "box2d",
    "onnx": "export",
    "onnxscript": "export",
    "onnxruntime": "export",
    "tensorboardX": "tensorboard",
    "wandb": "wandb",
    "lz4": "lz4",
    "moviepy": "video",
    "pygame": "video",
    "Xlib": "screen",  # python-xlib; `pip install Xlib` is another package
    "mss": "screen",
    "pynput": "screen",
}


def missing_module_hint(name: str) -> str:
    """What to install for module ``name`` (its top-level package decides the extra)."""
    top = name.split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return f"the Python package {top!r} is not installed (pip install {top})"
    return f"the Python package {top!r} is not installed: pip install -e '.[{extra}]' (or 'mqttrl[{extra}]')"


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line and exit code for an error a user can cause, or ('', 0) for a bug."""
    from mqttrl.config import ConfigError
    from mqttrl.plugin.manager import MissingDependency, PluginError, UnknownPluginError
    from mqttrl.state.atomic import DiskFull, is_disk_full
    from mqttrl.state.run_dir import RunDirInUse, RunDirNotWritable

    if isinstance(exc, ConfigError):
        return f"config error: {exc}", EXIT_USAGE
    if isinstance(exc, RunDirInUse | RunDirNotWritable):
        return str(exc), EXIT_USAGE
    if isinstance(exc, DiskFull):
        return str(exc), EXIT_DISK_FULL
    if is_disk_full(exc):
        where = f" writing {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        return f"the disk is full{where} ({_reason(exc)}): free space and run it again", EXIT_DISK_FULL
    if isinstance(exc, MissingDependency):
        return str(exc), EXIT_MISSING
    if isinstance(exc, UnknownPluginError):
        return str(exc), EXIT_MISSING
    if isinstance(exc, PluginError):
        return f"plugin error: {exc}", EXIT_MISSING
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return missing_module_hint(exc.name), EXIT_MISSING
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror):
        return f"broker: {exc}", EXIT_BROKER
    if isinstance(exc, OSError) and exc.filename and exc.errno in NOT_WRITABLE:
        return f"cannot use {exc.filename}: {exc.strerror} (check the path and its permissions)", EXIT_USAGE
    return "", 0


#: the errnos of a path the user pointed at that this process may not write (or read)
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _reason(exc: BaseException) -> str:
    """An error's words without its class: the OS's strerror where it has one."""
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def guarded(run: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``run`` with the errors of :func:`describe` ending the process in one line."""

    def call(args: Any) -> Any:
        try:
            return run(args)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            line, code = describe(exc)
            if os.environ.get("MQTTRL_TRACEBACK") == "1":
                traceback.print_exc()
            if not code:
                line = f"internal error: {type(exc).__name__}: {exc} (a bug; MQTTRL_TRACEBACK=1 shows where)"
                code = EXIT_FAILED
            print(f"mqttrl: {line}", file=sys.stderr)
            raise SystemExit(code) from None

    return call
