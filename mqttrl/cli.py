"""Command line: ``mqttrl`` (train, learner, worker, plugins, quicksave) and the node scripts."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from mqttrl.transport.client import BrokerSettings

EPILOG_TRAIN = """examples:
  mqttrl train configs/cartpole_dqn.toml
  mqttrl train configs/cartpole_dqn.toml --workers 4 --set algorithm.lr=0.001
  mqttrl train configs/cartpole_dqn.toml --broker mqtt://gpu-box:1883
"""


def _broker_args(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_argument_group("broker connection")
    g.add_argument(
        "--broker",
        required=required,
        metavar="URL",
        help="broker URL, mqtt://host:1883 or mqtts://host:8883 (user:pass@ allowed)",
    )
    g.add_argument("--username", default=os.environ.get("MQTTRL_USERNAME"), help="broker user (env MQTTRL_USERNAME)")
    g.add_argument(
        "--password", default=os.environ.get("MQTTRL_PASSWORD"), help="broker password (env MQTTRL_PASSWORD)"
    )
    g.add_argument("--tls-ca", help="CA certificate file; enables TLS")
    g.add_argument("--tls-cert", help="client certificate file (TLS client auth)")
    g.add_argument("--tls-key", help="client key file (TLS client auth)")
    g.add_argument(
        "--tls-insecure", action="store_true", help="do not verify the broker's host name (test setups only)"
    )
    g.add_argument(
        "--mqtt-protocol",
        default="auto",
        choices=["auto", "5", "3.1.1"],
        help="MQTT version; auto tries 5 then falls back to 3.1.1",
    )


def _settings(args: argparse.Namespace, url: str | None = None) -> BrokerSettings:
    return BrokerSettings(
        url=url or args.broker,
        username=args.username,
        password=args.password,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_insecure=args.tls_insecure,
        protocol=args.mqtt_protocol,
    )


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def _load(config: str | None, overrides: list[str]):
    from mqttrl.config import ConfigError, load_config
    from mqttrl.plugin.manager import UnknownPluginError, get_registry

    registry = get_registry()
    try:
        return load_config(config, overrides, lambda n: registry.algorithm(n).params)
    except (ConfigError, UnknownPluginError) as e:
        raise SystemExit(f"config error: {e}") from None


# ---- learner -------------------------------------------------------------------
def learner_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(
        prog="mqttrl-learner",
        description="Run the learner of a run: trains on samples from workers and publishes weights (retained).",
    )
    p.add_argument("--config", required=True, help="run config (TOML, or the config.json of a run directory)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set learner.publish_every=100 (repeatable)",
    )
    p.add_argument("--run-dir", help="where checkpoints and logs go (default runs/<run>)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    p.add_argument("--max-seconds", type=float, help="stop after this long (checkpoints first)")
    p.add_argument("-v", "--verbose", action="store_true")
    _broker_args(p, required=False)
    return p


def learner_main(argv: list[str] | None = None) -> None:
    args = learner_parser().parse_args(argv)
    _run_learner(args)


def _run_learner(args: argparse.Namespace) -> None:
    _logging(args.verbose)
    from mqttrl.nodes.learner.node import run_learner

    cfg = _load(args.config, args.overrides)
    run_dir = Path(args.run_dir or f"runs/{cfg.run}")
    run_learner(
        cfg,
        _settings(args, args.broker or "mqtt://127.0.0.1:1883"),
        run_dir,
        resume=args.resume,
        max_seconds=args.max_seconds,
    )


# ---- worker --------------------------------------------------------------------
def worker_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(
        prog="mqttrl-worker",
        description="Run a worker: reads the run's config and weights from the broker, plays, streams samples.",
        epilog="example: mqttrl-worker --broker mqtt://learner-host:1883 --run cartpole",
    )
    p.add_argument("--run", required=True, help="run name (the learner's config 'run')")
    p.add_argument("--name", help="worker name, unique in the run (default <host>-<pid>)")
    p.add_argument("--index", type=int, default=0, help="worker index, spreads exploration (Ape-X epsilon ladder)")
    p.add_argument("--num-envs", type=int, help="envs in this process (default: the run config's env.num_envs)")
    p.add_argument("--seed", type=int, help="env seed (default derived from run seed and index)")
    p.add_argument("--wait-timeout", type=float, help="give up if no config/weights arrive in this many seconds")
    p.add_argument("-v", "--verbose", action="store_true")
    _broker_args(p, required=True)
    return p


def worker_main(argv: list[str] | None = None) -> None:
    args = worker_parser().parse_args(argv)
    _run_worker(args)


def _run_worker(args: argparse.Namespace) -> None:
    _logging(args.verbose)
    from mqttrl.nodes.worker.node import run_worker

    try:
        run_worker(
            _settings(args),
            args.run,
            name=args.name,
            index=args.index,
            num_envs=args.num_envs,
            seed=args.seed,
            wait_timeout=args.wait_timeout,
        )
    except TimeoutError as e:
        raise SystemExit(f"mqttrl-worker: {e}") from None


# ---- telemetry -----------------------------------------------------------------
def telemetry_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(
        prog="mqttrl-telemetry",
        description="Watch a run: aggregate episode stats and learner metrics, write them to storages "
        "(InfluxDB, CSV + PNG files), and ask the learner to save each new best model.",
        epilog="examples:\n  mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage files --storage-opt files.dir=telemetry\n"
        "  INFLUXDB_URL=http://db:8086 INFLUXDB_TOKEN=... INFLUXDB_ORG=me INFLUXDB_BUCKET=rl \\\n"
        "    mqttrl-telemetry --broker mqtt://host:1883 --run cartpole --storage influxdb --storage files",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--storage",
        action="append",
        default=[],
        metavar="NAME",
        help="storage plugin to write to (repeatable; default: files). See `mqttrl plugins`",
    )
    p.add_argument(
        "--storage-opt",
        action="append",
        default=[],
        metavar="NAME.KEY=VALUE",
        help="storage option, e.g. files.dir=telemetry or influxdb.bucket=rl (repeatable)",
    )
    p.add_argument("--window", type=int, default=20, help="episodes in the moving averages (default 20)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between aggregate points (default 2)")
    p.add_argument("--no-best-quicksave", action="store_true", help="do not ask the learner to save new best models")
    p.add_argument("--max-seconds", type=float, help="stop after this long")
    p.add_argument("-v", "--verbose", action="store_true")
    _broker_args(p, required=True)
    return p


def telemetry_main(argv: list[str] | None = None) -> None:
    _run_telemetry(telemetry_parser().parse_args(argv))


def _run_telemetry(args: argparse.Namespace) -> None:
    _logging(args.verbose)
    from mqttrl.nodes.telemetry import TelemetrySettings, make_storages, run_telemetry
    from mqttrl.plugin.manager import UnknownPluginError

    options: dict[str, dict] = {}
    for item in args.storage_opt:
        key, sep, value = item.partition("=")
        name, dot, opt = key.partition(".")
        if not sep or not dot:
            raise SystemExit(f"--storage-opt {item!r}: expected NAME.KEY=VALUE, e.g. files.dir=telemetry")
        options.setdefault(name, {})[opt] = value
    try:
        storages = make_storages(args.storage or ["files"], options)
    except UnknownPluginError as e:
        raise SystemExit(f"mqttrl-telemetry: {e}") from None
    settings = TelemetrySettings(
        window=args.window, interval_s=args.interval, quicksave_best=not args.no_best_quicksave
    )
    run_telemetry(_settings(args), args.run, storages, settings, max_seconds=args.max_seconds)


# ---- mqttrl ----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mqttrl", description="Distributed reinforcement learning over MQTT.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = sub.add_parser(
        "train",
        help="train on this machine: embedded broker, learner, workers, evaluation",
        description="Train on one machine. Starts an embedded broker unless --broker is given, "
        "then the learner and --workers worker processes; shows progress; evaluates greedily; "
        "stops at the config's target or budget, or on Ctrl-C.",
        epilog=EPILOG_TRAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("config", help="run config (TOML)")
    t.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
    t.add_argument("--workers", type=int, help="worker processes (default: train.workers)")
    t.add_argument("--seed", type=int, help="run seed (default: train.seed)")
    t.add_argument("--run-dir", help="run directory (default runs/<run>-<timestamp>)")
    t.add_argument(
        "--embedded-broker",
        default="auto",
        choices=["auto", "mosquitto", "amqtt"],
        help="embedded broker kind when no --broker is given",
    )
    t.add_argument("--no-progress", action="store_true", help="plain log lines instead of the live display")
    t.add_argument("-v", "--verbose", action="store_true")
    _broker_args(t, required=False)

    learner_parser(sub.add_parser("learner", help="run a learner (same as mqttrl-learner)"))
    worker_parser(sub.add_parser("worker", help="run a worker (same as mqttrl-worker)"))
    telemetry_parser(sub.add_parser("telemetry", help="run telemetry (same as mqttrl-telemetry)"))
    sub.add_parser("plugins", help="print installed plugins and what they register (JSON)")
    q = sub.add_parser("quicksave", help="ask a running learner for a checkpoint and print where it went")
    q.add_argument("--run", required=True)
    q.add_argument("--name", help="checkpoint name (default quicksave-<updates>; 'best' writes checkpoints/best)")
    q.add_argument("--timeout", type=float, default=30.0)
    _broker_args(q, required=False)
    inf = sub.add_parser(
        "inference",
        help="run a central inference server for a run (SEED style)",
        description='Serve policy forwards for workers with worker.inference = "remote": batches '
        "observations from many workers, runs the newest retained weights, replies with the network's outputs. "
        "Run several for more throughput or redundancy; with MQTT 5 the broker spreads requests over them.",
    )
    inf.add_argument("--run", required=True)
    inf.add_argument("--name", help="server name (default inference-<host>-<pid>)")
    inf.add_argument(
        "--batch-size", type=int, help="observations per forward (default: the run config's inference.batch_size)"
    )
    inf.add_argument(
        "--max-delay-ms", type=float, help="longest wait to fill a batch (default: inference.max_delay_ms)"
    )
    inf.add_argument("--backend", choices=["auto", "torch", "numpy"], help="default: inference.backend")
    inf.add_argument("--no-shared", action="store_true", help="do not join the MQTT 5 shared subscription")
    inf.add_argument("-v", "--verbose", action="store_true")
    _broker_args(inf, required=True)
    ev = sub.add_parser(
        "evaluate",
        help="greedy evaluation of a live run's newest weights",
        description="Evaluate the newest weights of a run greedily (no exploration, no samples sent).",
    )
    ev.add_argument("--run", required=True)
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--every", type=float, default=10.0, help="seconds between evaluations (default 10)")
    ev.add_argument("--target", type=float, help="exit 0 as soon as the mean return reaches this")
    ev.add_argument("--max-seconds", type=float, help="give up after this long (exit 3 if a --target was not met)")
    ev.add_argument("-v", "--verbose", action="store_true")
    _broker_args(ev, required=False)
    ws = sub.add_parser(
        "workers",
        help="run N supervised worker processes on this host (restarts crashed ones)",
        description="Start --processes worker processes for a run and restart any that crashes "
        "(with backoff if it keeps crashing). Each process steps the run's env.num_envs envs.",
    )
    ws.add_argument("--run", required=True)
    ws.add_argument("--processes", type=int, default=2)
    ws.add_argument("--name-prefix", help="worker names are <prefix>-<i> (default: this host's name)")
    ws.add_argument("--first-index", type=int, default=0, help="index of the first process (epsilon ladder)")
    ws.add_argument("--num-envs", type=int, help="envs per process (default: the run config's env.num_envs)")
    ws.add_argument("--log-dir", default="worker-logs")
    ws.add_argument("-v", "--verbose", action="store_true")
    _broker_args(ws, required=True)
    st = sub.add_parser("status", help="live table of the learner and workers of a run")
    st.add_argument("--run", required=True)
    st.add_argument("--once", type=float, metavar="SECONDS", help="listen this long, print one table and exit")
    st.add_argument("--json", action="store_true", help="with --once: print JSON rows instead of a table")
    _broker_args(st, required=False)

    args = parser.parse_args(argv)
    if args.command == "plugins":
        from mqttrl.plugin.manager import plugins_report

        print(json.dumps(plugins_report(), indent=2))
    elif args.command == "telemetry":
        _run_telemetry(args)
    elif args.command == "quicksave":
        from mqttrl.nodes.status import quicksave

        try:
            reply = quicksave(
                _settings(args, args.broker or "mqtt://127.0.0.1:1883"), args.run, args.timeout, args.name
            )
        except TimeoutError as e:
            raise SystemExit(f"mqttrl quicksave: {e}") from None
        print(
            f"checkpoint written to {reply['path']} (model version {reply.get('model_version')}, {reply.get('updates')} updates)"
        )
    elif args.command == "status":
        from mqttrl.nodes.status import watch_status

        view = watch_status(_settings(args, args.broker or "mqtt://127.0.0.1:1883"), args.run, args.once)
        if args.once is not None:
            if args.json:
                print(json.dumps(view.rows(), indent=1, default=str))
            else:
                from rich.console import Console

                Console().print(view.table())
    elif args.command == "inference":
        _logging(args.verbose)
        import socket

        from mqttrl.nodes.inference import run_inference_server

        run_inference_server(
            _settings(args),
            args.run,
            args.name or f"inference-{socket.gethostname().split('.')[0]}-{os.getpid()}",
            batch_size=args.batch_size,
            max_delay_ms=args.max_delay_ms,
            backend=args.backend,
            shared=not args.no_shared,
        )
    elif args.command == "evaluate":
        _logging(args.verbose)
        from mqttrl.nodes.evaluator import run_evaluator

        result = run_evaluator(
            _settings(args, args.broker or "mqtt://127.0.0.1:1883"),
            args.run,
            args.episodes,
            args.every,
            args.target,
            args.max_seconds,
        )
        if args.target is not None:
            if result is None:
                raise SystemExit(3)
            print(
                f"target {args.target} reached by model version {result['model_version']} after {result['wall_s']:.0f}s"
            )
    elif args.command == "workers":
        _logging(args.verbose)
        _run_workers(args)
    elif args.command == "learner":
        _run_learner(args)
    elif args.command == "worker":
        _run_worker(args)
    elif args.command == "train":
        _logging(args.verbose)
        from mqttrl.local.train import train

        overrides = list(args.overrides)
        if args.workers is not None:
            overrides.append(f"train.workers={args.workers}")
        if args.seed is not None:
            overrides.append(f"train.seed={args.seed}")
        cfg = _load(args.config, overrides)
        summary = train(
            cfg,
            broker=_settings(args, args.broker) if args.broker else None,
            broker_args=_forward_broker_args(args),
            run_dir=Path(args.run_dir) if args.run_dir else None,
            embedded=args.embedded_broker,
            progress=not args.no_progress,
        )
        sys.exit(0 if summary.get("solved") or cfg.train.target_return is None else 3)


def _run_workers(args: argparse.Namespace) -> None:
    import signal
    import socket
    import time

    from mqttrl.local.supervisor import Child, Supervisor

    prefix = args.name_prefix or socket.gethostname().split(".")[0]
    base = [
        sys.executable,
        "-m",
        "mqttrl",
        "worker",
        "--run",
        args.run,
        "--broker",
        args.broker,
    ] + _forward_broker_args(args)
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
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    sup.start()
    logging.getLogger("mqttrl.workers").info(
        "supervising %d worker processes (logs in %s)", len(children), args.log_dir
    )
    try:
        while not stop:
            for c in sup.check():
                logging.getLogger("mqttrl.workers").warning("restarted %s (restart %d)", c.name, c.restarts)
            time.sleep(0.5)
    finally:
        sup.stop()
        print(json.dumps({"restarts": sup.restarts}))


def _forward_broker_args(args: argparse.Namespace) -> list[str]:
    out = []
    for flag in ("username", "tls_ca", "tls_cert", "tls_key"):  # the password travels in MQTTRL_PASSWORD
        v = getattr(args, flag)
        if v:
            out += [f"--{flag.replace('_', '-')}", v]
    if args.tls_insecure:
        out.append("--tls-insecure")
    out += ["--mqtt-protocol", args.mqtt_protocol]
    return out
