"""The learner node's shell: MQTT, the clock, the main loop, checkpoints and run-dir files.

The rules (admission, membership, rounds, flow control) live in the pure
:class:`~mqttrl.nodes.learner.core.LearnerCore`; this shell feeds it what the
broker delivers, through one handler table, and does what it answers. One
thread runs everything that touches the algorithm: it drains the inbox, lets
the core train, publishes weights (each publish is a new model version),
reports metrics, applies flow control and writes checkpoints. The MQTT
client's callbacks only enqueue.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import RunConfig
from mqttrl.nodes.learner.best import BestModels
from mqttrl.nodes.learner.checkpointing import Checkpointing, disk_full_line
from mqttrl.nodes.learner.env_spec import learner_config
from mqttrl.nodes.learner.setup import clock, set_up_training, take_demos
from mqttrl.nodes.learner.setup import init_from as init_from_model
from mqttrl.nodes.learner.weights_out import WEIGHTS_QOS, WeightsPublisher
from mqttrl.observe.ledger import Ledger
from mqttrl.observe.prometheus import serve_metrics
from mqttrl.observe.timing import BlockTimes, FleetTiming
from mqttrl.plugin.manager import get_registry
from mqttrl.state.atomic import DiskFull, is_disk_full
from mqttrl.state.best import read_score
from mqttrl.state.checkpoint import CheckpointStore
from mqttrl.state.run_dir import write_resolved
from mqttrl.system.procs import StopSignals
from mqttrl.transport.client import BrokerSettings, Message, MqttClient, Outgoing
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import (
    Flow,
    LearnerMetrics,
    LearnerState,
    Quicksave,
    QuicksaveReply,
    Rejected,
    RejectionCounter,
    decode_header,
    decode_weights,
    encode_json,
)
from mqttrl.wire.commands import COMMANDS
from mqttrl.wire.model_ref import ModelRef

log = logging.getLogger("mqttrl.learner")


class LearnerNode:
    def __init__(
        self,
        config: RunConfig,
        broker: BrokerSettings,
        run_dir: Path,
        resume: bool = False,
        init_from: Path | None = None,
    ):
        """Everything the node needs before it connects, in the order a failure should stop it: the
        env's spaces, torch and the device, the algorithm's learner and core (its networks loaded from
        ``init_from`` when given), the run's checkpoints (resumed from when asked), then the MQTT
        client (not connected yet)."""
        self.config = config
        self.lc = config.learner
        self.topics = Topics(config.run)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        registry = get_registry()
        #: where the time goes, per block (receive, sample, train_step, publish), and the workers' reports
        self.blocks = BlockTimes()
        training = set_up_training(config, registry, self.blocks)
        self.info, self.device, self.spec = training.info, training.device, training.spec
        self.algo, self.core = training.algo, training.core
        #: where the first model's weights came from (--init-from), None: a fresh network
        self.initialised_from = (
            init_from_model(self.algo, Path(init_from), registry, config.algorithm.name)
            if init_from is not None
            else None
        )
        self.fleet_timing = FleetTiming()
        self.dispatch = Dispatcher(
            self.topics,
            {
                Kind.SAMPLES: self._on_samples,
                Kind.HEARTBEAT: _timed(self._on_heartbeat),
                Kind.WORKER_STATE: _timed(self.core.on_worker_state),
                Kind.COMMAND: self._on_command,
            },
            log,
        )
        self.started = time.time()
        store = CheckpointStore(self.run_dir / "checkpoints", keep=self.lc.keep_checkpoints)
        self.checkpoints = Checkpointing(store, config, self.algo, self.core)
        #: the score of ``checkpoints/best/`` (read back at start: only a better one replaces it) and
        #: the recent versions' exact weights (a best-model save writes the model that was judged)
        self.best = BestModels(read_score(self.best_dir))
        if self.best.score is not None:
            log.info("best model so far: %s", self.best.score.describe())
        self.weights = WeightsPublisher(config, self.algo, self.core, self.best)
        self._stop = threading.Event()
        self.resumed_from = self.checkpoints.resume(clock()) if resume else None
        take_demos(config, training, fresh=self.resumed_from is None)
        write_resolved(config, self.run_dir / "config.json")
        self.client = self._make_client(broker)
        #: the audit of every batch judged, when $MQTTRL_LEDGER_DIR is set (opened once the epoch is final)
        self.ledger: Ledger | None = None

    def _make_client(self, broker: BrokerSettings) -> MqttClient:
        """The learner's MQTT client: a persistent session, its will and birth, manual acks."""
        return MqttClient(
            broker,
            client_id=f"mqttrl-learner-{self.config.run}",
            persistent=True,
            subscriptions=[
                self.topics.subscription(kind)
                for kind in (Kind.SAMPLES, Kind.HEARTBEAT, Kind.WORKER_STATE, Kind.COMMAND, Kind.WEIGHTS)
            ],
            will=Outgoing(
                self.topics.learner_state, self._state_payload("offline", "connection lost"), 1, True, "state"
            ),
            birth=self._birth,
            inbox_limit=20000,
            inbox_block_s=5.0,
            outbox_limit=1000,
            # acknowledged once handled: a learner killed with batches in its inbox gets them again
            manual_ack=True,
        )

    @property
    def best_dir(self) -> Path:
        return self.checkpoints.store.root / "best"

    @property
    def version(self) -> int:
        return self.core.version

    @property
    def rejections(self) -> RejectionCounter:
        """The one count of refused messages, by reason: the dispatcher's."""
        return self.dispatch.rejections

    def _read_retained_version(self, wait: float = 1.5) -> None:
        """Never go backwards: if the broker holds newer weights than our checkpoint, continue after
        them. Only the retained copy says what the broker holds."""
        deadline = time.monotonic() + wait
        held: list[Message] = []
        while time.monotonic() < deadline:
            try:
                msg = self.client.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg.topic != self.topics.weights:
                held.append(msg)
                continue
            self.client.ack(msg)
            if msg.retain:  # else a dead learner's unacked weights, delivered again by the session
                continue_after_retained(self.core, msg.payload)
                break
        self.ledger = Ledger.from_env(f"learner-{self.core.epoch}.jsonl")  # the epoch is final now
        self.checkpoints.ledger = self.ledger
        for m in held:  # keep everything else, in order
            self._handle(m)

    # ---- messages ----------------------------------------------------------------
    def _state_payload(self, status: str, reason: str = "") -> bytes:
        return LearnerState(
            status=status,
            reason=reason,
            run=self.config.run,
            algorithm=self.config.algorithm.name,
            mode=self.info.mode,
            model_version=self.version,
            epoch=self.core.epoch,
            updates=self.algo.updates,
            host=socket.gethostname(),
            pid=os.getpid(),
            mqttrl=__version__,
            protocol=PROTOCOL_VERSION,
            time=time.time(),
            # the best model's score: a restarted telemetry node (on any host) learns the best so far
            best=self.best.score.to_json() if self.best.score is not None else None,
        ).encode()

    def _birth(self) -> list[Outgoing]:
        """Published (retained) on every connect. With the newest weights too: after a failover
        to a broker that holds none of this run's retained messages, a worker that joins there
        must find a model at once (a learner with no samples coming would publish none)."""
        birth = [
            Outgoing(self.topics.config, encode_json(self.config.to_dict()), 1, True, "config"),
            Outgoing(self.topics.learner_state, self._state_payload("online"), 1, True, "state"),
            Outgoing(self.topics.flow, self._flow_payload(), 1, True, "flow"),
        ]
        weights = self.weights.last  # one read: the main thread may swap in newer ones meanwhile
        if weights is not None:
            birth.append(Outgoing(self.topics.weights, weights, WEIGHTS_QOS, True, "weights"))
        return birth

    def _flow_payload(self) -> bytes:
        """The flow signal; re-published every ``beat_s`` it is also the learner's beat: workers
        that stop hearing it idle (the learner or their link is away; WorkerCore.should_idle)."""
        beat_s = self.lc.metrics_interval_s
        return Flow(pause=self.core.paused, model_version=self.version, beat_s=beat_s, time=time.time()).encode()

    def publish_weights(self) -> None:
        """Publish the learner's weights as the core's current version (retained: late workers get them)."""
        payload = self.weights.encode()
        self.client.publish(self.topics.weights, payload, qos=WEIGHTS_QOS, retain=True, kind="weights")

    def _handle(self, msg: Message) -> None:
        """Dispatch one message, then acknowledge it to the broker (it is ours now)."""
        with self.blocks.timed("receive"):
            self.dispatch(msg.topic, msg.payload)
            self.client.ack(msg)

    def _on_heartbeat(self, worker: str, payload: bytes, now: float) -> None:
        """The core judges the heartbeat; its timing and real-time reports feed the fleet's figures."""
        self.fleet_timing.on_heartbeat(worker, self.core.on_heartbeat(worker, payload, now))

    def _gauges(self) -> dict[str, float]:
        """What the Prometheus endpoint shows besides the blocks (read by its thread at scrape time)."""
        return {"updates": self.algo.updates, "model_version": self.version, "samples": self.core.samples_total}

    def _on_samples(self, worker: str, payload: bytes) -> None:
        try:
            batch = self.core.on_samples(worker, payload, clock())
        except Rejected as r:
            if self.ledger is not None:
                self.ledger.write("refused", worker=worker, reason=r.reason, **_header_of(payload))
            raise
        if self.ledger is not None:
            self.ledger.write("accepted", worker=worker, inc=batch.incarnation, seq=batch.seq, n=batch.count)

    def _on_command(self, command: str, payload: bytes) -> None:
        if command not in COMMANDS:
            raise Rejected("bad_value", f"unknown command {command!r}; known: {', '.join(COMMANDS)}")
        cmd = Quicksave.decode(payload) if payload else Quicksave()
        reply = QuicksaveReply(path="")
        if cmd.name == "best":
            path, reply.refused = self._save_best(cmd)
            if reply.refused:
                log.info("quicksave named best refused: %s", reply.refused)
            else:
                log.info("quicksave -> %s (%s)", path, self.best.score.describe() if self.best.score else "no score")
        else:
            path = self.save_checkpoint(f"quicksave-{self.algo.updates:010d}")
            log.info("quicksave -> %s", path)
        target = cmd.reply_to
        if target is not None and target.startswith(self.topics.base + "/"):
            reply.path, reply.model_version, reply.updates = str(path), self.version, self.algo.updates
            self.client.publish(target, reply.encode(), 1, False, "reply")

    # ---- checkpoints -----------------------------------------------------------
    def _save_best(self, cmd: Quicksave) -> tuple[Path, str | None]:
        """``checkpoints/best/``: the learner's full state plus the exact weights of the judged version
        and its score (:mod:`.best`); ``(path, None)``, or ``(best dir, why not)`` when refused."""
        plan = self.best.plan(cmd, ModelRef(self.core.epoch, self.version))
        if isinstance(plan, str):
            return self.best_dir, plan
        path = self.save_checkpoint("best", extra={"best": plan.info}, files=plan.files)
        self.best.score = plan.score
        # retained: a telemetry node started from now on learns this best
        self.client.publish(self.topics.learner_state, self._state_payload("online"), 1, True, "state")
        return path, None

    def save_checkpoint(
        self, name: str | None = None, extra: dict | None = None, files: dict[str, bytes] | None = None
    ) -> Path:
        return self.checkpoints.save(name, extra, files)

    # ---- metrics -----------------------------------------------------------------
    def _metrics(self, window: dict) -> LearnerMetrics:
        """The metrics message: the core's snapshot, the fleet's timing, and this node's counters."""
        now = time.time()
        dt = max(now - window["t"], 1e-6)
        core = self.core.snapshot(clock())
        m = LearnerMetrics(
            time=now,
            updates=self.algo.updates,
            updates_per_s=(self.algo.updates - window["updates"]) / dt,
            samples_per_s=(core["samples"] - window["samples"]) / dt,
            inbox=self.client.inbox.qsize(),
            inbox_dropped=self.client.inbox_dropped,
            rejected=self.rejections.snapshot(),
            timing=self.blocks.take(),
            timing_total={b: round(s, 3) for b, s in self.blocks.total.items()},
            uptime_s=now - self.started,
            **core,
            **self.fleet_timing.take(),
        )
        window.update(t=now, updates=self.algo.updates, samples=core["samples"])
        return m

    # ---- main loop -------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        self._stop.set()

    def _train(self) -> bool:
        """Let the core train; publish, record the round and checkpoint as it answers."""
        with self.blocks.timed("train_step"):
            step = self.core.step(clock())
        if step.round_record is not None:
            with open(self.run_dir / "rounds.jsonl", "a") as f:
                f.write(json.dumps({**step.round_record, "time": time.time()}) + "\n")
        if step.publish:
            with self.blocks.timed("publish"):
                self.publish_weights()
        if step.trained and self.checkpoints.due():
            self.save_checkpoint()
        self._update_flow()
        return step.trained

    def _update_flow(self) -> None:
        """Publish the flow signal when it changed. Called after the inbox is drained too, so a
        pause goes out before a (slow) update, not after it."""
        if self.core.update_flow():
            self.client.publish(self.topics.flow, self._flow_payload(), 1, True, "flow")

    def _drain_inbox(self, wait_s: float, most: int = 256) -> int:
        """Handle up to ``most`` queued messages, waiting up to ``wait_s`` for the first; how many."""
        handled = 0
        try:
            msg = self.client.inbox.get(timeout=wait_s) if wait_s else self.client.inbox.get_nowait()
            while True:
                self._handle(msg)
                handled += 1
                if handled >= most:
                    break
                msg = self.client.inbox.get_nowait()
        except queue.Empty:
            pass
        return handled

    def run(self, max_seconds: float | None = None) -> None:
        self.client.start(wait=30)
        metrics_server = serve_metrics(self.lc.metrics_port, "learner", self.blocks, None, self._gauges)
        self._read_retained_version()
        self.core.new_version(clock())
        self.publish_weights()
        log.info(
            "learner for run %s up: algorithm %s (%s), model version %d",
            self.config.run,
            self.config.algorithm.name,
            self.info.mode,
            self.version,
        )
        window = {"t": time.time(), "updates": self.algo.updates, "samples": self.core.samples_total}
        next_metrics = time.monotonic() + self.lc.metrics_interval_s
        deadline = time.monotonic() + max_seconds if max_seconds else None
        metrics_file = open(self.run_dir / "learner_metrics.jsonl", "a")
        try:
            idle = False
            while not self._stop.is_set():
                # every message handled updates the flow before the next (maybe slow) update: the
                # batch that fills the replay to learning_starts pauses workers before it runs
                drained = self._drain_inbox(wait_s=0.02 if idle else 0.0)
                if drained:
                    self._update_flow()
                trained = self._train()
                idle = not trained and not drained
                now = time.monotonic()
                if now >= next_metrics:
                    next_metrics = now + self.lc.metrics_interval_s
                    self.core.check_liveness(clock())
                    self.client.publish(self.topics.flow, self._flow_payload(), 1, True, "flow")  # the beat
                    payload = self._metrics(window).encode()
                    self.client.publish(self.topics.learner_metrics, payload, 0, False, "metrics")
                    metrics_file.write(payload.decode() + "\n")
                    metrics_file.flush()
                if deadline and now > deadline:
                    break
        finally:
            _close(metrics_file)
            if metrics_server is not None:
                metrics_server.shutdown()
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            path = self.save_checkpoint()
            log.info("final checkpoint %s", path)
        except Exception as e:  # a full disk: one line (Checkpointing tries no write after the first refused)
            log.error("final checkpoint failed: %s", e, exc_info=not isinstance(e, DiskFull))
        self.client.stop(
            final=[Outgoing(self.topics.learner_state, self._state_payload("offline", "stopped"), 1, True, "state")]
        )


def _header_of(payload: bytes) -> dict:
    """Who sent a refused batch, if its header can say (for the ledger; nothing is decompressed)."""
    try:
        h = decode_header(payload)
    except Rejected:
        return {}
    return {"inc": h.incarnation, "seq": h.seq, "n": h.count}


def _timed(handler: Callable[[str, bytes, float], Any]) -> Callable[[str, bytes], None]:
    """A core handler as a dispatcher handler: the shell reads the clock, the core only gets ``now``."""

    def handle(name: str, payload: bytes) -> None:
        handler(name, payload, clock())

    return handle


def run_learner(
    config: RunConfig,
    broker: BrokerSettings,
    run_dir: Path,
    resume: bool = False,
    max_seconds: float | None = None,
    init_from: Path | None = None,
) -> StopSignals:
    """Run the learner until a stop signal or ``max_seconds``; returns which signal stopped it."""
    stopped = threading.Event()
    signals = StopSignals(stopped.set)  # Ctrl-C also while it waits for the env spec
    config = learner_config(config, broker, get_registry(), stopped)
    if config is None:
        return signals
    node = LearnerNode(config, broker, run_dir, resume=resume, init_from=init_from)
    signals.stop = node.stop
    if stopped.is_set():
        node.stop()
    try:
        node.run(max_seconds=max_seconds)
    except Exception as e:  # a full disk ends the learner in one line that says what was kept (exit 6)
        if isinstance(e, DiskFull) or not is_disk_full(e):
            raise
        raise DiskFull(disk_full_line(Path(run_dir), str(getattr(e, "filename", None) or "a learner file"))) from None
    return signals


def _close(f: Any) -> None:
    """Close a file the learner appends to; a full disk (its last line unwritten) is the loop's error."""
    try:
        f.close()
    except OSError as e:
        if not is_disk_full(e):
            raise


def continue_after_retained(core: Any, payload: bytes) -> None:
    """Number on after the broker's retained weights where they are newer than the checkpoint (a
    resumed learner never goes backwards); only the retained copy counts: under load an unacked
    echo of the dead learner's own newer weights came first and the new epoch continued after it."""
    try:
        w = decode_weights(payload)
    except Rejected as r:
        log.warning("retained weights unreadable (%s); ignoring", r)
        return
    if w.epoch >= core.epoch:  # a clock that went back: stay ahead of the last learner
        core.epoch = w.epoch + 1
    before = core.version
    if core.continue_after(w.version):
        log.info("broker holds weights version %d > checkpoint version %d; continuing from there", w.version, before)
