"""``mqttrl evaluate``: greedy evaluation of a live run's newest weights, from any machine.

Reads the run config and weights from their retained messages (like a worker),
evaluates every ``every_s`` seconds when a newer model exists, prints and
publishes each result on ``eval/<name>``, and can stop once a target is met.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid

import numpy as np

from mqttrl.config import from_dict
from mqttrl.envs.rollout import evaluate, greedy_actor
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttNode
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import decode_json, decode_weights, encode_json

log = logging.getLogger("mqttrl.evaluate")


class _Latest:
    """What the evaluator has read from the run's retained topics: its handler table."""

    def __init__(self, topics: Topics, episodes: int):
        self.episodes = episodes
        self.registry = get_registry()
        self.config = self.actor = self.make = None
        self.weights = None
        #: why the run's config cannot be evaluated here (unknown algorithm, bad value): raised by the loop
        self.error: Exception | None = None
        self.dispatch = Dispatcher(topics, {Kind.CONFIG: self.on_config, Kind.WEIGHTS: self.on_weights}, log)
        self.rejections = self.dispatch.rejections

    def subscriptions(self) -> list[tuple[str, int]]:
        return [self.dispatch.topics.subscription(k) for k in self.dispatch.handlers]

    def on_config(self, name: str, payload: bytes) -> None:
        if self.config is not None:
            return
        data = decode_json(payload)  # a refusal here is counted by the dispatcher
        try:
            config = from_dict(data, lambda n: self.registry.algorithm(n).params)
            self.actor, self.make = greedy_actor(config, self.episodes)
        except Exception as e:  # a config this host cannot run ends the evaluator, as before the handler table
            self.error = e
            return
        self.config = config

    def on_weights(self, name: str, payload: bytes) -> None:
        w = decode_weights(payload)
        if self.weights is None or w.version > self.weights.version:
            self.weights = w


def run_evaluator(
    broker: BrokerSettings,
    run: str,
    episodes: int = 20,
    every_s: float = 10.0,
    target: float | None = None,
    max_seconds: float | None = None,
    name: str | None = None,
) -> dict | None:
    """Returns the first result that met ``target`` (or None at the time limit)."""
    tp = Topics(run)
    name = name or f"eval-{uuid.uuid4().hex[:6]}"
    seen = _Latest(tp, episodes)
    node = MqttNode(broker, client_id=f"mqttrl-{name}", subscriptions=seen.subscriptions()).start(wait=30)
    evaluated = -1
    t0 = time.monotonic()
    next_eval = 0.0
    try:
        while max_seconds is None or time.monotonic() - t0 < max_seconds:
            try:
                m = node.inbox.get(timeout=0.2)
                seen.dispatch(m.topic, m.payload)
            except queue.Empty:
                pass
            if seen.error is not None:
                raise seen.error
            actor, latest = seen.actor, seen.weights
            if actor is None or latest is None or latest.version <= evaluated or time.monotonic() < next_eval:
                continue
            actor.load_weights(latest.tensors, latest.info)
            evaluated = latest.version
            started = time.monotonic()
            returns = np.asarray(evaluate(actor, seen.make, episodes, seed=10**6 + evaluated))
            result = {
                "model_version": evaluated,
                "episodes": episodes,
                "mean": float(returns.mean()),
                "std": float(returns.std()),
                "min": float(returns.min()),
                "max": float(returns.max()),
                "eval_s": round(time.monotonic() - started, 3),
                "wall_s": round(time.monotonic() - t0, 2),
            }
            node.publish(tp.evaluation(name), encode_json(result), qos=1, kind="eval")
            print(
                f"model v{evaluated}: mean {result['mean']:.1f} ± {result['std']:.1f} over {episodes} episodes "
                f"(min {result['min']:.0f}, max {result['max']:.0f})",
                flush=True,
            )
            next_eval = time.monotonic() + every_s
            if target is not None and result["mean"] >= target:
                return result
        return None
    finally:
        node.stop(flush_timeout=2)
