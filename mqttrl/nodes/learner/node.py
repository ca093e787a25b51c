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

import gymnasium as gym

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import ConfigError, RunConfig, write_resolved
from mqttrl.envs.fit import check_fit, spaces_of_run
from mqttrl.ledger import Ledger
from mqttrl.nodes.learner.best import BestModels
from mqttrl.nodes.learner.core import LearnerCore, Rules
from mqttrl.nodes.learner.device import describe_device, resolve_device
from mqttrl.nodes.learner.env_spec import learner_config
from mqttrl.plugin.algorithm import FLEET_PROGRESS_KEY, INGESTED_KEY, UPDATES_KEY, LearnerContext, takes_context
from mqttrl.plugin.manager import MissingDependency, get_registry
from mqttrl.procs import StopSignals
from mqttrl.prometheus import serve_metrics
from mqttrl.state.best import read_score
from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint
from mqttrl.state.init_from import load_into, read_source
from mqttrl.state.rng import restore_rng, rng_state, seed_everything
from mqttrl.timing import BlockTimes, FleetTiming
from mqttrl.transport.client import BrokerSettings, Message, MqttNode, Outgoing
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
    check_compression,
    decode_header,
    decode_weights,
    encode_json,
    encode_weights,
)
from mqttrl.wire.commands import COMMANDS

log = logging.getLogger("mqttrl.learner")

#: the core's clock: worker liveness and round ages are measured on it
clock = time.monotonic

#: weights go out at QoS 1 (docs/architecture.md, "Weights on a slow link", says why not 0)
WEIGHTS_QOS = 1


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
        self.info = registry.algorithm(config.algorithm.name)
        self.params = config.algorithm.params
        self.obs_space, self.act_space = _env_spaces(config, registry)
        self._set_up_torch()
        #: where the time goes, per block (receive, sample, train_step, publish), and the workers' reports
        self.blocks = BlockTimes()
        self._make_learner()
        #: where the first model's weights came from (--init-from), None: a fresh network
        self.initialised_from: str | None = None
        if init_from is not None:
            self._init_from(Path(init_from), registry)
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
        self.checkpoints = CheckpointStore(self.run_dir / "checkpoints", keep=self.lc.keep_checkpoints)
        #: the score of ``checkpoints/best/`` (read back at start: only a better one replaces it) and
        #: the recent versions' exact weights (a best-model save writes the model that was judged)
        self.best = BestModels(read_score(self.best_dir))
        if self.best.score is not None:
            log.info("best model so far: %s", self.best.score.describe())
        self._stop = threading.Event()
        self._last_ckpt_update = 0
        self.resumed_from: str | None = None
        #: the newest published weights, re-published by the birth after a (re)connect
        self._last_weights: bytes | None = None
        self._start_from(resume)
        write_resolved(config, self.run_dir / "config.json")
        self.node = self._make_client(broker)
        #: the audit of every batch judged, when $MQTTRL_LEDGER_DIR is set (opened once the epoch is final)
        self.ledger: Ledger | None = None

    def _set_up_torch(self) -> None:
        """torch, the device (one line if it cannot be used), the seed and the thread count."""
        torch = _import_torch()
        try:
            self.device = resolve_device(self.lc.device, torch)
            check_compression(self.config.worker.compression)  # the workers' batches must decompress here
        except (ConfigError, ValueError) as e:  # one line, exit 2 (docs/cli.md)
            raise ConfigError(str(e)) from None
        log.info("learner device: %s (learner.device = %r)", describe_device(self.device, torch), self.lc.device)
        seed_everything(self.config.train.seed)
        torch.set_num_threads(self.lc.torch_threads)

    def _make_learner(self) -> None:
        """The algorithm's sample spec and learner, and the core that drives it, in a new epoch."""
        config = self.config
        self.spec = self.info.sample_spec(self.params, self.obs_space, self.act_space)
        make = self.info.make_learner
        context = LearnerContext(self.device, config.train.seed, self.blocks.timed, log)
        extra = {"context": context} if takes_context(make) else {}  # an older plugin: called as before
        self.algo = make(self.params, self.obs_space, self.act_space, self.device, config.train.seed, **extra)
        self.core = LearnerCore.create(Rules.from_config(config), self.spec, self.info.mode, self.algo, clock())
        # a new epoch per learner process: its weights win over any earlier learner's, even at a lower version
        self.core.epoch = time.time_ns() // 1_000_000

    def _make_client(self, broker: BrokerSettings) -> MqttNode:
        """The learner's MQTT client: a persistent session, its will and birth, manual acks."""
        return MqttNode(
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
        return self.checkpoints.root / "best"

    @property
    def version(self) -> int:
        return self.core.version

    @property
    def rejections(self) -> RejectionCounter:
        """The one count of refused messages, by reason: the dispatcher's."""
        return self.dispatch.rejections

    def _init_from(self, path: Path, registry: Any) -> None:
        """A new run from an earlier model: its weights in every network before the first update
        (the run's first published version); InitFromError (one line, exit 2) when it does not fit."""
        source = read_source(path, registry)
        load_into(self.algo, source, self.config.algorithm.name)
        self.initialised_from = source.origin
        log.info("initialised the %s networks from %s", self.config.algorithm.name, source.origin)

    def _start_from(self, resume: bool) -> None:
        """The state training starts from: the newest checkpoint (``resume``), then the demonstrations."""
        if resume:
            self._resume()
        self._take_demos()

    def _take_demos(self) -> None:
        """``demos.path``: the demonstration dataset, read whole and checked against the run's spaces,
        handed to the algorithm (``AlgorithmInfo.learn_from_demos``) before any sample; pretraining only
        in a new run, not a resumed one. A dataset that cannot be used, or an algorithm that does not
        learn from demonstrations, stops the learner with one line (a ConfigError, exit 2)."""
        settings = self.config.demos
        if not settings.path:
            return
        if self.info.learn_from_demos is None:
            raise ConfigError(
                f"demos.path is set, but algorithm {self.config.algorithm.name!r} does not learn from demonstrations"
            )
        from mqttrl.demos.dataset import read_for_run

        dataset = read_for_run(settings, self.obs_space, self.act_space)
        started = time.monotonic()
        figures = self.info.learn_from_demos(self.algo, dataset, settings, self.resumed_from is None)
        log.info(
            "demonstrations: %s; %s (%.1f s)",
            dataset.describe(),
            ", ".join(f"{k} {v:g}" for k, v in figures.items()),
            time.monotonic() - started,
        )

    # ---- resume ----------------------------------------------------------------
    def _resume(self) -> None:
        path = self.checkpoints.latest()
        if path is None:
            log.warning("resume requested but %s holds no checkpoint; starting fresh", self.checkpoints.root)
            return
        tensors, meta = read_checkpoint(path)
        algo_tensors = {k[len("algo/") :]: v for k, v in tensors.items() if k.startswith("algo/")}
        self.algo.load_state_dict(algo_tensors, meta["algo"])
        node = meta["node"]
        self.core.restore(
            node["version"], node["samples_total"], node["batches_total"], node.get("last_seq", {}), now=clock()
        )
        self.core.epoch = max(self.core.epoch, int(node.get("epoch", 0)) + 1)
        restore_rng(meta.get("rng", {}), tensors)
        self._last_ckpt_update = self.algo.updates
        self.resumed_from = str(path)
        log.info("resumed from %s: version %d, %d updates", path, self.version, self.algo.updates)

    def _read_retained_version(self, wait: float = 1.5) -> None:
        """Never go backwards: if the broker holds newer weights than our checkpoint, continue after them."""
        deadline = time.monotonic() + wait
        held: list[Message] = []
        while time.monotonic() < deadline:
            try:
                msg = self.node.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg.topic == self.topics.weights:
                try:
                    self.node.ack(msg)
                    w = decode_weights(msg.payload)
                    if w.epoch >= self.core.epoch:  # a clock that went back: stay ahead of the last learner
                        self.core.epoch = w.epoch + 1
                    before = self.version
                    if self.core.continue_after(w.version):
                        log.info(
                            "broker holds weights version %d > checkpoint version %d; continuing from there",
                            w.version,
                            before,
                        )
                except Rejected as r:
                    log.warning("retained weights unreadable (%s); ignoring", r)
                break
            held.append(msg)
        self.ledger = Ledger.from_env(f"learner-{self.core.epoch}.jsonl")  # the epoch is final now
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
        weights = self._last_weights  # one read: the main thread may swap in newer ones meanwhile
        if weights is not None:
            birth.append(Outgoing(self.topics.weights, weights, WEIGHTS_QOS, True, "weights"))
        return birth

    def _flow_payload(self) -> bytes:
        """The flow signal; re-published every ``beat_s`` it is also the learner's beat: workers
        that stop hearing it idle (the learner or their link is away; WorkerCore.should_idle)."""
        beat_s = self.lc.metrics_interval_s
        return Flow(pause=self.core.paused, model_version=self.version, beat_s=beat_s, time=time.time()).encode()

    def publish_weights(self) -> None:
        """Publish the learner's weights as the core's current version (retained: late workers get them).

        In ``learner.weights_dtype`` on the wire (float16/bfloat16 halve the bytes); the copy kept
        for ``best/`` is float32. How often this runs is bounded by ``learner.weights_every_s``
        (the core opens versions no faster), which bounds every worker's weight traffic."""
        tensors, info = self.algo.export_weights()
        info = {
            **info,
            FLEET_PROGRESS_KEY: self.core.env_steps_per_worker(),
            INGESTED_KEY: self.core.samples_total,
            UPDATES_KEY: self.algo.updates,
        }
        head = (self.version, self.config.algorithm.name, self.config.run, tensors, info, time.time())
        exact = encode_weights(*head, epoch=self.core.epoch)
        wire_dtype = self.lc.weights_dtype
        payload = (
            exact if wire_dtype == "float32" else encode_weights(*head, epoch=self.core.epoch, wire_dtype=wire_dtype)
        )
        self.best.remember(self.version, exact)
        self._last_weights = payload
        self.node.publish(self.topics.weights, payload, qos=WEIGHTS_QOS, retain=True, kind="weights")

    def _handle(self, msg: Message) -> None:
        """Dispatch one message, then acknowledge it to the broker (it is ours now)."""
        with self.blocks.timed("receive"):
            self.dispatch(msg.topic, msg.payload)
            self.node.ack(msg)

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
            path, reply.refused = self._save_best(cmd.to_json())
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
            self.node.publish(target, reply.encode(), 1, False, "reply")

    # ---- checkpoints -----------------------------------------------------------
    def _save_best(self, cmd: dict) -> tuple[Path, str | None]:
        """``checkpoints/best/``: the learner's full state plus the exact weights of the judged version
        and its score (:mod:`.best`); ``(path, None)``, or ``(best dir, why not)`` when refused."""
        plan = self.best.plan(cmd, self.version)
        if isinstance(plan, str):
            return self.best_dir, plan
        path = self.save_checkpoint("best", extra={"best": plan.info}, files=plan.files)
        self.best.score = plan.score
        # retained: a telemetry node started from now on learns this best
        self.node.publish(self.topics.learner_state, self._state_payload("online"), 1, True, "state")
        return path, None

    def save_checkpoint(
        self, name: str | None = None, extra: dict | None = None, files: dict[str, bytes] | None = None
    ) -> Path:
        tensors, algo_meta = self.algo.state_dict(include_replay=self.lc.checkpoint_replay)
        all_tensors = {f"algo/{k}": v for k, v in tensors.items()}
        rng_meta, rng_tensors = rng_state()
        all_tensors.update(rng_tensors)
        meta = {
            "algo": algo_meta,
            "rng": rng_meta,
            "node": {
                "version": self.version,
                "updates": self.algo.updates,
                "samples_total": self.core.samples_total,
                "batches_total": self.core.batches_total,
                "last_seq": self.core.last_seqs(),
                "epoch": self.core.epoch,
                "time": time.time(),
            },
            "config": self.config.to_dict(),
            **(extra or {}),
        }
        self._last_ckpt_update = self.algo.updates
        if self.ledger is not None:
            self.ledger.write("checkpoint", name=name or "periodic", updates=self.algo.updates)
        if name is None:
            return self.checkpoints.save_periodic(self.algo.updates, all_tensors, meta)
        return self.checkpoints.save_named(name, all_tensors, meta, files)

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
            inbox=self.node.inbox.qsize(),
            inbox_dropped=self.node.inbox_dropped,
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
        if (
            step.trained
            and self.lc.checkpoint_every
            and self.algo.updates - self._last_ckpt_update >= self.lc.checkpoint_every
        ):
            self.save_checkpoint()
        self._update_flow()
        return step.trained

    def _update_flow(self) -> None:
        """Publish the flow signal when it changed. Called after the inbox is drained too, so a
        pause goes out before a (slow) update, not after it."""
        if self.core.update_flow():
            self.node.publish(self.topics.flow, self._flow_payload(), 1, True, "flow")

    def _drain_inbox(self, wait_s: float, most: int = 256) -> int:
        """Handle up to ``most`` queued messages, waiting up to ``wait_s`` for the first; how many."""
        handled = 0
        try:
            msg = self.node.inbox.get(timeout=wait_s) if wait_s else self.node.inbox.get_nowait()
            while True:
                self._handle(msg)
                handled += 1
                if handled >= most:
                    break
                msg = self.node.inbox.get_nowait()
        except queue.Empty:
            pass
        return handled

    def run(self, max_seconds: float | None = None) -> None:
        self.node.start(wait=30)
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
                    self.node.publish(self.topics.flow, self._flow_payload(), 1, True, "flow")  # the beat
                    payload = self._metrics(window).encode()
                    self.node.publish(self.topics.learner_metrics, payload, 0, False, "metrics")
                    metrics_file.write(payload.decode() + "\n")
                    metrics_file.flush()
                if deadline and now > deadline:
                    break
        finally:
            metrics_file.close()
            if metrics_server is not None:
                metrics_server.shutdown()
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            path = self.save_checkpoint()
            log.info("final checkpoint %s", path)
        except Exception:
            log.exception("final checkpoint failed")
        self.node.stop(
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


def _env_spaces(config: RunConfig, registry: Any) -> tuple[gym.Space, gym.Space]:
    """The run's env's spaces: its spec (``env.spec``; :mod:`.env_spec` sets it) or, without one, the env
    made once and closed; checked against the algorithm. An unknown env id or an algorithm that cannot
    act in it is a ConfigError (exit 2), a missing package a MissingDependency (exit 5), each one line."""
    spaces = spaces_of_run(config, registry)
    check_fit(config.algorithm.name, config.algorithm.params, config.env.id, spaces, registry)
    return spaces


def _import_torch() -> Any:
    """torch, which only the learner needs; its absence is one line saying what to install."""
    try:
        import torch
    except ImportError:  # one line, exit 5 (docs/cli.md)
        raise MissingDependency(
            "the learner needs torch: pip install 'mqttrl[learner]' "
            "(on a CPU-only machine: pip install torch==<version> first, or the CPU wheel index)"
        ) from None
    return torch


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
    node.run(max_seconds=max_seconds)
    return signals
