"""Central inference (SEED style) over MQTT: servers batch observations from many workers.

A server runs the algorithm's *forward* (network outputs only: Q-values, policy
logits and values) for requests from many workers, batched up to
``batch_size`` rows or ``max_delay_ms``. Exploration and action sampling stay
on each worker (its actor applies its own epsilon or samples from the
returned logits), so servers are stateless, any server can answer any request,
and a worker's exploration schedule does not depend on which server answered.

Load sharing: with MQTT 5, workers publish to ``infer/pool/request`` and every
server consumes it through the shared subscription ``$share/mqttrl-infer/...``,
so the broker spreads requests over the live servers. Without shared
subscriptions (MQTT 3.1.1 brokers such as amqtt) each server also listens on
``infer/<server>/request`` and workers pick a live server from the retained
``state/inference/<server>`` messages, moving to the next one on a timeout.
Requests and replies use the sample-batch wire format (an ``obs`` array, a
correlation id in the header), so they are validated like samples.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import paho.mqtt.client as mqtt

from mqttrl.config import from_dict
from mqttrl.envs.make import make_env
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttNode, Outgoing, negotiate_protocol
from mqttrl.transport.topics import Topics, check_name
from mqttrl.wire import (
    FieldSpec,
    Rejected,
    RejectionCounter,
    SampleSpec,
    decode_batch,
    decode_json,
    decode_weights,
    encode_batch,
    encode_json,
)

log = logging.getLogger("mqttrl.inference")


class Forward(Protocol):
    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None: ...

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]: ...


class InferenceUnavailable(RuntimeError):
    """No inference server answered in time; the message says what to check."""


def _obs_spec(space) -> SampleSpec:
    return SampleSpec({"obs": FieldSpec("float32", tuple(int(d) for d in space.shape))}, max_transitions=4096)


class InferenceServer:
    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        name: str,
        batch_size: int | None = None,
        max_delay_ms: float | None = None,
        backend: str | None = None,
        shared: bool = True,
    ):
        """``batch_size``, ``max_delay_ms`` and ``backend`` default to the run config's [inference] section."""
        self.topics = Topics(run)
        self.name = check_name("server", name)
        sys.setswitchinterval(0.0005)  # hand the GIL to the network thread quickly: latency matters here
        if self.name == Topics.POOL:
            raise ValueError(f"server name {Topics.POOL!r} is reserved")
        self.batch_size = batch_size
        self.max_delay = max_delay_ms / 1000 if max_delay_ms is not None else None
        self.backend = backend
        self.rejections = RejectionCounter(log)
        self._stop = threading.Event()
        self.version = -1
        self.served_requests = 0
        self.served_rows = 0
        self.batches = 0
        self._latencies: collections.deque = collections.deque(maxlen=5000)
        self.forward: Forward | None = None
        self.spec: SampleSpec | None = None
        self._pending_weights = None
        self.protocol = negotiate_protocol(broker)
        self.shared = shared and self.protocol == mqtt.MQTTv5
        subs = [(self.topics.config, 1), (self.topics.weights, 1), (self.topics.infer_request(self.name), 0)]
        if self.shared:
            subs.append((self.topics.shared_infer_requests(), 0))

        def state(status):
            return encode_json(
                {
                    "status": status,
                    "server": self.name,
                    "shared": self.shared,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "batch_size": batch_size,
                    "time": time.time(),
                }
            )

        self._state = state
        self.node = MqttNode(
            broker,
            client_id=f"mqttrl-inference-{run}-{self.name}",
            subscriptions=subs,
            will=Outgoing(self.topics.inference_state(self.name), state("offline"), 1, True, "state"),
            birth=lambda: [Outgoing(self.topics.inference_state(self.name), state("online"), 1, True, "state")],
            inbox_limit=50000,
            outbox_limit=50000,
        )

    def stop(self, *_: Any) -> None:
        self._stop.set()

    def _setup(self, config_payload: bytes) -> None:
        registry = get_registry()
        cfg = from_dict(decode_json(config_payload), lambda n: registry.algorithm(n).params)
        info = registry.algorithm(cfg.algorithm.name)
        env = make_env(cfg.env.id, cfg.env.kwargs, registry)
        if self.batch_size is None:
            self.batch_size = cfg.inference.batch_size
        if self.max_delay is None:
            self.max_delay = cfg.inference.max_delay_ms / 1000
        if self.backend is None:
            self.backend = cfg.inference.backend
        if info.make_forward is None:
            raise RuntimeError(f"algorithm {cfg.algorithm.name!r} has no forward for central inference")
        backend = self.backend
        if backend == "auto":
            try:
                import torch

                backend = "torch"
            except ImportError:
                backend = "numpy"
        if backend == "torch":
            import torch

            torch.set_num_threads(1)  # intra-op threads cost milliseconds per small batch on a busy host
        self.forward = info.make_forward(cfg.algorithm.params, env.observation_space, env.action_space, backend)
        self.spec = _obs_spec(env.observation_space)
        env.close()
        log.info(
            "inference server %s: %s forward for %s on %s (batch %d, delay %.1f ms, shared=%s)",
            self.name,
            backend,
            cfg.algorithm.name,
            cfg.env.id,
            self.batch_size,
            self.max_delay * 1000,
            self.shared,
        )

    def _take(self, msg, requests: list) -> int:
        """Handle one inbox message; returns the observations it added to ``requests`` (0 for others)."""
        kind = None
        try:
            kind, _ = self.topics.parse(msg.topic)
        except ValueError:
            pass
        try:
            if kind == "config" and self.forward is None:
                self._setup(msg.payload)
            elif kind == "weights":
                w = decode_weights(msg.payload)
                if w.version > self.version:
                    self._pending_weights = w
            elif kind == "infer_request":
                if self.spec is None:
                    return
                req = decode_batch(msg.payload, max_bytes=16 * 1024 * 1024)
                self.spec.validate(req.arrays, req.count)
                reply_to = req.extra.get("reply_to")
                if (
                    not isinstance(reply_to, str)
                    or not reply_to.startswith(self.topics.base + "/infer/")
                    or not reply_to.endswith("/reply")
                ):
                    raise Rejected("bad_header", f"reply_to {reply_to!r} is not an inference reply topic of this run")
                requests.append((req, reply_to, time.perf_counter()))
                return req.count
        except Rejected as r:
            self.rejections.add(r, kind or msg.topic)
        return 0

    def _serve(self, requests: list) -> None:
        obs = (
            np.concatenate([r[0].arrays["obs"] for r in requests])
            if len(requests) > 1
            else requests[0][0].arrays["obs"]
        )
        out = self.forward(obs)
        start = 0
        for req, reply_to, received in requests:
            n = req.count
            part = {k: np.ascontiguousarray(v[start : start + n]) for k, v in out.items()}
            start += n
            payload = encode_batch(
                self.topics.run, self.name, req.seq, self.version, part, extra={"id": req.extra.get("id")}
            )
            self.node.send_now(reply_to, payload, kind="reply")
            self._latencies.append(time.perf_counter() - received)
        self.served_requests += len(requests)
        self.served_rows += len(obs)
        self.batches += 1

    def _metrics(self, window: dict) -> None:
        now = time.monotonic()
        dt = max(now - window["t"], 1e-6)
        lat = np.asarray(self._latencies) * 1000 if self._latencies else np.zeros(1)
        m = {
            "server": self.name,
            "model_version": self.version,
            "requests_per_s": (self.served_requests - window["req"]) / dt,
            "rows_per_s": (self.served_rows - window["rows"]) / dt,
            "mean_batch_rows": (self.served_rows - window["rows"]) / max(1, self.batches - window["batches"]),
            "service_ms_p50": float(np.percentile(lat, 50)),
            "service_ms_p99": float(np.percentile(lat, 99)),
            "rejected": self.rejections.snapshot(),
            "time": time.time(),
        }
        self.node.publish(self.topics.inference_metrics(self.name), encode_json(m), qos=0, kind="metrics")
        window.update(t=now, req=self.served_requests, rows=self.served_rows, batches=self.batches)

    def run(self, max_seconds: float | None = None) -> None:
        self.node.start(wait=30)
        deadline = time.monotonic() + max_seconds if max_seconds else None
        window = {"t": time.monotonic(), "req": 0, "rows": 0, "batches": 0}
        next_metrics = time.monotonic() + 1.0
        inbox = self.node.inbox
        try:
            while not self._stop.is_set():
                requests: list = []
                try:
                    rows = self._take(inbox.get(timeout=0.1), requests)
                except queue.Empty:
                    rows = 0
                if requests and self.batch_size:
                    # add what is already queued (requests that arrived during the last forward), then
                    # wait up to max_delay for more while the batch is not full
                    first = requests[0][2]
                    while rows < self.batch_size:
                        left = self.max_delay - (time.perf_counter() - first)
                        try:
                            msg = inbox.get(timeout=left) if left > 0 else inbox.get_nowait()
                        except queue.Empty:
                            break
                        rows += self._take(msg, requests)
                if self._pending_weights is not None and self.forward is not None:
                    w, self._pending_weights = self._pending_weights, None
                    self.forward.load_weights(w.tensors, w.info)
                    self.version = w.version
                if requests and self.version >= 0:
                    self._serve(requests)
                now = time.monotonic()
                if now >= next_metrics:
                    next_metrics = now + 1.0
                    self._metrics(window)
                if deadline and now > deadline:
                    break
        finally:
            self.node.stop(
                final=[Outgoing(self.topics.inference_state(self.name), self._state("offline"), 1, True, "state")]
            )


class RemoteForward:
    """A worker's forward that asks the inference servers; retries on timeout, then says what to check."""

    def __init__(self, broker: BrokerSettings, run: str, worker: str, timeout_s: float = 2.0, retries: int = 3):
        self.topics = Topics(run)
        self.worker = worker
        sys.setswitchinterval(0.0005)  # the game loop waits on every reply: hand over the GIL quickly
        self.timeout_s = timeout_s
        self.retries = retries
        self.reply_topic = self.topics.infer_reply(worker)
        self.node = MqttNode(
            broker,
            client_id=f"mqttrl-infer-client-{run}-{worker}",
            subscriptions=[(self.reply_topic, 0), (self.topics.all_inference_states, 1)],
            inbox_limit=10000,
        ).start(wait=30)
        self.servers: dict[str, dict] = {}
        self._ids = itertools.count()
        self._rr = itertools.count()
        self.version = -1
        #: replies computed with an older model are asked again (the worker sets this when it loads
        #: weights), so a sync round never mixes versions through a server that lags behind
        self.min_version = -1
        self.stale_replies = 0
        self.timeouts = 0
        self.latencies: collections.deque = collections.deque(maxlen=10000)
        self._await_servers(2.0)

    def _online(self) -> list[str]:
        return sorted(n for n, s in self.servers.items() if s.get("status") == "online")

    def _await_servers(self, seconds: float) -> None:
        """Read the retained server states first: without shared subscriptions (MQTT 3.1.1)
        a request can only go to a server the client knows by name."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._online():
            try:
                msg = self.node.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg.topic != self.reply_topic:
                self._note_state(msg)

    def load_weights(self, tensors, info) -> None:
        """Servers hold the weights; the worker raises ``min_version`` instead."""

    def _note_state(self, msg) -> None:
        try:
            kind, name = self.topics.parse(msg.topic)
            if kind != "inference_state":
                log.debug("inference client ignored a message on %s", msg.topic)
                return
            st = decode_json(msg.payload, {"status": str}) if msg.payload else {"status": "gone"}
            self.servers[check_name("server", name)] = st
            log.debug("inference server %s is %s", name, st.get("status"))
        except (Rejected, ValueError):
            pass

    def _target(self, attempt: int) -> str:
        online = self._online()
        if online and all(self.servers[n].get("shared") for n in online) and self.node.protocol == mqtt.MQTTv5:
            return self.topics.infer_request()  # the broker balances over the shared subscription
        if not online:
            return self.topics.infer_request()
        return self.topics.infer_request(online[(next(self._rr) + attempt) % len(online)])

    def _send(self, obs: np.ndarray, attempt: int) -> int:
        """Send one request; returns its correlation id."""
        rid = next(self._ids)
        payload = encode_batch(
            self.topics.run,
            self.worker,
            rid,
            max(self.version, 0),
            {"obs": obs},
            extra={"id": rid, "reply_to": self.reply_topic},
        )
        self.node.send_now(self._target(attempt), payload, kind="request")
        return rid

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        obs = np.ascontiguousarray(obs, dtype=np.float32)
        for attempt in range(self.retries + 1):
            sent = time.perf_counter()
            rid = self._send(obs, attempt)
            deadline = sent + self.timeout_s
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    msg = self.node.inbox.get(timeout=left)
                except queue.Empty:
                    break
                if msg.topic != self.reply_topic:
                    self._note_state(msg)
                    continue
                try:
                    rep = decode_batch(msg.payload)
                except Rejected:
                    continue
                if rep.extra.get("id") != rid:
                    continue  # a late answer to a request we already retried
                if rep.model_version < self.min_version:  # that server has not got the new weights yet
                    self.stale_replies += 1
                    time.sleep(0.001)
                    rid = self._send(obs, attempt)
                    continue
                self.latencies.append(time.perf_counter() - sent)
                self.version = rep.model_version
                return {k: np.array(v) for k, v in rep.arrays.items()}
            self.timeouts += 1
            log.warning(
                "inference request %d got no answer in %.1fs (attempt %d of %d); retrying",
                rid,
                self.timeout_s,
                attempt + 1,
                self.retries + 1,
            )
        raise InferenceUnavailable(
            f"no inference server answered for run {self.topics.run!r} after {self.retries + 1} tries of {self.timeout_s:.1f}s "
            f"(servers online: {self._online() or 'none'}). Start one with `mqttrl inference --run {self.topics.run} --broker URL`, "
            f'or use worker.inference = "numpy"'
        )

    def close(self) -> None:
        self.node.stop(flush_timeout=1)


def run_inference_server(broker: BrokerSettings, run: str, name: str, **kwargs) -> None:
    server = InferenceServer(broker, run, name, **kwargs)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, server.stop)
    server.run()
