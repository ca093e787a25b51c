"""``mqttrl telemetry`` / ``mqttrl-telemetry``: aggregate a run into storages, ask for best-model saves.

Ctrl-C ends it with 130 (its storages closed first), a stop request (SIGTERM, Windows' CTRL_BREAK)
with 0, as docs/cli.md's table says for every node.
"""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings, setup_logging, verbose_arg
from mqttrl.cli.errors import EXIT_INTERRUPTED


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--storage",
        action="append",
        default=[],
        metavar="NAME",
        help="storage plugin to write to (repeatable; default: files). See `mqttrl plugins`",
    )
    p.add_argument(
        "--storage-opt",
        action="append",
        default=[],
        metavar="NAME.KEY=VALUE",
        help="storage option, e.g. files.dir=telemetry or influxdb.bucket=rl (repeatable)",
    )
    p.add_argument("--window", type=int, default=20, help="episodes in the moving averages (default 20)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between aggregate points (default 2)")
    p.add_argument("--no-best-quicksave", action="store_true", help="do not ask the learner to save new best models")
    p.add_argument("--max-seconds", type=float, help="stop after this long")
    verbose_arg(p)
    broker_args(p)


def storage_options(items: list[str]) -> dict[str, dict]:
    """``["files.dir=x", ...]`` -> ``{"files": {"dir": "x"}}``; exits with one line on a malformed item."""
    options: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, opt = key.partition(".")
        if not sep or not dot:
            raise SystemExit(f"--storage-opt {item!r}: expected NAME.KEY=VALUE, e.g. files.dir=telemetry")
        options.setdefault(name, {})[opt] = value
    return options


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings, make_storages
    from mqttrl.plugin.manager import UnknownPluginError
    from mqttrl.system.procs import StopSignals

    options = storage_options(args.storage_opt)
    try:
        storages = make_storages(args.storage or ["files"], options)
    except UnknownPluginError as e:
        raise SystemExit(f"mqttrl-telemetry: {e}") from None
    telemetry = TelemetrySettings(
        window=args.window, interval_s=args.interval, quicksave_best=not args.no_best_quicksave
    )
    node = TelemetryNode(settings(args), args.run, storages, telemetry)
    signals = StopSignals(node.stop)
    node.run(max_seconds=args.max_seconds)
    if signals.interrupted:  # Ctrl-C: a clean stop, but not the end a script should take for done
        raise SystemExit(EXIT_INTERRUPTED)


COMMAND = Command(
    help="run telemetry (same as mqttrl-telemetry)",
    description="Watch a run: aggregate episode stats and learner metrics, write them to storages "
    "(CSV + PNG files, InfluxDB, TensorBoard event files, Weights & Biases), and ask the learner to save "
    "each new best model. Storages and their options: docs/telemetry.md.",
    epilog="examples:\n  mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage files --storage-opt files.dir=telemetry\n"
    "  INFLUXDB_URL=http://db:8086 INFLUXDB_TOKEN=... INFLUXDB_ORG=me INFLUXDB_BUCKET=rl \\\n"
    "    mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage influxdb --storage files\n"
    "  mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage tensorboard --storage-opt tensorboard.dir=tb\n"
    "  WANDB_MODE=offline mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage wandb --storage-opt wandb.project=rl",
    raw=True,
    add_arguments=add_arguments,
    run=run,
)
