#!/usr/bin/env python
"""Throughput of the worker game loop and of the learner's sample ingest, side by side.

Starts its own mosquitto on a free port and measures, in one run:

1. Worker env-steps/s: the worker loop body (DQN actor + ``EnvSet`` of CartPole-v1
   envs: act -> step -> record -> take a batch when ``pending() >= batch``) in
   variants that differ only in what happens to a full batch:

   * ``raw``      -- no policy, no recording: ``env.step`` with precomputed random
                     actions (the ceiling);
   * ``loop``     -- the batch is taken (``actor.take()``) and thrown away;
   * ``encode``   -- ... and encoded with ``encode_batch``;
   * ``publish``  -- ... and handed to ``MqttClient.publish(qos=1, kind="samples")``
                     (what ``WorkerNode.send_batch`` does);
   * ``full``     -- ``publish`` plus one JSON message per finished episode on
                     the episodes topic, as ``WorkerNode.run`` sends them.

   Variants are interleaved (round-robin, ``--rounds`` times) so that load from
   other work on the machine hits them alike. A paho subscriber in another
   process drains the messages; the arrived transitions are reported.

2. Learner ingest: ``--ingest-messages`` pre-encoded batches of ``--batch`` valid
   CartPole transitions are published at QoS 1 from another process as fast as
   it can. Receiver A is a bare paho client that only counts (the ceiling);
   receiver B is an ``MqttClient`` whose consumer (the main thread, as in the
   learner) does what ``LearnerCore.on_samples`` does: ``decode_batch``, header
   checks, ``spec.validate``, ``DQNLearner.add``. Measured live (publisher
   running) and from a backlog (messages queued in the broker for a persistent
   session first, then drained: the receiver alone sets the pace). Also the
   pure in-process cost of each ingest stage (no network).

3. Weights: safetensors encode + decode of the DQN default network, and of a
   ~0.5M-parameter one (the ANCHORS figure).

Every figure comes from this run; compare ratios, not figures across runs:
the machines are shared and noisy. On a loaded machine prefer the CPU-time
figures (work per CPU-second of the measuring process, all its threads) to the
wall-clock ones: the scheduler hands a thread that often sleeps and wakes (as
the publishing variants do) a bigger share of a contended CPU than a pure CPU
hog, which can make a variant that does *more* work look faster on the wall clock.

    python -m benchmarks.bench_throughput                 # about 2 minutes
    python -m benchmarks.bench_throughput --rounds 2 --envs 8 --parts 1   # quick look at the worker
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import platform
import queue
import struct
import subprocess
import sys
import threading
import time

# Keep module-level imports light: spawned helper processes re-import this module.

RUN = "bench"
WORKER = "w0"


# ------------------------------------------------------------------------------------------
# helpers shared by the processes
# ------------------------------------------------------------------------------------------


def _paho_client(client_id: str):
    import paho.mqtt.client as mqtt

    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)


def _header_count(payload: bytes) -> int:
    """Transitions in a sample batch, from its header only (MQSB, u8, u32, JSON)."""
    if payload[:4] != b"MQSB":
        return 0
    (hlen,) = struct.unpack_from("<I", payload, 5)
    return int(json.loads(bytes(payload[9 : 9 + hlen]))["count"])


def _make_payloads(n: int, batch: int, seed: int) -> list[bytes]:
    """``n`` encoded batches of ``batch`` CartPole transitions valid for the DQN spec."""
    import numpy as np

    from mqttrl.wire import encode_batch

    rng = np.random.default_rng(seed)
    out = []
    for seq in range(n):
        obs = rng.uniform(-0.2, 0.2, (batch, 4)).astype(np.float32)
        arrays = {
            "obs": obs,
            "action": rng.integers(0, 2, batch).astype(np.int64),
            "reward": rng.uniform(0.0, 2.98, batch).astype(np.float32),
            "next_obs": (obs + rng.normal(0, 0.02, (batch, 4))).astype(np.float32),
            "discount": np.where(rng.random(batch) < 0.05, 0.0, 0.99**3).astype(np.float32),
        }
        out.append(encode_batch(RUN, WORKER, seq, 0, arrays))
    return out


def _subscriber_main(host: str, port: int, conn) -> None:
    """Part 1 helper process: count messages, bytes and transitions per topic."""
    counts: dict[str, list[int]] = {}
    lock = threading.Lock()
    subscribed = threading.Event()
    c = _paho_client(f"bench-sub-{os.getpid()}")

    def on_connect(client, userdata, flags, rc, props):
        client.subscribe("bench/w/#", qos=1)

    def on_subscribe(client, userdata, mid, rcs, props):
        subscribed.set()

    def on_message(client, userdata, msg):
        p = msg.payload
        n = _header_count(p) if "/samples/" in msg.topic else 0
        with lock:
            e = counts.setdefault(msg.topic, [0, 0, 0])
            e[0] += 1
            e[1] += len(p)
            e[2] += n

    c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
    c.connect(host, port, keepalive=30)
    c.loop_start()
    conn.send(subscribed.wait(15))
    while True:
        cmd = conn.recv()
        if cmd == "report":
            with lock:
                conn.send({k: list(v) for k, v in counts.items()})
        else:
            break
    c.disconnect()
    c.loop_stop()


def _publisher_main(host: str, port: int, conn, n_msgs: int, batch: int) -> None:
    """Part 2 helper process: publish the same pre-encoded batches at QoS 1 on command."""
    payloads = _make_payloads(n_msgs, batch, seed=1)
    acked = [0]
    done = threading.Event()
    c = _paho_client(f"bench-pub-{os.getpid()}")
    c.max_inflight_messages_set(64)  # MqttClient's default window
    c.max_queued_messages_set(0)  # paho queues the rest itself

    def on_publish(client, userdata, mid, rc, props):
        acked[0] += 1
        if acked[0] >= n_msgs:
            done.set()

    c.on_publish = on_publish
    c.connect(host, port, keepalive=30)
    c.loop_start()
    conn.send(sum(len(p) for p in payloads))
    while True:
        cmd = conn.recv()
        if cmd is None:
            break
        topic = cmd
        acked[0] = 0
        done.clear()
        t0 = time.perf_counter()
        for p in payloads:
            c.publish(topic, p, qos=1)
        ok = done.wait(120)
        conn.send({"seconds": time.perf_counter() - t0, "acked": acked[0], "ok": ok})
    c.disconnect()
    c.loop_stop()


# ------------------------------------------------------------------------------------------
# part 1: the worker loop
# ------------------------------------------------------------------------------------------

VARIANTS = ("raw", "loop", "encode", "publish", "full")


def _make_actor_envs(num_envs: int, seed: int):
    from mqttrl.envs.make import make_env
    from mqttrl.envs.rollout import EnvSet
    from mqttrl.plugin.algorithm import ActorContext
    from mqttrl.plugin.manager import get_registry

    registry = get_registry()
    info = registry.algorithm("dqn")
    envs = EnvSet(lambda: make_env("CartPole-v1", {}, registry), num_envs, seed)
    ctx = ActorContext(num_envs=num_envs, first_env_index=0, total_envs=num_envs, seed=seed)
    obs_space, act_space = envs.envs[0].observation_space, envs.envs[0].action_space
    forward = info.make_forward(info.params(), obs_space, act_space, "numpy", seed)
    actor = info.make_actor(info.params(), obs_space, act_space, ctx, forward)
    return actor, envs


def _raw_steps(num_envs: int, seconds: float, seed: int) -> dict:
    import numpy as np

    from mqttrl.envs.make import make_env

    envs = [make_env("CartPole-v1") for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    actions = np.random.default_rng(seed).integers(0, 2, 1 << 16).tolist()
    mask = (1 << 16) - 1
    k = 0
    steps = 0
    perf = time.perf_counter
    c0 = time.process_time()
    t0 = perf()
    deadline = t0 + seconds
    while True:
        for env in envs:
            _, _, term, trunc, _ = env.step(actions[k & mask])
            k += 1
            if term or trunc:
                env.reset()
        steps += num_envs
        if perf() >= deadline:
            break
    dt = perf() - t0
    cpu = time.process_time() - c0
    for env in envs:
        env.close()
    return {"steps": steps, "seconds": dt, "cpu_seconds": cpu, "transitions": 0, "messages": 0, "phases": {}}


def _worker_steps(mode: str, num_envs: int, seconds: float, batch: int, node, topic: str, seed: int) -> dict:
    """The worker loop body; ``mode`` decides what happens to a full batch."""
    from mqttrl.wire import encode_batch, encode_json

    actor, envs = _make_actor_envs(num_envs, seed)  # fresh each time: every variant sees the same trajectory
    do_encode = mode in ("encode", "publish", "full")
    do_publish = mode in ("publish", "full")
    do_episodes = mode == "full"
    episodes_topic = topic.replace("/samples/", "/episodes/")
    inbox = node.inbox
    perf = time.perf_counter
    ph = {"act": 0.0, "step": 0.0, "record": 0.0, "episodes": 0.0, "take": 0.0, "encode": 0.0, "publish": 0.0}
    steps = transitions = messages = episodes = seq = 0
    c0 = time.process_time()  # all threads of this process: the publisher and paho threads count too
    t0 = perf()
    deadline = t0 + seconds
    while True:
        try:  # WorkerNode.drain: the inbox is polled every step
            inbox.get_nowait()
        except queue.Empty:
            pass
        a = perf()
        actions, extras = actor.act(envs.obs)
        b = perf()
        obs, rewards, next_obs, terminated, truncated, ended = envs.step(actions)
        c = perf()
        actor.record(obs, actions, extras, rewards, next_obs, terminated, truncated)
        d = perf()
        ph["act"] += b - a
        ph["step"] += c - b
        ph["record"] += d - c
        steps += num_envs
        if do_episodes and ended:
            for e in ended:
                episodes += 1
                node.publish(
                    episodes_topic,
                    encode_json(
                        {
                            "worker": WORKER,
                            "env": e.env_index,
                            "return": e.episode_return,
                            "length": e.length,
                            "terminated": e.terminated,
                            "model_version": 0,
                            "env_steps": steps,
                            "time": time.time(),
                        }
                    ),
                    qos=1,
                    kind="episodes",
                )
            d2 = perf()
            ph["episodes"] += d2 - d
            d = d2
        if actor.pending() >= batch:
            arrays = actor.take()
            e1 = perf()
            ph["take"] += e1 - d
            transitions += len(arrays["action"])
            if do_encode:
                payload = encode_batch(RUN, WORKER, seq, 0, arrays)
                seq += 1
                e2 = perf()
                ph["encode"] += e2 - e1
                if do_publish:
                    node.publish(topic, payload, qos=1, retain=False, kind="samples")
                    messages += 1
                    ph["publish"] += perf() - e2
            d = perf()
        if d >= deadline:
            break
    dt = perf() - t0
    cpu = time.process_time() - c0
    envs.close()
    return {
        "steps": steps,
        "seconds": dt,
        "cpu_seconds": cpu,
        "transitions": transitions,
        "messages": messages,
        "episodes": episodes,
        "phases": ph,
    }


def part_worker(args, settings, host: str, port: int) -> dict:
    import torch

    from mqttrl.transport.client import MqttClient

    torch.set_num_threads(1)  # WorkerConfig.torch_threads default
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    sub = ctx.Process(target=_subscriber_main, args=(host, port, child), daemon=True)
    sub.start()
    if not parent.recv():
        raise RuntimeError("part 1 subscriber did not subscribe")
    node = MqttClient(settings, client_id="bench-worker", persistent=False, inbox_limit=1000, outbox_limit=2000).start(
        wait=10
    )

    # warm-up: torch's first calls, imports, env registration
    _worker_steps("loop", max(args.envs), 0.5, args.batch, node, "bench/w/samples/warmup", 0)

    results: dict[int, dict[str, list[dict]]] = {n: {v: [] for v in VARIANTS} for n in args.envs}
    published: dict[str, int] = {}
    for r in range(args.rounds):
        for n in args.envs:
            for v in VARIANTS:
                topic = f"bench/w/samples/{n}-{v}-{r}"
                if v == "raw":
                    res = _raw_steps(n, args.seconds, seed=1000 + r)
                else:
                    res = _worker_steps(v, n, args.seconds, args.batch, node, topic, seed=1000 + r)
                if v in ("publish", "full"):
                    published[topic] = res["transitions"]
                    # let the publisher thread finish this run's tail before the next variant starts
                    t_end = time.monotonic() + 5
                    while node.outbox_size and time.monotonic() < t_end:
                        time.sleep(0.01)
                    time.sleep(0.05)
                results[n][v].append(res)
                print(
                    f"  round {r + 1:2d} envs {n:2d} {v:8s} {res['steps'] / res['seconds']:7.0f} env-steps/s, "
                    f"{res['steps'] / res['cpu_seconds']:7.0f} per CPU-s",
                    flush=True,
                )

    # how much of what was published arrived at the subscriber
    t_end = time.monotonic() + 20
    while True:
        parent.send("report")
        counts = parent.recv()
        arrived = {t: counts.get(t, [0, 0, 0])[2] for t in published}
        if all(arrived[t] >= published[t] for t in published) or time.monotonic() > t_end:
            break
        time.sleep(0.2)
    episode_msgs = sum(v[0] for t, v in counts.items() if "/episodes/" in t)
    parent.send("stop")
    sub.join(5)
    dropped = dict(node.dropped)
    node.stop()

    out: dict = {
        "per_envs": {},
        "published_transitions": sum(published.values()),
        "arrived_transitions": sum(arrived.values()),
        "episode_messages_arrived": episode_msgs,
        "outbox_dropped": dropped,
    }
    for n in args.envs:
        per: dict = {}
        for v in VARIANTS:
            runs = results[n][v]
            steps = sum(x["steps"] for x in runs)
            secs = sum(x["seconds"] for x in runs)
            rates = [x["steps"] / x["seconds"] for x in runs]
            phases = {}
            if v != "raw":
                for k in runs[0]["phases"]:
                    phases[k] = sum(x["phases"][k] for x in runs) / steps * n * 1e6  # us per vector step
            per[v] = {
                "steps_per_s": steps / secs,
                "seconds": secs,
                "steps_per_cpu_s": steps / sum(x["cpu_seconds"] for x in runs),
                "min": min(rates),
                "max": max(rates),
                "rates": rates,
                "cpu_rates": [x["steps"] / x["cpu_seconds"] for x in runs],
                "messages": sum(x["messages"] for x in runs),
                "episodes": sum(x.get("episodes", 0) for x in runs),
                "us_per_vector_step": phases,
            }
        # paired ratios: each round's variants ran back to back, so the median of per-round ratios is
        # what best survives load from other work on the machine
        for v in VARIANTS:
            for base in ("loop", "raw", "encode"):
                per[v][f"vs_{base}"] = _paired(per[v]["rates"], per[base]["rates"])
                per[v][f"vs_{base}_cpu"] = _paired(per[v]["cpu_rates"], per[base]["cpu_rates"])
        out["per_envs"][n] = per
    return out


def _paired(a: list[float], b: list[float]) -> float:
    import statistics

    return statistics.median(x / y for x, y in zip(a, b)) if a and b else 0.0


# ------------------------------------------------------------------------------------------
# part 2: learner ingest
# ------------------------------------------------------------------------------------------


class _Ingest:
    """What LearnerCore.on_samples does to one payload, minus the worker bookkeeping."""

    def __init__(self):
        import gymnasium as gym

        from mqttrl.plugin.manager import get_registry

        info = get_registry().algorithm("dqn")
        params = info.params()
        env = gym.make("CartPole-v1")
        self.spec = info.sample_spec(params, env.observation_space, env.action_space)
        self.algo = info.make_learner(params, env.observation_space, env.action_space, "cpu", 0)
        env.close()
        self.max_bytes = 64 * 1024 * 1024  # LearnerConfig.max_payload_mb default
        self.version = 0
        self.samples = 0
        from mqttrl.wire import Rejected, decode_batch

        self._decode, self._rejected = decode_batch, Rejected

    def __call__(self, payload: bytes) -> int:
        batch = self._decode(payload, max_bytes=self.max_bytes)
        if batch.run != RUN or batch.worker != WORKER:
            raise self._rejected("wrong_run", "")
        if batch.model_version > self.version:
            raise self._rejected("future_version", "")
        self.spec.validate(batch.arrays, batch.count)
        self.algo.add(batch)
        self.samples += batch.count
        return batch.count


def _inprocess_ingest(payloads: list[bytes], ingest: _Ingest, seconds: float) -> dict:
    """Per-batch cost of each ingest stage, no network."""
    from mqttrl.wire import decode_batch

    def per_call(fn) -> float:  # CPU time of this (single-threaded at this point) process
        n = 0
        c0 = time.process_time()
        deadline = time.perf_counter() + seconds
        while True:
            for p in payloads[:200]:
                fn(p)
            n += min(200, len(payloads))
            if time.perf_counter() >= deadline:
                break
        return (time.process_time() - c0) / n * 1e6

    decoded = [decode_batch(p) for p in payloads[:200]]
    it = iter(range(1 << 62))
    spec, algo = ingest.spec, ingest.algo

    def validate(p):
        b = decoded[next(it) % len(decoded)]
        spec.validate(b.arrays, b.count)

    def add(p):
        algo.add(decoded[next(it) % len(decoded)])

    base = per_call(lambda p: decoded[next(it) % len(decoded)])  # loop + indexing overhead
    res = {
        "decode_us": per_call(decode_batch),
        "validate_us": per_call(validate) - base,
        "add_us": per_call(add) - base,  # DQNLearner.add validates again
        "full_us": per_call(ingest),
    }
    return res


def _recv_raw(settings_host: str, port: int, topic: str, n_msgs: int, pub, backlog: bool, timeout: float) -> dict:
    """Receiver A: a bare paho client that only counts."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    state = {"n": 0, "bytes": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()
    subscribed = threading.Event()
    cid = f"bench-rawrecv-{topic.replace('/', '-')}"

    def on_connect(client, userdata, flags, rc, props):
        client.subscribe(topic, qos=1)

    def on_subscribe(client, userdata, mid, rcs, props):
        subscribed.set()

    def on_message(client, userdata, msg):
        now = time.perf_counter()
        if state["n"] == 0:
            state["first"] = now
        state["n"] += 1
        state["bytes"] += len(msg.payload)
        state["last"] = now
        if state["n"] >= n_msgs:
            done.set()

    def client():
        c = _paho_client(cid)
        c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
        return c

    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    c = client()
    c.connect(settings_host, port, keepalive=30, clean_start=True, properties=props)
    c.loop_start()
    if not subscribed.wait(10):
        raise RuntimeError("raw receiver did not subscribe")
    pub_result = None
    if backlog:
        c.disconnect()
        c.loop_stop()
        pub.send(topic)
        pub_result = pub.recv()  # all acknowledged by the broker, queued for our session
        c = client()
        c.on_connect = lambda *a: None  # the session keeps the subscription
        c0 = time.process_time()
        t_start = time.perf_counter()
        c.connect(settings_host, port, keepalive=30, clean_start=False, properties=props)
        c.loop_start()
    else:
        c0 = time.process_time()
        t_start = time.perf_counter()
        pub.send(topic)
    done.wait(timeout)
    cpu = time.process_time() - c0
    if not backlog:
        pub_result = pub.recv()
    c.disconnect()
    c.loop_stop()
    return _recv_result(state["n"], state["bytes"], t_start, state["last"], cpu, pub_result)


def _recv_result(n: int, nbytes: int, t_start: float, t_last: float, cpu: float, pub_result) -> dict:
    """Rates over the whole run: from the start (publisher told to go, or reconnect) to the last message handled."""
    span = t_last - t_start if n else 0.0
    return {
        "messages": n,
        "bytes": nbytes,
        "seconds": span,
        "msgs_per_s": n / span if span > 0 else 0.0,
        "cpu_seconds": cpu,
        "cpu_us_per_msg": cpu / n * 1e6 if n else 0.0,
        "publisher": pub_result,
    }


def _recv_ingest(settings, topic: str, n_msgs: int, pub, backlog: bool, ingest: _Ingest, timeout: float) -> dict:
    """Receiver B: an MqttClient; the main thread decodes, validates and inserts, as the learner does."""
    from mqttrl.transport.client import MqttClient

    cid = f"bench-ingest-{topic.replace('/', '-')}"

    def node():
        return MqttClient(
            settings,
            client_id=cid,
            subscriptions=[(topic, 1)],
            persistent=True,
            inbox_limit=20000,
            inbox_block_s=5.0,
            outbox_limit=1000,
        )

    nd = node().start(wait=10)
    time.sleep(0.3)  # MqttClient.start returns once SUBSCRIBE is sent; give the SUBACK time
    pub_result = None
    if backlog:
        nd.stop()
        pub.send(topic)
        pub_result = pub.recv()
        nd = node()
        c0 = time.process_time()
        t_start = time.perf_counter()
        nd.start(wait=10)
    else:
        c0 = time.process_time()
        t_start = time.perf_counter()
        pub.send(topic)
    n = transitions = nbytes = 0
    last = 0.0
    max_inbox = 0
    deadline = time.monotonic() + timeout
    while n < n_msgs and time.monotonic() < deadline:
        try:
            msg = nd.inbox.get(timeout=0.2)
        except queue.Empty:
            continue
        transitions += ingest(msg.payload)
        nbytes += len(msg.payload)
        n += 1
        if n % 64 == 0:
            max_inbox = max(max_inbox, nd.inbox.qsize())
        last = time.perf_counter()
    cpu = time.process_time() - c0
    if not backlog:
        pub_result = pub.recv()
    nd.stop()
    return {
        **_recv_result(n, nbytes, t_start, last, cpu, pub_result),
        "transitions": transitions,
        "max_inbox": max_inbox,
        "inbox_dropped": nd.inbox_dropped,
    }


def part_ingest(args, settings, host: str, port: int) -> dict:
    import torch

    torch.set_num_threads(1)  # LearnerConfig.torch_threads default
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    pub = ctx.Process(target=_publisher_main, args=(host, port, child, args.ingest_messages, args.batch), daemon=True)
    pub.start()
    ingest = _Ingest()
    payloads = _make_payloads(min(args.ingest_messages, 400), args.batch, seed=1)
    total_bytes = parent.recv()
    M = args.ingest_messages
    print(f"  {M} messages of {args.batch} transitions, {total_bytes / M / 1024:.1f} KiB each", flush=True)

    inproc = _inprocess_ingest(payloads, ingest, max(0.5, args.seconds / 3))
    print(
        f"  in-process: decode {inproc['decode_us']:.1f} us, validate {inproc['validate_us']:.1f} us, "
        f"add {inproc['add_us']:.1f} us, full chain {inproc['full_us']:.1f} us per batch",
        flush=True,
    )

    runs: dict[str, list[dict]] = {"live_raw": [], "live_ingest": [], "backlog_raw": [], "backlog_ingest": []}
    for r in range(args.ingest_rounds):
        for mode in ("live", "backlog"):
            backlog = mode == "backlog"
            a = _recv_raw(host, port, f"bench/ingest/{mode}-raw-{r}", M, parent, backlog, timeout=120)
            a["transitions"] = a["messages"] * args.batch
            runs[f"{mode}_raw"].append(a)
            print(
                f"  round {r + 1} {mode:7s} A raw paho   {a['msgs_per_s'] * args.batch:9.0f} transitions/s "
                f"({a['messages']}/{M} msgs)",
                flush=True,
            )
            b = _recv_ingest(settings, f"bench/ingest/{mode}-ingest-{r}", M, parent, backlog, ingest, timeout=120)
            runs[f"{mode}_ingest"].append(b)
            print(
                f"  round {r + 1} {mode:7s} B ingest     {b['msgs_per_s'] * args.batch:9.0f} transitions/s "
                f"({b['messages']}/{M} msgs, max inbox {b['max_inbox']})",
                flush=True,
            )
    parent.send(None)
    pub.join(10)

    def agg(lst):
        msgs = sum(x["messages"] for x in lst)
        secs = sum(x["seconds"] for x in lst)
        rate = msgs / secs if secs else 0.0
        pubs = [x["publisher"] for x in lst if x.get("publisher")]
        pub_rate = sum(M for _ in pubs) / sum(p["seconds"] for p in pubs) if pubs else 0.0
        return {
            "msgs_per_s": rate,
            "transitions_per_s": rate * args.batch,
            "received": msgs,
            "cpu_us_per_msg": sum(x["cpu_seconds"] for x in lst) / max(msgs, 1) * 1e6,
            "expected": M * len(lst),
            "publisher_msgs_per_s": pub_rate,
            "min_tps": min(x["msgs_per_s"] for x in lst) * args.batch,
            "max_tps": max(x["msgs_per_s"] for x in lst) * args.batch,
        }

    out = {
        "messages": M,
        "message_bytes": total_bytes / M,
        "inprocess_us_per_batch": inproc,
        **{k: agg(v) for k, v in runs.items()},
    }
    for mode in ("live", "backlog"):
        out[f"{mode}_ratio_B_A"] = _paired(
            [x["msgs_per_s"] for x in runs[f"{mode}_ingest"]], [x["msgs_per_s"] for x in runs[f"{mode}_raw"]]
        )
    return out


# ------------------------------------------------------------------------------------------
# part 3: weights
# ------------------------------------------------------------------------------------------


def part_weights(args) -> dict:
    import gymnasium as gym
    import torch

    from mqttrl.plugin.algorithm import ActorContext
    from mqttrl.plugin.manager import get_registry
    from mqttrl.wire import decode_weights, encode_weights

    torch.set_num_threads(1)
    info = get_registry().algorithm("dqn")
    env = gym.make("CartPole-v1")
    out = {}
    for label, hidden in (("default", None), ("0.5M", [700, 700])):
        params = info.params() if hidden is None else info.params(hidden=hidden)
        learner = info.make_learner(params, env.observation_space, env.action_space, "cpu", 0)
        forward = info.make_forward(params, env.observation_space, env.action_space, "numpy")
        actor = info.make_actor(params, env.observation_space, env.action_space, ActorContext(num_envs=1), forward)
        tensors, winfo = learner.export_weights()
        n_params = sum(v.size for v in tensors.values())

        def timeit(fn, min_s=0.4):  # CPU ms per call
            fn()
            n, t0, c0 = 0, time.perf_counter(), time.process_time()
            while True:
                fn()
                n += 1
                if time.perf_counter() - t0 >= min_s:
                    return (time.process_time() - c0) / n * 1e3

        payload = encode_weights(1, "dqn", RUN, tensors, winfo, time.time())
        export_ms = timeit(lambda: learner.export_weights())
        enc_ms = timeit(lambda: encode_weights(1, "dqn", RUN, tensors, winfo, time.time()))
        dec_ms = timeit(lambda: decode_weights(payload))
        msg = decode_weights(payload)
        load_ms = timeit(lambda: actor.load_weights(msg.tensors, msg.info))
        out[label] = {
            "params": int(n_params),
            "bytes": len(payload),
            "export_ms": export_ms,
            "encode_ms": enc_ms,
            "decode_ms": dec_ms,
            "encode_decode_ms": enc_ms + dec_ms,
            "actor_load_ms": load_ms,
        }
        print(
            f"  {label:8s} {n_params:8d} params: encode {enc_ms:.2f} ms, decode {dec_ms:.2f} ms, "
            f"actor.load_weights {load_ms:.2f} ms",
            flush=True,
        )
    env.close()
    return out


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def machine_info() -> dict:
    import gymnasium
    import numpy
    import paho.mqtt
    import torch

    try:
        mosq = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, timeout=5).stdout.splitlines()[0]
    except Exception:
        mosq = "?"
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "sched_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "gymnasium": gymnasium.__version__,
        "paho": paho.mqtt.__version__,
        "mosquitto": mosq,
        "loadavg_start": os.getloadavg(),
    }


def print_report(args, res: dict) -> None:
    m = res["machine"]
    print()
    print("=" * 78)
    print(f"mqttrl throughput, {m['date']}")
    print(
        f"machine: nproc {m['nproc']} ({m['cpu']}), python {m['python']}, torch {m['torch']}, numpy {m['numpy']}, "
        f"gymnasium {m['gymnasium']}, paho {m['paho']}, {m['mosquitto']}"
    )
    print(f"load average at start {m['loadavg_start'][0]:.2f}, at end {res['loadavg_end'][0]:.2f}")
    print(
        f"settings: --seconds {args.seconds} --rounds {args.rounds} --envs {','.join(map(str, args.envs))} "
        f"--batch {args.batch} --ingest-messages {args.ingest_messages} --ingest-rounds {args.ingest_rounds}"
    )
    w = res.get("worker")
    if w:
        print()
        print(
            "1. Worker loop, DQN actor + CartPole-v1. steps/CPU-s: env steps per CPU-second of the worker process (all"
        )
        print("   its threads: the publisher and paho threads count), the figure least disturbed by other load on the")
        print(
            "   machine; steps/s: wall clock, over all rounds [min-max of rounds]. 'vs' columns: median over rounds of"
        )
        print(
            "   the ratio to the same round's run (a round's variants ran back to back). Phases: wall us per vector step."
        )
        print(
            f"   {'envs':>4} | {'variant':<8} | {'steps/CPU-s':>11} | {'vs loop':>7} | {'vs raw':>6} | {'steps/s':>7} | {'range':>13} | "
            f"{'vs loop':>7} | act step record take encode publish episodes"
        )
        for n, per in w["per_envs"].items():
            for v in VARIANTS:
                x = per[v]
                ph = x["us_per_vector_step"]
                phs = (
                    " ".join(
                        f"{ph.get(k, 0):.0f}"
                        for k in ("act", "step", "record", "take", "encode", "publish", "episodes")
                    )
                    if ph
                    else "-"
                )
                print(
                    f"   {n:>4} | {v:<8} | {x['steps_per_cpu_s']:11.0f} | {x['vs_loop_cpu']:7.2f} | {x['vs_raw_cpu']:6.3f} | "
                    f"{x['steps_per_s']:7.0f} | {x['min']:6.0f}-{x['max']:<6.0f} | {x['vs_loop']:7.2f} | {phs}"
                )
            pub, full = per["publish"], per["full"]
            print(
                f"   {n:>4}   with publishing / without (publish/loop): CPU {pub['vs_loop_cpu']:.2f}, wall {pub['vs_loop']:.2f}; "
                f"publish/encode: CPU {pub['vs_encode_cpu']:.2f}, wall {pub['vs_encode']:.2f}; publish/raw: CPU {pub['vs_raw_cpu']:.3f}, "
                f"wall {pub['vs_raw']:.3f}"
            )
            print(
                f"   {n:>4}   full/loop: CPU {full['vs_loop_cpu']:.2f}, wall {full['vs_loop']:.2f}; "
                f"{pub['messages'] / pub['seconds']:.0f} sample msgs/s in publish, {full['episodes'] / full['seconds']:.0f} episode msgs/s in full"
            )
        print(
            f"   delivery: {w['arrived_transitions']}/{w['published_transitions']} published transitions arrived at the "
            f"subscriber process; {w['episode_messages_arrived']} episode messages; outbox drops {w['outbox_dropped'] or 0}"
        )
    g = res.get("ingest")
    if g:
        B = args.batch
        print()
        print(
            f"2. Learner ingest, {g['messages']} msgs x {B} transitions ({g['message_bytes'] / 1024:.1f} KiB) per run, "
            f"{args.ingest_rounds} rounds. Wall rates from 'go' (live: the"
        )
        print(
            "   publisher starts; backlog: the receiver reconnects to its queued session) to the last message handled;"
        )
        print("   CPU: the receiving process's CPU time (all threads) per message, and the rate that CPU cost allows")
        print(
            f"   {'mode':<7} | {'receiver':<30} | {'transitions/s':>13} | {'range':>17} | {'msgs/s':>6} | {'CPU us/msg':>10} | "
            f"{'transitions/CPU-s':>17} | {'got':>11} | publisher msgs/s"
        )
        for mode in ("live", "backlog"):
            for k, label in (("raw", "A bare paho, counts only"), ("ingest", "B MqttClient+decode+valid.+add")):
                x = g[f"{mode}_{k}"]
                print(
                    f"   {mode:<7} | {label:<30} | {x['transitions_per_s']:13.0f} | {x['min_tps']:8.0f}-{x['max_tps']:<8.0f} | "
                    f"{x['msgs_per_s']:6.0f} | {x['cpu_us_per_msg']:10.0f} | {B / x['cpu_us_per_msg'] * 1e6:17.0f} | "
                    f"{x['received']:>5}/{x['expected']:<5} | {x['publisher_msgs_per_s']:.0f}"
                )
            a, b = g[f"{mode}_raw"], g[f"{mode}_ingest"]
            print(
                f"   {mode:<7}   ratio B/A: wall {g[f'{mode}_ratio_B_A']:.2f} (median of rounds), "
                f"CPU {a['cpu_us_per_msg'] / b['cpu_us_per_msg']:.2f}"
            )
        ip = g["inprocess_us_per_batch"]
        print(
            f"   in-process (CPU time), per batch of {B}: decode {ip['decode_us']:.1f} us, validate {ip['validate_us']:.1f} us, "
            f"DQNLearner.add {ip['add_us']:.1f} us (it validates again), full chain {ip['full_us']:.1f} us "
            f"= {B / ip['full_us'] * 1e6:,.0f} transitions/CPU-s"
        )
    wt = res.get("weights")
    if wt:
        print()
        print("3. Weights (safetensors + checksum + finiteness check), one torch thread, CPU ms per call")
        for label, x in wt.items():
            print(
                f"   {label:8s} {x['params']:>8} params, {x['bytes'] / 1024:7.0f} KiB: encode {x['encode_ms']:.2f} ms + decode "
                f"{x['decode_ms']:.2f} ms = {x['encode_decode_ms']:.2f} ms; export {x['export_ms']:.2f} ms, "
                f"actor.load_weights {x['actor_load_ms']:.2f} ms"
            )
    print("=" * 78)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Parts: 1 worker loop, 2 learner ingest, 3 weights encode/decode.",
    )
    ap.add_argument("--seconds", type=float, default=0.5, help="seconds per worker-loop measurement (default 0.5)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=16,
        help="interleaved rounds of the worker-loop measurements (default 16; short, many rounds resist noise best)",
    )
    ap.add_argument(
        "--ingest-rounds", type=int, default=3, help="interleaved rounds of the ingest measurements (default 3)"
    )
    ap.add_argument(
        "--envs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 8],
        help="envs per worker, comma separated (default 1,8)",
    )
    ap.add_argument("--batch", type=int, default=256, help="transitions per sample message (default 256)")
    ap.add_argument("--ingest-messages", type=int, default=3000, help="messages per ingest measurement (default 3000)")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (default 1,2,3)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",")}

    from mqttrl.broker.embedded import EmbeddedBroker
    from mqttrl.transport.client import BrokerSettings

    res: dict = {"machine": machine_info(), "args": vars(args)}
    t0 = time.monotonic()
    with EmbeddedBroker("mosquitto") as broker:
        settings = BrokerSettings(url=broker.url, protocol="5")
        host, port = "127.0.0.1", broker.port
        print(f"mosquitto on {broker.url}", flush=True)
        if 1 in parts:
            print("1. worker loop", flush=True)
            res["worker"] = part_worker(args, settings, host, port)
        if 2 in parts:
            print("2. learner ingest", flush=True)
            res["ingest"] = part_ingest(args, settings, host, port)
    if 3 in parts:
        print("3. weights", flush=True)
        res["weights"] = part_weights(args)
    res["loadavg_end"] = os.getloadavg()
    res["wall_s"] = time.monotonic() - t0
    print_report(args, res)
    print(f"wall time {res['wall_s']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
