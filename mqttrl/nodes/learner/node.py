"""The learner node: algorithm-agnostic ingest, training loop, weights, checkpoints.

One thread runs everything that touches the algorithm: it drains the inbox
(decode, validate, insert), runs training steps while the algorithm says one
is due, publishes weights every ``publish_every`` updates (each publish is a
new model version), reports metrics, tracks worker liveness, applies flow
control and writes checkpoints. The MQTT client's callbacks only enqueue.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import attrs

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import RunConfig, write_resolved
from mqttrl.envs.make import make_env
from mqttrl.plugin.manager import get_registry
from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint
from mqttrl.state.rng import restore_rng, rng_state, seed_everything
from mqttrl.transport.client import BrokerSettings, Message, MqttNode, Outgoing
from mqttrl.transport.topics import Topics
from mqttrl.wire import (
    Rejected,
    RejectionCounter,
    decode_batch,
    decode_json,
    decode_weights,
    encode_json,
    encode_weights,
)

log = logging.getLogger("mqttrl.learner")


@attrs.define
class WorkerStatus:
    name: str
    online: bool = True
    last_seen: float = 0.0
    announced_at: float = 0.0
    model_version: int = -1
    env_steps: int = 0
    episodes: int = 0
    last_seq: int = -1
    #: first sequence number received in this learner process (shows what a restart recovered)
    first_seq: int = -1
    samples: int = 0
    missing: int = 0
    info: dict = attrs.Factory(dict)


@attrs.define
class Round:
    """Sync mode: the round of one model version: who owes a share, who delivered."""

    version: int
    started: float
    members: set = attrs.Factory(set)
    batches: dict = attrs.Factory(dict)
    dropped: set = attrs.Factory(set)


class LearnerNode:
    def __init__(self, config: RunConfig, broker: BrokerSettings, run_dir: Path, resume: bool = False):
        self.config = config
        self.lc = config.learner
        self.topics = Topics(config.run)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        registry = get_registry()
        self.info = registry.algorithm(config.algorithm.name)
        self.params = config.algorithm.params
        env = make_env(config.env.id, config.env.kwargs, registry)
        self.obs_space, self.act_space = env.observation_space, env.action_space
        env.close()
        try:
            import torch
        except ImportError:
            raise SystemExit(
                "the learner needs torch: pip install 'mqttrl[learner]' "
                "(on a CPU-only machine: pip install torch==<version> first, or the CPU wheel index)"
            ) from None
        seed_everything(config.train.seed)

        torch.set_num_threads(self.lc.torch_threads)
        self.spec = self.info.sample_spec(self.params, self.obs_space, self.act_space)
        self.algo = self.info.make_learner(
            self.params, self.obs_space, self.act_space, self.lc.device, config.train.seed
        )
        self.rejections = RejectionCounter(log)
        self.workers: dict[str, WorkerStatus] = {}
        self.version = 0
        self.samples_total = 0
        self.batches_total = 0
        self.started = time.time()
        self.checkpoints = CheckpointStore(self.run_dir / "checkpoints", keep=self.lc.keep_checkpoints)
        self._stop = threading.Event()
        self._last_train_metrics: dict[str, float] = {}
        self._paused_workers = False
        self._last_publish_update = 0
        self._last_ckpt_update = 0
        self.resumed_from: str | None = None
        #: the last published weights by version, so a best-model save can write the exact model that was judged
        self._recent_weights: OrderedDict[int, bytes] = OrderedDict()
        self.sync = self.info.mode == "sync"
        self.round = Round(version=0, started=time.monotonic())
        self.rounds_completed = 0
        self.rounds_short = 0  # rounds that trained without some member (death or timeout)
        if resume:
            self._resume()
        write_resolved(config, self.run_dir / "config.json")
        self.node = MqttNode(
            broker,
            client_id=f"mqttrl-learner-{config.run}",
            persistent=True,
            subscriptions=[
                (self.topics.all_samples, 1),
                (self.topics.all_heartbeats, 0),
                (self.topics.all_worker_states, 1),
                (self.topics.all_commands, 1),
                (self.topics.weights, 1),
            ],
            will=Outgoing(
                self.topics.learner_state, self._state_payload("offline", "connection lost"), 1, True, "state"
            ),
            birth=self._birth,
            inbox_limit=20000,
            inbox_block_s=5.0,
            outbox_limit=1000,
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
        self.version = int(node["version"])
        self.samples_total = int(node["samples_total"])
        self.batches_total = int(node["batches_total"])
        for name, seq in node.get("last_seq", {}).items():
            self.workers[name] = WorkerStatus(name=name, online=False, last_seq=int(seq))
        restore_rng(meta.get("rng", {}), tensors)
        self._last_publish_update = self._last_ckpt_update = self.algo.updates
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
                    w = decode_weights(msg.payload)
                    if w.version > self.version:
                        log.info(
                            "broker holds weights version %d > checkpoint version %d; continuing from there",
                            w.version,
                            self.version,
                        )
                        self.version = w.version
                except Rejected as r:
                    log.warning("retained weights unreadable (%s); ignoring", r)
                break
            held.append(msg)
        for m in held:  # keep everything else, in order
            self._handle(m)

    # ---- messages ----------------------------------------------------------------
    def _state_payload(self, status: str, reason: str = "") -> bytes:
        return encode_json(
            {
                "status": status,
                "reason": reason,
                "run": self.config.run,
                "algorithm": self.config.algorithm.name,
                "mode": self.info.mode,
                "model_version": self.version,
                "updates": self.algo.updates,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "mqttrl": __version__,
                "protocol": PROTOCOL_VERSION,
                "time": time.time(),
            }
        )

    def _birth(self) -> list[Outgoing]:
        return [
            Outgoing(self.topics.config, encode_json(self.config.to_dict()), 1, True, "config"),
            Outgoing(self.topics.learner_state, self._state_payload("online"), 1, True, "state"),
            Outgoing(self.topics.flow, self._flow_payload(), 1, True, "flow"),
        ]

    def _flow_payload(self) -> bytes:
        return encode_json({"pause": self._paused_workers, "model_version": self.version, "time": time.time()})

    def publish_weights(self) -> None:
        self.version += 1
        tensors, info = self.algo.export_weights()
        payload = encode_weights(self.version, self.config.algorithm.name, self.config.run, tensors, info, time.time())
        self._recent_weights[self.version] = payload
        while len(self._recent_weights) > 32:
            self._recent_weights.popitem(last=False)
        self.node.publish(self.topics.weights, payload, qos=1, retain=True, kind="weights")
        self._last_publish_update = self.algo.updates
        if self.sync:  # every live worker owes a share of the new version
            members = {w.name for w in self.workers.values() if w.online}
            self.round = Round(version=self.version, started=time.monotonic(), members=members)

    def _handle(self, msg: Message) -> None:
        try:
            kind, name = self.topics.parse(msg.topic)
        except ValueError:
            return
        try:
            if kind == "samples":
                self._on_samples(name, msg.payload)
            elif kind == "heartbeat":
                self._on_heartbeat(name, msg.payload)
            elif kind == "worker_state":
                self._on_worker_state(name, msg.payload)
            elif kind == "command":
                self._on_command(name, msg.payload)
        except Rejected as r:
            self.rejections.add(r, f"{kind} from {name}")
        except Exception as exc:  # never let one message take the node down
            log.exception("handling a message on %s failed", msg.topic)
            self.rejections.add(Rejected("internal_error", f"{type(exc).__name__}: {exc}"), f"{kind} from {name}")

    def _on_samples(self, worker: str, payload: bytes) -> None:
        batch = decode_batch(payload, max_bytes=int(self.lc.max_payload_mb * 1024 * 1024))
        if batch.run != self.config.run:
            raise Rejected("wrong_run", f"batch for run {batch.run!r}")
        if batch.worker != worker:
            raise Rejected("sender_mismatch", f"header says {batch.worker!r}, topic says {worker!r}")
        status = self.workers.get(worker)
        if status is None:
            if self.lc.require_announce:
                raise Rejected("unknown_sender", f"worker {worker!r} never announced itself on state/workers/{worker}")
            status = self.workers[worker] = WorkerStatus(name=worker, last_seen=time.time())
        if batch.model_version > self.version:
            raise Rejected("future_version", f"model version {batch.model_version} > current {self.version}")
        if not self.sync and self.version - batch.model_version > self.lc.max_staleness:
            raise Rejected(
                "stale_version", f"version {batch.model_version} is older than {self.version} - {self.lc.max_staleness}"
            )
        if self.sync and batch.model_version != self.round.version:
            raise Rejected(
                "wrong_round", f"batch made with version {batch.model_version}, the open round is {self.round.version}"
            )
        if batch.seq <= status.last_seq:
            raise Rejected("duplicate", f"sequence {batch.seq} already seen (last {status.last_seq})")
        if self.sync and worker in self.round.batches:
            raise Rejected("duplicate", f"worker {worker!r} already sent its share of round {self.round.version}")
        self.spec.validate(batch.arrays, batch.count)
        if status.last_seq >= 0 and batch.seq > status.last_seq + 1:
            status.missing += batch.seq - status.last_seq - 1
        status.last_seq = batch.seq
        if status.first_seq < 0:
            status.first_seq = batch.seq
        status.samples += batch.count
        status.last_seen = time.time()
        status.online = True
        if self.sync:
            self.round.batches[worker] = batch
            if not self.round.members and not self.round.batches.keys() - {worker}:
                self.round.members.add(worker)  # the first worker of a fresh run opens the round
        else:
            self.algo.add(batch)
        self.samples_total += batch.count
        self.batches_total += 1

    def _on_heartbeat(self, worker: str, payload: bytes) -> None:
        hb = decode_json(payload, {"model_version": int, "env_steps": int})
        status = self.workers.get(worker)
        if status is None:
            raise Rejected("unknown_sender", f"heartbeat from {worker!r}, which never announced itself")
        status.last_seen = time.time()
        status.online = True
        status.model_version = hb["model_version"]
        status.env_steps = hb["env_steps"]
        status.episodes = int(hb.get("episodes", status.episodes))

    def _on_worker_state(self, worker: str, payload: bytes) -> None:
        if not payload:  # retained state cleared
            self.workers.pop(worker, None)
            return
        st = decode_json(payload, {"status": str})
        status = self.workers.setdefault(worker, WorkerStatus(name=worker))
        if st["status"] == "online":
            status.online = True
            status.announced_at = time.time()
            status.last_seen = time.time()
            status.info = {k: st[k] for k in ("host", "pid", "num_envs") if k in st}
            log.info("worker %s online (%s)", worker, status.info)
        else:
            if status.online:
                log.warning("worker %s offline (%s)", worker, st.get("reason", st["status"]))
            status.online = False
            self._drop_from_round(worker)

    def _on_command(self, command: str, payload: bytes) -> None:
        cmd = decode_json(payload) if payload else {}
        if command == "quicksave":
            name = cmd.get("name")
            if name == "best":
                path = self._save_best(cmd)
            else:
                path = self.save_checkpoint(f"quicksave-{self.algo.updates:010d}")
            log.info("quicksave -> %s", path)
            reply = cmd.get("reply_to")
            if isinstance(reply, str) and reply.startswith(self.topics.base + "/"):
                self.node.publish(
                    reply,
                    encode_json({"path": str(path), "model_version": self.version, "updates": self.algo.updates}),
                    1,
                    False,
                    "reply",
                )
        else:
            raise Rejected("bad_value", f"unknown command {command!r}; known: quicksave")

    # ---- checkpoints -----------------------------------------------------------
    def _save_best(self, cmd: dict) -> Path:
        """``checkpoints/best/``: the learner's full state plus the exact weights of the judged version."""
        asked = cmd.get("model_version")
        version = asked if isinstance(asked, int) and asked in self._recent_weights else self.version
        info = {
            "model_version": version,
            "requested_version": asked,
            "mean_return": cmd.get("mean_return"),
            "window": cmd.get("window"),
            "saved_at_version": self.version,
            "time": time.time(),
        }
        files = {"best.json": json.dumps(info, indent=1).encode()}
        payload = self._recent_weights.get(version)
        if payload is not None:
            files["weights.safetensors"] = payload
        return self.save_checkpoint("best", extra={"best": info}, files=files)

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
                "samples_total": self.samples_total,
                "batches_total": self.batches_total,
                "last_seq": {w.name: w.last_seq for w in self.workers.values() if w.last_seq >= 0},
                "time": time.time(),
            },
            "config": self.config.to_dict(),
            **(extra or {}),
        }
        self._last_ckpt_update = self.algo.updates
        if name is None:
            return self.checkpoints.save_periodic(self.algo.updates, all_tensors, meta)
        return self.checkpoints.save_named(name, all_tensors, meta, files)

    # ---- metrics, liveness, flow ------------------------------------------------
    def _metrics(self, window: dict) -> dict:
        now = time.time()
        dt = max(now - window["t"], 1e-6)
        m = {
            "time": now,
            "model_version": self.version,
            "updates": self.algo.updates,
            "updates_per_s": (self.algo.updates - window["updates"]) / dt,
            "samples": self.samples_total,
            "samples_per_s": (self.samples_total - window["samples"]) / dt,
            "batches": self.batches_total,
            "inbox": self.node.inbox.qsize(),
            "inbox_dropped": self.node.inbox_dropped,
            "paused_workers": self._paused_workers,
            "rejected": self.rejections.snapshot(),
            "missing_batches": sum(w.missing for w in self.workers.values()),
            "workers_online": sum(w.online for w in self.workers.values()),
            "workers": {
                w.name: {
                    "online": w.online,
                    "last_seen_s": round(now - w.last_seen, 2) if w.last_seen else None,
                    "model_version": w.model_version,
                    "version_lag": self.version - w.model_version if w.model_version >= 0 else None,
                    "env_steps": w.env_steps,
                    "samples": w.samples,
                    "missing_batches": w.missing,
                    "first_seq": w.first_seq,
                    "last_seq": w.last_seq,
                }
                for w in self.workers.values()
            },
            "train": self._last_train_metrics,
            "round": {
                "version": self.round.version,
                "members": sorted(self.round.members),
                "delivered": sorted(self.round.batches),
                "age_s": round(time.monotonic() - self.round.started, 2),
                "completed": self.rounds_completed,
                "short": self.rounds_short,
            }
            if self.sync
            else None,
            "uptime_s": now - self.started,
        }
        window.update(t=now, updates=self.algo.updates, samples=self.samples_total)
        return m

    def _check_liveness(self) -> None:
        now = time.time()
        for w in self.workers.values():
            if w.online and w.last_seen and now - w.last_seen > self.lc.worker_timeout_s:
                w.online = False
                self._drop_from_round(w.name)
                log.warning("worker %s silent for %.0fs; marked offline", w.name, now - w.last_seen)

    def _drop_from_round(self, worker: str) -> None:
        if worker in self.round.members and worker not in self.round.batches:
            self.round.members.discard(worker)
            self.round.dropped.add(worker)
            log.warning("round %d goes on without %s (offline)", self.round.version, worker)

    def _maybe_complete_round(self) -> bool:
        """Sync mode: train when every member delivered, or when the round timed out."""
        r = self.round
        waiting = r.members - r.batches.keys()
        if not r.batches:
            if time.monotonic() - r.started > self.lc.round_timeout_s:
                r.started = time.monotonic()
                r.members = {w.name for w in self.workers.values() if w.online}
                log.warning(
                    "round %d: no worker delivered a share in %.0fs; still waiting (workers online: %s)",
                    r.version,
                    self.lc.round_timeout_s,
                    sorted(r.members) or "none",
                )
            return False
        if waiting:
            if time.monotonic() - r.started < self.lc.round_timeout_s:
                return False
            log.warning(
                "round %d timed out after %.0fs; training without %s",
                r.version,
                self.lc.round_timeout_s,
                sorted(waiting),
            )
        if waiting or r.dropped:
            self.rounds_short += 1
        batches = [r.batches[w] for w in sorted(r.batches)]
        record = {
            "version": r.version,
            "workers": sorted(r.batches),
            "batch_versions": sorted({b.model_version for b in batches}),
            "transitions": sum(b.count for b in batches),
            "missing": sorted(waiting),
            "dropped": sorted(r.dropped),
            "seconds": round(time.monotonic() - r.started, 3),
            "time": time.time(),
        }
        with open(self.run_dir / "rounds.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        self._last_train_metrics = self.algo.train_round(batches)
        self._last_train_metrics["round_workers"] = len(batches)
        self.rounds_completed += 1
        self.publish_weights()
        if self.lc.checkpoint_every and self.algo.updates - self._last_ckpt_update >= self.lc.checkpoint_every:
            self.save_checkpoint()
        return True

    def _update_flow(self) -> None:
        behind = bool(self.algo.behind())
        if behind != self._paused_workers:
            self._paused_workers = behind
            self.node.publish(self.topics.flow, self._flow_payload(), 1, True, "flow")

    # ---- main loop -------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> None:
        self.node.start(wait=30)
        self._read_retained_version()
        self.publish_weights()
        log.info(
            "learner for run %s up: algorithm %s (%s), model version %d",
            self.config.run,
            self.config.algorithm.name,
            self.info.mode,
            self.version,
        )
        window = {"t": time.time(), "updates": self.algo.updates, "samples": self.samples_total}
        next_metrics = time.monotonic() + self.lc.metrics_interval_s
        deadline = time.monotonic() + max_seconds if max_seconds else None
        metrics_file = open(self.run_dir / "learner_metrics.jsonl", "a")
        try:
            while not self._stop.is_set():
                drained = 0
                try:
                    while drained < 256:
                        self._handle(self.node.inbox.get_nowait())
                        drained += 1
                except queue.Empty:
                    pass
                trained = False
                if self.sync:
                    trained = self._maybe_complete_round()
                elif self.algo.train_due():
                    self._last_train_metrics = self.algo.train_step()
                    trained = True
                    if self.algo.updates - self._last_publish_update >= self.lc.publish_every:
                        self.publish_weights()
                    if (
                        self.lc.checkpoint_every
                        and self.algo.updates - self._last_ckpt_update >= self.lc.checkpoint_every
                    ):
                        self.save_checkpoint()
                if not self.sync:
                    self._update_flow()
                if not trained and not drained:
                    try:
                        self._handle(self.node.inbox.get(timeout=0.02))
                    except queue.Empty:
                        pass
                now = time.monotonic()
                if now >= next_metrics:
                    next_metrics = now + self.lc.metrics_interval_s
                    self._check_liveness()
                    m = self._metrics(window)
                    payload = encode_json(m)
                    self.node.publish(self.topics.learner_metrics, payload, 0, False, "metrics")
                    metrics_file.write(payload.decode() + "\n")
                    metrics_file.flush()
                if deadline and now > deadline:
                    break
        finally:
            metrics_file.close()
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


def run_learner(
    config: RunConfig, broker: BrokerSettings, run_dir: Path, resume: bool = False, max_seconds: float | None = None
) -> None:
    node = LearnerNode(config, broker, run_dir, resume=resume)
    signal.signal(signal.SIGTERM, node.stop)
    signal.signal(signal.SIGINT, node.stop)
    node.run(max_seconds=max_seconds)
