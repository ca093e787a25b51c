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
from mqttrl.transport.topics import Topics
from mqttrl.wire import Rejected, decode_json, decode_weights, encode_json

log = logging.getLogger("mqttrl.evaluate")


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
    node = MqttNode(broker, client_id=f"mqttrl-{name}", subscriptions=[(tp.config, 1), (tp.weights, 1)]).start(wait=30)
    registry = get_registry()
    config = actor = make = None
    latest = None
    evaluated = -1
    t0 = time.monotonic()
    next_eval = 0.0
    try:
        while max_seconds is None or time.monotonic() - t0 < max_seconds:
            try:
                m = node.inbox.get(timeout=0.2)
                if m.topic == tp.config and config is None:
                    config = from_dict(decode_json(m.payload), lambda n: registry.algorithm(n).params)
                    actor, make = greedy_actor(config, episodes)
                elif m.topic == tp.weights:
                    w = decode_weights(m.payload)
                    if latest is None or w.version > latest.version:
                        latest = w
            except queue.Empty:
                pass
            except Rejected as r:
                log.warning("ignored %s", r)
            if actor is None or latest is None or latest.version <= evaluated or time.monotonic() < next_eval:
                continue
            actor.load_weights(latest.tensors, latest.info)
            evaluated = latest.version
            started = time.monotonic()
            returns = np.asarray(evaluate(actor, make, episodes, seed=10**6 + evaluated))
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
