"""``mqttrl inference``: a central inference server (SEED style)."""

from __future__ import annotations

import argparse
import os
import socket

from mqttrl.cli.common import Command, broker_args, settings, setup_logging, verbose_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--name", help="server name (default inference-<host>-<pid>)")
    p.add_argument(
        "--batch-size", type=int, help="observations per forward (default: the run config's inference.batch_size)"
    )
    p.add_argument("--max-delay-ms", type=float, help="longest wait to fill a batch (default: inference.max_delay_ms)")
    p.add_argument("--backend", choices=["auto", "torch", "numpy"], help="default: inference.backend")
    p.add_argument("--no-shared", action="store_true", help="do not join the MQTT 5 shared subscription")
    verbose_arg(p)
    broker_args(p)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    from mqttrl.nodes.inference import run_inference_server

    run_inference_server(
        settings(args),
        args.run,
        args.name or f"inference-{socket.gethostname().split('.')[0]}-{os.getpid()}",
        batch_size=args.batch_size,
        max_delay_ms=args.max_delay_ms,
        backend=args.backend,
        shared=not args.no_shared,
    )


COMMAND = Command(
    help="run a central inference server for a run (SEED style)",
    description='Serve policy forwards for workers with worker.inference = "remote": batches '
    "observations from many workers, runs the newest retained weights, replies with the network's outputs. "
    "Run several for more throughput or redundancy; with MQTT 5 the broker spreads requests over them.",
    add_arguments=add_arguments,
    run=run,
)
