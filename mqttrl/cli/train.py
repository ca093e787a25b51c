"""``mqttrl train CONFIG``: a whole run on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mqttrl.cli.common import (
    Command,
    broker_args,
    broker_url,
    forward_broker_args,
    load,
    overrides_arg,
    setting_arg,
    settings,
    setup_logging,
    verbose_arg,
)
from mqttrl.cli.errors import EXIT_DISK_FULL, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNSOLVED, EXIT_USAGE

EPILOG = """examples:
  mqttrl train configs/cartpole_dqn.toml
  mqttrl train configs/cartpole_dqn.toml --workers 4 --set algorithm.lr=0.001
  mqttrl train configs/cartpole_dqn.toml --broker mqtt://gpu-box:1883
  mqttrl train configs/cartpole_dqn.toml --credentials cartpole-dqn.credentials.json
      (a shared broker with per-run clients: mqttrl broker add-run cartpole-dqn; broker/README.md)
  mqttrl train configs/cartpole_dqn.toml --set 'train.telemetry_storages=["files", "tensorboard"]'
      (then: tensorboard --logdir runs)
  mqttrl train configs/cartpole_dqn.toml --run-dir runs/cp --max-seconds 600
  mqttrl train configs/cartpole_dqn.toml --run-dir runs/cp --resume      (continue that run)
  mqttrl train configs/cartpole_dqn.toml --init-from runs/cp             (a new run from its model)
  mqttrl train configs/lunarlander_dqn.toml --demos demos/lunar      (learn from demonstrations)
from Python: mqttrl.train("configs/cartpole_dqn.toml", seed=1) (docs/python-api.md)

exit codes (docs/cli.md):
  0  the target return was reached (or the config has none and the budget ended)
  1  the run failed: a node died for good (the learner after its restarts), a bug
  2  bad arguments or config; --run-dir holds checkpoints without --resume/--overwrite
  3  the budget (--max-seconds, --max-env-steps) ended before the target return
  4  the broker cannot be reached
  5  a plugin or an optional package is not installed
  6  the disk filled: the run stopped, its newest intact checkpoint and best/ kept (continue with --resume)
  130  interrupted (Ctrl-C)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="run config (TOML)")
    overrides_arg(p, "override a config value (repeatable)")
    setting_arg(p, "train.workers", "--workers", metavar="N", help="worker processes")
    setting_arg(p, "train.seed", "--seed", metavar="SEED", help="run seed")
    setting_arg(p, "train.max_seconds", "--max-seconds", metavar="S")
    setting_arg(p, "train.max_env_steps", "--max-env-steps", metavar="N")
    p.add_argument("--run-dir", help="run directory (default runs/<run>-<timestamp>)")
    again = p.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir: the learner starts from its newest checkpoint (refused, exit 2, "
        "when --run-dir holds none)",
    )
    again.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a --run-dir that holds a run (its checkpoints and records are moved to "
        "checkpoints.replaced-TIME, never deleted)",
    )
    again.add_argument(
        "--init-from",
        metavar="RUN_OR_FILE",
        help="start training from a model: a run directory (its best model) or a weights/checkpoint file "
        "(a new run, as Stable-Baselines3's load(...).learn())",
    )
    p.add_argument(
        "--demos",
        metavar="DIR",
        help="learn from a demonstration dataset (mqttrl record writes one): sets demos.path; the [demos] "
        "section says how (docs/demonstrations.md)",
    )
    p.add_argument(
        "--embedded-broker",
        default="auto",
        choices=["auto", "mosquitto", "amqtt"],
        help="embedded broker kind when no --broker is given",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")
    verbose_arg(p)
    broker_args(p, embedded=True)
    p.add_argument(
        "--credentials",
        metavar="FILE",
        help="per-node credentials written by `mqttrl broker add-run RUN`: the learner, workers, inference "
        "servers and telemetry each log in as their own client of the run, the evaluator as its operator; "
        "the broker is the file's unless --broker is given",
    )


#: flag -> the [train] key it sets
TRAIN_FLAGS = {"workers": "workers", "seed": "seed", "max_seconds": "max_seconds", "max_env_steps": "max_env_steps"}


def run(args: argparse.Namespace) -> None:
    """Exits 0 when the target was reached (or the config has none), 3 when it was not, 1 when a
    node failed for good (the epilog's table)."""
    setup_logging(args.verbose)
    from mqttrl.trainer.run import DISK_FULL, train

    overrides = list(args.overrides)
    for flag, key in TRAIN_FLAGS.items():
        if getattr(args, flag) is not None:
            overrides.append(f"train.{key}={getattr(args, flag)}")
    if args.init_from and not Path(args.init_from).exists():
        _usage_error(f"--init-from {args.init_from}: no such run directory or file")
    if (args.resume or args.overwrite) and not args.run_dir:
        _usage_error(f"--{'resume' if args.resume else 'overwrite'} needs --run-dir (the run to continue or replace)")
    if args.demos:
        overrides.append(f"demos.path={json.dumps(str(Path(args.demos).resolve()))}")
    cfg = load(args.config, overrides)
    if cfg.demos.path:  # a dataset that cannot be used ends the command here, not in the learner's restarts
        from mqttrl.demos.dataset import check_run_demos

        check_run_demos(cfg)
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
        resume=args.resume,
        overwrite=args.overwrite,
        init_from=Path(args.init_from) if args.init_from else None,
    )
    if summary.get("failure"):
        print(f"mqttrl: {summary['failure']}", file=sys.stderr, flush=True)
        sys.exit(EXIT_DISK_FULL if summary.get("stop_reason") == DISK_FULL else EXIT_FAILED)
    if summary.get("stop_reason") == "interrupted":  # Ctrl-C: a script must tell it from a budget spent
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(0 if summary.get("solved") or cfg.train.target_return is None else EXIT_UNSOLVED)


def _usage_error(line: str) -> None:
    print(f"mqttrl train: error: {line}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def _credentials(args: argparse.Namespace, run: str) -> dict[str, tuple[str, str]]:
    """The node kinds' (user, password) from an add-run file; sets args.broker from it if not given."""
    from mqttrl.broker.dynsec import run_credentials

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
    "then the learner and --workers worker processes, and the telemetry and evaluator nodes in this "
    "process; shows progress; stops at the config's target or budget, or on Ctrl-C.",
    epilog=EPILOG,
    raw=True,
    add_arguments=add_arguments,
    run=run,
)
