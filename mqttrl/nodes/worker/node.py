"""The worker node: plays the game and streams experience.

Started with only a broker URL and a run name: it reads the run's config and
newest weights from their retained messages, builds the envs and the
algorithm's actor, then steps. New weights are applied between steps (model and
version swap together). Samples go out in batches through a bounded outbox,
so a broker outage never stops the game loop. Spawn-safe: nothing here relies
on fork, so it runs the same on a Windows game PC.

This module is the shell: it owns the MQTT client, the clock, the envs and the
actor. The rules (which weights to take, when to send, when to stop, what a
heartbeat says) are in :mod:`mqttrl.nodes.worker.core`.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import attrs
import gymnasium as gym

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import RunConfig, WorkerConfig, from_dict
from mqttrl.demos.live import live_recorder
from mqttrl.envs.launch import GameProcess, StopWhileLaunching, for_worker
from mqttrl.envs.realtime import RealTimeEnvSet
from mqttrl.envs.realtime_clock import ThreadPriority
from mqttrl.envs.rollout import EnvFailing, EnvSet
from mqttrl.envs.spec import check_env_against, made_by, spec_of, spec_of_config
from mqttrl.nodes.worker.core import IDLE_REASONS, Link, Move, WorkerCore, WorkerRules
from mqttrl.nodes.worker.envs import make_worker_envs
from mqttrl.nodes.worker.evaluation import WorkerEvaluation, worker_evaluation
from mqttrl.nodes.worker.loops import GameLoop, make_loop
from mqttrl.nodes.worker.policy import make_worker_policy
from mqttrl.nodes.worker.protocol import ProtocolCheck, ProtocolMismatch
from mqttrl.nodes.worker.remote_forward import RemoteForward
from mqttrl.nodes.worker.step import StepRecorder
from mqttrl.nodes.worker.weights_inbox import WeightsInbox
from mqttrl.observe.ledger import Ledger
from mqttrl.observe.ledger import note as ledger_note
from mqttrl.observe.prometheus import serve_metrics
from mqttrl.observe.timing import BlockTimes, PeriodStats
from mqttrl.plugin.algorithm import Actor, ActorContext, AlgorithmInfo, Forward, SyncActor
from mqttrl.plugin.manager import get_registry
from mqttrl.system.procs import StopSignals
from mqttrl.transport.client import BrokerSettings, MqttClient, Outgoing
from mqttrl.transport.dispatch import Dispatcher, Handler
from mqttrl.transport.topics import Kind, Topics, check_name
from mqttrl.wire import (
    GameReport,
    ModelRef,
    Rejected,
    RejectionCounter,
    SampleBatch,
    WorkerState,
    decode_weights,
    encode_json,
)

log = logging.getLogger("mqttrl.worker")


#: a worker's retained offline state (its last will, or its clean exit) expires after a day
#: (MQTT 5): processes that come and go under new names (the default ``<host>-<pid>``) leave
#: no pile of dead names on the broker for learners, status and telemetry to read at start
OFFLINE_STATE_EXPIRY_S = 24 * 3600

#: idle reasons that come and go many times a second (a busy learner's flow control, a backlog
#: the link drains in milliseconds): their changes are logged at debug level, not each a line
QUIET_IDLE_REASONS = frozenset({"learner_paused", "link_behind"})


class SyncTimeout(TimeoutError):
    """Sync mode: the learner published no new model version in time."""


def _parse_config(data: dict) -> RunConfig:
    """The received config, with the algorithm's hyperparameter class from the plugin registry."""
    registry = get_registry()
    return from_dict(data, lambda name: registry.algorithm(name).params)


def _payload_only(handler: Callable[[bytes], None]) -> Handler:
    """The worker's topics are singletons (no name level): its core's handlers take the payload."""
    return lambda _name, payload: handler(payload)


class WorkerNode:
    #: worker.record_demos_to: writes a person's episodes to a dataset (:class:`mqttrl.demos.live.LiveRecorder`)
    demo_recorder = None

    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        name: str | None = None,
        index: int | None = None,
        num_envs: int | None = None,
        seed: int | None = None,
        wait_timeout: float | None = None,
    ):
        self.topics = Topics(run)
        # with broker credentials the ACL ties a worker's topics to its username, so that is the natural default name
        self.name = check_name("worker", name or broker.user or f"{socket.gethostname()}-{os.getpid()}")
        #: the worker's place in the fleet (epsilon ladder, seeds); None: derived from its name
        self.index = index
        self.num_envs_override = num_envs
        self.seed_override = seed
        self.wait_timeout = wait_timeout
        self.clock = time.monotonic
        self._stop = threading.Event()
        self.core = WorkerCore(run, self.name, _parse_config)
        self.protocol = ProtocolCheck(run)  # a learner of another protocol version ends the worker in one line
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.CONFIG: _payload_only(self.protocol.config(self.core.on_config)),
                Kind.WEIGHTS: _payload_only(self.core.on_weights),
                Kind.FLOW: lambda _name, payload: self.core.on_flow(payload, self.clock()),
                Kind.LEARNER_STATE: self.protocol.learner_state(self.core.on_learner_state, lambda: self.clock()),
            },
            log,
        )
        self.info: AlgorithmInfo | None = None
        self.backend = ""
        self.forward: Forward | None = None
        #: the forward when it is the central inference servers' client (told the model version to ask for)
        self.remote: RemoteForward | None = None
        self.actor: Actor | None = None
        self._init_timing()
        self.weights_inbox = WeightsInbox(decode_weights)  # the newest weights, big ones decoded off the game loop
        self.client = MqttClient(
            broker,
            client_id=f"mqttrl-worker-{run}-{self.name}",
            persistent=False,
            subscriptions=[self.topics.subscription(kind) for kind in self.dispatch.handlers],
            will=self._offline_state("connection lost"),
            birth=lambda: [Outgoing(self.topics.worker_state(self.name), self._state("online"), 1, True, "state")],
            inbox_limit=1000,
            outbox_limit=WorkerConfig().outbox_limit,  # the run's worker.outbox_limit once its config is in
        )
        #: the audit of every batch sent and acknowledged, when $MQTTRL_LEDGER_DIR is set
        self.ledger = Ledger.from_env(f"worker-{self.name}-{self.core.incarnation}.jsonl")

    def _init_timing(self) -> None:
        """Where the time goes, and the real-time control loop's state (set before the first step)."""
        #: where the time goes, per block (forward, env_step, wait, encode, publish, load, receive)
        self.blocks = BlockTimes()
        #: real-time stepping (``[env] control_hz``): the control periods' errors, and whether the
        #: worker paused its games (they can pause) because it had nothing useful to do
        self.period_stats: PeriodStats | None = None
        #: the envs this worker plays (None before they are made); their capture-to-action counts go
        #: into the heartbeats
        self.envs: EnvSet | None = None
        #: the game this worker launched and relaunches (``[env] launch``), else None
        self.game: GameProcess | None = None
        #: greedy evaluations this worker plays on its own game (``[train] eval_on = "workers"``), else None
        self.evaluation: WorkerEvaluation | None = None
        #: the info of the model loaded last (what an evaluation of it reports, e.g. its env steps)
        self.model_info: dict = {}
        #: the control thread's scheduling priority: raised for the period's deadline, lowered for its chores
        self.priority = ThreadPriority(0)
        #: the game loop (free or real-time) once the first model is in, else None
        self.loop: GameLoop | None = None

    # ---- what other code reads -------------------------------------------------
    @property
    def rejections(self) -> RejectionCounter:
        """The one count of refused messages, by reason: the dispatcher's."""
        return self.dispatch.rejections

    @property
    def version(self) -> int:
        return self.core.version

    @property
    def env_steps(self) -> int:
        return self.core.env_steps

    @property
    def episodes(self) -> int:
        return self.core.episodes

    @property
    def env_restarts(self) -> int:
        """Games that crashed and were made afresh so far (heartbeats report it)."""
        return self.envs.env_restarts if self.envs is not None else 0

    @property
    def games_paused(self) -> bool:
        """Whether the real-time loop paused its games (they can pause): nothing useful to do."""
        return self.loop is not None and self.loop.games_paused

    def stop(self, *_: Any) -> None:
        self._stop.set()

    # ---- the run, top to bottom -------------------------------------------------
    def run(self, max_env_steps: int | None = None) -> None:
        self.client.start(wait=None)
        reason = "stopped"
        try:
            if self._wait_for("config", lambda: self.core.config is not None):
                self._play(max_env_steps)
        except StopWhileLaunching:
            pass  # asked to stop while the game came up again: a clean stop
        except (EnvFailing, ProtocolMismatch) as e:
            reason = f"env failing: {e}" if isinstance(e, EnvFailing) else "the learner speaks another protocol"
            raise
        finally:  # also when a game keeps failing: what was collected goes out, then a clean offline
            self._shutdown(reason)

    def _play(self, max_env_steps: int | None) -> None:
        """Build envs and policy, wait for a model, then step until stopped or done."""
        cfg = self._own_config()
        self.info = get_registry().algorithm(cfg.algorithm.name)
        made = self._checked_envs(cfg)
        if made is None:
            return
        envs, ctx = made
        self.demo_recorder = live_recorder(cfg, envs, f"worker:{self.name}")  # worker.record_demos_to
        metrics = serve_metrics(
            cfg.worker.metrics_port + (self.index or 0) if cfg.worker.metrics_port else 0,
            self.name,
            self.blocks,
            lambda: self.period_stats,
            self._gauges,
        )
        try:
            self._make_policy(cfg, envs.envs[0].observation_space, envs.envs[0].action_space, ctx)
            if not self._wait_for("weights", lambda: self.core.has_model):
                return
            self.core.begin(WorkerRules.from_config(cfg, self.info.mode, max_env_steps))
            self.evaluation = worker_evaluation(cfg.train, self.info.mode, self.index, self.name, self.clock)
            self.load_new_weights()
            self._step_until_done(envs)
        finally:
            envs.close()
            if self.game is not None:
                self.game.close()
            if self.forward is not None:
                self.forward.close()
            if metrics is not None:
                metrics.shutdown()

    def _own_config(self) -> RunConfig:
        """The run's config as this worker plays it: {index} and {worker} in [env] filled in (its own
        game among several on one PC), and the transport settings it carries applied."""
        cfg = self.core.config
        own_env = for_worker(cfg.env, self.name, self.index)
        if own_env is not cfg.env:
            cfg = attrs.evolve(cfg, env=own_env)
        self.client.ack_timeout_s = cfg.worker.ack_timeout_s
        self.client.outbox_limit = cfg.worker.outbox_limit
        return cfg

    def _checked_envs(self, cfg: RunConfig) -> tuple[EnvSet, ActorContext] | None:
        """The envs (their game launched first with ``[env] launch``), held against the run's env
        spec; None when a stop came while the game came up. A launched game does not outlive a
        worker that failed to start."""
        try:
            envs, ctx = self._make_envs(cfg)  # a game it launched is stopped when this raises
        except StopWhileLaunching:
            return None
        self.envs = envs
        try:
            self._check_env_spec(cfg, envs.envs[0])
        except Exception:
            envs.close()
            if self.game is not None:
                self.game.close()
            raise
        return envs, ctx

    def _step_until_done(self, envs: EnvSet) -> None:
        """The game loop, from the first model on, until stopped or done; what was recorded goes out."""
        # the games ran on while the worker waited for its first model: each starts its first
        # episode now, seeded as before (a simulator replays it), the model playing it from the start
        envs.reset_all(seed=envs.seed)
        log.info(
            "worker %s stepping %d envs from model version %d (inference: %s)",
            self.name,
            envs.num_envs,
            self.core.version,
            self.backend,
        )
        recorder = StepRecorder(
            self.actor, self.core, self.blocks, self.demo_recorder, self.heartbeat, self._stop.is_set
        )
        self.loop = make_loop(self, envs, recorder)
        try:
            if isinstance(envs, RealTimeEnvSet):
                envs.restart_clocks()  # the wait for a model is not an overrun
            while not self._stop.is_set() and not self.core.finished:
                self.loop.tick()
        finally:
            self.priority.close()  # the ordinary priority; on Windows the system timer's period given back
            self._flush()  # every recorded row is a real transition, even after an EnvFailing

    def _gauges(self) -> dict[str, float]:
        """What the Prometheus endpoint shows besides the blocks (read by its thread at scrape time)."""
        return {
            "env_steps": self.core.env_steps,
            "episodes": self.core.episodes,
            "model_version": self.core.version,
            "env_restarts": self.env_restarts,
            "outbox": self.client.outbox_size,
            "games_paused": int(self.games_paused),
        }

    # ---- greedy evaluation on this game ---------------------------------------------------
    def evaluate_if_due(self, envs: EnvSet) -> None:
        """Between steps, when due: the greedy episodes on this worker's own envs, nothing recorded,
        the result on ``eval/<worker>``; messages and heartbeats go on meanwhile. A game that fails
        during it ends the evaluation (no result); the env set makes it afresh as after any failure."""
        ev, busy = self.evaluation, getattr(envs, "resetting_rows", None) or self.games_paused
        if ev is None or busy or not ev.due(model := ModelRef(self.core.epoch, self.core.version), self.model_info):
            return
        if self.core.rules.sync and not self.core.awaiting_model:
            return  # a PPO round's share is being collected: its evaluation waits for the round's end
        if self.actor.pending():  # what was recorded goes out first (a batch never spans the gap)
            self.send_batch()
        try:
            result = ev.play(envs, self.actor, model, self.model_info, during=self._evaluation_chores)
        except EnvFailing:
            raise
        except Exception as e:
            log.warning(
                "worker %s: the evaluation of model %d stopped: %s: %s", self.name, model.version, type(e).__name__, e
            )
            envs.reset_all()
            return
        self.client.publish(self.topics.evaluation(self.name), result.encode(), qos=1, kind="eval")
        log.info(
            "worker %s evaluated model %d: mean %.1f over %d episodes (%.1f s)",
            self.name,
            model.version,
            result.mean,
            result.episodes,
            result.eval_s,
        )

    def _evaluation_chores(self) -> None:
        """While an evaluation plays: messages (a new model waits until it ends) and heartbeats."""
        self.drain()
        self.heartbeat_if_due()

    def idle_now(self) -> str | None:
        """Why the worker idles now (the core's :meth:`~WorkerCore.should_idle` over this turn's
        reading of the link), None to play; a change is logged, the idle time counted."""
        now, n = self.clock(), self.client
        link = Link(n.connected, n.outbox_size, n.outbox_limit, n.oldest_unacked_age(now))
        reason = self.core.should_idle(now, link)
        before = self.core.idle_reason
        if self.core.track_idle(reason, now):
            # flow control and a backlog come and go many times a second: not worth a line each
            quiet = logging.DEBUG if (reason or before) in QUIET_IDLE_REASONS else logging.INFO
            if reason is not None:
                log.log(quiet, "worker %s idles: %s", self.name, IDLE_REASONS[reason])
            elif before is not None:
                log.log(quiet, "worker %s plays again (%s no more)", self.name, IDLE_REASONS[before])
        return reason

    def send_when_due(self) -> None:
        """Send a batch when the core says so; in sync mode that was the share: wait for the next model."""
        if self.core.next_move(self.actor.pending(), self.clock()) is not Move.SEND:
            return  # STEP on; or STOP, which the run loop reads from core.finished
        self.send_batch()
        if self.core.awaiting_model:
            if self.envs is not None:  # the round's gap: a greedy evaluation on this game, when due
                self.evaluate_if_due(self.envs)
            self._wait_for_newer_model()

    def _flush(self) -> None:
        """On the way out: what is pending, and the episodes not yet reported."""
        if self.actor.pending():
            self.send_batch()
        self._send_episodes()

    # ---- weights -------------------------------------------------------------------
    def load_new_weights(self) -> None:
        try:
            load = self.core.weights_to_load()
        except Rejected as r:
            self.rejections.add(r, "weights")
            return
        if load is None:
            return
        if load.discard_partial:  # only in sync mode, where the actor is a SyncActor (checked when built)
            cast(SyncActor, self.actor).discard()
        if self.actor.pending():  # a batch never mixes model versions
            self.send_batch()
        w = load.weights
        with self.blocks.timed("load"):
            self.actor.load_weights(w.tensors, w.info)
        self.core.loaded(w)
        ledger_note(self.ledger, "loaded", epoch=w.epoch, v=w.version)  # the model played from here
        self.model_info = dict(w.info)
        if self.remote is not None:
            self.remote.require_version(w.version, w.epoch)

    def _wait_for_newer_model(self) -> None:
        """Sync mode: the share is sent; wait for the round's model, saying what to check at every timeout."""
        while self.core.awaiting_model and not self._stop.is_set():
            try:
                self.sync(self.core.rules.sync_timeout_s)
            except SyncTimeout as e:
                log.error("%s", e)

    def sync(self, timeout: float) -> None:
        """Sync mode: block until a model version newer than the one we sent a share for.

        Keeps heartbeating (the learner must not think we died) and raises
        :class:`SyncTimeout` with what to check when nothing arrives in time.
        """
        deadline = self.clock() + timeout
        while self.core.awaiting_model and not self._stop.is_set():
            self.drain(timeout=0.05)
            self.load_new_weights()
            now = self.clock()
            if self.core.awaiting_model and now >= deadline:
                raise SyncTimeout(self._sync_timeout_message(timeout))
            self.heartbeat_if_due(now)

    def _sync_timeout_message(self, timeout: float) -> str:
        state = "online" if self.core.learner_online else "offline"
        return (
            f"no model version after {self.core.awaiting_newer_than} within {timeout:.0f}s for run {self.topics.run!r} "
            f"(learner state: {state}). Check that the learner is running and connected to this broker "
            f"(mosquitto_sub -v -t '{self.topics.learner_state}'), and its log for stalled rounds; "
            f"raise worker.sync_timeout_s if rounds are legitimately slow. Still waiting."
        )

    # ---- publishing ----------------------------------------------------------------
    def send_batch(self) -> None:
        self._send_episodes()
        count = self.actor.pending()  # transitions; a pool field (DQN's frames) has its own row count
        arrays = self.actor.take()
        if not arrays or not count:
            return
        seq, version = self.core.batch_sent()
        t0 = self.blocks.clock()
        batch = SampleBatch(
            self.topics.run,
            self.name,
            seq,
            version,
            count,
            arrays,
            incarnation=self.core.incarnation,
            epoch=self.core.epoch,
        )
        payload = batch.encode(self.core.config.worker.compression)
        self._note_acks()  # the acknowledgements so far first: a ledger's lines stay in order
        ledger_note(self.ledger, "sent", seq=seq, n=count, epoch=self.core.epoch, v=version)
        t1 = self.blocks.clock()
        self.client.publish(self.topics.samples(self.name), payload, qos=1, retain=False, kind="samples", tag=seq)
        self.blocks.add("encode", t1 - t0)
        self.blocks.add("publish", self.blocks.clock() - t1)

    def _note_acks(self) -> None:
        """Take the acknowledged and dropped batches (always: the client keeps them until taken)
        and write them to the ledger when there is one."""
        acked, dropped = self.client.take_acked(), self.client.take_dropped()
        if self.ledger is not None:
            for seq in acked:
                self.ledger.write("acked", seq=seq)
            for seq in dropped:
                self.ledger.write("dropped", seq=seq, cause="outbox full")

    def _send_episodes(self) -> None:
        report = self.core.take_episodes()
        if report is not None:
            self.client.publish(self.topics.episodes(self.name), report.encode(), qos=1, kind="episodes")

    def heartbeat_if_due(self, now: float | None = None) -> None:
        if self.core.heartbeat_due(self.clock() if now is None else now):
            self.heartbeat()

    def heartbeat(self) -> None:
        self._note_acks()
        hb = self.core.heartbeat(
            time.time(),
            os.getpid(),
            self.client.outbox_size,
            self.client.dropped,
            self.rejections.snapshot(),
            env_restarts=self.env_restarts,
            now=self.clock(),
            person_steps=self.envs.person_steps if self.envs is not None else 0,
        )
        hb.timing = self.blocks.take()
        if self.game is not None:  # the game this worker launched: its starts, and those after the first
            g = self.game
            hb.game = GameReport(
                launches=g.launches, relaunches=g.relaunches, crashes=g.crashes, relaunch_s=round(g.relaunch_s, 3)
            )
        if self.period_stats is not None:
            idle = self.loop.idle_reason if self.loop is not None else None
            hb.realtime = {**self.period_stats.take(), "games_paused": self.games_paused, "idle": idle}
        if self.envs is not None and self.envs.act_latency.n:
            hb.act_latency = self.envs.act_latency.report()
        self.client.publish(self.topics.heartbeat(self.name), hb.encode(), qos=0, kind="heartbeat")

    def _offline_state(self, reason: str) -> Outgoing:
        """The retained offline state, as the last will and on a clean exit; it expires (MQTT 5)."""
        return Outgoing(
            self.topics.worker_state(self.name),
            self._state("offline", reason),
            1,
            True,
            "state",
            expiry_s=OFFLINE_STATE_EXPIRY_S,
        )

    def _state(self, status: str, reason: str = "") -> bytes:
        return WorkerState(
            status=status,
            reason=reason,
            worker=self.name,
            incarnation=self.core.incarnation,
            host=socket.gethostname(),
            pid=os.getpid(),
            index=self.index,
            num_envs=self.num_envs_override,
            mqttrl=__version__,
            protocol=PROTOCOL_VERSION,
            time=time.time(),
        ).encode()

    # ---- inbox ---------------------------------------------------------------------
    def drain(self, timeout: float = 0.0) -> None:
        """Handle every queued message, waiting up to ``timeout`` for the first.

        A worker only needs the newest model: of the weights messages queued, only the last is
        decoded (the others are counted in ``weights_inbox.superseded``), and after every other message,
        so flow, learner state and config are never handled behind a model being decoded."""
        newest = None
        try:
            msg = self.client.inbox.get(timeout=timeout) if timeout else self.client.inbox.get_nowait()
            while True:
                if msg.topic == self.topics.weights:
                    self.weights_inbox.superseded += newest is not None
                    newest = msg
                else:
                    self.dispatch(msg.topic, msg.payload)
                msg = self.client.inbox.get_nowait()
        except queue.Empty:
            pass
        self.protocol.raise_if_other()  # before any weights: they would be refused one by one
        if newest is not None:
            self.weights_inbox.put(newest.payload)  # a big model is decoded off the game loop
        for got in self.weights_inbox.take():
            try:
                if isinstance(got, Rejected):
                    raise got
                self.core.offer_weights(got)
            except Rejected as r:
                self.rejections.add(r, "weights")

    def _wait_for(self, what: str, ready: Callable[[], bool]) -> bool:
        """Handle messages until ``ready()``; False when stopped first. Says every 10 s what it waits for."""
        start = last_note = self.clock()
        while not ready():
            if self._stop.is_set():
                return False
            self.drain(timeout=0.2)
            now = self.clock()
            if now - last_note > 10:
                last_note = now
                log.warning(
                    "still waiting for the %s of run %r (retained on %s); is a learner running for this run on this broker?",
                    what,
                    self.topics.run,
                    self.topics.config if what == "config" else self.topics.weights,
                )
            if self.wait_timeout and now - start > self.wait_timeout:
                raise TimeoutError(
                    f"no {what} for run {self.topics.run!r} after {self.wait_timeout:.0f}s; start the learner first"
                )
        return not self._stop.is_set()

    # ---- building ------------------------------------------------------------------
    def _check_env_spec(self, cfg: RunConfig, env: gym.Env) -> None:
        """This worker's game against the run's env spec: a difference is one line (SpecMismatch,
        exit 2) before it plays. A run whose spec is not known yet (a learner without the game waits
        for it) gets this worker's, retained on ``mqttrl/<run>/env_spec``."""
        mine = spec_of(env, cfg.env.id, made_by(f"worker {self.name}"))
        run_spec = spec_of_config(cfg)
        if run_spec is not None:
            check_env_against(mine, run_spec)
            return
        self.client.publish(self.topics.env_spec, encode_json(mine.to_json()), 1, True, "env_spec")
        log.info("published the env spec of run %r (the learner waits for it): %s", self.topics.run, mine.spaces)

    def _make_envs(self, cfg: RunConfig) -> tuple[EnvSet, ActorContext]:
        """The envs and the actor's place (:func:`make_worker_envs`); the game, the control periods'
        statistics and the control thread's priority are kept for the loop and the heartbeats."""
        built = make_worker_envs(cfg, self.name, self.index, self._stop, self.num_envs_override, self.seed_override)
        self.game = built.game
        if built.period_stats is not None:
            self.period_stats, self.priority = built.period_stats, built.priority
        return built.envs, built.ctx

    def _make_policy(self, cfg: RunConfig, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext) -> None:
        """The forward (where the network runs) and the algorithm's actor over it (:mod:`.policy`)."""
        remote_as = (self.client.settings, self.topics.run, self.name, self.heartbeat_if_due)
        made = make_worker_policy(cfg, self.info, obs_space, act_space, ctx, remote_as)
        self.backend, self.forward, self.actor, self.remote = made.backend, made.forward, made.actor, made.remote

    def _shutdown(self, reason: str = "stopped") -> None:
        """Flush (bounded: the broker's acknowledgements are waited for), then record what never
        got one: a ``dropped`` ledger line per batch and one warning, never a silent loss."""
        self.client.stop(final=[self._offline_state(reason)])
        self._note_acks()
        unsent = self.client.take_unsent()
        if unsent:
            log.warning(
                "worker %s: %d sample batch(es) not acknowledged by the broker when it stopped (lost)",
                self.name,
                len(unsent),
            )
        if self.ledger is not None:
            for seq in unsent:
                self.ledger.write("dropped", seq=seq, cause="unacknowledged at stop")
        if self.ledger is not None:
            self.ledger.close()
        log.info(
            "worker %s stopped after %d env steps, %d episodes", self.name, self.core.env_steps, self.core.episodes
        )


def run_worker(broker: BrokerSettings, run: str, **kwargs) -> StopSignals:
    """Run a worker until a stop signal; returns which one stopped it (its command's exit code)."""
    node = WorkerNode(broker, run, **kwargs)
    signals = StopSignals(node.stop)
    node.run()
    return signals
