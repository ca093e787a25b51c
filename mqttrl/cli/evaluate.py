"""``mqttrl evaluate``: greedy evaluation of a live run's newest weights."""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings_or_local, setup_logging, verbose_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--episodes", type=int, default=20, help="greedy episodes per evaluation")
    p.add_argument("--every", type=float, default=10.0, help="seconds between evaluations (default 10)")
    p.add_argument(
        "--every-env-steps",
        type=int,
        default=0,
        metavar="N",
        help="evaluate by data instead: the first model trained on each multiple of N env steps (default 0: by time)",
    )
    p.add_argument("--target", type=float, help="exit 0 as soon as the mean return reaches this")
    p.add_argument("--max-seconds", type=float, help="give up after this long (exit 3 if a --target was not met)")
    verbose_arg(p)
    broker_args(p)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.nodes.evaluator import run_evaluator

    if args.every_env_steps < 0:
        raise SystemExit(f"--every-env-steps must be 0 or more, not {args.every_env_steps}")
    result = run_evaluator(
        settings_or_local(args),
        args.run,
        args.episodes,
        args.every,
        args.target,
        args.max_seconds,
        every_env_steps=args.every_env_steps,
    )
    if args.target is not None:
        if result is None:
            raise SystemExit(3)
        ev = result.evaluation
        print(f"target {args.target} reached by model version {ev.model_version} after {ev.wall_s or 0:.0f}s")


COMMAND = Command(
    help="greedy evaluation of a live run's newest weights",
    description="Evaluate the newest weights of a run greedily (no exploration, no samples sent).",
    add_arguments=add_arguments,
    run=run,
)
