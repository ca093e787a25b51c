"""Central inference (SEED style) over MQTT: servers batch observations from many workers.

A server runs the algorithm's *forward* (network outputs only: Q-values, policy
logits and values) for requests from many workers, batched up to
``batch_size`` rows or ``max_delay_ms``. Exploration and action sampling stay
on each worker (its actor applies its own epsilon or samples from the
returned logits), so servers are stateless, any server can answer any request,
and a worker's exploration schedule does not depend on which server answered.

Who gets an answer: a worker sends its requests on its own ``infer/<worker>/request``
and the server answers on ``infer/<worker>/reply``, the reply topic derived from the
request's topic (and the header's worker must match it), never from the payload. With
the broker's ACL letting a worker publish requests only under its own name and read
only its own replies (``mqttrl broker add-run --workers``), no worker can make a server
answer another.

Load sharing: with MQTT 5, every server consumes ``infer/+/request`` through the shared
subscription ``$share/mqttrl-infer/...``, so the broker spreads requests over the live
servers. Without shared subscriptions (MQTT 3.1.1 brokers such as amqtt) every server
reads every request and answers those that name it: workers pick a live server from the
retained ``state/inference/<server>`` messages, moving to the next one on a timeout.
Requests and replies are encoded by :mod:`mqttrl.wire.inference` (sample batches:
an ``obs`` array, a correlation id in the header), so they are validated like
samples. The worker's side, :class:`~mqttrl.nodes.worker.remote_forward.RemoteForward`,
lives with the worker: the two meet only on the broker.
"""

from __future__ import annotations

import collections
import importlib.util
import logging
import os
import queue
import socket
import sys
import threading
import time
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import paho.mqtt.client as mqtt

from mqttrl.config import ConfigError, from_dict
from mqttrl.envs.fit import spaces_of_run
from mqttrl.envs.rollout import obs_dtype
from mqttrl.plugin.algorithm import Forward, MovableForward
from mqttrl.plugin.manager import get_registry
from mqttrl.system.devices import describe_device, resolve_device
from mqttrl.system.procs import install_stop_handlers
from mqttrl.transport.client import BrokerSettings, MqttClient, Outgoing, negotiate_protocol
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import SPECS, Kind, Topics, check_name
from mqttrl.wire import (
    InferenceMetrics,
    InferenceReply,
    InferenceRequest,
    InferenceState,
    Rejected,
    RejectionCounter,
    SampleSpec,
    WeightsMessage,
    decode_json,
    decode_request,
    decode_weights,
    request_spec,
)

log = logging.getLogger("mqttrl.inference")


@attrs.frozen
class _Pending:
    """A request waiting for the next forward, with the time it was taken from the inbox."""

    request: InferenceRequest
    received: float
    #: the asking worker's own reply topic (from the request's topic)
    reply_topic: str


def _pick_backend(backend: str, offered: tuple[str, ...]) -> str:
    """ "auto": torch where the algorithm offers it and torch is installed (a server batches
    many workers' observations, where torch pays off), else the algorithm's first backend."""
    if backend != "auto":
        return backend
    if "torch" in offered and importlib.util.find_spec("torch") is not None:
        return "torch"
    return offered[0]


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
        device: str | None = None,
    ):
        """``batch_size``, ``max_delay_ms``, ``backend`` and ``device`` default to the run config's [inference] section."""
        self.topics = Topics(run)
        self.name = check_name("server", name)
        sys.setswitchinterval(0.0005)  # hand the GIL to the network thread quickly: latency matters here
        if self.name == Topics.POOL:
            raise ValueError(f"server name {Topics.POOL!r} is reserved")
        self.batch_size = batch_size
        self.max_delay = max_delay_ms / 1000 if max_delay_ms is not None else None
        self.backend = backend
        #: the torch forward's device (``inference.device``); "cpu" for a numpy forward
        self.device = device
        self._stop = threading.Event()
        self.epoch, self.version = 0, -1
        self.served_requests = 0
        self.served_rows = 0
        self.batches = 0
        self._latencies: collections.deque = collections.deque(maxlen=5000)
        self.forward: Forward | None = None
        self.spec: SampleSpec | None = None
        self._pending_weights: WeightsMessage | None = None
        #: requests for the next forward, and their rows
        self._batch: list[_Pending] = []
        self._rows = 0
        self.dispatch = Dispatcher(
            self.topics,
            {Kind.CONFIG: self._on_config, Kind.WEIGHTS: self._on_weights, Kind.INFER_REQUEST: self._on_request},
            log,
        )
        self.protocol = negotiate_protocol(broker)
        self.shared = shared and self.protocol == mqtt.MQTTv5
        requests = self.topics.shared_infer_requests() if self.shared else self.topics.all_infer_requests
        subs = [
            self.topics.subscription(Kind.CONFIG),
            self.topics.subscription(Kind.WEIGHTS),
            (requests, SPECS[Kind.INFER_REQUEST].qos),
        ]
        #: requests that named another server (seen because without shared subscriptions every server reads all)
        self.not_ours = 0
        self.client = MqttClient(
            broker,
            client_id=f"mqttrl-inference-{run}-{self.name}",
            subscriptions=subs,
            will=Outgoing(self.topics.inference_state(self.name), self._state("offline"), 1, True, "state"),
            birth=lambda: [Outgoing(self.topics.inference_state(self.name), self._state("online"), 1, True, "state")],
            inbox_limit=50000,
            outbox_limit=50000,
        )

    @property
    def rejections(self) -> RejectionCounter:
        """The one count of refused messages, by reason: the dispatcher's."""
        return self.dispatch.rejections

    def _state(self, status: str) -> bytes:
        return InferenceState(
            status=status,
            server=self.name,
            shared=self.shared,
            host=socket.gethostname(),
            pid=os.getpid(),
            batch_size=self.batch_size,
            time=time.time(),
        ).encode()

    def stop(self, *_: Any) -> None:
        self._stop.set()

    # ---- handlers ----------------------------------------------------------------
    def _on_config(self, _name: str, payload: bytes) -> None:
        """The first config that gives the env's spaces builds the forward: one with the run's env spec
        (the game need not be here), else one whose env can be made here. A learner that waits for a
        worker's spec publishes the config again with it, and that one builds the forward."""
        if self.forward is not None:
            return
        registry = get_registry()
        cfg = from_dict(decode_json(payload), lambda n: registry.algorithm(n).params)
        info = registry.algorithm(cfg.algorithm.name)
        spaces = self._spaces(cfg, registry)
        if spaces is None:
            return
        obs_space, act_space = spaces
        if self.batch_size is None:
            self.batch_size = cfg.inference.batch_size
        if self.max_delay is None:
            self.max_delay = cfg.inference.max_delay_ms / 1000
        if self.backend is None:
            self.backend = cfg.inference.backend
        backend = _pick_backend(self.backend, info.backends)
        if backend == "torch":
            import torch

            torch.set_num_threads(1)  # intra-op threads cost milliseconds per small batch on a busy host
        self.forward = info.make_forward(cfg.algorithm.params, obs_space, act_space, backend, cfg.train.seed)
        self._place_forward(backend, cfg.inference.device)
        self.spec = request_spec(obs_space.shape, obs_dtype(obs_space))
        log.info(
            "inference server %s: %s forward on %s for %s on %s (batch %d, delay %.1f ms, shared=%s)",
            self.name,
            backend,
            self.device,
            cfg.algorithm.name,
            cfg.env.id,
            self.batch_size,
            self.max_delay * 1000,
            self.shared,
        )

    def _spaces(self, cfg: Any, registry: Any) -> tuple[gym.Space, gym.Space] | None:
        """The run's spaces from its env spec, else from its env made here; None (said once) when
        neither is there yet: the config with the spec comes once a worker has published it."""
        try:
            return spaces_of_run(cfg, registry)
        except Exception as e:  # the game lives on the game PCs: wait for the spec
            log.warning(
                "inference server %s: env %r cannot be made here (%s: %s); waiting for the run's env spec",
                self.name,
                cfg.env.id,
                type(e).__name__,
                e,
            )
            return None

    def _place_forward(self, backend: str, configured: str) -> None:
        """Move a torch forward to ``inference.device`` (checked: one clear line if torch cannot use it).
        A forward without ``to_device`` (numpy, or a plugin's own) stays on the CPU, said once in the log."""
        asked = self.device if self.device is not None else configured
        if backend != "torch":
            self.device = "cpu"
            return
        import torch

        try:
            device = resolve_device(asked, torch, key="inference.device")
        except ConfigError as e:  # one line, and the server still serves
            log.error("inference server %s: %s; serving on the CPU", self.name, e)
            device = "cpu"
        if device != "cpu" and not isinstance(self.forward, MovableForward):
            log.warning("inference server %s: this forward cannot move to %s; it runs on the CPU", self.name, device)
            device = "cpu"
        elif device != "cpu":
            self.forward.to_device(device)
        self.device = describe_device(device, torch)

    def _on_weights(self, _name: str, payload: bytes) -> None:
        """Newest (epoch, version) wins, so a restarted learner's lower versions are served; loaded between forwards."""
        w = decode_weights(payload)
        if w.newer_than(self._pending_weights if self._pending_weights is not None else (self.epoch, self.version)):
            self._pending_weights = w

    def _on_request(self, worker: str, payload: bytes) -> None:
        """A request on ``infer/<worker>/request``: answered on ``worker``'s own reply topic."""
        if self.spec is None:
            return  # no config yet: the worker retries
        req = decode_request(payload, self.spec)
        if req.worker != worker:
            raise Rejected("sender_mismatch", f"request header says {req.worker!r}, topic says {worker!r}")
        if req.server and req.server not in (self.name, Topics.POOL):
            self.not_ours += 1  # asked another server by name
            return
        self._batch.append(_Pending(req, time.perf_counter(), self.topics.infer_reply(worker)))
        self._rows += req.count

    # ---- main loop ---------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        self.client.start(wait=30)
        deadline = time.monotonic() + max_seconds if max_seconds else None
        window = {"t": time.monotonic(), "req": 0, "rows": 0, "batches": 0}
        next_metrics = time.monotonic() + 1.0
        try:
            while not self._stop.is_set():
                self._collect()
                self._load_pending_weights()
                if self._batch and self.version >= 0:
                    self._serve(self._batch)
                self._batch, self._rows = [], 0
                now = time.monotonic()
                if now >= next_metrics:
                    next_metrics = now + 1.0
                    self._metrics(window)
                if deadline and now > deadline:
                    break
        finally:
            self.client.stop(
                final=[Outgoing(self.topics.inference_state(self.name), self._state("offline"), 1, True, "state")]
            )
            if self.forward is not None:
                self.forward.close()

    def _collect(self) -> None:
        """Handle the next message; once a request is in, add what is already queued (requests
        that arrived during the last forward), then wait up to ``max_delay`` for more while the
        batch is not full."""
        inbox = self.client.inbox
        try:
            msg = inbox.get(timeout=0.1)
        except queue.Empty:
            return
        self.dispatch(msg.topic, msg.payload)
        if not self._batch or not self.batch_size:
            return
        first = self._batch[0].received
        while self._rows < self.batch_size:
            left = self.max_delay - (time.perf_counter() - first)
            try:
                msg = inbox.get(timeout=left) if left > 0 else inbox.get_nowait()
            except queue.Empty:
                return
            self.dispatch(msg.topic, msg.payload)

    def _load_pending_weights(self) -> None:
        if self._pending_weights is None or self.forward is None:
            return
        w, self._pending_weights = self._pending_weights, None
        self.forward.load_weights(w.tensors, w.info)
        self.epoch, self.version = w.epoch, w.version

    def _serve(self, batch: list[_Pending]) -> None:
        obs = np.concatenate([p.request.obs for p in batch]) if len(batch) > 1 else batch[0].request.obs
        out = self.forward(obs)
        start = 0
        for p in batch:
            n = p.request.count
            part = {k: np.ascontiguousarray(v[start : start + n]) for k, v in out.items()}
            start += n
            reply = InferenceReply(
                p.request.id, self.version, part, self.epoch, p.request.seq, self.topics.run, self.name
            )
            payload = reply.encode()
            self.client.send_now(p.reply_topic, payload, kind="reply")
            self._latencies.append(time.perf_counter() - p.received)
        self.served_requests += len(batch)
        self.served_rows += len(obs)
        self.batches += 1

    def _metrics(self, window: dict) -> None:
        now = time.monotonic()
        dt = max(now - window["t"], 1e-6)
        lat = np.asarray(self._latencies) * 1000 if self._latencies else np.zeros(1)
        m = InferenceMetrics(
            server=self.name,
            model_version=self.version,
            epoch=self.epoch,
            requests_per_s=(self.served_requests - window["req"]) / dt,
            rows_per_s=(self.served_rows - window["rows"]) / dt,
            mean_batch_rows=(self.served_rows - window["rows"]) / max(1, self.batches - window["batches"]),
            service_ms_p50=float(np.percentile(lat, 50)),
            service_ms_p99=float(np.percentile(lat, 99)),
            rejected=self.rejections.snapshot(),
            time=time.time(),
        )
        self.client.publish(self.topics.inference_metrics(self.name), m.encode(), qos=0, kind="metrics")
        window.update(t=now, req=self.served_requests, rows=self.served_rows, batches=self.batches)


def run_inference_server(broker: BrokerSettings, run: str, name: str, **kwargs) -> None:
    server = InferenceServer(broker, run, name, **kwargs)
    install_stop_handlers(server.stop)
    server.run()
