"""``mqttrl train``: a whole run on one machine, as separate processes.

Starts an embedded broker (unless one is given), the learner and N workers as
child processes (exactly what you would run on separate hosts), then watches
the run over MQTT: a live progress display, episode and evaluation CSVs, a
greedy evaluation of the newest weights every ``train.eval_every_s``, and a
supervisor that restarts a worker process that died. Stops at the target
return, the time or step budget, or Ctrl-C, and writes ``summary.json``.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from mqttrl.config import RunConfig, write_resolved
from mqttrl.envs.rollout import evaluate, greedy_actor
from mqttrl.local.broker import EmbeddedBroker
from mqttrl.local.progress import Progress
from mqttrl.local.supervisor import Child, Supervisor
from mqttrl.procs import install_stop_handlers
from mqttrl.transport.client import BrokerSettings, MqttNode
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import decode_episodes, decode_json, decode_weights, encode_json

log = logging.getLogger("mqttrl.train")


class Evaluator(threading.Thread):
    """Greedy evaluation of the newest weights, off the display thread."""

    def __init__(self, config: RunConfig, run_dir: Path, on_result):
        super().__init__(name="evaluator", daemon=True)
        self.config = config
        self.actor, self.make = greedy_actor(config, config.train.eval_episodes)
        self.run_dir = run_dir
        self.on_result = on_result
        self.requests: queue.Queue = queue.Queue(maxsize=1)
        self.count = 0

    def submit(self, weights_payload: bytes) -> bool:
        try:
            self.requests.put_nowait(weights_payload)
            return True
        except queue.Full:
            return False

    def run(self) -> None:
        while True:
            payload = self.requests.get()
            if payload is None:
                return
            w = decode_weights(payload)
            self.actor.load_weights(w.tensors, w.info)
            t0 = time.monotonic()
            returns = evaluate(self.actor, self.make, self.config.train.eval_episodes, seed=10**6 + 1000 * self.count)
            self.count += 1
            self.on_result(w.version, returns, time.monotonic() - t0, payload)

    def final(self, weights_payload: bytes, timeout: float, cancel: threading.Event | None = None) -> bool:
        """Evaluate ``weights_payload`` after what is under way, then end the thread; False when
        that did not finish within ``timeout`` seconds or ``cancel`` was set (Ctrl-C) first."""
        deadline = time.monotonic() + timeout
        if not self._put(weights_payload, deadline, cancel):
            return False
        return self.finish(deadline - time.monotonic(), cancel)

    def finish(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        """End the thread once what is queued is evaluated; False if not within ``timeout`` s or
        ``cancel`` was set first."""
        deadline = time.monotonic() + timeout
        if not self._put(None, deadline, cancel):
            return False
        while self.is_alive() and time.monotonic() < deadline and not (cancel and cancel.is_set()):
            self.join(min(0.25, max(0.0, deadline - time.monotonic())))
        return not self.is_alive()

    def _put(self, item: bytes | None, deadline: float, cancel: threading.Event | None) -> bool:
        while True:
            try:
                self.requests.put(item, timeout=min(0.25, max(0.0, deadline - time.monotonic())))
                return True
            except queue.Full:
                if time.monotonic() >= deadline or (cancel and cancel.is_set()):
                    return False

    def stop(self) -> None:
        """End the thread after what it is doing (the queue may already hold the end)."""
        try:
            self.requests.put_nowait(None)
        except queue.Full:
            pass


def _python_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # thread counts: mqttrl/__init__ already set them in os.environ
    return env


def _stop_on_signals(interrupted: threading.Event) -> Callable[[], None]:
    """SIGINT, SIGTERM and (Windows) SIGBREAK set ``interrupted``; returns what puts the previous
    handlers back.

    The one place :func:`train` touches process-wide state. Python runs signal handlers in the main
    thread only, and only the main thread may install them: called from another thread (a notebook's
    background thread, a thread pool) this installs nothing, and the caller stops the run through
    ``train(stop=...)``.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}
    for name in ("SIGINT", "SIGTERM", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.getsignal(sig)
    install_stop_handlers(lambda *_: interrupted.set())

    def restore() -> None:
        for sig, handler in previous.items():
            # None: the previous handler was not installed from Python; the default is the nearest
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore


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


def _new_run_dir(run: str) -> Path:
    """``runs/<run>-<timestamp>``, made here; ``-2``, ``-3`` ... when runs start in the same second."""
    base = f"runs/{run}-{time.strftime('%Y%m%d-%H%M%S')}"
    Path("runs").mkdir(exist_ok=True)
    for i in range(1, 1000):
        path = Path(base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{base}: a thousand runs started in this second; pass run_dir")


def train(
    config: RunConfig,
    broker: BrokerSettings | None = None,
    broker_args: list[str] | None = None,
    run_dir: Path | None = None,
    embedded: str = "auto",
    progress: bool = True,
    stop: threading.Event | None = None,
    print_summary: bool = True,
    credentials: Mapping[str, tuple[str, str]] | None = None,
) -> dict:
    """Run ``config`` on this machine until its target, its budget, a stop signal (in the main
    thread) or ``stop`` being set; returns the summary it writes to ``<run dir>/summary.json``.

    Safe to call from any thread: signal handlers are installed (and the previous ones put back
    after) only in the main thread. :func:`mqttrl.train` is the friendlier front of this.

    ``credentials``: node kind -> (user, password) on a broker with per-run clients (``mqttrl broker
    add-run``): the learner, the workers, the inference servers and telemetry each log in as their
    own kind, this process (monitor and evaluations) as ``operator``.
    """
    tc = config.train
    if run_dir is None:
        run_dir = _new_run_dir(config.run)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.json"
    write_resolved(config, cfg_path)
    t_start = time.monotonic()
    embedded_broker = None
    undo: list[Callable[[], object]] = []  # what stops what was started, should setting up fail
    try:
        if broker is None:
            embedded_broker = EmbeddedBroker(embedded, workdir=run_dir / "broker").start()
            undo.append(embedded_broker.stop)
            broker = BrokerSettings(url=embedded_broker.url)
            log.info("embedded %s broker at %s", embedded_broker.kind, broker.url)
        base_env = _python_env()
        if broker.password:
            base_env["MQTTRL_PASSWORD"] = broker.password  # not on the command line, where ps shows it
        conn = ["--broker", broker.url] + [a for a in (broker_args or []) if a]
        if credentials is not None:
            missing = [k for k in ("learner", "worker", "inference", "telemetry", "operator") if k not in credentials]
            if missing:
                raise ValueError(f"credentials for {', '.join(missing)} missing")
            conn = _without_username(conn)
            user, password = credentials["operator"]
            broker = attrs.evolve(broker, username=user, password=password)

        def env_of(kind: str, worker: str | None = None) -> dict:
            """A child's environment: its own user and password when each node kind has one (a
            worker's own identity, ``worker@NAME``, where the credentials give it one)."""
            if credentials is None:
                return base_env
            user, password = (worker is not None and credentials.get(f"worker@{worker}")) or credentials[kind]
            return {**base_env, "MQTTRL_USERNAME": user, "MQTTRL_PASSWORD": password}

        py = [sys.executable, "-m", "mqttrl"]
        logs = run_dir / "logs"
        learner = Child(
            "learner",
            py + ["learner", "--config", str(cfg_path), "--run-dir", str(run_dir)] + conn,
            logs / "learner.log",
            env_of("learner"),
        )
        workers = [
            Child(
                f"w{i}",
                py + ["worker", "--run", config.run, "--name", f"w{i}", "--index", str(i)] + conn,
                logs / f"worker-w{i}.log",
                env_of("worker", f"w{i}"),
            )
            for i in range(tc.workers)
        ]
        children = [learner, *workers]
        for i in range(config.inference.servers):
            children.append(
                Child(
                    f"inference{i}",
                    py + ["inference", "--run", config.run, "--name", f"inference{i}"] + conn,
                    logs / f"inference{i}.log",
                    env_of("inference"),
                )
            )
        if tc.telemetry:
            storage_args = []
            for name in tc.telemetry_storages:
                storage_args += ["--storage", str(name)]
            # each built-in storage writes into the run directory (the files storage's options are always passed)
            in_run_dir = {
                "files": f"files.dir={run_dir / 'telemetry'}",
                "tensorboard": f"tensorboard.logdir={run_dir / 'tensorboard'}",
                "wandb": f"wandb.dir={run_dir}",
            }
            for name, opt in in_run_dir.items():
                if name == "files" or name in tc.telemetry_storages:
                    storage_args += ["--storage-opt", opt]
            telemetry = Child(
                "telemetry",
                py + ["telemetry", "--run", config.run, *storage_args] + conn,
                logs / "telemetry.log",
                env_of("telemetry"),
            )
            children.append(telemetry)
        supervisor = Supervisor(children[1:])
        monitor = Monitor(config, broker, run_dir)
        undo.append(monitor.stop)
        evaluator = Evaluator(config, run_dir, monitor.on_eval)
        evaluator.start()
        undo.append(evaluator.stop)
        undo.append(learner.stop)
        learner.start()
        undo.append(supervisor.stop)
        supervisor.start()
    except BaseException:  # e.g. an env that cannot be made: leave no broker or child process behind
        for fn in reversed(undo):
            try:
                fn()
            except Exception:
                log.exception("cleaning up after a failed start")
        raise
    display = Progress(config, enabled=progress)
    stop_reason = "interrupted"
    interrupted = stop if stop is not None else threading.Event()
    restore_signals = _stop_on_signals(interrupted)
    try:
        monitor.start()
        next_eval = time.monotonic() + tc.eval_every_s
        while not interrupted.is_set():
            monitor.pump(0.25)
            now = time.monotonic()
            if (
                monitor.latest_weights is not None
                and now >= next_eval
                and monitor.latest_version > monitor.evaluated_version
            ) and evaluator.submit(monitor.latest_weights):
                monitor.evaluated_version = monitor.latest_version
                next_eval = now + tc.eval_every_s
            display.update(monitor.snapshot(now - t_start))
            if monitor.solved_at is not None:
                stop_reason = "target reached"
                break
            if tc.max_seconds and now - t_start > tc.max_seconds:
                stop_reason = "time budget"
                break
            if tc.max_env_steps and monitor.env_steps >= tc.max_env_steps:
                stop_reason = "env step budget"
                break
            if not learner.alive():
                code = learner.proc.returncode
                if learner.restarts >= 3:
                    stop_reason = f"learner exited ({code}) {learner.restarts} times"
                    break
                log.warning("learner exited with %s; restarting it with --resume (see %s)", code, learner.log_path)
                learner.restarts += 1
                learner.argv = learner.argv + (["--resume"] if "--resume" not in learner.argv else [])
                learner.start()
            supervisor.check()
        if tc.final_eval and stop_reason in ("time budget", "env step budget"):
            _final_evaluation(monitor, evaluator, display, t_start, interrupted)
    finally:
        restore_signals()
        display.close()
        supervisor.stop()
        learner.stop(timeout=60)
        evaluator.stop()
        monitor.stop()
        if embedded_broker is not None:
            embedded_broker.stop()
    summary = monitor.summary(stop_reason, time.monotonic() - t_start)
    summary["restarts"] = supervisor.restarts
    summary["learner_restarts"] = learner.restarts
    summary["run_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if print_summary:
        _print_summary(summary)
    return summary


def _final_evaluation(
    monitor: Monitor, evaluator: Evaluator, display: Progress, t_start: float, cancel: threading.Event
) -> None:
    """The budget ran out: evaluate the newest model unless an evaluation has it (letting one
    under way finish). The workers go on meanwhile; the model is the one at the stop. Ctrl-C
    (``cancel``) ends the wait."""
    payload, version = monitor.latest_weights, monitor.latest_version
    if payload is None:
        return
    timeout = 60.0 + 4 * max((e["eval_s"] for e in monitor.evals), default=60.0)
    if version > monitor.evaluated_version:
        log.info("budget reached: evaluating the final model (version %d)", version)
        monitor.evaluated_version = version
        done = evaluator.final(payload, timeout, cancel)
    else:
        done = evaluator.finish(timeout, cancel)
    if not done:
        why = "was interrupted" if cancel.is_set() else f"did not end within {timeout:.0f}s"
        log.warning("the final evaluation %s; summary.json has the earlier ones", why)
    monitor.final_eval = next((e for e in reversed(monitor.evals) if e["model_version"] == version), None)
    display.update(monitor.snapshot(time.monotonic() - t_start))


def _print_summary(s: dict) -> None:
    lines = [f"run {s['run']} stopped: {s['stop_reason']} after {s['wall_s']:.0f}s"]
    if s["solved"]:
        lines.append(
            f"SOLVED: greedy evaluation mean {s['solve_eval_mean']:.1f} >= {s['target_return']} "
            f"(model version {s['solve_model_version']}); time-to-solve {s['time_to_solve_s']:.1f}s "
            f"(training time to that model {s['training_time_to_solve_s']}s), {s['env_steps_at_solve']} env steps"
        )
    elif s["best_eval_mean"] is not None and s["target_return"] is None:
        lines.append(f"best greedy evaluation mean {s['best_eval_mean']:.1f} (no target: trained for the budget)")
    elif s["best_eval_mean"] is not None:
        lines.append(f"not solved: best greedy evaluation mean {s['best_eval_mean']:.1f} (target {s['target_return']})")
    if s.get("final_eval_mean") is not None:
        lines.append(
            f"final model (version {s['final_model_version']}): greedy evaluation mean {s['final_eval_mean']:.1f}"
        )
    lines.append(f"run directory: {s['run_dir']}")
    print("\n".join(lines), flush=True)


class Monitor:
    """Watches the run over MQTT and writes episodes.csv / evaluations.csv."""

    def __init__(self, config: RunConfig, broker: BrokerSettings, run_dir: Path):
        self.config = config
        self.topics = Topics(config.run)
        self.run_dir = run_dir
        #: the handler table; its counter holds every refused message by reason
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.EPISODES: self.on_episodes,
                Kind.LEARNER_METRICS: self.on_learner_metrics,
                Kind.LEARNER_STATE: self.on_learner_state,
                Kind.WORKER_STATE: self.on_worker_state,
                Kind.WEIGHTS: self.on_weights,
            },
            log,
        )
        self.rejections = self.dispatch.rejections
        self.node = MqttNode(
            broker,
            client_id=f"mqttrl-train-{config.run}-{os.getpid()}",
            subscriptions=[self.topics.subscription(kind) for kind in self.dispatch.handlers],
            inbox_limit=100000,
        )
        self.t0 = time.monotonic()
        self.episodes = 0
        self.env_steps_by_worker: dict[str, int] = {}
        self.recent_returns: list[float] = []
        self.metrics: dict = {}
        self.learner_status = "starting"
        self.worker_status: dict[str, str] = {}
        self.latest_weights: bytes | None = None
        self.latest_version = -1
        self.first_published_at: float | None = None  # the learner's first model of this run
        self.evaluated_version = -1
        #: the evaluation of the model at the end of the budget (train.final_eval)
        self.final_eval: dict | None = None
        self.evals: list[dict] = []
        self.best_eval: float | None = None
        self.solved_at: dict | None = None
        self._eval_lock = threading.Lock()
        self._episodes_file = open(run_dir / "episodes.csv", "a", newline="")
        self._episodes = csv.writer(self._episodes_file)
        if self._episodes_file.tell() == 0:
            self._episodes.writerow(
                ["wall_s", "worker", "env", "return", "length", "terminated", "model_version", "worker_env_steps"]
            )
        self._evals_file = open(run_dir / "evaluations.csv", "a", newline="")
        self._evals = csv.writer(self._evals_file)
        if self._evals_file.tell() == 0:
            self._evals.writerow(
                [
                    "wall_s",
                    "model_version",
                    "env_steps",
                    "episodes",
                    "mean",
                    "std",
                    "min",
                    "max",
                    "eval_s",
                    "training_s",
                ]
            )

    @property
    def env_steps(self) -> int:
        return sum(self.env_steps_by_worker.values())

    def start(self) -> None:
        self.node.start(wait=30)

    def pump(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                msg = self.node.inbox.get(timeout=remaining)
            except queue.Empty:
                break
            self.dispatch(msg.topic, msg.payload)
        self._episodes_file.flush()

    def on_episodes(self, name: str, payload: bytes) -> None:
        for e in decode_episodes(payload):
            self.episodes += 1
            self.recent_returns.append(float(e["return"]))
            self.env_steps_by_worker[name] = max(self.env_steps_by_worker.get(name, 0), int(e.get("env_steps", 0)))
            self._episodes.writerow(
                [
                    round(time.monotonic() - self.t0, 3),
                    name,
                    e.get("env"),
                    e["return"],
                    e["length"],
                    e.get("terminated"),
                    e.get("model_version"),
                    e.get("env_steps"),
                ]
            )
        del self.recent_returns[:-100]

    def on_learner_metrics(self, name: str, payload: bytes) -> None:
        self.metrics = decode_json(payload)

    def on_learner_state(self, name: str, payload: bytes) -> None:
        if payload:
            self.learner_status = decode_json(payload, {"status": str})["status"]

    def on_worker_state(self, name: str, payload: bytes) -> None:
        if payload:
            self.worker_status[name] = decode_json(payload, {"status": str})["status"]

    def on_weights(self, name: str, payload: bytes) -> None:
        # the version sits in the safetensors metadata; decoding validates the payload too
        w = decode_weights(payload)
        if self.first_published_at is None or w.published_at < self.first_published_at:
            self.first_published_at = w.published_at
        if w.version > self.latest_version:
            self.latest_version = w.version
            self.latest_weights = payload

    def on_eval(self, version: int, returns: list[float], eval_s: float, payload: bytes) -> None:
        import numpy as np

        r = np.asarray(returns)
        wall = time.monotonic() - self.t0
        published_at = decode_weights(payload).published_at
        training_s = published_at - self.first_published_at if self.first_published_at else None
        row = {
            "wall_s": round(wall, 2),
            "model_version": version,
            "env_steps": self.env_steps,
            "episodes": len(r),
            "mean": float(r.mean()),
            "std": float(r.std()),
            "min": float(r.min()),
            "max": float(r.max()),
            "eval_s": round(eval_s, 3),
            "training_s": round(training_s, 2) if training_s is not None else None,
        }
        with self._eval_lock:
            self.evals.append(row)
            self._evals.writerow(list(row.values()))
            self._evals_file.flush()
            if self.best_eval is None or row["mean"] > self.best_eval:
                self.best_eval = row["mean"]
                best = self.run_dir / "best"
                best.mkdir(exist_ok=True)
                tmp = best / "weights.safetensors.tmp"
                tmp.write_bytes(payload)
                tmp.replace(best / "weights.safetensors")
                (best / "evaluation.json").write_text(json.dumps(row, indent=2))
            target = self.config.train.target_return
            if target is not None and row["mean"] >= target and self.solved_at is None:
                self.solved_at = row
        self.node.publish(self.topics.evaluation("train"), encode_json(row), qos=1, kind="eval")

    def snapshot(self, elapsed: float) -> dict:
        import numpy as np

        m = self.metrics
        return {
            "elapsed": elapsed,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "mean_return": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            "samples_per_s": m.get("samples_per_s"),
            "updates_per_s": m.get("updates_per_s"),
            "updates": m.get("updates"),
            "model_version": m.get("model_version", self.latest_version),
            "learner": self.learner_status,
            "workers_online": sum(s == "online" for s in self.worker_status.values()),
            "workers": len(self.worker_status),
            "rejected": sum((m.get("rejected") or {}).values()),
            "last_eval": self.evals[-1] if self.evals else None,
            "best_eval": self.best_eval,
        }

    def summary(self, stop_reason: str, wall: float) -> dict:
        s = self.solved_at
        return {
            "run": self.config.run,
            "algorithm": self.config.algorithm.name,
            "env": self.config.env.id,
            "seed": self.config.train.seed,
            "stop_reason": stop_reason,
            "wall_s": round(wall, 2),
            "solved": s is not None,
            "target_return": self.config.train.target_return,
            "time_to_solve_s": s["wall_s"] if s else None,
            # from the learner's first model to the publication of the model that solved: no start-up,
            # no evaluation cadence (what a single-process library's clock measures)
            "training_time_to_solve_s": s["training_s"] if s else None,
            "env_steps_at_solve": s["env_steps"] if s else None,
            "solve_eval_mean": s["mean"] if s else None,
            "solve_model_version": s["model_version"] if s else None,
            "best_eval_mean": self.best_eval,
            "final_eval_mean": self.final_eval["mean"] if self.final_eval else None,
            "final_model_version": self.final_eval["model_version"] if self.final_eval else None,
            "evaluations": len(self.evals),
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "updates": self.metrics.get("updates"),
            "model_version": self.latest_version,
            "workers": len(self.worker_status),  # workers that announced themselves during the run
            "rejected": self.metrics.get("rejected", {}),
        }

    def stop(self) -> None:
        self.node.stop(flush_timeout=2)
        self._episodes_file.close()
        self._evals_file.close()
