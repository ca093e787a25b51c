"""The telemetry node: watches a run, aggregates, writes to storages, asks for best-model saves.

It subscribes to episode stats, learner metrics, heartbeats, node states,
evaluations and the run's config (handed to the storages that take it); turns
them into :class:`~mqttrl.plugin.storage.Point` s (schema in docs/telemetry.md) for
every configured storage plugin; and when a model beats the best so far, publishes
``cmd/learner/quicksave`` with ``name="best"`` and its score so the learner writes that model
to ``checkpoints/best/``. Models are judged by greedy evaluation (``eval/<evaluator>``) once an
evaluator reports, by the moving average of training returns only while none does; the best so
far comes back with the learner's retained state, so a restarted telemetry node never asks for
a worse model (:mod:`mqttrl.state.best`).

``mqttrl telemetry`` runs it in the foreground; ``mqttrl train`` runs the same node in a thread,
reads what it keeps through :meth:`TelemetryNode.view` and takes every episode through
``on_episode`` (its ``episodes.csv``).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from mqttrl.observe.timing import timing_fields
from mqttrl.plugin.manager import get_registry
from mqttrl.plugin.storage import ConfiguredStorage, Point, pending_points
from mqttrl.state.best import GREEDY_EVAL, TRAINING_RETURNS, BestScore
from mqttrl.system.procs import install_stop_handlers
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import (
    EpisodeReport,
    EpisodeStats,
    Evaluation,
    Heartbeat,
    LearnerMetrics,
    LearnerState,
    Quicksave,
    StepRate,
    WorkerState,
    decode_json,
)

log = logging.getLogger("mqttrl.telemetry")


@attrs.define
class TelemetrySettings:
    #: episodes in the moving averages
    window: int = 20
    #: aggregate points every this many seconds
    interval_s: float = 2.0
    #: ask for a best-model checkpoint when the moving average beats the best by this much
    best_min_improvement: float = 0.0
    #: at most one best-model quicksave this often
    best_min_interval_s: float = 5.0
    #: send best-model quicksave commands at all
    quicksave_best: bool = True


@attrs.define
class WorkerView:
    name: str
    online: bool = False
    returns: collections.deque = attrs.Factory(lambda: collections.deque(maxlen=1000))
    lengths: collections.deque = attrs.Factory(lambda: collections.deque(maxlen=1000))
    episodes: int = 0
    #: the worker's env-step counter from its heartbeats (None until one came: not 0, which a reader of the
    #: counter would take for a restarted worker)
    env_steps: int | None = None
    steps: StepRate = attrs.Factory(StepRate)
    model_version: int = -1
    last_return: float | None = None
    outbox: int = 0
    dropped: int = 0
    last_seen: float = 0.0
    #: the game the worker launched (``[env] launch``): its starts and those after the first (heartbeats)
    game_launches: int = 0
    game_relaunches: int = 0
    #: of the relaunches, those after a crash (not a game over), and the seconds relaunches took
    game_crashes: int = 0
    relaunch_s: float = 0.0
    #: env steps a person played instead of the policy (a takeover), over the worker's processes
    person_steps: int = 0
    #: the counts of this worker's earlier processes (a restarted worker counts from 0 again), and
    #: the process they are of (the heartbeat's incarnation)
    before: dict = attrs.Factory(dict)
    incarnation: str | None = None
    last: dict = attrs.Factory(dict)

    def count(self, hb: Heartbeat) -> dict:
        """The counts of ``hb`` (env steps and its game's) added to those of the worker's earlier
        processes: what the run's record and summary.json read, which a worker's restart must not
        set back."""
        now = {"env_steps": hb.env_steps, "person_steps": hb.person_steps or 0}
        now.update({k: hb.count(k) for k in ("launches", "relaunches", "crashes")})
        now["relaunch_s"] = hb.game.seconds() if hb.game is not None else 0.0
        if self.incarnation is not None and hb.incarnation != self.incarnation:
            self.before = {k: self.before.get(k, 0) + v for k, v in self.last.items()}
        self.incarnation, self.last = hb.incarnation, now
        return {k: self.before.get(k, 0) + v for k, v in now.items()}

    def add_episode(self, episode_return: float, length: int) -> None:
        self.returns.append(episode_return)
        self.lengths.append(length)
        self.episodes += 1
        self.last_return = episode_return


def _mean(xs, n: int) -> float | None:
    if not xs:
        return None
    tail = list(xs)[-n:]
    return sum(tail) / len(tail)


class TelemetryNode:
    """Aggregates a run into ``storages``; ``on_episode``/``on_env_steps`` see each decoded episode and heartbeat's env steps."""

    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        storages: list,
        settings: TelemetrySettings | None = None,
        on_episode: Callable[[str, EpisodeStats], None] | None = None,
        on_env_steps: Callable[[str, int], None] | None = None,
    ):
        self.topics = Topics(run)
        self.on_episode, self.on_env_steps = on_episode, on_env_steps
        #: held while a message is handled: :meth:`view` reads from another thread
        self._lock = threading.Lock()
        self.run_name, self.storages = run, storages
        self.s = settings or TelemetrySettings()
        self.workers: dict[str, WorkerView] = {}
        self.all_returns: collections.deque = collections.deque(maxlen=10000)
        self.all_lengths: collections.deque = collections.deque(maxlen=10000)
        self.episodes = 0
        self.learner: LearnerMetrics | None = None  # its newest metrics message
        self.learner_status = "unknown"
        #: the run's resolved config (the learner's retained ``config`` message), once received
        self.config: dict | None = None
        #: the best model known: judged here, or read from the learner's retained state
        self.best: BestScore | None = None
        self.best_pending: BestScore | None = None
        #: an evaluator reported: greedy evaluations judge, training returns no longer do
        self.evaluated = False
        #: the newest model version an episode was played with
        self.episode_version = -1
        self._said_training = False
        self._last_best_sent = 0.0
        self.quicksaves_sent = 0
        self._stop = threading.Event()
        self._handled = 0
        self._handle_time = 0.0
        #: the handler table; its counter holds every refused message by reason
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.EPISODES: self.on_episodes,
                Kind.LEARNER_METRICS: self.on_learner_metrics,
                Kind.LEARNER_STATE: self.on_learner_state,
                Kind.WORKER_STATE: self.on_worker_state,
                Kind.HEARTBEAT: self.on_heartbeat,
                Kind.EVAL: self.on_eval,
                Kind.CONFIG: self.on_config,
            },
            log,
        )
        self.rejections = self.dispatch.rejections
        #: the refusal count last logged by :meth:`report_rejections`, and when
        self._rejections_logged, self._rejections_logged_at = 0, -1e18
        self.client = MqttClient(
            broker,
            client_id=f"mqttrl-telemetry-{run}",
            persistent=True,
            subscriptions=[self.topics.subscription(kind) for kind in self.dispatch.handlers],
            inbox_limit=100000,
        )

    # ---- messages ----------------------------------------------------------
    def _worker(self, name: str) -> WorkerView:
        return self.workers.get(name) or self.workers.setdefault(name, WorkerView(name=name))

    def _write(self, points: list[Point]) -> None:
        for st in self.storages:
            try:
                st.write(points)
            except Exception:  # one broken storage must not stop the others
                log.exception("storage %s failed to take points", type(st).__name__)

    def handle(self, topic: str, payload: bytes) -> None:
        """Handle one received message (through the handler table); times it for the ``telemetry`` point."""
        t0 = time.perf_counter()
        with self._lock:
            handled = self.dispatch(topic, payload)
        if handled is None:
            return  # not a topic of this run
        self._handled += 1
        self._handle_time += time.perf_counter() - t0

    def on_episodes(self, name: str, payload: bytes) -> None:
        now = time.time()
        w = self._worker(name)
        points = []
        for e in EpisodeReport.decode(payload).episodes:
            w.add_episode(e.episode_return, e.length)
            self.all_returns.append(e.episode_return)
            self.all_lengths.append(e.length)
            self.episodes += 1
            if self.on_episode is not None:
                self.on_episode(name, e)
            if e.model_version is not None:
                self.episode_version = max(self.episode_version, e.model_version)
            t = e.time if e.time is not None and abs(e.time - now) < 3600 else now
            points.append(Point("episode", {"run": self.run_name, "worker": name}, e.point_fields(), t))
            self._check_best(now)
        self._write(points)

    def on_learner_metrics(self, name: str, payload: bytes) -> None:
        self.learner = LearnerMetrics.decode(payload)
        self._write(self._learner_points(time.time()))

    def on_learner_state(self, name: str, payload: bytes) -> None:
        if payload:  # an empty retained message clears the state
            state = LearnerState.decode(payload)
            self.learner_status = state.status
            self._learn_best(state.best)

    def on_worker_state(self, name: str, payload: bytes) -> None:
        if payload:
            self._worker(name).online = WorkerState.decode(payload).online

    def on_heartbeat(self, name: str, payload: bytes) -> None:
        now = time.time()
        hb = Heartbeat.decode(payload)
        w = self._worker(name)
        w.steps.update(hb, now)
        w.env_steps = hb.env_steps
        w.model_version = hb.model_version
        w.outbox = hb.outbox or 0
        w.dropped = hb.dropped_total()
        total = w.count(hb)  # over the worker's processes: a restarted one counts on
        if hb.game is not None:
            w.game_launches, w.game_relaunches = total["launches"], total["relaunches"]
            w.game_crashes, w.relaunch_s = total["crashes"], total["relaunch_s"]
        w.person_steps = total["person_steps"]
        w.last_seen = now
        w.online = True
        if self.on_env_steps is not None:
            self.on_env_steps(name, total["env_steps"])

    def on_eval(self, name: str, payload: bytes) -> None:
        ev = Evaluation.decode(payload)  # a bad one is refused and counted by the dispatcher
        self._write([Point("eval", {"run": self.run_name, "evaluator": name}, ev.point_fields(), time.time())])
        self.evaluated = True
        self._propose_best(BestScore(ev.mean, ev.model_version, GREEDY_EVAL, ev.episodes, ev.model_epoch), time.time())

    def on_config(self, name: str, payload: bytes) -> None:
        """The run's config (retained): handed to every storage with a ``run_config(config)`` method."""
        if not payload:  # an empty retained message clears it
            return
        config = decode_json(payload)
        if config == self.config:  # a restarted learner publishes the same config again
            return
        self.config = config
        for st in self.storages:
            if isinstance(st, ConfiguredStorage):
                try:
                    st.run_config(config)
                except Exception:
                    log.exception("storage %s failed to take the run config", type(st).__name__)

    def _learner_points(self, now: float) -> list[Point]:
        m = self.learner
        if m is None:
            return []
        tags = {"run": self.run_name}
        fields = m.point_fields()
        fields.update(timing_fields(m.to_json()))  # where the time goes, per block; real-time control periods
        points = [Point("learner", tags, fields, now)]
        rejected = m.rejected or {}
        points += [
            Point("rejections", {**tags, "reason": r}, {"count": int(c)}, now)
            for r, c in rejected.items()
            if isinstance(c, int)
        ]
        return points

    # ---- best model ---------------------------------------------------------
    def _learn_best(self, data: Any) -> None:
        """A best the learner stored (its retained state carries it): ours when it beats what we know."""
        known = BestScore.from_json(data)
        if known is None or not known.beats(self.best):
            return
        self.best = known
        if self.best_pending is not None and not self.best_pending.beats(known):
            self.best_pending = None
        log.info("best model so far (the learner's): %s", known.describe())

    def _check_best(self, now: float) -> None:
        """Training returns judge only while no evaluator reported (greedy evaluations are the truth)."""
        if self.evaluated or len(self.all_returns) < self.s.window:
            return
        version = (
            self.episode_version if self.episode_version >= 0 else (self.learner.model_version if self.learner else -1)
        )
        if version < 0:
            return  # no model known yet: nothing to save
        avg = _mean(self.all_returns, self.s.window)
        self._propose_best(BestScore(avg, version, TRAINING_RETURNS, self.s.window), now)

    def _propose_best(self, candidate: BestScore, now: float) -> None:
        """Ask for ``candidate`` to be saved when it beats the best (by ``best_min_improvement`` within a kind)."""
        best = self.best
        if not candidate.beats(best):
            return
        same_kind = best is not None and best.judged_by == candidate.judged_by
        if same_kind and candidate.score <= best.score + self.s.best_min_improvement:
            return
        if candidate.judged_by == TRAINING_RETURNS and not self._said_training:
            self._said_training = True
            log.info(
                "no evaluator reports: the best model is judged by training returns (moving average of %d episodes)",
                self.s.window,
            )
        self.best = candidate
        tags = {"run": self.run_name, "judged_by": candidate.judged_by}
        self._write([Point("best", tags, candidate.point_fields(), now)])
        self.best_pending = candidate
        self._maybe_send_best()

    def _maybe_send_best(self) -> None:
        if not self.s.quicksave_best or self.best_pending is None:
            return
        if time.monotonic() - self._last_best_sent < self.s.best_min_interval_s:
            return
        best, self.best_pending = self.best_pending, None
        self._last_best_sent = time.monotonic()
        self.quicksaves_sent += 1
        command = Quicksave(
            name="best",
            score=best.score,
            model_version=best.model_version,
            model_epoch=best.model_epoch or None,
            judged_by=best.judged_by,
            episodes=best.episodes,
            # what a learner from before scores were stored reads
            mean_return=best.score,
            window=best.episodes,
        )
        self.client.publish(self.topics.command("quicksave"), command.encode(), qos=1, kind="cmd")
        log.info("new best model: %s; asked the learner to save it", best.describe())

    # ---- aggregates ---------------------------------------------------------
    def aggregate_points(self, now: float) -> list[Point]:
        tags = {"run": self.run_name}
        points = []
        version = self.learner.model_version if self.learner else None
        for w in self.workers.values():
            wt = {**tags, "worker": w.name}
            if w.returns:
                points.append(
                    Point(
                        "episode_stats",
                        wt,
                        {
                            "mean_return": _mean(w.returns, self.s.window),
                            "mean_length": _mean(w.lengths, self.s.window),
                            "episodes": w.episodes,
                        },
                        now,
                    )
                )
            fields: dict[str, Any] = {
                "online": int(w.online),
                "env_steps": w.env_steps,
                "env_steps_per_s": float(w.steps.rate or 0.0),
                "outbox": w.outbox,
                "dropped": w.dropped,
                "person_steps": w.person_steps,
            }
            # always the same fields (None: not known yet) so every storage sees a stable schema
            fields["version_lag"] = (
                max(0, version - w.model_version) if isinstance(version, int) and w.model_version >= 0 else None
            )
            fields["last_return"] = w.last_return
            points.append(Point("worker", wt, fields, now))
        if self.all_returns:
            points.append(
                Point(
                    "episode_stats",
                    {**tags, "worker": "all"},
                    {
                        "mean_return": _mean(self.all_returns, self.s.window),
                        "mean_length": _mean(self.all_lengths, self.s.window),
                        "episodes": self.episodes,
                    },
                    now,
                )
            )
        return points

    # ---- main loop ------------------------------------------------------------
    def view(self, window: int = 100) -> RunView:
        """What a watcher of the run shows (``mqttrl train``'s progress and summary); safe from any
        thread: the episodes, the mean of the last ``window`` returns, the learner's last metrics and
        state, the workers seen and those online."""
        with self._lock:
            return RunView(
                episodes=self.episodes,
                mean_return=_mean(self.all_returns, window),
                learner=attrs.evolve(self.learner) if self.learner else None,  # a copy: the node's stays
                learner_status=self.learner_status,
                workers=len(self.workers),
                workers_online=sum(w.online for w in self.workers.values()),
                **game_counts(self.workers),
            )

    def stop(self, *_: Any) -> None:
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> None:
        self.start()
        self.serve(max_seconds)

    def start(self) -> TelemetryNode:
        """Connect (raises when the broker cannot be reached, the storages closed); :meth:`serve`
        then runs the loop."""
        try:
            self.client.start(wait=30)
        except BaseException:
            self._close_storages()
            raise
        log.info("telemetry for run %s: storages %s", self.run_name, [type(s).__name__ for s in self.storages])
        return self

    def serve(self, max_seconds: float | None = None) -> None:
        """The loop, in the calling thread, until :meth:`stop` or ``max_seconds``; closes the storages."""
        next_agg = time.monotonic() + self.s.interval_s
        deadline = time.monotonic() + max_seconds if max_seconds else None
        window_t, window_n = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                try:
                    msg = self.client.inbox.get(timeout=0.1)
                    self.handle(msg.topic, msg.payload)
                except queue.Empty:
                    pass
                now = time.monotonic()
                if now >= next_agg:
                    next_agg = now + self.s.interval_s
                    self._maybe_send_best()
                    points = self.aggregate_points(time.time())
                    points.append(self.telemetry_point(now - window_t, self._handled - window_n, time.time()))
                    self.report_rejections(now)
                    self._handle_time, window_n, window_t = 0.0, self._handled, now
                    self._write(points)
                if deadline and now > deadline:
                    break
        finally:
            self._write(self.aggregate_points(time.time()))
            self.report_rejections(time.monotonic(), final=True)
            self._close_storages()
            self.client.stop()

    def telemetry_point(self, seconds: float, handled: int, wall_time: float) -> Point:
        """The ``telemetry`` point of an interval of ``seconds`` in which ``handled`` messages were
        handled: this node's own health, with the messages it refused (cumulative)."""
        return Point(
            "telemetry",
            {"run": self.run_name},
            {
                "loop_ms": (self._handle_time / handled * 1000) if handled else 0.0,
                "messages_per_s": handled / max(seconds, 1e-6),
                "pending_points": pending_points(self.storages),
                "rejected_total": self.rejections.total,
            },
            wall_time,
        )

    def report_rejections(self, now: float, final: bool = False) -> None:
        """Log the messages this node refused, by reason, when the count grew: at most once a
        minute (each refusal is also logged, rate-limited, as it happens), and at the end."""
        total = self.rejections.total
        if total == self._rejections_logged or (not final and now - self._rejections_logged_at < 60.0):
            return
        self._rejections_logged, self._rejections_logged_at = total, now
        log.warning("telemetry refused %d message(s) so far: %s", total, self.rejections.snapshot())

    def _close_storages(self) -> None:
        for st in self.storages:
            try:
                st.close()
            except Exception:
                log.exception("closing storage %s failed", type(st).__name__)


def make_storages(names: list[str], options: dict[str, dict]) -> list:
    registry = get_registry()
    return [registry.storage(name)(dict(options.get(name, {}))) for name in names]


def run_telemetry(
    broker: BrokerSettings, run: str, storages: list, settings: TelemetrySettings, max_seconds: float | None = None
) -> TelemetryNode:
    node = TelemetryNode(broker, run, storages, settings)
    install_stop_handlers(node.stop)
    node.run(max_seconds=max_seconds)
    return node


@attrs.frozen
class RunView:
    """A watcher's view of the run (:meth:`TelemetryNode.view`): the episodes seen, the mean of the
    last returns, the learner's newest metrics record (None before the first) and its status, the
    workers seen and online, and per worker that launched its game its relaunches, crashes and
    seconds relaunching."""

    episodes: int = 0
    mean_return: float | None = None
    learner: LearnerMetrics | None = None
    learner_status: str | None = None
    workers: int = 0
    workers_online: int = 0
    game_relaunches: dict[str, int] = attrs.field(factory=dict)
    game_crashes: dict[str, int] = attrs.field(factory=dict)
    game_relaunch_s: dict[str, float] = attrs.field(factory=dict)


def game_counts(workers: dict[str, WorkerView]) -> dict[str, dict]:
    """Per worker that launched its game (summary.json): how often it started it again, of those how
    often after a crash (not a game over), and the seconds the relaunches took."""
    launched = {n: w for n, w in workers.items() if w.game_launches}
    return {
        "game_relaunches": {n: w.game_relaunches for n, w in launched.items()},
        "game_crashes": {n: w.game_crashes for n, w in launched.items()},
        "game_relaunch_s": {n: round(w.relaunch_s, 2) for n, w in launched.items()},
    }
