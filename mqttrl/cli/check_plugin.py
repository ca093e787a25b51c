"""``mqttrl check-plugin NAME``: run a plugin's conformance checks.

Exit status: 0 when every check passed, 1 when one failed, 2 when no installed
plugin has that name.
"""

from __future__ import annotations

import argparse
import sys

from mqttrl.cli.common import Command, load, overrides_arg, setup_logging, verbose_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        metavar="NAME",
        nargs="?",
        help="what a plugin registers: an algorithm or storage name (see `mqttrl plugins`), or a plugin "
        "(everything it registers), or an env as module:Env-v0",
    )
    p.add_argument(
        "--config",
        metavar="CONFIG",
        help="check the env of this run config as the run makes it: its [env] kwargs (a game's window and "
        "keys), the game launched first with [env] launch, its env.spec (default: none)",
    )
    overrides_arg(p, "override a value of --config (repeatable)")
    p.add_argument(
        "--opt",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a storage option, as telemetry's --storage-opt NAME.KEY=VALUE passes it; repeatable "
        "(e.g. --opt url=http://127.0.0.1:8086) (default: none)",
    )
    verbose_arg(p)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.conformance import run_checks
    from mqttrl.plugin.manager import UnknownPluginError

    settings = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(
                f"mqttrl check-plugin: --opt {item!r}: expected KEY=VALUE, e.g. url=http://127.0.0.1:8086",
                file=sys.stderr,
            )
            raise SystemExit(2)
        settings[key] = value
    if not args.name and not args.config:
        print("mqttrl check-plugin: give NAME, --config CONFIG, or both", file=sys.stderr)
        raise SystemExit(2)
    results = []
    if args.config:
        from mqttrl.conformance import check_run_env

        results += check_run_env(load(args.config, args.overrides))
    try:
        results += run_checks(args.name, settings) if args.name else []
    except UnknownPluginError as e:
        print(f"mqttrl check-plugin: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for r in results:
        line = f"{'ok' if r.ok else 'FAIL':<4}  {r.name}"
        print(f"{line}: {r.detail}" if r.detail else line, flush=True)
    failed = sum(not r.ok for r in results)
    if failed:
        print(f"{failed} of {len(results)} checks failed", file=sys.stderr)
        raise SystemExit(1)


COMMAND = Command(
    help="run a plugin's conformance checks (exit 1 if one fails, 2 for an unknown name)",
    description="Run the conformance checks of what a plugin registers under NAME: for an algorithm, "
    "actor -> batch -> spec -> learner -> weights -> actor round trip; for a storage, write and close. "
    "With --config, the run's env as the run makes it (a game with its window and keys: it must be "
    "running, or [env] launch starts it). "
    "Prints one line per check; exits 0 if all pass, 1 if any fails, 2 if NAME is unknown.",
    add_arguments=add_arguments,
    run=run,
)
