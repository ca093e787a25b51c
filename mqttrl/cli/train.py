"""``mqttrl train CONFIG``: a whole run on this machine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mqttrl.cli.common import (
    Command,
    broker_args,
    broker_url,
    forward_broker_args,
    load,
    overrides_arg,
    settings,
    setup_logging,
    verbose_arg,
)

EPILOG = """examples:
  mqttrl train configs/cartpole_dqn.toml
  mqttrl train configs/cartpole_dqn.toml --workers 4 --set algorithm.lr=0.001
  mqttrl train configs/cartpole_dqn.toml --broker mqtt://gpu-box:1883
  mqttrl train configs/cartpole_dqn.toml --credentials cartpole-dqn.credentials.json
      (a shared broker with per-run clients: mqttrl broker add-run cartpole-dqn; broker/README.md)
  mqttrl train configs/cartpole_dqn.toml --set 'train.telemetry_storages=["files", "tensorboard"]'
      (then: tensorboard --logdir runs)
from Python: mqttrl.train("configs/cartpole_dqn.toml", seed=1) (docs/python-api.md)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="run config (TOML)")
    overrides_arg(p, "override a config value (repeatable)")
    p.add_argument("--workers", type=int, help="worker processes (default: train.workers)")
    p.add_argument("--seed", type=int, help="run seed (default: train.seed)")
    p.add_argument("--run-dir", help="run directory (default runs/<run>-<timestamp>)")
    p.add_argument(
        "--embedded-broker",
        default="auto",
        choices=["auto", "mosquitto", "amqtt"],
        help="embedded broker kind when no --broker is given",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")
    verbose_arg(p)
    broker_args(p, required=False)
    p.add_argument(
        "--credentials",
        metavar="FILE",
        help="per-node credentials written by `mqttrl broker add-run RUN`: the learner, workers, inference "
        "servers and telemetry each log in as their own client of the run, this process as its operator; "
        "the broker is the file's unless --broker is given",
    )


def run(args: argparse.Namespace) -> None:
    """Exits 0 when the target was reached (or the config has none), 3 when it was not."""
    setup_logging(args.verbose)
    from mqttrl.local.train import train

    overrides = list(args.overrides)
    if args.workers is not None:
        overrides.append(f"train.workers={args.workers}")
    if args.seed is not None:
        overrides.append(f"train.seed={args.seed}")
    cfg = load(args.config, overrides)
    credentials = None
    if args.credentials:
        credentials = _credentials(args, cfg.run)
    summary = train(
        cfg,
        broker=settings(args) if args.broker else None,
        credentials=credentials,
        broker_args=forward_broker_args(args),
        run_dir=Path(args.run_dir) if args.run_dir else None,
        embedded=args.embedded_broker,
        progress=not args.no_progress,
    )
    sys.exit(0 if summary.get("solved") or cfg.train.target_return is None else 3)


def _credentials(args: argparse.Namespace, run: str) -> dict[str, tuple[str, str]]:
    """The node kinds' (user, password) from an add-run file; sets args.broker from it if not given."""
    from mqttrl.dynsec import run_credentials

    try:
        url, credentials = run_credentials(args.credentials, run)
    except ValueError as e:
        raise SystemExit(f"--credentials: {e}") from None
    if not args.broker:
        if not url:
            raise SystemExit(f"--credentials: {args.credentials} names no broker; give --broker URL")
        args.broker = broker_url(url)
    return credentials


COMMAND = Command(
    help="train on this machine: embedded broker, learner, workers, evaluation",
    description="Train on one machine. Starts an embedded broker unless --broker is given, "
    "then the learner and --workers worker processes; shows progress; evaluates greedily; "
    "stops at the config's target or budget, or on Ctrl-C.",
    epilog=EPILOG,
    raw=True,
    add_arguments=add_arguments,
    run=run,
)
