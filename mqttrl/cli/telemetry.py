"""``mqttrl telemetry`` / ``mqttrl-telemetry``: aggregate a run into storages, ask for best-model saves."""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings, setup_logging, verbose_arg


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
    from mqttrl.nodes.telemetry import TelemetrySettings, make_storages, run_telemetry
    from mqttrl.plugin.manager import UnknownPluginError

    options = storage_options(args.storage_opt)
    try:
        storages = make_storages(args.storage or ["files"], options)
    except UnknownPluginError as e:
        raise SystemExit(f"mqttrl-telemetry: {e}") from None
    telemetry = TelemetrySettings(
        window=args.window, interval_s=args.interval, quicksave_best=not args.no_best_quicksave
    )
    run_telemetry(settings(args), args.run, storages, telemetry, max_seconds=args.max_seconds)


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
