"""``mqttrl worker`` / ``mqttrl-worker``: one worker process."""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings, setup_logging, verbose_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--name", help="worker name, unique in the run (default <host>-<pid>)")
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
    broker_args(p, required=True)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.envs.rollout import EnvFailing
    from mqttrl.nodes.worker.node import run_worker

    try:
        run_worker(
            settings(args),
            args.run,
            name=args.name,
            index=args.index,
            num_envs=args.num_envs,
            seed=args.seed,
            wait_timeout=args.wait_timeout,
        )
    except (TimeoutError, EnvFailing) as e:  # one line; a supervisor restarts the process
        raise SystemExit(f"mqttrl-worker: {e}") from None


COMMAND = Command(
    help="run a worker (same as mqttrl-worker)",
    description="Run a worker: reads the run's config and weights from the broker, plays, streams samples.",
    epilog="example: mqttrl-worker --broker mqtt://learner-host:1883 --run cartpole",
    add_arguments=add_arguments,
    run=run,
)
