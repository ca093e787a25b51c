"""The learner's rules as plain objects: admission, membership, rounds, flow control.

No MQTT, no threads, no clock reads: every call that depends on time takes
``now`` (seconds on one monotonic clock), so tests drive the core with a fake
clock and hand-made batches. The shell (:mod:`mqttrl.nodes.learner.node`) feeds
it what the broker delivers and does what it answers: publish weights, write
rounds.jsonl, update the flow signal, checkpoint.

A refused message raises :class:`~mqttrl.wire.Rejected` with one reason of
:data:`~mqttrl.wire.errors.REASONS`; the shell's
:class:`~mqttrl.transport.dispatch.Dispatcher` counts it, in one place.

The mode is chosen once, at construction: :class:`AsyncAdmission` hands every
admitted batch to an :class:`~mqttrl.plugin.algorithm.AsyncLearner` and trains while it
says a step is due; :class:`SyncRounds` collects one share per worker for the
open model version and trains a :class:`~mqttrl.plugin.algorithm.SyncLearner` when the
round is complete.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from collections.abc import Mapping

import attrs

from mqttrl.config import LearnerConfig, RunConfig
from mqttrl.config.settings import from_section, view
from mqttrl.nodes.learner.protocols import OtherProtocols
from mqttrl.nodes.learner.worker_table import WorkerTable
from mqttrl.plugin.algorithm import AsyncLearner, Mode, SyncLearner
from mqttrl.wire import Heartbeat, Rejected, SampleBatch, SampleSpec, WorkerState, decode_batch
from mqttrl.wire.samples import batch_protocol

log = logging.getLogger("mqttrl.learner")


@view(LearnerConfig)
class LearnerRules:
    """The settings the rules read: a typed view of ``[learner]`` (each default and doc is the
    declaration's in :mod:`mqttrl.config`); :meth:`from_config` takes them from a run's config."""

    run: str
    max_staleness_s: float
    #: deprecated: the old rule in versions, on only when a config sets it
    max_staleness: int | None
    weights_every_s: float
    require_announce: bool
    worker_timeout_s: float
    round_timeout_s: float
    publish_every: int
    #: from learner.max_payload_mb (:attr:`~mqttrl.config.LearnerConfig.max_payload_bytes`)
    max_payload_bytes: int
    metrics_workers: int
    forget_offline_s: float

    @classmethod
    def from_config(cls, config: RunConfig) -> LearnerRules:
        return from_section(cls, config.learner, run=config.run)


@attrs.define
class WorkerStatus:
    """What the learner knows about one worker. Times are on the core's clock (``now``)."""

    name: str
    online: bool = True
    last_seen: float | None = None
    #: when the learner marked it offline (None: online, or restored from a checkpoint unseen)
    offline_since: float | None = None
    announced_at: float | None = None
    model_version: int = -1
    env_steps: int = 0
    episodes: int = 0
    #: the worker process now running under this name (its birth message or newest batch says)
    incarnation: str = ""
    #: first sequence number received from the current incarnation in this learner process
    first_seq: int = -1
    samples: int = 0
    #: sequence numbers never seen: gaps within an incarnation's numbering
    missing: int = 0
    #: new incarnations seen under this name (process restarts)
    restarts: int = 0
    #: envs its current process made afresh after their game crashed (its heartbeat says)
    env_restarts: int = 0
    #: the same, of its earlier processes under this name (the run's count is cumulative)
    env_restarts_before: int = 0
    #: last sequence number seen, per incarnation (a late batch of a previous process still counts right)
    seqs: dict[str, int] = attrs.Factory(dict)
    #: per incarnation, the sequence numbers below its last that never came (counted in ``missing``)
    #: and may still come late: brokers can hand over QoS 1 messages out of order (mosquitto 2.0's
    #: bridge does, around a reconnect), and a batch that comes late fills its hole instead of being
    #: refused as a duplicate. At most :data:`MAX_HOLES` per incarnation, the newest.
    holes: dict[str, set[int]] = attrs.Factory(dict)
    info: dict = attrs.Factory(dict)

    def seen_online(self, now: float) -> None:
        """It spoke (a batch, a heartbeat, a birth): online, seen ``now``."""
        self.online = True
        self.last_seen = now
        self.offline_since = None

    def went_offline(self, now: float) -> None:
        """Its last will, clean exit or silence: offline since ``now``, unless it already was
        (a repeated offline state does not restart the clock that forgets it)."""
        if self.online or self.offline_since is None:
            self.offline_since = now
        self.online = False

    def switch_to(self, incarnation: str) -> None:
        """A new process runs under this name: its numbering starts afresh."""
        if incarnation == self.incarnation:
            return
        if self.incarnation or self.seqs:
            self.restarts += 1
        self.incarnation = incarnation
        self.env_restarts_before += self.env_restarts  # the new process counts from 0
        self.env_restarts = 0
        self.first_seq = -1
        while len(self.seqs) >= MAX_INCARNATIONS and incarnation not in self.seqs:
            oldest = next(iter(self.seqs))
            del self.seqs[oldest]
            self.holes.pop(oldest, None)

    def seen(self, incarnation: str, seq: int) -> bool:
        """Whether sequence ``seq`` of ``incarnation`` came before: a resend, a duplicate."""
        return seq <= self.seqs.get(incarnation, -1) and seq not in self.holes.get(incarnation, ())

    def saw(self, incarnation: str, seq: int) -> None:
        """Sequence ``seq`` of ``incarnation`` arrived (accepted or not): count the gap before it,
        or fill its hole when it comes late."""
        last = self.seqs.get(incarnation, -1)
        if seq <= last:
            holes = self.holes.get(incarnation)
            if holes is not None and seq in holes:
                holes.discard(seq)
                self.missing -= 1
            return
        if last >= 0 and seq > last + 1:
            self.missing += seq - last - 1
            holes = self.holes.setdefault(incarnation, set())
            holes.update(range(max(last + 1, seq - MAX_HOLES), seq))
            if len(holes) > MAX_HOLES:
                self.holes[incarnation] = {h for h in holes if h >= seq - MAX_HOLES}
        self.seqs[incarnation] = seq
        if incarnation == self.incarnation and self.first_seq < 0:
            self.first_seq = seq

    @property
    def last_seq(self) -> int:
        """Last sequence number seen (accepted or refused) from the current incarnation."""
        return self.seqs.get(self.incarnation, -1)

    @property
    def env_restarts_total(self) -> int:
        """Env restarts of every process that ran under this name."""
        return self.env_restarts_before + self.env_restarts


#: incarnations remembered per worker name (a late batch from an older process is still recognised)
MAX_INCARNATIONS = 8
#: sequence numbers remembered as holes per incarnation (how far back a late batch is still taken)
MAX_HOLES = 4096
#: forgotten workers whose sequence numbers are still remembered (a resend stays a duplicate)
MAX_RETIRED = 4096


@attrs.frozen
class Step:
    """What a turn of the loop did, for the shell to act on."""

    trained: bool = False
    #: a new model version was opened: publish the learner's weights as ``LearnerCore.version``
    publish: bool = False
    metrics: dict | None = None
    #: sync mode: the rounds.jsonl record of the round just trained (the shell adds the wall-clock time)
    round_record: dict | None = None


class AsyncAdmission:
    """Async mode (Ape-X): any batch in time goes to the learner at once.

    **In time** is measured in seconds, not versions: a batch made with version ``v`` is admitted
    while ``v`` is the current model, and for ``max_staleness_s`` seconds after the version that
    replaced it was opened. Counted in versions, a learner that publishes 16 versions a second
    gives a worker a fraction of a second (every batch made around a broker restart, or behind a
    150 ms link, was refused); counted in seconds, how fast the learner trains or how slowly the
    weights travel changes nothing. New versions are also opened at most every
    ``weights_every_s`` seconds, which bounds each worker's weight traffic (one model per
    interval, whatever the learner's speed).
    """

    mode: Mode = "async"

    def __init__(
        self,
        learner: AsyncLearner,
        max_staleness_s: float,
        publish_every: int,
        weights_every_s: float = 0.0,
        max_staleness_versions: int | None = None,
    ):
        self.learner = learner
        self.max_staleness_s = max_staleness_s
        self.max_staleness_versions = max_staleness_versions
        self.publish_every = publish_every
        self.weights_every_s = weights_every_s
        self.last_publish_update = learner.updates
        #: a model trained by this learner was opened (a resumed learner's first one is): until
        #: then workers are held while training is due (the warm-up hold, see :meth:`behind`)
        self.warm = learner.updates > 0
        #: when each version of this epoch was opened, oldest first: (version, opened at)
        self._opened: deque[tuple[int, float]] = deque()
        #: every version up to this one was replaced more than ``max_staleness_s`` ago
        self._stale_through = -1

    def check(self, batch: SampleBatch, version: int, now: float) -> None:
        v = batch.model_version
        if self.max_staleness_versions is not None and version - v > self.max_staleness_versions:
            raise Rejected(
                "stale_version", f"version {v} is older than {version} - {self.max_staleness_versions} (max_staleness)"
            )
        replaced = self.replaced_at(v, now)
        if replaced is not None and now - replaced > self.max_staleness_s:
            ago = f"{now - replaced:.2f}s ago" if replaced != float("-inf") else "so long ago that it is no longer held"
            raise Rejected(
                "stale_version", f"version {v} was replaced {ago}, max_staleness_s is {self.max_staleness_s:g}"
            )

    def replaced_at(self, version: int, now: float) -> float | None:
        """When a newer version than ``version`` was first opened (None: it is still the newest);
        ``-inf`` when that was so long ago that it is no longer held."""
        self._forget(now)
        if version <= self._stale_through:
            return float("-inf")
        for v, t in self._opened:
            if v > version:
                return t
        return None

    def _forget(self, now: float) -> None:
        """Drop the opening times no check needs: a version whose successor was opened more than
        ``max_staleness_s`` ago is stale whatever comes (bounded memory at any publishing rate)."""
        opened = self._opened
        while len(opened) > 1 and now - opened[1][1] > self.max_staleness_s:
            self._stale_through = opened.popleft()[0]

    def take(self, batch: SampleBatch) -> None:
        self.learner.add(batch)

    def drop(self, worker: str) -> None:
        """Nothing waits for a worker in async mode."""

    def opened(self, version: int, members: set[str], now: float) -> None:
        self.last_publish_update = self.learner.updates
        self.warm = self.warm or self.learner.updates > 0
        self._opened.append((version, now))
        self._forget(now)

    def step(self, now: float, online: set[str]) -> Step:
        """One training step if the learner says one is due; a new version once ``publish_every``
        updates were made and ``weights_every_s`` passed since the last one."""
        if not self.learner.train_due():
            return Step()
        metrics = self.learner.train_step()
        publish = self.learner.updates - self.last_publish_update >= self.publish_every and self._publish_allowed(now)
        return Step(trained=True, publish=publish, metrics=metrics)

    def _publish_allowed(self, now: float) -> bool:
        """Whether ``weights_every_s`` passed since the newest version was opened; the first
        trained model goes out at once (workers are held for it)."""
        return not self.warm or not self._opened or now - self._opened[-1][1] >= self.weights_every_s

    def behind(self) -> bool:
        """The learner's own flow rule, and the warm-up hold: from the moment training can start
        until the first trained model is out, workers wait. Without it a fast env (or a game
        whose worker is far ahead of a learner doing its first, slow update) fills the replay
        with thousands of transitions of the untrained policy while the first update runs; a
        real-time game at 20 Hz loses a few steps at most. Never a deadlock: the hold lasts only
        while an update is due."""
        if not self.warm and self.learner.train_due():
            return True
        return bool(self.learner.behind())

    def snapshot(self, now: float) -> None:
        return None


@attrs.define
class Round:
    """Sync mode: the round of one model version: who owes a share, who delivered, who was dropped."""

    version: int
    started: float
    members: set[str] = attrs.Factory(set)
    batches: dict[str, SampleBatch] = attrs.Factory(dict)
    dropped: set[str] = attrs.Factory(set)


class SyncRounds:
    """Sync mode (PPO): one share per worker for the open version; train when the round is complete.

    A round is complete when every member delivered, or when it timed out with at
    least one share (it then trains without the missing). A round with no share
    keeps waiting, with the members refreshed from the workers online. Batches of
    another version are refused, so a round never mixes versions.
    """

    mode: Mode = "sync"

    def __init__(self, learner: SyncLearner, round_timeout_s: float, now: float):
        self.learner = learner
        self.round_timeout_s = round_timeout_s
        self.round = Round(version=0, started=now)
        self.completed = 0
        self.short = 0  # rounds that trained without some member (death or timeout)

    def check(self, batch: SampleBatch, version: int, now: float) -> None:
        r = self.round
        if batch.model_version != r.version:
            raise Rejected(
                "wrong_round", f"batch made with version {batch.model_version}, the open round is {r.version}"
            )
        if batch.worker in r.batches:
            raise Rejected("duplicate", f"worker {batch.worker!r} already sent its share of round {r.version}")

    def take(self, batch: SampleBatch) -> None:
        r = self.round
        r.batches[batch.worker] = batch
        if batch.worker in r.dropped:  # back (e.g. restarted) in time to deliver: a member again
            r.dropped.discard(batch.worker)
            r.members.add(batch.worker)
        if not r.members and r.batches.keys() == {batch.worker}:
            r.members.add(batch.worker)  # the first worker of a fresh run opens the round

    def drop(self, worker: str) -> None:
        r = self.round
        if worker in r.members and worker not in r.batches:
            r.members.discard(worker)
            r.dropped.add(worker)
            log.warning("round %d goes on without %s (offline)", r.version, worker)

    def opened(self, version: int, members: set[str], now: float) -> None:
        """Every live worker owes a share of the new version."""
        self.round = Round(version=version, started=now, members=set(members))

    def step(self, now: float, online: set[str]) -> Step:
        r = self.round
        waiting = r.members - r.batches.keys()
        if not r.batches:
            if now - r.started > self.round_timeout_s:
                r.started = now
                r.members = set(online)
                log.warning(
                    "round %d: no worker delivered a share in %.0fs; still waiting (workers online: %s)",
                    r.version,
                    self.round_timeout_s,
                    sorted(r.members) or "none",
                )
            return Step()
        if waiting:
            if now - r.started < self.round_timeout_s:
                return Step()
            log.warning(
                "round %d timed out after %.0fs; training without %s", r.version, self.round_timeout_s, sorted(waiting)
            )
        if waiting or r.dropped:
            self.short += 1
        batches = [r.batches[w] for w in sorted(r.batches)]
        record = {
            "version": r.version,
            "workers": sorted(r.batches),
            "batch_versions": sorted({b.model_version for b in batches}),
            "transitions": sum(b.count for b in batches),
            "missing": sorted(waiting),
            "dropped": sorted(r.dropped),
            "seconds": round(now - r.started, 3),
        }
        metrics = dict(self.learner.train_round(batches))
        metrics["round_workers"] = len(batches)
        self.completed += 1
        return Step(trained=True, publish=True, metrics=metrics, round_record=record)

    def behind(self) -> bool:
        """Rounds pace the workers themselves; they are never paused."""
        return False

    def snapshot(self, now: float) -> dict:
        r = self.round
        return {
            "version": r.version,
            "members": sorted(r.members),
            "delivered": sorted(r.batches),
            "age_s": round(now - r.started, 2),
            "completed": self.completed,
            "short": self.short,
        }


class LearnerCore:
    """Admission, membership and liveness, version and flow state; training through the admission
    strategy of the algorithm's mode (``admission``: :class:`AsyncAdmission` or :class:`SyncRounds`;
    ``mode`` is only ever the string ``"async"``/``"sync"``)."""

    def __init__(self, rules: LearnerRules, spec: SampleSpec, admission: AsyncAdmission | SyncRounds):
        self.rules = rules
        self.spec = spec
        self.admission = admission
        self.workers: dict[str, WorkerStatus] = {}
        #: this learner incarnation (the shell sets it at start); weights and batches carry it
        self.epoch = 0
        self.version = 0
        #: async mode: batches made with a previous epoch's model, accepted (off-policy data stays good)
        self.old_epoch_batches = 0
        self.samples_total = 0
        self.batches_total = 0
        self.paused = False
        self.train_metrics: dict = {}
        #: the metrics message's per-worker table, bounded for big fleets
        self.table = WorkerTable(rules.metrics_workers)
        #: forgotten workers' sequence numbers, newest last (at most MAX_RETIRED): dedupe does not
        #: depend on the table of workers, nor on their retained states
        self._retired: dict[str, dict[str, int]] = {}
        #: env restarts of forgotten workers (the run's count stays cumulative)
        self.env_restarts_forgotten = 0
        #: workers of another protocol version: never members, their messages refused (one line each)
        self.protocols = OtherProtocols()

    @classmethod
    def create(cls, rules: LearnerRules, spec: SampleSpec, mode: Mode, learner: AsyncLearner | SyncLearner, now: float):
        """Select the admission strategy once, from the algorithm's mode."""
        if mode == "sync":
            return cls(rules, spec, SyncRounds(learner, rules.round_timeout_s, now))
        if rules.max_staleness is not None:
            message = (
                f"learner.max_staleness = {rules.max_staleness} (versions) is deprecated: staleness is "
                f"learner.max_staleness_s (now {rules.max_staleness_s:g} s); both rules apply"
            )
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            log.warning("%s", message)
        admission = AsyncAdmission(
            learner, rules.max_staleness_s, rules.publish_every, rules.weights_every_s, rules.max_staleness
        )
        return cls(rules, spec, admission)

    # ---- versions ----------------------------------------------------------------
    def restore(
        self,
        version: int,
        samples_total: int,
        batches_total: int,
        last_seq: Mapping[str, int | Mapping[str, int]],
        now: float | None = None,
    ) -> None:
        """Resume from a checkpoint: workers come back offline (since ``now``), with their last
        sequence numbers per incarnation (an int: a checkpoint from before incarnations, under
        incarnation "")."""
        self.version = int(version)
        self.samples_total = int(samples_total)
        self.batches_total = int(batches_total)
        for name, seqs in last_seq.items():
            per_incarnation = {"": int(seqs)} if isinstance(seqs, int) else {str(k): int(v) for k, v in seqs.items()}
            newest = next(reversed(per_incarnation), "")
            self.workers[name] = WorkerStatus(
                name=name,
                online=False,
                offline_since=now,
                incarnation=newest,
                seqs=per_incarnation,
            )

    def continue_after(self, version: int) -> bool:
        """Never go backwards: adopt a newer version (the broker's retained weights). True if adopted."""
        if version <= self.version:
            return False
        self.version = version
        return True

    def new_version(self, now: float) -> int:
        """Open the next model version (the shell publishes its weights)."""
        self.version += 1
        self.admission.opened(self.version, self.online(), now)
        return self.version

    # ---- messages ----------------------------------------------------------------
    def on_samples(self, worker: str, payload: bytes, now: float) -> SampleBatch:
        self.protocols.refuse_known(worker)
        try:
            batch = decode_batch(payload, max_bytes=self.rules.max_payload_bytes)
        except Rejected as r:
            if r.reason == "protocol_version":  # a sender of another version whose birth we missed
                self.protocols.check(worker, batch_protocol(payload))
            raise
        self.admit(worker, batch, now)
        return batch

    def admit(self, worker: str, batch: SampleBatch, now: float) -> None:
        """Accept ``batch`` from the worker named by the topic, or raise :class:`Rejected`."""
        if batch.run != self.rules.run:
            raise Rejected("wrong_run", f"batch for run {batch.run!r}")
        if batch.worker != worker:
            raise Rejected("sender_mismatch", f"header says {batch.worker!r}, topic says {worker!r}")
        status = self.workers.get(worker)
        if status is None:
            if self.rules.require_announce:
                raise Rejected("unknown_sender", f"worker {worker!r} never announced itself on state/workers/{worker}")
            status = self.workers[worker] = self._new_status(worker, last_seen=now)
        inc = batch.incarnation
        if inc not in status.seqs and inc != status.incarnation:
            status.switch_to(inc)  # a process whose birth we missed: a new sender, not a duplicate
        if status.seen(inc, batch.seq):
            last = status.seqs[inc]
            raise Rejected("duplicate", f"sequence {batch.seq} already seen (last {last}, incarnation {inc!r})")
        status.saw(inc, batch.seq)  # seen, whatever comes next: a refusal below is not also "missing"
        old_epoch = 0 < batch.epoch < self.epoch  # 0: a sender that names no epoch; the version rules apply
        if batch.epoch > self.epoch:
            raise Rejected("future_epoch", f"epoch {batch.epoch} > this learner's {self.epoch}: is another learner up?")
        if old_epoch:
            if self.admission.mode == "sync":
                raise Rejected("old_epoch", f"made with epoch {batch.epoch}'s model; rounds are of epoch {self.epoch}")
        else:
            if batch.model_version > self.version:
                raise Rejected("future_version", f"model version {batch.model_version} > current {self.version}")
            self.admission.check(batch, self.version, now)
        self.spec.validate(batch.arrays, batch.count)
        self.admission.take(batch)
        self.old_epoch_batches += old_epoch
        status.samples += batch.count
        self._heard_from(status, now)
        self.samples_total += batch.count
        self.batches_total += 1

    def on_heartbeat(self, worker: str, payload: bytes, now: float) -> Heartbeat:
        """A worker's heartbeat: alive, on this version, this far; the record for the fleet's timing."""
        self.protocols.refuse_known(worker)
        hb = Heartbeat.decode(payload)
        status = self.workers.get(worker)
        if status is None:
            raise Rejected("unknown_sender", f"heartbeat from {worker!r}, which never announced itself")
        self._heard_from(status, now)
        status.model_version = hb.model_version
        status.env_steps = hb.env_steps
        if hb.episodes is not None:
            status.episodes = hb.episodes
        other = hb.incarnation is not None and status.incarnation and hb.incarnation != status.incarnation
        if hb.env_restarts is not None and not other:  # not a late one of an earlier process
            status.env_restarts = hb.env_restarts
        return hb

    def on_worker_state(self, worker: str, payload: bytes, now: float) -> None:
        """A birth message, a last will / clean exit (offline: the open round goes on without it), or a clear.

        A clear (an empty retained state) changes nothing: the worker's sequence numbers must outlive
        its retained state (a resend after it is still a duplicate), and a worker that is gone is
        forgotten after ``forget_offline_s`` like any other."""
        if not payload:  # retained state cleared
            return
        st = WorkerState.decode(payload)
        self._check_protocol(worker, st, now)
        status = self.workers.get(worker)
        if status is None:
            status = self.workers[worker] = self._new_status(worker)
        if st.online:
            if st.incarnation is not None:
                status.switch_to(st.incarnation)
            status.seen_online(now)
            status.announced_at = now
            status.info = {
                k: v for k, v in (("host", st.host), ("pid", st.pid), ("num_envs", st.num_envs)) if v is not None
            }
            log.info("worker %s online (%s)", worker, status.info)
        else:
            if status.online:
                log.warning("worker %s offline (%s)", worker, st.reason or st.status)
            status.went_offline(now)
            self.admission.drop(worker)

    # ---- membership ----------------------------------------------------------------
    def _check_protocol(self, worker: str, st: WorkerState, now: float) -> None:
        """A state of another protocol version is refused (:meth:`OtherProtocols.check_state`);
        a member of that name leaves."""
        try:
            self.protocols.check_state(worker, st)
        except Rejected:
            status = self.workers.get(worker)
            if status is not None and status.online:
                status.went_offline(now)
                self.admission.drop(worker)
            raise

    def _new_status(self, name: str, last_seen: float | None = None) -> WorkerStatus:
        """A worker the table does not hold; one forgotten earlier keeps its sequence numbers."""
        seqs = self._retired.pop(name, {})
        return WorkerStatus(name=name, last_seen=last_seen, incarnation=next(reversed(seqs), ""), seqs=seqs)

    def _retire(self, status: WorkerStatus) -> None:
        """``status`` leaves the table: its sequence numbers are kept (bounded), its env restarts counted."""
        self.env_restarts_forgotten += status.env_restarts_total
        seqs = {k: v for k, v in status.seqs.items() if v >= 0 and k != status.incarnation}
        if status.last_seq >= 0:
            seqs[status.incarnation] = status.last_seq  # the current incarnation last: the one resumed
        if seqs:
            self._retired.pop(status.name, None)
            self._retired[status.name] = seqs
            while len(self._retired) > MAX_RETIRED:
                del self._retired[next(iter(self._retired))]

    @staticmethod
    def _heard_from(status: WorkerStatus, now: float) -> None:
        """A batch or heartbeat came: online. One that had been marked offline (its link was
        silent, the process the same) is said to be back, with how long it was silent."""
        if not status.online:
            if status.last_seen is not None:
                log.info("worker %s back after %.0fs silent (same process)", status.name, now - status.last_seen)
            else:
                log.info("worker %s back (not heard from by this learner before)", status.name)
        status.seen_online(now)

    # ---- time --------------------------------------------------------------------
    def check_liveness(self, now: float) -> list[str]:
        """Mark workers silent for longer than the timeout offline; returns their names. Forget
        workers offline for longer than ``rules.forget_offline_s``."""
        gone, forget = [], []
        for w in self.workers.values():
            if w.online and w.last_seen is not None and now - w.last_seen > self.rules.worker_timeout_s:
                w.went_offline(now)
                self.admission.drop(w.name)
                log.warning("worker %s silent for %.0fs; marked offline", w.name, now - w.last_seen)
                gone.append(w.name)
            elif not w.online and w.offline_since is not None and now - w.offline_since > self.rules.forget_offline_s:
                forget.append(w.name)
        for name in forget:
            self._retire(self.workers.pop(name))
            self.table.forget(name)
        if forget:
            log.info("forgot %d workers offline for over %.0fs", len(forget), self.rules.forget_offline_s)
        return gone

    def step(self, now: float) -> Step:
        """Train if the mode says so; opens the next version when the new weights are to be published."""
        step = self.admission.step(now, self.online())
        if step.metrics is not None:
            self.train_metrics = step.metrics
        if step.publish:
            self.new_version(now)
        return step

    def update_flow(self) -> bool:
        """Pause workers while the learner is behind; True when the signal changed (publish it)."""
        behind = self.admission.behind()
        if behind == self.paused:
            return False
        self.paused = behind
        return True

    # ---- reading -----------------------------------------------------------------
    def env_steps_per_worker(self) -> int:
        """The median env steps the workers reported (0 before any heartbeat): the run's progress."""
        steps = sorted(w.env_steps for w in self.workers.values() if w.env_steps > 0)
        return steps[(len(steps) - 1) // 2] if steps else 0

    def online(self) -> set[str]:
        return {w.name for w in self.workers.values() if w.online}

    def last_seqs(self) -> dict[str, dict[str, int]]:
        """Per worker and incarnation, the last sequence number seen (checkpoints keep it so
        resends stay duplicates); the current incarnation last."""
        out = {}
        for w in self.workers.values():
            seqs = {k: v for k, v in w.seqs.items() if v >= 0 and k != w.incarnation}
            if w.last_seq >= 0:
                seqs[w.incarnation] = w.last_seq
            if seqs:
                out[w.name] = seqs
        return out

    def snapshot(self, now: float) -> dict:
        """The core's part of the learner metrics."""
        workers = list(self.workers.values())
        return {
            "model_version": self.version,
            "samples": self.samples_total,
            "batches": self.batches_total,
            "paused_workers": self.paused,
            "missing_batches": sum(w.missing for w in workers),
            "worker_restarts": sum(w.restarts for w in workers),
            "env_restarts": self.env_restarts_forgotten + sum(w.env_restarts_total for w in workers),
            "epoch": self.epoch,
            "old_epoch_batches": self.old_epoch_batches,
            "workers_online": sum(w.online for w in workers),
            "workers_known": len(workers),
            "workers": self.table.rows(workers, self.version, now),
            "train": self.train_metrics,
            "round": self.admission.snapshot(now),
        }
