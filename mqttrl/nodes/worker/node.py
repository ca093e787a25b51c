"""The worker node: plays the game and streams experience.

Started with only a broker URL and a run name: it reads the run's config and
newest weights from their retained messages, builds the envs and the
algorithm's actor, then steps. New weights are applied between steps (model and
version swap together). Samples go out in batches through a bounded outbox,
so a broker outage never stops the game loop. Spawn-safe: nothing here relies
on fork, so it runs the same on a Windows game PC.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from typing import Any

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.algorithm import ActorContext
from mqttrl.config import RunConfig, from_dict
from mqttrl.envs.make import make_env
from mqttrl.envs.rollout import EnvSet
from mqttrl.nodes.inference import InferenceUnavailable
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, Message, MqttNode, Outgoing
from mqttrl.transport.topics import Topics, check_name
from mqttrl.wire import Rejected, RejectionCounter, decode_json, decode_weights, encode_batch, encode_json

log = logging.getLogger("mqttrl.worker")


class SyncTimeout(TimeoutError):
    """Sync mode: the learner published no new model version in time."""


class WorkerNode:
    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        name: str | None = None,
        index: int = 0,
        num_envs: int | None = None,
        seed: int | None = None,
        wait_timeout: float | None = None,
    ):
        self.topics = Topics(run)
        # with broker credentials the ACL ties a worker's topics to its username, so that is the natural default name
        self.name = check_name("worker", name or broker.user or f"{socket.gethostname()}-{os.getpid()}")
        self.index = index
        self.num_envs_override = num_envs
        self.seed_override = seed
        self.wait_timeout = wait_timeout
        self.rejections = RejectionCounter(log)
        self._stop = threading.Event()
        self.version = -1
        self.seq = 0
        self.env_steps = 0
        self.episodes = 0
        self.learner_online = False
        self.pause = False
        self.config: RunConfig | None = None
        self.actor = None
        self.forward = None
        self.inference_mode = "torch"
        self._pending_weights = None
        self._episodes: list[dict] = []  # finished episodes, sent with the next sample batch
        self.node = MqttNode(
            broker,
            client_id=f"mqttrl-worker-{run}-{self.name}",
            persistent=False,
            subscriptions=[
                (self.topics.config, 1),
                (self.topics.weights, 1),
                (self.topics.flow, 1),
                (self.topics.learner_state, 1),
            ],
            will=Outgoing(
                self.topics.worker_state(self.name), self._state("offline", "connection lost"), 1, True, "state"
            ),
            birth=lambda: [Outgoing(self.topics.worker_state(self.name), self._state("online"), 1, True, "state")],
            inbox_limit=1000,
            outbox_limit=2000,
        )

    def _state(self, status: str, reason: str = "") -> bytes:
        return encode_json(
            {
                "status": status,
                "reason": reason,
                "worker": self.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "index": self.index,
                "num_envs": self.num_envs_override,
                "mqttrl": __version__,
                "protocol": PROTOCOL_VERSION,
                "time": time.time(),
            }
        )

    # ---- inbox ----------------------------------------------------------------
    def _handle(self, msg: Message) -> None:
        try:
            kind, _ = self.topics.parse(msg.topic)
        except ValueError:
            return
        try:
            if kind == "config":
                if self.config is None:
                    self._on_config(decode_json(msg.payload, {"run": str}))
            elif kind == "weights":
                w = decode_weights(msg.payload)
                if w.run != self.topics.run:
                    raise Rejected("wrong_run", f"weights for run {w.run!r}")
                if self.version < 0 or w.version > self.version or w.version < self.version - 1000:
                    self._pending_weights = w  # applied between steps; newest wins
            elif kind == "flow":
                self.pause = bool(decode_json(msg.payload).get("pause", False))
            elif kind == "learner_state" and msg.payload:
                st = decode_json(msg.payload, {"status": str})
                online = st["status"] == "online"
                if online != self.learner_online:
                    log.info("learner is %s", st["status"])
                self.learner_online = online
        except Rejected as r:
            self.rejections.add(r, kind)
        except Exception as exc:  # never let one message take the node down
            log.exception("handling a message on %s failed", msg.topic)
            self.rejections.add(Rejected("internal_error", f"{type(exc).__name__}: {exc}"), kind)

    def _on_config(self, data: dict) -> None:
        registry = get_registry()
        algo_name = data.get("algorithm", {}).get("name")
        self.config = from_dict(data, lambda name: registry.algorithm(name).params)
        self.info = registry.algorithm(algo_name)
        log.info("run %s: env %s, algorithm %s", self.config.run, self.config.env.id, algo_name)

    def _drain(self, timeout: float = 0.0) -> None:
        try:
            msg = self.node.inbox.get(timeout=timeout) if timeout else self.node.inbox.get_nowait()
            self._handle(msg)
            while True:
                self._handle(self.node.inbox.get_nowait())
        except queue.Empty:
            pass

    def _wait_for(self, what: str, ready) -> None:
        start = time.monotonic()
        last_note = start
        while not ready() and not self._stop.is_set():
            self._drain(timeout=0.2)
            now = time.monotonic()
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

    # ---- main loop ------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        self._stop.set()

    def _apply_weights(self) -> None:
        w = self._pending_weights
        self._pending_weights = None
        if w is None:
            return
        if w.algorithm != self.config.algorithm.name:
            self.rejections.add(
                Rejected("bad_value", f"weights for {w.algorithm!r}, run uses {self.config.algorithm.name!r}"),
                "weights",
            )
            return
        if self.actor.pending():  # a batch never mixes model versions
            self._send_batch()
        self.actor.load_weights(w.tensors, w.info)
        self.version = w.version
        if hasattr(self.forward, "min_version"):  # central inference: only answers from this model on
            self.forward.min_version = w.version

    def _wait_next_version(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync(self.config.worker.sync_timeout_s)
                return
            except SyncTimeout as e:
                log.error("%s", e)

    def _send_episodes(self) -> None:
        if self._episodes:
            body = {"worker": self.name, "episodes": self._episodes}
            self._episodes = []
            self.node.publish(self.topics.episodes(self.name), encode_json(body), qos=1, kind="episodes")

    def _send_batch(self) -> None:
        self._send_episodes()
        arrays = self.actor.take()
        if not arrays:
            return
        payload = encode_batch(self.topics.run, self.name, self.seq, self.version, arrays)
        self.seq += 1
        self.node.publish(self.topics.samples(self.name), payload, qos=1, retain=False, kind="samples")

    def sync(self, timeout: float) -> None:
        """Sync mode: block until a model version newer than the one we sent a share for.

        Keeps heartbeating (the learner must not think we died) and raises
        :class:`SyncTimeout` with what to check when nothing arrives in time.
        """
        sent_version = self.version
        deadline = time.monotonic() + timeout
        next_hb = time.monotonic() + self.config.worker.heartbeat_interval_s
        while not self._stop.is_set():
            if self._pending_weights is not None and self._pending_weights.version > sent_version:
                self._apply_weights()
                return
            now = time.monotonic()
            if now >= deadline:
                state = "online" if self.learner_online else "offline"
                raise SyncTimeout(
                    f"no model version after {sent_version} within {timeout:.0f}s for run {self.topics.run!r} "
                    f"(learner state: {state}). Check that the learner is running and connected to this broker "
                    f"(mosquitto_sub -v -t '{self.topics.learner_state}'), and its log for stalled rounds; "
                    f"raise worker.sync_timeout_s if rounds are legitimately slow. Still waiting."
                )
            if now >= next_hb:
                next_hb = now + self.config.worker.heartbeat_interval_s
                self._heartbeat()
            self._drain(timeout=0.05)

    def _heartbeat(self) -> None:
        hb = {
            "worker": self.name,
            "pid": os.getpid(),
            "model_version": self.version,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "seq": self.seq,
            "outbox": self.node.outbox_size,
            "dropped": dict(self.node.dropped),
            "rejected": self.rejections.snapshot(),
            "paused": self.pause and self.learner_online,
            "time": time.time(),
        }
        self.node.publish(self.topics.heartbeat(self.name), encode_json(hb), qos=0, kind="heartbeat")

    def _make_forward(self, obs_space, act_space):
        """The policy network's home: local torch, local numpy, or the central inference servers."""
        cfg = self.config
        mode = cfg.worker.inference
        if mode == "remote":
            from mqttrl.nodes.inference import RemoteForward

            ic = cfg.inference
            return RemoteForward(
                self.node.settings, self.topics.run, self.name, timeout_s=ic.timeout_s, retries=ic.retries
            )
        if mode == "auto":  # numpy where the algorithm has a numpy forward: no torch needed, and faster for MLPs
            mode = "numpy" if self.info.make_forward is not None else "torch"
        if mode == "torch":
            import torch

            torch.set_num_threads(cfg.worker.torch_threads)
        if self.info.make_forward is None:
            if mode != "torch":
                raise RuntimeError(
                    f'algorithm {cfg.algorithm.name!r} offers no {mode} forward; use worker.inference = "torch"'
                )
            return None
        self.inference_mode = mode
        return self.info.make_forward(cfg.algorithm.params, obs_space, act_space, mode)

    def run(self, max_env_steps: int | None = None) -> None:
        self.node.start(wait=None)
        self._wait_for("config", lambda: self.config is not None)
        if self._stop.is_set():
            return self._shutdown()
        cfg = self.config
        num_envs = self.num_envs_override or cfg.env.num_envs
        seed = self.seed_override if self.seed_override is not None else cfg.train.seed * 1000 + self.index * 97
        registry = get_registry()
        make = lambda: make_env(cfg.env.id, cfg.env.kwargs, registry)  # noqa: E731
        envs = EnvSet(make, num_envs, seed)
        ctx = ActorContext(
            num_envs=num_envs,
            first_env_index=self.index * num_envs,
            total_envs=max(cfg.train.workers, self.index + 1) * num_envs,
            seed=seed,
        )
        obs_space, act_space = envs.envs[0].observation_space, envs.envs[0].action_space
        self.forward = self._make_forward(obs_space, act_space)
        if self.forward is None:
            self.actor = self.info.make_actor(cfg.algorithm.params, obs_space, act_space, ctx)
        else:
            self.actor = self.info.make_actor(cfg.algorithm.params, obs_space, act_space, ctx, forward=self.forward)
        self._wait_for("weights", lambda: self._pending_weights is not None or self.version >= 0)
        if self._stop.is_set():
            envs.close()
            return self._shutdown()
        self._apply_weights()
        log.info(
            "worker %s stepping %d envs from model version %d (inference: %s)",
            self.name,
            num_envs,
            self.version,
            cfg.worker.inference if cfg.worker.inference != "auto" else self.inference_mode,
        )
        hb_every = cfg.worker.heartbeat_interval_s
        next_hb = 0.0
        batch_started = None
        sync_mode = self.info.mode == "sync"
        while not self._stop.is_set():
            self._drain()
            if self._pending_weights is not None:
                if sync_mode:  # a round finished without us: our partial share is of an old version
                    discard = getattr(self.actor, "discard", None)
                    if discard is not None:
                        discard()
                self._apply_weights()
            now = time.monotonic()
            if now >= next_hb:
                next_hb = now + hb_every
                self._heartbeat()
            if self.pause and self.learner_online:
                self._drain(timeout=0.01)  # the learner is behind: wait for it
                continue
            try:
                actions, extras = self.actor.act(envs.obs)
            except InferenceUnavailable as e:  # central inference is down: say so, keep trying
                log.error("%s", e)
                self._heartbeat()
                continue
            obs, rewards, next_obs, terminated, truncated, ended = envs.step(actions)
            self.actor.record(obs, actions, extras, rewards, next_obs, terminated, truncated)
            self.env_steps += num_envs
            for e in ended:
                self.episodes += 1
                self._episodes.append(
                    {
                        "env": e.env_index,
                        "return": e.episode_return,
                        "length": e.length,
                        "terminated": e.terminated,
                        "model_version": self.version,
                        "env_steps": self.env_steps,
                        "time": time.time(),
                    }
                )
            pending = self.actor.pending()
            if sync_mode:
                if pending:  # our whole share of this round: send it, wait for the next version
                    self._send_batch()
                    self._wait_next_version()
                    next_hb = 0.0
                continue
            if pending and batch_started is None:
                batch_started = now
            if pending >= cfg.worker.batch_size or (pending and now - batch_started > cfg.worker.max_batch_delay_s):
                self._send_batch()
                batch_started = None
            if max_env_steps and self.env_steps >= max_env_steps:
                break
        if self.actor.pending():
            self._send_batch()
        self._send_episodes()
        envs.close()
        if hasattr(self.forward, "close"):
            self.forward.close()
        self._shutdown()

    def _shutdown(self) -> None:
        self.node.stop(
            final=[Outgoing(self.topics.worker_state(self.name), self._state("offline", "stopped"), 1, True, "state")]
        )
        log.info("worker %s stopped after %d env steps, %d episodes", self.name, self.env_steps, self.episodes)


def run_worker(broker: BrokerSettings, run: str, **kwargs) -> None:
    node = WorkerNode(broker, run, **kwargs)
    signal.signal(signal.SIGTERM, node.stop)
    signal.signal(signal.SIGINT, node.stop)
    node.run()
