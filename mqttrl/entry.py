"""The console scripts' entry points: a Ctrl-C while the command line is still loading ends in one line.

``mqttrl.cli`` imports every command's module (argparse tables, config, the plugin manager);
a SIGINT that lands during those imports, or while the arguments are parsed, would print a
``KeyboardInterrupt`` traceback, because :func:`mqttrl.cli.errors.guarded` only wraps a
command once it runs. These wrappers import the CLI inside a ``try`` so that the only
unguarded window is ``import mqttrl`` itself (~15 ms, pluggy and the package's ``__init__``).
"""

from __future__ import annotations

import sys

#: exit code of an interrupted command (mqttrl.cli.errors.EXIT_INTERRUPTED; not imported: this module stays light)
_EXIT_INTERRUPTED = 130


def _interrupted() -> None:
    print("interrupted", file=sys.stderr)
    raise SystemExit(_EXIT_INTERRUPTED)


def _call(name: str) -> None:
    try:
        from mqttrl import cli

        getattr(cli, name)()
    except KeyboardInterrupt:
        _interrupted()


def main() -> None:
    """``mqttrl COMMAND``."""
    _call("main")


def learner_main() -> None:
    """``mqttrl-learner``."""
    _call("learner_main")


def worker_main() -> None:
    """``mqttrl-worker``."""
    _call("worker_main")


def telemetry_main() -> None:
    """``mqttrl-telemetry``."""
    _call("telemetry_main")
