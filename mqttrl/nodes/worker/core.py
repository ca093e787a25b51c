"""The worker's rules as plain objects: which weights to take, when to send, when to stop.

No MQTT, no threads, no clock reads: every call that depends on time takes
``now`` (seconds on one monotonic clock) or ``wall_time`` (seconds since the
epoch, for the JSON that other processes read), so tests drive the core with
made-up times. The shell (:mod:`mqttrl.nodes.worker.node`) feeds it what the
broker delivers and what the envs did, and does what it answers: load weights,
send a batch, wait for the next model, stop.

A refused message raises :class:`~mqttrl.wire.Rejected`; the shell's
:class:`~mqttrl.transport.dispatch.Dispatcher` counts it, in one place.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Iterable, Mapping

import attrs

from mqttrl.config import ConfigError, RunConfig, WorkerConfig
from mqttrl.config.settings import from_section, view
from mqttrl.envs.rollout import EpisodeEnd
from mqttrl.plugin.algorithm import Mode
from mqttrl.wire import (
    EpisodeReport,
    EpisodeStats,
    Flow,
    Heartbeat,
    LearnerState,
    Rejected,
    WeightsMessage,
    decode_json,
    decode_weights,
)

log = logging.getLogger("mqttrl.worker")


def new_incarnation() -> str:
    """A fresh id for this worker process: the learner counts sequence numbers per incarnation."""
    return os.urandom(6).hex()


@view(WorkerConfig)
class WorkerRules:
    """The settings the rules read: a typed view of ``[worker]`` (each default and doc is the
    declaration's in :mod:`mqttrl.config`) and the mode; :meth:`from_config` makes it."""

    batch_size: int
    max_batch_delay_s: float
    heartbeat_interval_s: float
    #: sync mode (PPO rounds): send the whole share, then wait for a newer model
    sync: bool = False
    sync_timeout_s: float
    #: stop after this many env steps (None: run until stopped)
    max_env_steps: int | None = None

    @classmethod
    def from_config(cls, config: RunConfig, mode: Mode, max_env_steps: int | None = None) -> WorkerRules:
        return from_section(cls, config.worker, sync=mode == "sync", max_env_steps=max_env_steps)


#: a learner whose flow beat (re-published every ``beat_s``) has not come for this many beats, and at
#: least :data:`LEARNER_SILENT_MIN_S`, is away: its link or process is gone without a last will yet
LEARNER_SILENT_BEATS = 5
LEARNER_SILENT_MIN_S = 5.0
#: this many messages waiting in the outbox to be sent (behind the client's in-flight window) mean
#: the link carries less than the worker makes: more experience would only queue, growing stale,
#: and a pause from the learner would reach the games only after all of it arrived
BACKLOG_IDLE_MESSAGES = 16
#: with a small outbox limit, this fraction of it counts as a backlog already
OUTBOX_IDLE_FRACTION = 0.5
#: a sample batch the broker has not acknowledged for this long means a stalled link (a silent cut
#: that TCP and keepalive have not noticed yet, or an uplink far slower than the worker)
UNACKED_IDLE_S = 5.0

#: why a worker idles (:meth:`WorkerCore.should_idle`), in words for its log
IDLE_REASONS = {
    "link_down": "no connection to the broker",
    "link_stalled": f"the broker acknowledged no batch for over {UNACKED_IDLE_S:g}s",
    "learner_offline": "the learner is offline",
    "learner_silent": "the learner is silent (no flow beat)",
    "learner_paused": "the learner's flow control",
    "link_behind": "the link carries less than the worker makes (a backlog waits to be sent)",
}


@attrs.frozen
class Link:
    """What the worker's MQTT client says of its link (the shell reads it each turn)."""

    connected: bool = True
    #: messages waiting in the outbox, and its limit (0: unknown)
    outbox: int = 0
    outbox_limit: int = 0
    #: seconds the oldest sample batch has waited for the broker's acknowledgement (0.0: none waits)
    unacked_age_s: float = 0.0


class Move(enum.Enum):
    """What the worker does after a vector step."""

    STEP = "step"  #: keep stepping
    SEND = "send"  #: send the pending transitions (a full batch, an old partial one, or the whole share)
    STOP = "stop"  #: the run is over: send what is pending and stop


@attrs.frozen
class Load:
    """Weights to load now."""

    weights: WeightsMessage
    #: sync mode: a round finished without this worker, so the partial share it holds was made
    #: with a version the learner has moved past; the actor drops it before loading
    discard_partial: bool


class WorkerCore:
    """One worker's state: model version, flow, learner liveness, batching, counters.

    ``parse_config`` turns the received config's JSON object into a :class:`RunConfig`
    (the shell resolves the algorithm's hyperparameter class through the plugin registry).
    """

    def __init__(self, run: str, name: str, parse_config: Callable[[dict], RunConfig], incarnation: str = ""):
        self.run = run
        self.name = name
        #: this process; its birth message and every batch carry it
        self.incarnation = incarnation or new_incarnation()
        self._parse_config = parse_config
        self.config: RunConfig | None = None
        self.rules = WorkerRules()
        #: the loaded model's learner epoch and version (-1: none yet), and the newest accepted
        #: weights not yet loaded
        self.epoch = 0
        self.version = -1
        self.pending_weights: WeightsMessage | None = None
        #: the learner's flow signal, and whether the learner is online to lift it
        self.paused = False
        self.learner_online = False
        #: the learner's state was received (an explicit offline state idles the worker, no state does not)
        self.learner_known = False
        #: the learner re-publishes its flow every ``beat_s`` (0: an older learner that does not), and
        #: when its last flow or state came (on the core's clock; None: never)
        self.learner_beat_s = 0.0
        self.learner_heard: float | None = None
        #: the link as the shell last reported it (:meth:`should_idle`)
        self.link = Link()
        #: why the worker idles now (None: it plays), since when, and the idle seconds before that
        self.idle_reason: str | None = None
        self.idle_since: float | None = None
        self.idled_s = 0.0
        #: sync mode: the version the sent share was made with, until a newer model is loaded
        self.awaiting_newer_than: int | None = None
        self.seq = 0
        self.env_steps = 0
        self.episodes = 0
        #: finished episodes, sent with the next sample batch
        self.finished_episodes: list[EpisodeStats] = []
        self._batch_started: float | None = None
        self._next_heartbeat: float | None = None  # None: due now

    # ---- received messages -----------------------------------------------------
    def on_config(self, payload: bytes) -> None:
        """The first config is the run's; a retained copy seen again after a reconnect changes nothing."""
        if self.config is not None:
            return
        data = decode_json(payload, {"run": str})
        try:
            self.config = self._parse_config(data)
        except ConfigError as e:
            raise Rejected("bad_value", f"config: {e}") from None
        log.info("run %s: env %s, algorithm %s", self.config.run, self.config.env.id, self.config.algorithm.name)

    def on_weights(self, payload: bytes) -> None:
        """Keep the newest acceptable weights; they are loaded between steps."""
        self.offer_weights(decode_weights(payload))

    def offer_weights(self, w: WeightsMessage) -> None:
        """Decoded weights (the shell may decode big ones off the game loop): kept if newest."""
        if w.run != self.run:
            raise Rejected("wrong_run", f"weights for run {w.run!r}")
        if w.newer_than(self.pending_weights if self.pending_weights is not None else (self.epoch, self.version)):
            self.pending_weights = w

    def on_flow(self, payload: bytes, now: float | None = None) -> None:
        """The learner's flow signal; received at ``now``, it is also the learner's beat."""
        flow = Flow.decode(payload)
        self.paused = flow.pause
        self.learner_beat_s = flow.beat
        if now is not None:
            self.learner_heard = now

    def on_learner_state(self, payload: bytes, now: float | None = None) -> None:
        if not payload:  # a cleared retained state
            return
        status = LearnerState.decode(payload).status
        online = status == "online"
        if online != self.learner_online:
            log.info("learner is %s", status)
        self.learner_online = online
        self.learner_known = True
        if online and now is not None:
            self.learner_heard = now

    # ---- starting --------------------------------------------------------------
    def begin(self, rules: WorkerRules) -> None:
        """Envs and actor are built: stepping starts under ``rules``."""
        self.rules = rules

    @property
    def has_model(self) -> bool:
        return self.version >= 0 or self.pending_weights is not None

    # ---- weights -----------------------------------------------------------------
    def weights_to_load(self) -> Load | None:
        """The accepted weights to load now, if any (taken: the next call returns None).

        Raises :class:`Rejected` for weights of another algorithm than the run's.
        """
        w, self.pending_weights = self.pending_weights, None
        if w is None:
            return None
        algorithm = self.config.algorithm.name if self.config is not None else w.algorithm
        if w.algorithm != algorithm:
            raise Rejected("bad_value", f"weights for {w.algorithm!r}, run uses {algorithm!r}")
        # a share can be in progress only while a model runs and its share is not yet sent
        in_progress = self.rules.sync and self.version >= 0 and self.awaiting_newer_than is None
        return Load(w, discard_partial=in_progress)

    def loaded(self, w: WeightsMessage) -> None:
        """The actor runs ``w`` now. Ending a sync wait heartbeats at once, so the learner sees
        this worker on the new version without waiting a heartbeat interval."""
        self.epoch, self.version = w.epoch, w.version
        if self.awaiting_newer_than is not None:
            self.awaiting_newer_than = None
            self._next_heartbeat = None

    @property
    def awaiting_model(self) -> bool:
        """Sync mode: the share is sent and no newer model is loaded yet."""
        return self.awaiting_newer_than is not None

    # ---- stepping ----------------------------------------------------------------
    @property
    def held_back(self) -> bool:
        """The learner asked workers to pause. A pause left retained by a learner that went
        offline holds nobody back: it could never be lifted."""
        return self.paused and self.learner_online

    def learner_silent(self, now: float) -> bool:
        """The learner said it beats, and no beat came for :data:`LEARNER_SILENT_BEATS` of them."""
        if not self.learner_beat_s or self.learner_heard is None:
            return False
        return now - self.learner_heard > max(LEARNER_SILENT_MIN_S, LEARNER_SILENT_BEATS * self.learner_beat_s)

    def should_idle(self, now: float, link: Link | None = None) -> str | None:
        """Why the worker should stop making experience now (a key of :data:`IDLE_REASONS`), or
        None to play on; ``link`` (when given) is the shell's newest reading of its link.

        Experience made while the link cannot carry it, or while no learner takes it, is lost
        (outbox full) or refused when it arrives (stale); a worker that idles meanwhile keeps
        what it holds admissible. Idling means: no env steps (a game that can pause is paused:
        the real-time shell calls ``env.pause()`` while this says so), but messages, new weights
        and heartbeats go on. Pure: the reasons, first that applies:

        * ``link_down``: the client has no connection to the broker;
        * ``link_stalled``: a batch has waited for the broker's acknowledgement over
          :data:`UNACKED_IDLE_S` (a silent cut, or an uplink slower than the worker);
        * ``learner_offline``: the learner's state says offline (its last will or clean exit);
        * ``learner_silent``: a learner that beats (re-publishes its flow every ``beat_s``) was not
          heard from for :data:`LEARNER_SILENT_BEATS` beats (at least :data:`LEARNER_SILENT_MIN_S`);
        * ``learner_paused``: its flow control asks workers to pause (and it is online to lift it);
        * ``link_behind``: :data:`BACKLOG_IDLE_MESSAGES` messages wait to be sent (or
          :data:`OUTBOX_IDLE_FRACTION` of a smaller outbox): a free-running env makes experience
          faster than the link carries it.
        """
        if link is not None:
            self.link = link
        link = self.link
        if not link.connected:
            return "link_down"
        if link.unacked_age_s > UNACKED_IDLE_S:
            return "link_stalled"
        if self.learner_known and not self.learner_online:
            return "learner_offline"
        if self.learner_silent(now):
            return "learner_silent"
        if self.held_back:
            return "learner_paused"
        if link.outbox_limit and link.outbox >= min(BACKLOG_IDLE_MESSAGES, OUTBOX_IDLE_FRACTION * link.outbox_limit):
            return "link_behind"
        return None

    def track_idle(self, reason: str | None, now: float) -> bool:
        """Record that the worker idles for ``reason`` (None: it plays) from ``now``; True when
        that changed (the shell logs it). The idle time adds up in :meth:`idle_seconds`."""
        if reason == self.idle_reason:
            return False
        if self.idle_since is not None:
            self.idled_s += now - self.idle_since
        self.idle_since = now if reason is not None else None
        self.idle_reason = reason
        return True

    def idle_seconds(self, now: float) -> float:
        """Seconds this worker idled so far (heartbeats report it as ``paused_s``)."""
        return self.idled_s + (now - self.idle_since if self.idle_since is not None else 0.0)

    def stepped(self, num_envs: int, ended: Iterable[EpisodeEnd], wall_time: float) -> None:
        """Count one vector step and the episodes it finished."""
        self.env_steps += num_envs
        for e in ended:
            self.episodes += 1
            self.finished_episodes.append(
                EpisodeStats(
                    episode_return=e.episode_return,
                    length=e.length,
                    env=e.env_index,
                    terminated=e.terminated,
                    model_version=self.version,
                    env_steps=self.env_steps,
                    time=wall_time,
                    demo=True if e.demo else None,  # a person played it (docs/demonstrations.md)
                )
            )

    @property
    def finished(self) -> bool:
        """The run has made its ``max_env_steps``."""
        limit = self.rules.max_env_steps
        return bool(limit) and self.env_steps >= limit

    def next_move(self, pending: int, now: float) -> Move:
        """After a step with ``pending`` transitions ready to send: step on, send, or stop.

        Async: send a full batch, or a partial one older than ``max_batch_delay_s``.
        Sync: the actor reports nothing pending until its whole share is collected; send it
        (then :attr:`awaiting_model` holds until a newer model is loaded). Stopping comes
        first in both modes: the shell sends what is pending on its way out.
        """
        if self.finished:
            return Move.STOP
        if not pending:
            return Move.STEP
        if self.rules.sync:
            return Move.SEND
        if self._batch_started is None:
            self._batch_started = now
        if pending >= self.rules.batch_size or now - self._batch_started > self.rules.max_batch_delay_s:
            return Move.SEND
        return Move.STEP

    def batch_sent(self) -> tuple[int, int]:
        """Number a batch that is going out: returns ``(seq, model_version)``. In sync mode the
        batch is the share, and the worker now waits for a newer model."""
        seq = self.seq
        self.seq += 1
        self._batch_started = None
        if self.rules.sync:
            self.awaiting_newer_than = self.version
        return seq, self.version

    def take_episodes(self) -> EpisodeReport | None:
        """The episodes message for the finished episodes not yet sent, or None."""
        if not self.finished_episodes:
            return None
        report = EpisodeReport(self.finished_episodes, self.name)
        self.finished_episodes = []
        return report

    # ---- heartbeats ----------------------------------------------------------------
    def heartbeat_due(self, now: float) -> bool:
        """Whether a heartbeat goes out now; if so the next one is scheduled an interval later."""
        if self._next_heartbeat is not None and now < self._next_heartbeat:
            return False
        self._next_heartbeat = now + self.rules.heartbeat_interval_s
        return True

    def heartbeat(
        self,
        wall_time: float,
        pid: int,
        outbox: int,
        dropped: Mapping[str, int],
        rejected: Mapping[str, int],
        env_restarts: int = 0,
        now: float | None = None,
        person_steps: int = 0,
    ) -> Heartbeat:
        """The heartbeat's counters (the node adds its timing and game reports): the learner's
        liveness check and the dashboards read them. ``env_restarts``: envs this process made
        afresh after their game crashed; ``person_steps``: env steps a person played; ``now`` (the core's clock) dates ``paused_s``, the
        seconds idled so far (:meth:`should_idle`)."""
        idled = self.idle_seconds(now) if now is not None else self.idled_s
        return Heartbeat(
            model_version=self.version,
            env_steps=self.env_steps,
            worker=self.name,
            incarnation=self.incarnation,
            pid=pid,
            epoch=self.epoch,
            episodes=self.episodes,
            env_restarts=env_restarts,
            person_steps=person_steps,
            seq=self.seq,
            outbox=outbox,
            dropped=dict(dropped),
            rejected=dict(rejected),
            paused=self.held_back,
            idle=self.idle_reason,
            paused_s=round(idled, 3),
            time=wall_time,
        )
