"""``mqttrl status``: a live table of the learner and every worker of a run, and ``mqttrl quicksave``."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid

import attrs
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from mqttrl.cli.broker_runs import AbsentRun, BrokerRuns, RunNotOnBroker
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import SPECS, Kind, Topics
from mqttrl.wire import (
    EpisodeReport,
    Heartbeat,
    LearnerMetrics,
    LearnerState,
    Quicksave,
    QuicksaveReply,
    StepRate,
    WorkerState,
)

log = logging.getLogger("mqttrl.status")


@attrs.define
class WorkerRow:
    """One worker as the table shows it: its state, its last heartbeat's figures and its last
    episode's return; a real-time worker's control periods since its last heartbeat."""

    status: str = "?"
    last_hb: float | None = None
    steps: int | None = None
    rate: float | None = None
    version: int | None = None
    last_return: float | None = None
    env_restarts: int | None = None
    #: env steps a person played instead of the policy (a takeover), of ``steps``
    person_steps: int | None = None
    period_p50_ms: float | None = None
    period_p99_ms: float | None = None
    period_max_ms: float | None = None
    overruns: int | None = None
    lost_s: float | None = None
    paused_s: float | None = None
    #: the steps per second, from the heartbeats' counts (not shown)
    step_rate: StepRate = attrs.field(factory=StepRate, repr=False)

    def shown(self) -> dict:
        """Its fields for --json, those not reported yet left out."""
        return {k: v for k, v in attrs.asdict(self, filter=lambda a, _: a.name != "step_rate").items() if v is not None}


def _share(part: int | None, whole: int | None) -> str:
    """``part`` of ``whole`` as a percentage cell ("-" when unknown)."""
    if not part or not whole:
        return "-" if part is None else "0%"
    return f"{100 * part / whole:.0f}%"


class FleetView:
    """What an operator wants to see, built from retained states, heartbeats, episodes and metrics."""

    def __init__(self, run: str):
        self.topics = Topics(run)
        self.learner: LearnerState | None = None
        self.metrics: LearnerMetrics | None = None
        self.workers: dict[str, WorkerRow] = {}
        #: the handler table; its counter holds every refused message by reason
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.LEARNER_STATE: self.on_learner_state,
                Kind.LEARNER_METRICS: self.on_learner_metrics,
                Kind.WORKER_STATE: self.on_worker_state,
                Kind.HEARTBEAT: self.on_heartbeat,
                Kind.EPISODES: self.on_episodes,
            },
            log,
        )
        self.rejections = self.dispatch.rejections

    def _w(self, name: str) -> WorkerRow:
        return self.workers.setdefault(name, WorkerRow())

    def handle(self, topic: str, payload: bytes) -> None:
        """Handle one received message through the handler table (refusals are counted, not raised)."""
        self.dispatch(topic, payload)

    @property
    def heard(self) -> bool:
        """Whether anything of the run came: its learner's state or metrics, or a worker."""
        return bool(self.learner or self.metrics or self.workers)

    @property
    def learner_status(self) -> str:
        return self.learner.status if self.learner is not None else "unknown"

    def on_learner_state(self, name: str, payload: bytes) -> None:
        if payload:
            self.learner = LearnerState.decode(payload)

    def on_learner_metrics(self, name: str, payload: bytes) -> None:
        self.metrics = LearnerMetrics.decode(payload)

    def on_worker_state(self, name: str, payload: bytes) -> None:
        if payload:
            self._w(name).status = WorkerState.decode(payload).status

    def on_heartbeat(self, name: str, payload: bytes) -> None:
        hb = Heartbeat.decode(payload)
        w = self._w(name)
        w.rate = w.step_rate.update(hb, time.time())
        w.last_hb, w.steps, w.version, w.status = time.time(), hb.env_steps, hb.model_version, "online"
        if hb.env_restarts is not None:  # games that crashed and were made afresh
            w.env_restarts = hb.env_restarts
        if hb.person_steps is not None:
            w.person_steps = hb.person_steps
        rt = hb.realtime
        if rt is not None:  # a real-time worker: its control periods since its last heartbeat
            err = rt.get("period_err_ms") or {}
            w.period_p50_ms, w.period_p99_ms, w.period_max_ms = err.get("p50"), err.get("p99"), err.get("max")
            w.overruns, w.lost_s, w.paused_s = rt.get("overruns"), rt.get("lost_s"), rt.get("paused_s")

    def on_episodes(self, name: str, payload: bytes) -> None:
        episodes = EpisodeReport.decode(payload).episodes
        if episodes:
            self._w(name).last_return = episodes[-1].episode_return

    def subscriptions(self) -> list[tuple[str, int]]:
        """One filter per kind in the handler table; episodes at QoS 0 (a viewer may miss some)."""
        qos = {Kind.EPISODES: 0}
        return [(self.topics.filter(k), qos.get(k, SPECS[k].qos)) for k in self.dispatch.handlers]

    def model_version(self) -> int | None:
        """The learner's newest model version: its metrics, else its birth message."""
        version = self.metrics.model_version if self.metrics is not None else None
        if version is None and self.learner is not None:
            version = self.learner.model_version
        return version if isinstance(version, int) else None

    def lag(self, worker: WorkerRow) -> int | None:
        """Versions the worker's model is behind the learner's. Never negative: the learner's metrics
        come once a second, so a worker's heartbeat can name a version they have not reached yet."""
        version = self.model_version()
        if version is None or not isinstance(worker.version, int):
            return None
        return max(0, version - worker.version)

    def table(self) -> Table:
        """Short column titles, so that the table fits an 80-column terminal (or a pipe)."""
        version = self.model_version()
        t = Table(
            title=f"mqttrl run {self.topics.run}", box=box.SIMPLE_HEAD, pad_edge=False
        )  # no column rules: fits 80 columns
        t.add_column("node", max_width=16, overflow="ellipsis", no_wrap=True)  # long names are cut, not the titles
        realtime = any(w.period_p99_ms is not None for w in self.workers.values())
        person = any(w.person_steps for w in self.workers.values())  # someone took a game over
        cols = (
            ("status", "seen", "steps/s", "model", "lag", "return", "restarts")
            + (("p99 ms", "late") if realtime else ())
            + (("person",) if person else ())
        )
        for col in cols:
            t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True, min_width=len(col))
        m = self.metrics
        fleet_rt = m.realtime if realtime and m is not None else None
        updates = m.updates_per_s if m is not None else None
        t.add_row(
            "learner",
            _status(self.learner_status),
            "-",
            f"{updates:.0f} upd" if isinstance(updates, int | float) else "-",
            _text(version),
            "-",
            "-",
            _text(m.env_restarts if m is not None else None),
            *(
                _realtime_cells(fleet_rt.get("period_err_ms") or {}, fleet_rt)
                if isinstance(fleet_rt, dict)
                else ["-", "-"]
            )[: 2 if realtime else 0],
            *(["-"] if person else []),
        )
        now = time.time()
        for name in sorted(self.workers):
            w = self.workers[name]
            t.add_row(
                name,
                _status(w.status),
                f"{now - w.last_hb:.0f}s" if w.last_hb else "-",
                f"{w.rate:,.0f}" if w.rate is not None else "-",
                _text(w.version),
                _text(self.lag(w)),
                f"{w.last_return:.1f}" if w.last_return is not None else "-",
                _text(w.env_restarts),
                *(_realtime_cells({"p99": w.period_p99_ms}, {"overruns": w.overruns}) if realtime else []),
                *([_share(w.person_steps, w.steps)] if person else []),
            )
        return t

    def rows(self) -> list[dict]:
        """Plain data for --json: what a node has not reported yet is left out (never null), and the
        lag is never negative."""
        learner = {"node": "learner", "status": self.learner_status, "model_version": self.model_version()}
        out = [{k: v for k, v in learner.items() if v is not None}]
        for name in sorted(self.workers):
            w = self.workers[name]
            row = {"node": name, **w.shown(), "lag": self.lag(w)}
            out.append({k: v for k, v in row.items() if v is not None})
        return out


def _realtime_cells(err: dict, counts: dict) -> list[str]:
    """A real-time row's control-period p99 (ms) and overruns."""
    p99 = err.get("p99")
    return [f"{p99:.1f}" if isinstance(p99, int | float) else "-", _text(counts.get("overruns"))]


def _text(value) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "-"


def _status(s: str) -> str:
    return {"online": "[green]online[/]", "offline": "[red]offline[/]"}.get(s, s)


def watch_status(
    broker: BrokerSettings,
    run: str,
    once_after: float | None = None,
    every_s: float = 5.0,
    stop: threading.Event | None = None,
    wait_s: float = 5.0,
) -> FleetView:
    """Listen to a run and show its table: live on a terminal; printed every ``every_s`` seconds
    when stdout is a pipe or a file (a Live display there would print nothing until the end);
    once after ``once_after`` seconds when that is given. Ends when ``stop`` is set (the command's
    SIGINT/SIGTERM handler sets it: a KeyboardInterrupt raised wherever the main thread happened to
    be, inside paho's start or rich's print, once left the command hanging) or on KeyboardInterrupt.
    Nothing of the run within ``wait_s`` (a misspelled run): :class:`RunNotOnBroker` once, a line on
    stderr live (:mod:`mqttrl.cli.broker_runs`)."""
    stop = stop or threading.Event()
    view = FleetView(run)
    subscriptions = [*view.subscriptions(), BrokerRuns.subscription()]
    node = MqttClient(broker, client_id=f"mqttrl-status-{uuid.uuid4().hex[:8]}", subscriptions=subscriptions)
    node.start(wait=10)
    absent = AbsentRun(view, broker.url, wait_s, live=once_after is None)
    console = Console()
    try:
        if once_after is not None:
            _drain_for(node, absent, once_after, stop)
            _drain_for(node, absent, absent.left_s() if not view.heard else 0.0, stop)
            line = absent.line()
            if line is not None:
                raise RunNotOnBroker(line)
        elif console.is_terminal:
            with Live(view.table(), console=console, refresh_per_second=2) as live:
                while not stop.is_set():
                    _drain_for(node, absent, 0.25, stop)
                    live.update(view.table())
        else:
            while not stop.is_set():
                _drain_for(node, absent, every_s, stop)
                console.print(view.table())
                console.file.flush()
        return view
    except KeyboardInterrupt:
        return view
    finally:
        node.stop(flush_timeout=1)


def _drain_for(node: MqttClient, absent: AbsentRun, seconds: float, stop: threading.Event) -> None:
    """Hand every message that arrives in the next ``seconds`` (or until ``stop``) to the view (through
    ``absent``, which also says once when nothing of the run came: live mode keeps watching)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
        try:
            m = node.inbox.get(timeout=min(0.1, left))
            absent.handle(m.topic, m.payload)
        except queue.Empty:
            pass
        absent.say_once()


def quicksave(broker: BrokerSettings, run: str, timeout: float = 30.0, name: str | None = None) -> dict:
    """Ask the learner for a checkpoint and return its reply (path, model version, updates)."""
    tp = Topics(run)
    request = uuid.uuid4().hex[:12]
    node = MqttClient(
        broker, client_id=f"mqttrl-quicksave-{request}", subscriptions=[(tp.reply(request), 1), (tp.learner_state, 1)]
    ).start(wait=10)
    try:
        time.sleep(0.2)  # let the subscription settle before asking
        command = Quicksave(name=name or None, reply_to=tp.reply(request))
        node.publish(tp.command("quicksave"), command.encode(), qos=1, kind="cmd")
        deadline = time.monotonic() + timeout
        learner = "unknown"
        while time.monotonic() < deadline:
            try:
                m = node.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            if m.topic == tp.learner_state and m.payload:
                learner = LearnerState.decode(m.payload).status
            elif m.topic == tp.reply(request):
                return QuicksaveReply.decode(m.payload).to_json()
        raise TimeoutError(
            f"no answer from the learner of run {run!r} in {timeout:.0f}s (its last state: {learner}). "
            "Check that it is running on this broker and that these credentials may send commands"
        )
    finally:
        node.stop(flush_timeout=1)
