"""``mqttrl worker`` / ``mqttrl-worker``: one worker process."""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings, setup_logging, verbose_arg
from mqttrl.cli.errors import EXIT_INTERRUPTED


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument(
        "--name",
        help="worker name, unique in the run (default: <host>-<pid>; logged in as a worker's own identity "
        "RUN-worker@NAME, that NAME)",
    )
    p.add_argument(
        "--index",
        type=int,
        help="this worker's place in the fleet: its envs' slots on the Ape-X epsilon ladder and its env seeds "
        "(default: derived from --name, so that workers started the same way explore and seed differently)",
    )
    p.add_argument("--num-envs", type=int, help="envs in this process (default: the run config's env.num_envs)")
    p.add_argument("--seed", type=int, help="env seed (default: derived from the run seed and --index or --name)")
    p.add_argument("--wait-timeout", type=float, help="give up if no config/weights arrive in this many seconds")
    verbose_arg(p)
    broker_args(p)


def worker_name(args: argparse.Namespace) -> str | None:
    """--name, checked against a worker's own identity (``RUN-worker@NAME`` may publish only as
    NAME: under another name every batch would be refused and the connection dropped)."""
    from mqttrl.broker.dynsec import own_worker_name

    own = own_worker_name(args.run, args.username)
    if own is not None and args.name is not None and args.name != own:
        raise SystemExit(
            f"mqttrl-worker: user {args.username} may publish only as worker {own!r}, not as --name {args.name!r}: "
            f"start it with --name {own} (or without --name)"
        )
    return args.name or own


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.envs.rollout import EnvFailing
    from mqttrl.nodes.worker.node import run_worker

    name = worker_name(args)
    try:
        signals = run_worker(
            settings(args),
            args.run,
            name=name,
            index=args.index,
            num_envs=args.num_envs,
            seed=args.seed,
            wait_timeout=args.wait_timeout,
        )
    except (TimeoutError, EnvFailing) as e:  # one line; a supervisor restarts the process
        raise SystemExit(f"mqttrl-worker: {e}") from None
    if signals.interrupted:  # Ctrl-C: a clean stop, but not the end a script should take for done
        raise SystemExit(EXIT_INTERRUPTED)


COMMAND = Command(
    help="run a worker (same as mqttrl-worker)",
    description="Run a worker: reads the run's config and weights from the broker, plays, streams samples.",
    epilog="example: mqttrl-worker --broker mqtt://learner-host:1883 --run cartpole",
    add_arguments=add_arguments,
    run=run,
)
