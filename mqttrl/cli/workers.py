"""``mqttrl workers``: N supervised worker processes on this host."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from mqttrl.cli.common import Command, broker_args, forward_broker_args, setup_logging, verbose_arg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--name-prefix", help="worker names are <prefix>-<i> (default: this host's name)")
    p.add_argument("--first-index", type=int, default=0, help="index of the first process (epsilon ladder)")
    p.add_argument("--num-envs", type=int, help="envs per process (default: the run config's env.num_envs)")
    p.add_argument("--log-dir", default="worker-logs")
    verbose_arg(p)
    broker_args(p, required=True)


def run(args: argparse.Namespace) -> None:
    setup_logging(args.verbose)
    import socket
    import time

    from mqttrl.local.supervisor import Child, Supervisor
    from mqttrl.procs import install_stop_handlers

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
    sup = Supervisor(children)
    stop = []
    install_stop_handlers(lambda *_: stop.append(1))
    sup.start()
    log.info("supervising %d worker processes (logs in %s)", len(children), args.log_dir)
    try:
        while not stop:
            for c in sup.check():
                log.warning("restarted %s (restart %d)", c.name, c.restarts)
            time.sleep(0.5)
    finally:
        sup.stop()
        print(json.dumps({"restarts": sup.restarts}))


COMMAND = Command(
    help="run N supervised worker processes on this host (restarts crashed ones)",
    description="Start --processes worker processes for a run and restart any that crashes "
    "(with backoff if it keeps crashing). Each process steps the run's env.num_envs envs.",
    add_arguments=add_arguments,
    run=run,
)
