"""The real worker node's game loop: env steps per second of ``WorkerNode.run``, whole.

Not a test: it prints what it measured. ``bench_throughput`` times the body of the game loop
rebuilt by hand (actor, env set, codec, client); this runs the worker node itself (its loop object,
step record, heartbeats, batches published to a mosquitto it starts), so a change to the shell shows
here. The config and a first model (a fresh DQN network) are published retained, as a learner
would; no learner runs, so the worker plays on that model until ``--env-steps``.

Run it against another checkout (before and after a change, interleaved) with ``PYTHONPATH``::

    python -m benchmarks.bench_worker_node --env-steps 40000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time

import paho.mqtt.client as mqtt

from mqttrl.broker.embedded import EmbeddedBroker
from mqttrl.config import load_config
from mqttrl.nodes.worker.node import WorkerNode
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics
from mqttrl.wire import encode_json, encode_weights


def publish_run(url: str, config) -> None:
    """The run's config and a first model, retained (what a learner's birth publishes)."""
    import gymnasium as gym

    registry = get_registry()
    info = registry.algorithm(config.algorithm.name)
    env = gym.make(config.env.id)
    algo = info.make_learner(config.algorithm.params, env.observation_space, env.action_space, "cpu", 0)
    env.close()
    tensors, winfo = algo.export_weights()
    topics = Topics(config.run)
    host, port = url.removeprefix("mqtt://").split(":")
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect(host, int(port))
    client.loop_start()
    client.publish(topics.config, encode_json(config.to_dict()), qos=1, retain=True).wait_for_publish(5)
    weights = encode_weights(1, config.algorithm.name, config.run, tensors, winfo, time.time(), epoch=1)
    client.publish(topics.weights, weights, qos=1, retain=True).wait_for_publish(5)
    client.loop_stop()
    client.disconnect()


def one_round(url: str, run: str, env_steps: int) -> dict:
    """One worker node from start to ``env_steps``: its wall and CPU rate over the stepping."""
    worker = WorkerNode(BrokerSettings(url=url), run, name=f"bench-{time.monotonic_ns()}", seed=1)
    w0, c0 = time.perf_counter(), time.process_time()
    worker.run(max_env_steps=env_steps)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"env_steps": worker.env_steps, "wall_s": wall, "cpu_s": cpu, "steps_per_cpu_s": worker.env_steps / cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/cartpole_dqn.toml", help="the run config (default: %(default)s)")
    p.add_argument("--envs", type=int, default=8, help="envs in the worker (default: %(default)s)")
    p.add_argument("--env-steps", type=int, default=40000, help="env steps a round (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="worker runs, one after the other (default: %(default)s)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    registry = get_registry()
    overrides = [f"env.num_envs={args.envs}", "run=bench-worker-node"]
    config = load_config(args.config, overrides, lambda name: registry.algorithm(name).params)
    with EmbeddedBroker("mosquitto") as broker:
        publish_run(broker.url, config)
        rounds = [one_round(broker.url, config.run, args.env_steps) for _ in range(args.rounds)]
    rates = [r["steps_per_cpu_s"] for r in rounds]
    for r in rounds:
        print(
            f"{r['env_steps']} env steps in {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU: {r['steps_per_cpu_s']:,.0f} steps/CPU-s"
        )
    print(
        f"median {statistics.median(rates):,.0f} env steps per CPU-second ({args.envs} envs, {config.algorithm.name})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "median_steps_per_cpu_s": statistics.median(rates)}, f, indent=1)


if __name__ == "__main__":
    main()
