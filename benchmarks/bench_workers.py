"""Worker benchmark: env steps/s per worker process for local torch, local numpy and central inference.

Not a test: it prints figures measured side by side in one run on this machine:
- the raw env step rate with random actions (the ceiling), for 1 env and for --envs envs;
- the worker loop (batched policy call over --envs envs, the algorithm's record/take,
  sample-batch encoding and publishing to mosquitto) with the policy computed by
  local torch, local numpy, and a central inference server in another process;
- the central-inference round trip (p50/p99);
- `mqttrl workers` restarting a worker process that was killed (time to its next heartbeat).

    python benchmarks/bench_workers.py --algo dqn --envs 8 --seconds 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mqttrl  # noqa: F401  (first: sets one BLAS thread per process before numpy loads)
from mqttrl.algorithm import ActorContext
from mqttrl.config import load_config
from mqttrl.envs.make import make_env
from mqttrl.envs.rollout import EnvSet
from mqttrl.local.broker import EmbeddedBroker
from mqttrl.nodes.worker.remote_forward import RemoteForward
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttNode
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_json, encode_batch, encode_json, encode_weights

REPO = Path(__file__).resolve().parent.parent


def raw_rate(env_id: str, n_envs: int, seconds: float) -> float:
    envs = EnvSet(lambda: make_env(env_id), n_envs, seed=0)
    rng = np.random.default_rng(0)
    n_act = envs.envs[0].action_space.n
    actions = rng.integers(0, n_act, size=(4096, n_envs))
    steps, t0, i = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        envs.step(actions[i % 4096])
        i += 1
        steps += n_envs
    return steps / (time.perf_counter() - t0)


def raw_sampled(env_id: str, seconds: float) -> float:
    """ANCHORS' baseline: one env stepped with ``action_space.sample()`` actions."""
    env = make_env(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        steps += 1
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def raw_single_env(env_id: str, seconds: float) -> float:
    env = make_env(env_id)
    env.reset(seed=0)
    acts = np.random.default_rng(0).integers(0, env.action_space.n, 4096)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(int(acts[steps % 4096]))
        steps += 1
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def worker_loop(cfg, info, forward, weights, broker_url: str, seconds: float) -> tuple[float, int]:
    """The worker's inner loop with a given forward; returns (env steps/s, messages published)."""
    env = make_env(cfg.env.id)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    n = cfg.env.num_envs
    actor = info.make_actor(
        cfg.algorithm.params, obs_space, act_space, ActorContext(num_envs=n, total_envs=n), forward=forward
    )
    actor.load_weights(*weights)
    envs = EnvSet(lambda: make_env(cfg.env.id), n, seed=1)
    tp = Topics(cfg.run)
    node = MqttNode(BrokerSettings(url=broker_url), client_id=f"bench-worker-{time.monotonic_ns()}").start()
    seq = steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        actions, extras = actor.act(envs.obs)
        o, r, no, te, tr, _ = envs.step(actions)
        actor.record(o, actions, extras, r, no, te, tr)
        steps += n
        if actor.pending() >= cfg.worker.batch_size:
            node.publish(
                tp.samples("bench"), encode_batch(cfg.run, "bench", seq, 1, actor.take()), qos=1, kind="samples"
            )
            seq += 1
    rate = steps / (time.perf_counter() - t0)
    node.stop(flush_timeout=5)
    return rate, seq


def supervisor_restart(broker_url: str, run: str, tmp: Path) -> float | None:
    """Start `mqttrl workers --processes 2`, SIGKILL one worker, time until it heartbeats again."""
    tp = Topics(run)
    watch = MqttNode(
        BrokerSettings(url=broker_url), client_id="bench-watch-hb", subscriptions=[(tp.all_heartbeats, 0)]
    ).start()
    sup = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mqttrl",
            "workers",
            "--broker",
            broker_url,
            "--run",
            run,
            "--processes",
            "2",
            "--name-prefix",
            "sup",
            "--log-dir",
            str(tmp / "sup-logs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        seen: dict[str, dict] = {}
        deadline = time.monotonic() + 90
        while len(seen) < 2 and time.monotonic() < deadline:
            try:
                m = watch.inbox.get(timeout=0.5)
                seen[m.topic.rsplit("/", 1)[1]] = decode_json(m.payload)
            except queue.Empty:
                pass
        if len(seen) < 2:
            return None
        pid = seen["sup-0"].get("pid") or _pid_of("sup-0")
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        while time.monotonic() - killed < 60:
            try:
                m = watch.inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            hb = decode_json(m.payload)
            if m.topic.endswith("/sup-0") and hb.get("pid") != pid and hb.get("env_steps", 0) > 0:
                return time.monotonic() - killed
        return None
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(30)
        watch.stop(flush_timeout=1)


def _pid_of(name: str) -> int:
    out = subprocess.run(["pgrep", "-f", f"--name {name}"], capture_output=True, text=True).stdout.split()
    return int(out[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", default="dqn", choices=["dqn", "ppo"])
    p.add_argument("--envs", type=int, default=8, help="envs per worker process")
    p.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    registry = get_registry()
    cfg = load_config(
        REPO / "configs" / f"cartpole_{args.algo}.toml",
        [f"env.num_envs={args.envs}", "run=bench-workers"],
        lambda n: registry.algorithm(n).params,
    )
    info = registry.algorithm(cfg.algorithm.name)
    env = make_env(cfg.env.id)
    learner = info.make_learner(cfg.algorithm.params, env.observation_space, env.action_space, "cpu", 0)
    tensors, winfo = learner.export_weights()
    weights = (tensors, winfo)
    import torch

    torch.set_num_threads(1)
    figures: dict = {
        "algo": args.algo,
        "envs": args.envs,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    with EmbeddedBroker("mosquitto") as broker, tempfile.TemporaryDirectory() as tmp:
        figures["raw_sampled"] = raw_sampled(cfg.env.id, args.seconds)
        figures["raw_1env"] = raw_single_env(cfg.env.id, args.seconds)
        figures["raw_envset"] = raw_rate(cfg.env.id, args.envs, args.seconds)
        for backend in ("torch", "numpy"):
            fwd = info.make_forward(cfg.algorithm.params, env.observation_space, env.action_space, backend)
            figures[f"{backend}_steps_per_s"], _ = worker_loop(cfg, info, fwd, weights, broker.url, args.seconds)
        # central inference: a server process serving the retained config + weights published here
        tp = Topics(cfg.run)
        pub = MqttNode(BrokerSettings(url=broker.url), client_id="bench-learner").start()
        pub.publish(tp.config, encode_json(cfg.to_dict()), qos=1, retain=True)
        pub.publish(tp.weights, encode_weights(1, cfg.algorithm.name, cfg.run, tensors, winfo), qos=1, retain=True)
        server = subprocess.Popen(
            [sys.executable, "-m", "mqttrl", "inference", "--broker", broker.url, "--run", cfg.run, "--name", "s0"],
            stdout=open(Path(tmp) / "server.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            remote = RemoteForward(BrokerSettings(url=broker.url), cfg.run, "bench", timeout_s=5.0)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # wait until the server answers
                try:
                    remote(np.zeros((1, *env.observation_space.shape), np.float32))
                    break
                except Exception:
                    time.sleep(0.5)
            remote.latencies.clear()
            figures["remote_steps_per_s"], _ = worker_loop(cfg, info, remote, weights, broker.url, args.seconds)
            lat = np.asarray(remote.latencies) * 1000
            figures["remote_rtt_ms_p50"] = float(np.percentile(lat, 50))
            figures["remote_rtt_ms_p99"] = float(np.percentile(lat, 99))
            remote.close()
            figures["supervisor_restart_s"] = supervisor_restart(broker.url, cfg.run, Path(tmp))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(20)
            pub.stop(flush_timeout=1)
    raw, sampled = figures["raw_envset"], figures["raw_sampled"]
    print(
        f"\nworker throughput, {args.algo} policy, {args.envs} envs per process, CartPole-v1; "
        f"{figures['cores']} cores, Python {figures['python']}, torch {figures['torch']}, {figures['date']}"
    )
    print("| mode | env steps/s per process | / raw, action_space.sample() | / raw, precomputed actions |")
    print("|---|---|---|---|")
    print(f"| raw env, 1 env, action_space.sample() (ANCHORS' baseline) | {sampled:,.0f} | 1.00 | - |")
    print(f"| raw env, 1 env, precomputed random actions | {figures['raw_1env']:,.0f} | - | - |")
    print(f"| raw env, {args.envs} envs, precomputed random actions | {raw:,.0f} | - | 1.00 |")
    for mode, key in (
        ("local torch", "torch_steps_per_s"),
        ("local numpy", "numpy_steps_per_s"),
        ("central inference", "remote_steps_per_s"),
    ):
        print(f"| {mode} | {figures[key]:,.0f} | {figures[key] / sampled:.2f} | {figures[key] / raw:.2f} |")
    print(
        f"central inference round trip: p50 {figures['remote_rtt_ms_p50']:.2f} ms, p99 {figures['remote_rtt_ms_p99']:.2f} ms"
    )
    r = figures["supervisor_restart_s"]
    print(f"supervisor: killed worker heartbeating again after {r:.1f} s" if r else "supervisor: restart not observed")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
