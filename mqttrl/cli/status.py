"""``mqttrl status``: a live table of the learner and workers of a run."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from mqttrl.cli.common import Command, broker_args, settings_or_local
from mqttrl.cli.errors import EXIT_USAGE
from mqttrl.system.procs import install_stop_handlers


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--once", type=float, metavar="SECONDS", help="listen this long, print one table and exit")
    p.add_argument("--json", action="store_true", help="with --once: print JSON rows instead of a table")
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="when stdout is not a terminal (a pipe, a file): print the table this often",
    )
    p.add_argument(
        "--wait-s",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="nothing of the run on the broker this long after connecting (a misspelled --run): one line that "
        "names the runs the broker holds; with --once then exit 2, live it keeps watching. 0: never say it",
    )
    broker_args(p, required=False, local_default=True)


def run(args: argparse.Namespace) -> None:
    try:
        from mqttrl.cli.fleet import watch_status
    except ImportError as e:  # a worker-only install has no rich
        raise SystemExit(f"mqttrl status needs {e.name or 'rich'}: pip install 'mqttrl[telemetry]'") from None

    stop = threading.Event()
    install_stop_handlers(lambda *_: stop.set())
    from mqttrl.cli.broker_runs import RunNotOnBroker

    try:
        view = watch_status(
            settings_or_local(args), args.run, args.once, every_s=args.every, stop=stop, wait_s=args.wait_s
        )
    except RunNotOnBroker as e:  # a misspelled run: one line, the runs there are, a usage error
        print(f"mqttrl status: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    if args.once is None:
        return
    if args.json:
        print(json.dumps(view.rows(), indent=1, default=str))
    else:
        from rich.console import Console

        Console().print(view.table())


COMMAND = Command(help="live table of the learner and workers of a run", add_arguments=add_arguments, run=run)
