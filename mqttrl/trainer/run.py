"""``mqttrl train``: a whole run on this machine, composed of the nodes a distributed run uses.

Starts an embedded broker (unless one is given); the learner, N workers and any inference servers
as child processes (exactly what you would run on separate hosts), under one :class:`Supervisor`;
and the telemetry node and the evaluator node as threads of this process. What the trainer adds
comes from those nodes: each episode telemetry decodes and each result of the evaluator go to a
:class:`RunRecord` (``episodes.csv``, ``evaluations.csv``, ``best/``, the target), which with
telemetry's view feeds the live progress display and ``summary.json``. Stops at the target
return, the time or step budget, or Ctrl-C; at a budget the newest model gets a last evaluation.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mqttrl.broker.embedded import EmbeddedBroker
from mqttrl.config import RunConfig
from mqttrl.nodes.evaluator import EvaluatorNode
from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings, make_storages
from mqttrl.state.atomic import EXIT_DISK_FULL, is_disk_full, write_file_atomically
from mqttrl.state.run_dir import check_writable, write_resolved
from mqttrl.system.procs import install_stop_handlers
from mqttrl.trainer.plan import plan_children, storage_options
from mqttrl.trainer.progress import Progress
from mqttrl.trainer.record import RunRecord
from mqttrl.trainer.supervisor import Child, Supervisor
from mqttrl.transport.client import BrokerSettings

log = logging.getLogger("mqttrl.train")

#: the loggers of the in-process nodes -> their file in ``<run dir>/logs`` (as a child's output)
NODE_LOGS = {
    "mqttrl.telemetry": "telemetry.log",
    "mqttrl.storage": "telemetry.log",
    "mqttrl.evaluate": "evaluator.log",
}
#: every other ``mqttrl`` logger of the trainer's process (the trainer, its supervisor, the broker)
TRAINER_LOG = "trainer.log"
#: the run is given up when none of its child processes stayed up 30 s for this long (docs/cli.md)
GIVE_UP_AFTER_S = 300.0
#: the stop reasons of a run that ended as planned (any other is a failure: exit 1)
PLANNED_STOPS = ("target reached", "time budget", "env step budget", "interrupted")
#: the stop reason of a run ended by a full disk (exit 6: what was written is kept whole)
DISK_FULL = "disk full"


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


def _node_logs(run_dir: Path, quiet: bool = False) -> Callable[[], None]:
    """The in-process nodes log into ``<run dir>/logs`` (not onto the progress display), as a
    child process does, and the trainer's own lines (every other ``mqttrl`` logger) go to
    ``logs/trainer.log`` too; ``quiet``: only there, at INFO, nothing on the console. Returns what
    puts the loggers back."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    files: dict[str, logging.FileHandler] = {}
    undo = []
    for name, file in {**NODE_LOGS, "mqttrl": TRAINER_LOG}.items():
        handler = files.get(file) or files.setdefault(file, _LogFile(run_dir / "logs" / file))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
        logger = logging.getLogger(name)
        undo.append((logger, handler, logger.propagate, logger.level))
        logger.addHandler(handler)
        logger.propagate = name == "mqttrl" and not quiet  # a node's lines: its own file only
        if quiet and logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)

    def restore() -> None:
        for logger, handler, propagate, level in undo:
            logger.removeHandler(handler)
            logger.propagate = propagate
            logger.setLevel(level)
        for handler in files.values():
            handler.close()

    return restore


class _LogFile(logging.FileHandler):
    """A node's log file that drops its lines once the disk is full, instead of printing a
    "--- Logging error ---" traceback on the console for every line (the run says so in one)."""

    def handleError(self, record: logging.LogRecord) -> None:
        import sys

        if is_disk_full(sys.exc_info()[1]):
            return
        super().handleError(record)


class NodeThread(threading.Thread):
    """A node's loop in a thread of the trainer; keeps the error that ended it."""

    def __init__(self, name: str, loop: Callable[[], object]):
        super().__init__(name=name, daemon=True)
        self.loop = loop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as e:  # the trainer stops the run and says why
            self.error = e
            logging.getLogger(f"mqttrl.{self.name}").exception("the %s node failed", self.name)


class LocalRun:
    """What one ``mqttrl train`` run started, and how to stop it again (:meth:`stop`)."""

    def __init__(self, config: RunConfig, run_dir: Path):
        self.config, self.run_dir = config, run_dir
        self.embedded_broker: EmbeddedBroker | None = None
        self.supervisor: Supervisor | None = None
        self.learner: Child | None = None
        self.record: RunRecord | None = None
        self.telemetry: TelemetryNode | None = None
        self.evaluator: EvaluatorNode | None = None
        self.threads: list[NodeThread] = []
        self._undo: list[Callable[[], object]] = []

    def on_stop(self, fn: Callable[[], object]) -> None:
        """``fn`` is part of stopping what was started so far (run last-in, first-out)."""
        self._undo.append(fn)

    def stop(self) -> None:
        """Stop everything started, the last started first: the children (the learner last), then
        telemetry (which has counted their last episodes), the evaluator, the files, the broker."""
        while self._undo:
            fn = self._undo.pop()
            try:
                fn()
            except Exception:
                log.exception("stopping the run")

    def run_node(self, name: str, loop: Callable[[], object], stop: Callable[[], None], join_s: float) -> None:
        thread = NodeThread(name, loop)
        thread.start()
        self.threads.append(thread)
        self.on_stop(lambda: (stop(), thread.join(join_s)))

    def view(self) -> dict:
        assert self.telemetry is not None
        return self.telemetry.view()

    def snapshot(self, elapsed: float) -> dict:
        assert self.record is not None and self.evaluator is not None
        return self.record.snapshot(elapsed, self.view(), self.evaluator.latest_version)


def _start(
    config: RunConfig,
    run_dir: Path,
    broker: BrokerSettings | None,
    broker_args: list[str] | None,
    embedded: str,
    credentials: Mapping[str, tuple[str, str]] | None,
    start_from: dict,
    quiet: bool = False,
) -> LocalRun:
    """Start the broker (unless given), the in-process nodes, then the children; on any failure
    (an env that cannot be made, a broker that refuses) stop what started and raise."""
    run = LocalRun(config, run_dir)
    try:
        run.on_stop(_node_logs(run_dir, quiet))
        if broker is None:
            run.embedded_broker = EmbeddedBroker(embedded, workdir=run_dir / "broker").start()
            run.on_stop(run.embedded_broker.stop)
            broker = BrokerSettings(url=run.embedded_broker.url)
            log.info("embedded %s broker at %s", run.embedded_broker.kind, broker.url)
        plan = plan_children(config, run_dir, broker, broker_args, credentials, **start_from)
        _start_nodes(run, plan.brokers)
        run.learner = plan.learner
        run.supervisor = Supervisor(plan.children, give_up_after_s=GIVE_UP_AFTER_S, final_codes=(EXIT_DISK_FULL,))
        run.on_stop(run.supervisor.stop)
        run.supervisor.start()
    except BaseException:  # leave no broker, thread or child process behind
        run.stop()
        raise
    return run


def _start_nodes(run: LocalRun, brokers: Mapping[str, BrokerSettings]) -> None:
    """The record, then the evaluator (made first: its env is made here) and telemetry, each
    connected here and then looping in a thread."""
    config, tc = run.config, run.config.train
    run.record = record = RunRecord(config, run.run_dir)
    run.on_stop(record.close)
    run.evaluator = EvaluatorNode(
        brokers["operator"],
        config.run,
        tc.eval_episodes,
        tc.eval_every_s,
        name="train",
        config=config,
        first_after_s=tc.eval_every_s,
        every_env_steps=tc.eval_every_env_steps,
        on_result=record.on_evaluation,
        play=tc.eval_on != "workers",  # else the workers play them on their games; it hands their results on
    )
    names = list(tc.telemetry_storages) if tc.telemetry else []
    storages = make_storages(names, storage_options(names, run.run_dir))
    run.telemetry = TelemetryNode(
        brokers["telemetry"],
        config.run,
        storages,
        TelemetrySettings(quicksave_best=tc.telemetry),
        on_episode=record.on_episode,
        on_env_steps=record.on_env_steps,
    )
    run.evaluator.start()
    run.run_node("evaluate", run.evaluator.serve, run.evaluator.stop, join_s=2.0)
    run.telemetry.start()
    run.run_node("telemetry", run.telemetry.serve, run.telemetry.stop, join_s=60.0)


def _stop_reason(run: LocalRun, elapsed: float) -> str | None:
    """Why the run ends now, or None: the target, a budget, a learner given up, a node that failed."""
    assert run.record is not None and run.supervisor is not None
    tc = run.config.train
    if run.record.solved_at is not None:
        return "target reached"
    if tc.max_seconds and elapsed > tc.max_seconds:
        return "time budget"
    if tc.max_env_steps and run.record.env_steps >= tc.max_env_steps:
        return "env step budget"
    if run.record.disk_full or any(_exit_code(c) == EXIT_DISK_FULL for c in run.supervisor.given_up):
        return DISK_FULL
    for c in run.supervisor.given_up:
        return f"{c.name} exited ({c.proc.returncode if c.proc else None}) {c.restarts + 1} times"
    hopeless = run.supervisor.hopeless()
    if hopeless is not None:
        return hopeless
    for t in run.threads:
        if t.error is not None and is_disk_full(t.error):
            return DISK_FULL
        if t.error is not None:
            return f"the {t.name} node failed: {type(t.error).__name__}: {t.error}"
    return None


def _exit_code(child: Child) -> int | None:
    return child.proc.returncode if child.proc is not None else None


def _watch(run: LocalRun, display: Progress, t_start: float, interrupted: threading.Event) -> str:
    """Show progress and supervise the children until a stop reason or ``interrupted``."""
    assert run.supervisor is not None
    while not interrupted.wait(0.25):
        elapsed = time.monotonic() - t_start
        display.update(run.snapshot(elapsed))
        reason = _stop_reason(run, elapsed)
        if reason is not None:
            return reason
        run.supervisor.check()
    return "interrupted"


def _final_evaluation(run: LocalRun, display: Progress, t_start: float, cancel: threading.Event) -> None:
    """The budget ran out: the evaluator evaluates the newest model unless an evaluation has it
    (after one under way). The workers go on meanwhile. Ctrl-C (``cancel``) ends the wait."""
    assert run.evaluator is not None and run.record is not None
    if run.evaluator.latest_version < 0:
        return
    timeout = 60.0 + 4 * max((e["eval_s"] for e in list(run.record.evals)), default=60.0)
    version = run.evaluator.latest_version
    if run.evaluator.play:
        log.info("budget reached: the final model (version %d) is evaluated", version)
    else:  # the workers evaluate on their games, every eval_every_s: the next of theirs is the final one
        timeout += run.config.train.eval_every_s
        log.info(
            "budget reached: waiting for the workers' evaluation of model %d or a newer one (train.eval_on = "
            '"workers", every %.0f s)',
            version,
            run.config.train.eval_every_s,
        )
    if not run.evaluator.final(timeout, cancel):
        why = "was interrupted" if cancel.is_set() else f"did not end within {timeout:.0f}s"
        log.warning("the final evaluation %s; summary.json has the earlier ones", why)
    if run.evaluator.play:  # the evaluator judged the newest model it had when asked (maybe newer than `version`)
        run.record.final_eval = run.record.evaluation_of(run.evaluator.latest_version)
    else:
        run.record.final_eval = run.record.newest_evaluation(at_least=version)
    display.update(run.snapshot(time.monotonic() - t_start))


def _failure(run: LocalRun, stop_reason: str) -> str | None:
    """The one line that says why a run that did not end as planned failed (None if it did)."""
    if stop_reason in PLANNED_STOPS:
        return None
    if stop_reason == DISK_FULL:
        return disk_full_line(run.run_dir)
    assert run.supervisor is not None
    logs = [str(c.log_path) for c in run.supervisor.given_up]
    where = f" (see {', '.join(logs)})" if logs else f" (see {run.run_dir / 'logs'})"
    return f"the run failed: {stop_reason}; given up{where}"


def disk_full_line(run_dir: Path, unwritten: str = "") -> str:
    """The one line of a run ended by a full disk: what it kept whole, and how to go on."""
    from mqttrl.state.run_dir import what_is_kept

    lost = f"; {unwritten} was not written" if unwritten else ""
    return (
        f"the run stopped: the disk is full; {what_is_kept(run_dir)}{lost}. Free space, then continue "
        f"it with --resume (mqttrl train {shlex.quote(str(run_dir))}/config.json --run-dir "
        f"{shlex.quote(str(run_dir))} --resume)"
    )


def _summary(run: LocalRun, stop_reason: str, wall: float) -> dict:
    """``summary.json``'s content, written into the run directory (atomically: a full disk leaves the
    previous one, or none, never a truncated one; the run then says so, exit 6)."""
    assert run.record is not None and run.supervisor is not None and run.evaluator is not None
    summary = run.record.summary(stop_reason, wall, run.view(), run.evaluator.latest_version)
    summary["failure"] = _failure(run, stop_reason)
    summary["restarts"] = {c.name: c.restarts for c in run.supervisor.children if c is not run.learner}
    summary["learner_restarts"] = run.learner.restarts if run.learner else 0
    summary["run_dir"] = str(run.run_dir)
    try:
        write_file_atomically(run.run_dir / "summary.json", json.dumps(summary, indent=2))
    except OSError as e:
        if not is_disk_full(e):
            raise
        summary["stop_reason"] = DISK_FULL
        summary["failure"] = disk_full_line(run.run_dir, unwritten="summary.json")
    return summary


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
    *,
    resume: bool = False,
    overwrite: bool = False,
    init_from: Path | None = None,
    quiet: bool = False,
) -> dict:
    """Run ``config`` on this machine until its target, its budget, a stop signal (in the main
    thread) or ``stop`` being set; returns the summary it writes to ``<run dir>/summary.json``.

    Safe to call from any thread: signal handlers are installed (and the previous ones put back
    after) only in the main thread. :func:`mqttrl.train` is the friendlier front of this.

    ``credentials``: node kind -> (user, password) on a broker with per-run clients (``mqttrl broker
    add-run``): the learner, the workers, the inference servers and telemetry each log in as their
    own kind, the evaluator as ``operator``.

    ``resume``: continue the run in ``run_dir`` (the learner starts from its newest checkpoint);
    ``overwrite``: start again in a ``run_dir`` that holds a run (moved aside first); without either
    a ``run_dir`` holding checkpoints raises :class:`~mqttrl.state.run_dir.RunDirInUse` before
    anything starts. ``init_from``: the learner starts from that model (a run directory or a file).
    ``quiet``: nothing on stdout or stderr (no display, no summary lines; every log line goes to
    ``<run dir>/logs``). A run that failed (the learner given up) says why in ``summary["failure"]``.
    """
    if run_dir is not None:  # a read-only or foreign folder: one line (exit 2) before anything starts
        check_writable(Path(run_dir))
    else:
        check_writable(Path("runs").absolute(), "the default run directory")
    config = _preflight(config)
    start_from = _claim(run_dir, resume, overwrite, init_from)
    run_dir = Path(run_dir) if run_dir is not None else _new_run_dir(config.run)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_resolved(config, run_dir / "config.json")
    t_start = time.monotonic()
    run = _start(config, run_dir, broker, broker_args, embedded, credentials, start_from, quiet)
    display = Progress(config, enabled=progress, quiet=quiet)
    interrupted = stop if stop is not None else threading.Event()
    restore_signals = _stop_on_signals(interrupted)
    stop_reason = "interrupted"
    try:
        stop_reason = _watch(run, display, t_start, interrupted)
        if config.train.final_eval and stop_reason in ("time budget", "env step budget"):
            _final_evaluation(run, display, t_start, interrupted)
    finally:
        restore_signals()
        display.close()
        run.stop()
    summary = _summary(run, stop_reason, time.monotonic() - t_start)
    if print_summary and not quiet:
        _print_summary(summary)
    return summary


#: what a run directory holds of the trainer's record, moved aside with the checkpoints by ``overwrite``
RECORD_FILES = ("episodes.csv", "evaluations.csv", "summary.json", "best", "telemetry", "tensorboard")


def _preflight(config: RunConfig) -> RunConfig:
    """The mistakes a run's config and env show, before a broker, a run directory or a process starts:
    a human baseline that cannot be read (``[train] human_baseline``), an env
    that cannot be made (exit 2 for an unknown id, 5 for a missing package), one that differs from a
    spec the config declares, and an algorithm that cannot act in it (exit 2, naming those that can).
    The env is made once and closed; returns ``config`` with its spec (``env.spec``), which every node
    reads instead of making the env again."""
    from mqttrl.envs.fit import check_fit, run_spaces
    from mqttrl.envs.spec import EnvSpec, check_env_against, made_by, spec_of_config, with_spec
    from mqttrl.plugin.manager import get_registry
    from mqttrl.trainer.baseline import load_baseline

    load_baseline(config.train.human_baseline)  # a file that cannot be read: one line, now
    registry = get_registry()
    spaces = run_spaces(config.env, registry)
    spec = EnvSpec(*spaces, config.env.id, made_by("trainer"))
    declared = spec_of_config(config)
    if declared is not None:
        check_env_against(spec, declared)
        spec = declared
    check_fit(config.algorithm.name, config.algorithm.params, config.env.id, spaces, registry)
    return with_spec(config, spec)


def _claim(run_dir: Path | None, resume: bool, overwrite: bool, init_from: Path | None) -> dict:
    """Check, before anything starts, that the run may use ``run_dir`` (mqttrl.state.run_dir.claim)
    and that ``init_from`` exists; returns the plan's ``resume``/``init_from``."""
    from mqttrl.state.run_dir import RunDirInUse, claim

    if resume and init_from is not None:
        raise RunDirInUse(
            "--resume continues this run's checkpoints, --init-from starts from another model: choose one"
        )
    if init_from is not None and not Path(init_from).exists():
        raise FileNotFoundError(f"init_from {init_from}: no such run directory or file")
    if run_dir is None:
        if resume or overwrite:
            raise RunDirInUse("--resume and --overwrite need the run directory (--run-dir) to continue or replace")
        return {"resume": False, "init_from": init_from}
    aside = claim(Path(run_dir), resume=resume, overwrite=overwrite)
    if aside is not None:
        for name in RECORD_FILES:
            if (Path(run_dir) / name).exists():
                (Path(run_dir) / name).rename(aside / name)
        log.info("the previous run's checkpoints and records are kept in %s", aside)
    return {"resume": resume, "init_from": Path(init_from) if init_from is not None else None}


def _print_summary(s: dict) -> None:
    lines = [f"run {s['run']} stopped: {s['stop_reason']} after {s['wall_s']:.0f}s"]
    if s["solved"] and s["stop_reason"] != "target reached":  # the budget's last evaluation reached it
        lines[0] += "; the evaluation at its end reached the target"
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
    lines.extend(next_steps(Path(s["run_dir"]), exportable=can_export(s.get("algorithm"))))
    print("\n".join(lines), flush=True)


def can_export(algorithm: str | None, registry: Any = None) -> bool:
    """Whether ``mqttrl export`` can write this algorithm's policy: its plugin gives ``export_module``
    (so the end of a run offers export only where it works)."""
    from mqttrl.plugin.manager import get_registry

    found = (registry or get_registry()).algorithms.get(algorithm) if algorithm else None
    return found is not None and getattr(found.obj, "export_module", None) is not None


def next_steps(run_dir: Path, exportable: bool = True) -> list[str]:
    """What to run next on a finished run: play its model, export it (``exportable``) or train on."""
    quoted = shlex.quote(str(run_dir))
    from mqttrl.policy.source import PolicyLoadError, locate

    try:
        locate(run_dir)
    except (OSError, PolicyLoadError):
        return [f"no model was saved: nothing to play or resume (each process's log: {quoted}/logs)"]
    export = f"mqttrl export {quoted} -o policy.onnx, " if exportable else ""
    return [
        f"next: mqttrl enjoy {quoted} (watch it play), {export}"
        f"or mqttrl train {quoted}/config.json --run-dir {quoted} --resume (train on)"
    ]
