"""``mqttrl workers``: N supervised worker processes on this host."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from mqttrl.cli.common import Command, broker_args, forward_broker_args, setup_logging, verbose_arg

#: default of --give-up-after: seconds of restarts without one process staying up before giving up
GIVE_UP_AFTER_S = 300.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--processes", type=int, default=2, help="worker processes to run")
    p.add_argument("--name-prefix", help="worker names are <prefix>-<i> (default: this host's name)")
    p.add_argument("--first-index", type=int, default=0, help="index of the first process (epsilon ladder)")
    p.add_argument("--num-envs", type=int, help="envs per process (default: the run config's env.num_envs)")
    p.add_argument("--log-dir", default="worker-logs", help="where each process's log goes")
    p.add_argument(
        "--give-up-after",
        type=float,
        default=GIVE_UP_AFTER_S,
        metavar="S",
        help="give up (exit 4 when the broker is unreachable, else 1) once no process has stayed up "
        "30 s (or half of S, if less) for S seconds; 0: restart for ever",
    )
    verbose_arg(p)
    broker_args(p)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    import socket
    import time

    from mqttrl.system.procs import install_stop_handlers
    from mqttrl.trainer.supervisor import Child, Supervisor

    log = logging.getLogger("mqttrl.workers")
    prefix = args.name_prefix or socket.gethostname().split(".")[0]
    base = [sys.executable, "-m", "mqttrl", "worker", "--run", args.run, "--broker", args.broker]
    base += forward_broker_args(args)
    env = dict(os.environ)
    if args.password:
        env["MQTTRL_PASSWORD"] = args.password
    children = []
    for i in range(args.processes):
        argv = base + ["--name", f"{prefix}-{i}", "--index", str(args.first_index + i)]
        if args.num_envs:
            argv += ["--num-envs", str(args.num_envs)]
        children.append(Child(f"{prefix}-{i}", argv, Path(args.log_dir) / f"{prefix}-{i}.log", env))
    give_up = args.give_up_after or None
    sup = Supervisor(children, give_up_after_s=give_up, healthy_after_s=min(30.0, give_up / 2) if give_up else 30.0)
    stop = []
    install_stop_handlers(lambda *_: stop.append(1))
    sup.start()
    log.info("supervising %d worker processes (logs in %s)", len(children), args.log_dir)
    hopeless = None
    try:
        while not stop and hopeless is None:
            for c in sup.check():
                log.warning("restarted %s (restart %d)", c.name, c.restarts)
            hopeless = sup.hopeless()
            time.sleep(0.5)
    finally:
        sup.stop()
        print(json.dumps({"restarts": sup.restarts}))
    if hopeless is not None:
        _give_up(sup, hopeless)


def _give_up(sup, reason: str) -> None:
    """One line and exit 4 when the last process could not reach the broker, else 1."""
    from mqttrl.cli.errors import EXIT_BROKER, EXIT_FAILED

    code = sup.last_exit[1] if sup.last_exit else None
    print(f"mqttrl workers: giving up: {reason}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BROKER if code == EXIT_BROKER else EXIT_FAILED)


COMMAND = Command(
    help="run N supervised worker processes on this host (restarts crashed ones)",
    description="Start --processes worker processes for a run and restart any that crashes "
    "(with backoff if it keeps crashing). Each process steps the run's env.num_envs envs. Gives up "
    "after --give-up-after seconds in which no process stayed up (a broker that is gone): one line, "
    "exit 4 (broker unreachable) or 1.",
    add_arguments=add_arguments,
    run=run,
)
