"""``mqttrl quicksave``: ask a running learner for a checkpoint."""

from __future__ import annotations

import argparse

from mqttrl.cli.common import Command, broker_args, settings_or_local


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--name", help="checkpoint name (default quicksave-<updates>; 'best' writes checkpoints/best)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the learner's reply")
    broker_args(p)


def run(args: argparse.Namespace) -> None:
    from mqttrl.cli.fleet import quicksave

    try:
        reply = quicksave(settings_or_local(args), args.run, args.timeout, args.name)
    except TimeoutError as e:
        raise SystemExit(f"mqttrl quicksave: {e}") from None
    if reply.get("refused"):  # e.g. --name best with a score no better than the best kept
        raise SystemExit(f"mqttrl quicksave: the learner refused: {reply['refused']} (it keeps {reply['path']})")
    print(
        f"checkpoint written to {reply['path']} (model version {reply.get('model_version')}, {reply.get('updates')} updates)"
    )


COMMAND = Command(
    help="ask a running learner for a checkpoint and print where it went", add_arguments=add_arguments, run=run
)
