"""A worker's forward that asks the central inference servers (see :mod:`mqttrl.nodes.inference`).

It meets the servers only on the broker: requests and replies are encoded by
:mod:`mqttrl.wire.inference`, and the live servers are read from their retained
``state/inference/<server>`` messages. Requests go out on the worker's own
``infer/<worker>/request`` and come back on its own ``infer/<worker>/reply``. With
MQTT 5 and shared subscriptions on every live server, the broker picks the server;
otherwise the client names one (of those without a shared subscription) in the
request, round robin, and moves to the next on a timeout.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt

from mqttrl.transport.client import BrokerSettings, Message, MqttClient
from mqttrl.transport.topics import SPECS, Kind, Topics, check_name
from mqttrl.wire import InferenceRequest, InferenceState, Rejected, decode_reply, request_obs

log = logging.getLogger("mqttrl.inference")


class InferenceUnavailable(RuntimeError):
    """No inference server answered in time; the message says what to check."""


class RemoteForward:
    """The :class:`~mqttrl.plugin.algorithm.Forward` of a worker without a local network; retries on
    timeout, then raises :class:`InferenceUnavailable` saying what to check."""

    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        worker: str,
        timeout_s: float = 2.0,
        retries: int = 3,
        on_timeout: Callable[[], None] | None = None,
    ):
        self.topics = Topics(run)
        #: called after each unanswered attempt: the worker heartbeats there, since its game loop is
        #: held here for up to (retries + 1) * timeout_s and the learner marks a worker silent for 10 s offline
        self.on_timeout = on_timeout
        self.worker = worker
        sys.setswitchinterval(0.0005)  # the game loop waits on every reply: hand over the GIL quickly
        self.timeout_s = timeout_s
        self.retries = retries
        self.reply_topic = self.topics.infer_reply(worker)
        self.request_topic = self.topics.infer_request(worker)
        self.client = MqttClient(
            broker,
            client_id=f"mqttrl-infer-client-{run}-{worker}",
            subscriptions=[
                (self.reply_topic, SPECS[Kind.INFER_REPLY].qos),
                self.topics.subscription(Kind.INFERENCE_STATE),
            ],
            inbox_limit=10000,
        ).start(wait=30)
        self.servers: dict[str, InferenceState] = {}
        self._ids = itertools.count()
        self._rr = itertools.count()
        self.version = -1
        #: replies computed with an older model, ordered (epoch, version), are asked again
        #: (see :meth:`require_version`)
        self.min_order = (0, -1)
        self.stale_replies = 0
        self.timeouts = 0
        self.latencies: collections.deque = collections.deque(maxlen=10000)
        self._await_servers(2.0)

    def require_version(self, version: int, epoch: int = 0) -> None:
        """Only accept answers computed with ``(epoch, version)`` or newer. The worker calls this
        when it loads weights, so a sync round never mixes versions through a server that lags behind."""
        self.min_order = (epoch, version)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Servers hold the weights; the worker calls :meth:`require_version` instead."""

    def close(self) -> None:
        self.client.stop(flush_timeout=1)

    # ---- server states -------------------------------------------------------
    def _online(self) -> list[str]:
        return sorted(n for n, s in self.servers.items() if s.online)

    def _await_servers(self, seconds: float) -> None:
        """Read the retained server states first: without shared subscriptions (MQTT 3.1.1)
        a request can only go to a server the client knows by name."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._online():
            try:
                msg = self.client.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if msg.topic != self.reply_topic:
                self._note_state(msg)

    def _note_state(self, msg: Message) -> None:
        try:
            kind, name = self.topics.parse(msg.topic)
            if kind != Kind.INFERENCE_STATE:
                log.debug("inference client ignored a message on %s", msg.topic)
                return
            st = InferenceState.decode(msg.payload) if msg.payload else InferenceState(status="gone")
            self.servers[check_name("server", name)] = st
            log.debug("inference server %s is %s", name, st.status)
        except (Rejected, ValueError):
            pass

    # ---- requests --------------------------------------------------------------
    def _target(self, attempt: int) -> str:
        """The server to name in the request; "" lets any server answer (the broker balances over
        the shared subscription, or no server is known yet)."""
        online = self._online()
        if not online or (all(self.servers[n].shared for n in online) and self.client.protocol == mqtt.MQTTv5):
            return ""
        # only servers without a shared subscription read every request; a shared one sees its share
        named = [n for n in online if not self.servers[n].shared] or online
        return named[(next(self._rr) + attempt) % len(named)]

    def _send(self, obs: np.ndarray, attempt: int) -> int:
        """Send one request; returns its correlation id."""
        rid = next(self._ids)
        server = self._target(attempt)
        request = InferenceRequest(
            rid,
            self.reply_topic,
            obs,
            rid,
            self.worker,
            server,
            model_version=max(self.version, 0),
            run=self.topics.run,
        )
        payload = request.encode()
        self.client.send_now(self.request_topic, payload, kind="request")
        return rid

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        obs = request_obs(obs)  # uint8/bool stay as they are (a frame is 4x smaller than its float32 copy)
        for attempt in range(self.retries + 1):
            sent = time.perf_counter()
            rid = self._send(obs, attempt)
            deadline = sent + self.timeout_s
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    msg = self.client.inbox.get(timeout=left)
                except queue.Empty:
                    break
                if msg.topic != self.reply_topic:
                    self._note_state(msg)
                    continue
                try:
                    rep = decode_reply(msg.payload)
                except Rejected:
                    continue
                if rep.id != rid:
                    continue  # a late answer to a request we already retried
                if rep.order < self.min_order:  # that server has not got the new weights yet
                    self.stale_replies += 1
                    time.sleep(0.001)
                    rid = self._send(obs, attempt)
                    continue
                self.latencies.append(time.perf_counter() - sent)
                self.version = rep.model_version
                return {k: np.array(v) for k, v in rep.outputs.items()}
            self.timeouts += 1
            log.warning(
                "inference request %d got no answer in %.1fs (attempt %d of %d); retrying",
                rid,
                self.timeout_s,
                attempt + 1,
                self.retries + 1,
            )
            if self.on_timeout is not None:
                self.on_timeout()
        raise InferenceUnavailable(
            f"no inference server answered for run {self.topics.run!r} after {self.retries + 1} tries of {self.timeout_s:.1f}s "
            f"(servers online: {self._online() or 'none'}). Start one with `mqttrl inference --run {self.topics.run} --broker URL`, "
            f'or use worker.inference = "numpy"'
        )
