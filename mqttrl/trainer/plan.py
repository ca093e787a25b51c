"""What ``mqttrl train`` starts: the child processes' command lines and environments, the storages
of its telemetry node, and the broker login of each node it runs in-process.

The learner, the workers and the inference servers are child processes, started exactly as on
separate hosts; telemetry and the evaluator are the same nodes a distributed run uses, run as
threads of the trainer (:mod:`mqttrl.trainer.run`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

from mqttrl.config import RunConfig
from mqttrl.trainer.supervisor import Child
from mqttrl.transport.client import BrokerSettings

log = logging.getLogger("mqttrl.train")

#: the node kinds a credentials file must hold a client for
NODE_KINDS = ("learner", "worker", "inference", "telemetry", "operator")
#: the learner is started again with ``--resume-if-any`` (its newest checkpoint) this many times at most
LEARNER_MAX_RESTARTS = 3
#: each built-in storage's option that puts what it writes into the run directory
RUN_DIR_OPTIONS = {"files": ("dir", "telemetry"), "tensorboard": ("logdir", "tensorboard"), "wandb": ("dir", "")}


@attrs.frozen
class Plan:
    """The children (the learner first) and the broker settings of the in-process nodes."""

    learner: Child
    children: list[Child]
    #: node kind ("telemetry", "operator": the evaluator) -> how it logs in
    brokers: Mapping[str, BrokerSettings]


def _python_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # thread counts: mqttrl/__init__ already set them in os.environ
    return env


def _without_username(argv: list[str]) -> list[str]:
    """``argv`` less any ``--username NAME`` (each child then takes its own from MQTTRL_USERNAME)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--username":
            skip = True
        elif not a.startswith("--username="):
            out.append(a)
    return out


class _Logins:
    """Who logs in as whom: one shared login, or (``credentials``) each node kind its own client of
    the run; a worker with an identity of its own (``worker@NAME``) uses that one."""

    def __init__(self, broker: BrokerSettings, credentials: Mapping[str, tuple[str, str]] | None):
        if credentials is not None:
            missing = [k for k in NODE_KINDS if k not in credentials]
            if missing:
                raise ValueError(f"credentials for {', '.join(missing)} missing")
        self.broker, self.credentials = broker, credentials
        self.base_env = _python_env()
        if broker.password:
            self.base_env["MQTTRL_PASSWORD"] = broker.password  # not on the command line, where ps shows it

    def env(self, kind: str, worker: str | None = None) -> dict:
        if self.credentials is None:
            return self.base_env
        user, password = self._login(kind, worker)
        return {**self.base_env, "MQTTRL_USERNAME": user, "MQTTRL_PASSWORD": password}

    def settings(self, kind: str) -> BrokerSettings:
        if self.credentials is None:
            return self.broker
        user, password = self._login(kind)
        return attrs.evolve(self.broker, username=user, password=password)

    def _login(self, kind: str, worker: str | None = None) -> tuple[str, str]:
        assert self.credentials is not None
        return (worker is not None and self.credentials.get(f"worker@{worker}")) or self.credentials[kind]


def plan_children(
    config: RunConfig,
    run_dir: Path,
    broker: BrokerSettings,
    broker_args: list[str] | None = None,
    credentials: Mapping[str, tuple[str, str]] | None = None,
    *,
    resume: bool = False,
    init_from: Path | None = None,
) -> Plan:
    """The learner, ``train.workers`` workers and ``inference.servers`` inference servers of
    ``config``, each with its log under ``<run_dir>/logs``, and the logins of the in-process nodes.

    ``resume``: the learner continues from the run directory's newest checkpoint from its first
    start; ``init_from``: it starts from that model (``mqttrl-learner --init-from``). A restarted
    learner gets ``--resume-if-any`` (its own newest checkpoint), never ``--init-from`` again."""
    logins = _Logins(broker, credentials)
    conn = ["--broker", broker.url] + [a for a in (broker_args or []) if a]
    if credentials is not None:
        conn = _without_username(conn)
    py, logs, run = [sys.executable, "-m", "mqttrl"], run_dir / "logs", config.run
    learner = Child(
        "learner",
        py + ["learner", "--config", str(run_dir / "config.json"), "--run-dir", str(run_dir)] + conn,
        logs / "learner.log",
        logins.env("learner"),
        restart_args=["--resume-if-any"],
        first_args=_start_from(resume, init_from),
        max_restarts=LEARNER_MAX_RESTARTS,
        stop_timeout=60.0,
    )
    workers = [
        Child(
            f"w{i}",
            py + ["worker", "--run", run, "--name", f"w{i}", "--index", str(i)] + conn,
            logs / f"worker-w{i}.log",
            logins.env("worker", f"w{i}"),
        )
        for i in range(config.train.workers)
    ]
    servers = [
        Child(
            f"inference{i}",
            py + ["inference", "--run", run, "--name", f"inference{i}"] + conn,
            logs / f"inference{i}.log",
            logins.env("inference"),
        )
        for i in range(inference_servers(config))
    ]
    brokers = {kind: logins.settings(kind) for kind in ("telemetry", "operator")}
    # started in this order and stopped in reverse: the workers stop before the servers they ask
    # (stopped after them, each worker spent its stop retrying a server that was gone) and the learner last
    return Plan(learner, [learner, *servers, *workers], brokers)


def inference_servers(config: RunConfig) -> int:
    """``inference.servers``, or one server when workers act remotely and none was asked for
    (``worker.inference = "remote"`` with no server would leave every worker waiting for answers)."""
    if config.inference.servers == 0 and config.worker.inference == "remote":
        log.info('worker.inference = "remote" and inference.servers = 0: starting 1 inference server')
        return 1
    return config.inference.servers


def _start_from(resume: bool, init_from: Path | None) -> list[str]:
    """The learner's flags of its first start only: ``--resume`` (refused without a checkpoint) or
    ``--init-from``; a restart gets ``--resume-if-any`` instead (it may have died before its first
    checkpoint)."""
    if resume and init_from is not None:
        raise ValueError("resume continues this run's checkpoints, init_from starts from another model: choose one")
    if resume:
        return ["--resume"]
    return ["--init-from", str(init_from)] if init_from is not None else []


def storage_options(names: list[str], run_dir: Path) -> dict[str, dict]:
    """The options that put each built-in storage of ``names`` into the run directory
    (``telemetry/``, ``tensorboard/``, ``wandb/``)."""
    options = {}
    for name in names:
        if name in RUN_DIR_OPTIONS:
            key, sub = RUN_DIR_OPTIONS[name]
            options[name] = {key: str(run_dir / sub)}
    return options
