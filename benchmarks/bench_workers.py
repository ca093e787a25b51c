"""Worker benchmark: env steps/s per worker process for local torch, local numpy and central inference.

Not a test: it prints figures measured side by side in one run on this machine:
- the raw env step rate with random actions (the ceiling), for 1 env and for --envs envs;
- the worker loop (batched policy call over --envs envs, the algorithm's record/take,
  sample-batch encoding and publishing to mosquitto) with the policy computed by
  local torch, local numpy, and a central inference server in another process;
- the central-inference round trip (p50/p99);
- `mqttrl workers` restarting a worker process that was killed (time to its next heartbeat).

Pixel games (`--pixels`, the same as `--config configs/atari_pong_dqn.toml`; or any `--config`/`--env`
whose DQN batches carry frames) add, from the same run (the supervisor check is off there unless
`--restart`):
- the best worker mode against the raw 8-env EnvSet rate (goal >= 0.6);
- wire bytes per transition as the worker loops sent them (payload bytes / transitions, with the
  config's `[worker] compression`; goal <= 1,800 B), and the batches those loops recorded encoded
  each way: frames with no compression, lz4 and zstd, and whole stacks (`obs` + `next_obs`,
  rebuilt from the frames) with none and zstd, with the encode and decode CPU time;
- learner ingest: --ingest-messages recorded batches (the config's compression; the recording
  repeated under new sender names where it is shorter) published at QoS 1, all at once, by another
  process, and received in this process by the learner's receive path (an `MqttClient` set up as
  `LearnerNode` sets it up, `LearnerCore.on_samples`: decode, decompress, admission, spec check,
  `DQNLearner.add` into its frame replay, then the manual ack; no training), against a bare paho
  client receiving the same messages from the same broker: transitions/s and payload MB/s;
- replay memory: a `FrameReplay` of `algorithm.buffer_size` (100k) filled in a fresh process (a
  clean RSS) to capacity and a tenth more (the ring overwrites, freed frames are reused):
  `nbytes()` / size and the process RSS growth / size (goal <= 1.1 x one frame, 7,056 B). The
  default fill is continuous streams of --replay-workers actors x --envs envs stepping the env with
  random actions (as every worker starts; about 80 s for 110k transitions of Pong here), batches as
  `take()` makes them; `--replay-fill recorded` cycles the recorded batches instead (fast, but
  each copy is a new sender: many short streams, so more frames per transition than a real run).

    python -m benchmarks.bench_workers --algo dqn --envs 8 --seconds 8
    python -m benchmarks.bench_workers --pixels --seconds 8 --json pong.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import attrs
import numpy as np

import mqttrl  # noqa: F401  (first: sets one BLAS thread per process before numpy loads)
from mqttrl.broker.embedded import EmbeddedBroker
from mqttrl.config import load_config
from mqttrl.envs.make import make_env
from mqttrl.envs.rollout import EnvSet, obs_dtype
from mqttrl.nodes.worker.remote_forward import RemoteForward
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.topics import Topics
from mqttrl.wire import Rejected, decode_batch, decode_json, encode_batch, encode_json, encode_weights

REPO = Path(__file__).resolve().parent.parent


def raw_rate(env_id: str, n_envs: int, seconds: float, kwargs: dict | None = None) -> float:
    envs = EnvSet(lambda: make_env(env_id, kwargs), n_envs, seed=0)
    rng = np.random.default_rng(0)
    n_act = envs.envs[0].action_space.n
    actions = rng.integers(0, n_act, size=(4096, n_envs))
    steps, t0, i = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        envs.step(actions[i % 4096])
        i += 1
        steps += n_envs
    rate = steps / (time.perf_counter() - t0)
    envs.close()
    return rate


def raw_sampled(env_id: str, seconds: float, kwargs: dict | None = None) -> float:
    """ANCHORS' baseline: one env stepped with ``action_space.sample()`` actions."""
    env = make_env(env_id, kwargs)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        steps += 1
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def raw_single_env(env_id: str, seconds: float, kwargs: dict | None = None) -> float:
    env = make_env(env_id, kwargs)
    env.reset(seed=0)
    acts = np.random.default_rng(0).integers(0, env.action_space.n, 4096)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(int(acts[steps % 4096]))
        steps += 1
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def worker_loop(
    cfg, info, forward, weights, broker_url: str, seconds: float, record: list | None = None, max_record: int = 0
) -> dict:
    """The worker's inner loop with a given forward: env steps/s, messages and payload bytes published.

    Batches are encoded as the worker encodes them (the transition count, the config's compression);
    the first ``max_record`` taken batches are appended to ``record`` as ``(count, arrays)``."""
    env = make_env(cfg.env.id, cfg.env.kwargs)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    n = cfg.env.num_envs
    actor = info.make_actor(
        cfg.algorithm.params, obs_space, act_space, ActorContext(num_envs=n, total_envs=n), forward=forward
    )
    actor.load_weights(*weights)
    envs = EnvSet(lambda: make_env(cfg.env.id, cfg.env.kwargs), n, seed=1)
    tp = Topics(cfg.run)
    node = MqttClient(BrokerSettings(url=broker_url), client_id=f"bench-worker-{time.monotonic_ns()}").start()
    compression = _compression(cfg)
    seq = steps = nbytes = transitions = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        actions, extras = actor.act(envs.obs)
        o, r, no, te, tr, _ = envs.step(actions)
        actor.record(o, actions, extras, r, no, te, tr)
        steps += n
        if actor.pending() >= cfg.worker.batch_size:
            count = actor.pending()  # transitions; a pool field (DQN's frames) has its own row count
            arrays = actor.take()
            payload = encode_batch(cfg.run, "bench", seq, 1, arrays, count=count, **compression)
            node.publish(tp.samples("bench"), payload, qos=1, kind="samples")
            if record is not None and len(record) < max_record:
                record.append((count, arrays))
            seq += 1
            nbytes += len(payload)
            transitions += count
    rate = steps / (time.perf_counter() - t0)
    node.stop(flush_timeout=5)
    envs.close()
    return {"steps_per_s": rate, "messages": seq, "payload_bytes": nbytes, "transitions": transitions}


def _compression(cfg_or_name) -> dict:
    """``encode_batch`` keyword for a compression (a config's ``[worker] compression`` or a name);
    nothing for "none", so the CartPole path runs on a wire without compression too."""
    name = cfg_or_name if isinstance(cfg_or_name, str) else getattr(cfg_or_name.worker, "compression", "none")
    return {} if name in (None, "none") else {"compression": name}


# --------------------------------------------------------------------------------------------
# pixel games: wire bytes, learner ingest, replay memory
# --------------------------------------------------------------------------------------------


WIRE_VARIANTS = (
    ("frames, none", "frames", "none"),
    ("frames, lz4", "frames", "lz4"),
    ("frames, zstd", "frames", "zstd"),
    ("whole stacks (obs + next_obs), none", "stacks", "none"),
    ("whole stacks (obs + next_obs), zstd", "stacks", "zstd"),
)


def wire_bytes(cfg, recorded: list[tuple[int, dict]], obs_shape: tuple[int, ...]) -> list[dict]:
    """The recorded batches encoded each way: bytes per transition, encode and decode CPU time."""
    from mqttrl_plugins.dqn.frames import unpack

    totals = {label: [0, 0.0, 0.0] for label, _, _ in WIRE_VARIANTS}  # bytes, encode s, decode s
    for i, (count, arrays) in enumerate(recorded):  # one batch at a time: a batch's stacks are ~14 MB
        obs, next_obs = unpack(arrays, obs_shape)
        rest = {k: v for k, v in arrays.items() if k not in ("frames", "frame_ids", "obs_ref", "next_obs_ref")}
        stacks = {"obs": obs, "next_obs": next_obs, **rest}
        for label, fields, comp in WIRE_VARIANTS:
            c0 = time.process_time()
            payload = encode_batch(
                cfg.run, "w", i, 1, arrays if fields == "frames" else stacks, count=count, **_compression(comp)
            )
            c1 = time.process_time()
            decode_batch(payload)
            c2 = time.process_time()
            t = totals[label]
            t[0] += len(payload)
            t[1] += c1 - c0
            t[2] += c2 - c1
    transitions = sum(c for c, _ in recorded)
    return [
        {
            "encoding": label,
            "compression": comp,
            "bytes_per_transition": totals[label][0] / transitions,
            "bytes_per_message": totals[label][0] / len(recorded),
            "encode_us_per_transition": totals[label][1] / transitions * 1e6,
            "decode_us_per_transition": totals[label][2] / transitions * 1e6,
        }
        for label, _, comp in WIRE_VARIANTS
    ]


def _copies(recorded_streams: list[list[tuple[int, dict]]], copies: int):
    """(sender, seq, count, arrays) for ``copies`` copies of every recorded stream, each copy of a
    stream under its own sender name (a stream's frame serials are its own actor's)."""
    for c in range(copies):
        for s, stream in enumerate(recorded_streams):
            for seq, (count, arrays) in enumerate(stream):
                yield f"s{s}c{c}", seq, count, arrays


def _write_messages(path: Path, messages) -> tuple[int, int]:
    """Length-prefixed (topic, payload) pairs; returns (messages, bytes of payload)."""
    n = total = 0
    with open(path, "wb") as f:
        for topic, payload in messages:
            t = topic.encode()
            f.write(struct.pack("<II", len(t), len(payload)))
            f.write(t)
            f.write(payload)
            n += 1
            total += len(payload)
    return n, total


def _read_messages(path: Path) -> list[tuple[str, bytes]]:
    out = []
    with open(path, "rb") as f:
        while head := f.read(8):
            tl, pl = struct.unpack("<II", head)
            out.append((f.read(tl).decode(), f.read(pl)))
    return out


def _paho(client_id: str):
    import paho.mqtt.client as mqtt

    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)


def _publisher_main(host: str, port: int, path: str, conn) -> None:
    """Ingest helper process: publish the recorded messages at QoS 1 on every "go"."""
    messages = _read_messages(Path(path))
    acked = [0]
    done = threading.Event()
    c = _paho(f"bench-ingest-pub-{os.getpid()}")
    c.max_inflight_messages_set(64)  # MqttClient's default window
    c.max_queued_messages_set(0)

    def on_publish(client, userdata, mid, rc, props):
        acked[0] += 1
        if acked[0] >= len(messages):
            done.set()

    c.on_publish = on_publish
    c.connect(host, port, keepalive=60)
    c.loop_start()
    conn.send(len(messages))
    while conn.recv():
        acked[0] = 0
        done.clear()
        t0 = time.perf_counter()
        for topic, payload in messages:
            c.publish(topic, payload, qos=1)
        ok = done.wait(300)
        conn.send({"seconds": time.perf_counter() - t0, "acked": acked[0], "ok": ok})
    c.disconnect()
    c.loop_stop()


def _recv_paho(host: str, port: int, filt: str, expect: int, pub, timeout: float) -> dict:
    """A bare paho client that counts what it receives."""
    st = {"n": 0, "bytes": 0, "last": 0.0}
    done, subscribed = threading.Event(), threading.Event()
    c = _paho(f"bench-ingest-paho-{os.getpid()}")

    def on_message(client, userdata, msg):
        st["n"] += 1
        st["bytes"] += len(msg.payload)
        st["last"] = time.perf_counter()
        if st["n"] >= expect:
            done.set()

    c.on_connect = lambda client, *a: client.subscribe(filt, qos=1)
    c.on_subscribe = lambda *a: subscribed.set()
    c.on_message = on_message
    c.connect(host, port, keepalive=60)
    c.loop_start()
    if not subscribed.wait(10):
        raise RuntimeError("paho receiver did not subscribe")
    c0, t0 = time.process_time(), time.perf_counter()
    pub.send(True)
    done.wait(timeout)
    cpu = time.process_time() - c0
    pub_result = pub.recv()
    c.disconnect()
    c.loop_stop()
    return {
        "messages": st["n"],
        "bytes": st["bytes"],
        "seconds": st["last"] - t0,
        "cpu_s": cpu,
        "publisher": pub_result,
    }


def _recv_learner(broker_url: str, cfg, filt: str, expect: int, pub, timeout: float) -> dict:
    """The learner's receive path in this process: MqttClient as LearnerNode sets it up, LearnerCore.on_samples
    (decode, decompress, admission, spec check, DQNLearner.add), then the manual ack. No training."""
    from mqttrl.nodes.learner.core import LearnerCore, LearnerRules

    registry = get_registry()
    info = registry.algorithm(cfg.algorithm.name)
    env = make_env(cfg.env.id, cfg.env.kwargs)
    algo = info.make_learner(cfg.algorithm.params, env.observation_space, env.action_space, "cpu", 0)
    spec = info.sample_spec(cfg.algorithm.params, env.observation_space, env.action_space)
    env.close()
    rules = attrs.evolve(LearnerRules.from_config(cfg), require_announce=False)
    core = LearnerCore.create(rules, spec, info.mode, algo, time.monotonic())
    core.new_version(time.monotonic())  # version 1: the batches were made with it
    node = MqttClient(
        BrokerSettings(url=broker_url),
        client_id=f"bench-ingest-learner-{os.getpid()}",
        persistent=True,
        subscriptions=[(filt, 1)],
        inbox_limit=20000,
        inbox_block_s=5.0,
        outbox_limit=1000,
        manual_ack=True,
    ).start(wait=10)
    time.sleep(0.5)  # start() returns once SUBSCRIBE is sent; give the SUBACK time
    n = nbytes = transitions = 0
    rejected: dict[str, int] = {}
    last = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    pub.send(True)
    deadline = time.monotonic() + timeout
    while n < expect and time.monotonic() < deadline:
        try:
            msg = node.inbox.get(timeout=0.2)
        except queue.Empty:
            continue
        worker = msg.topic.rsplit("/", 1)[1]
        try:
            transitions += core.on_samples(worker, msg.payload, time.monotonic()).count
        except Rejected as r:
            rejected[r.reason] = rejected.get(r.reason, 0) + 1
        node.ack(msg)
        n += 1
        nbytes += len(msg.payload)
        last = time.perf_counter()
    cpu = time.process_time() - c0
    pub_result = pub.recv()
    node.stop(flush_timeout=1)
    return {
        "messages": n,
        "bytes": nbytes,
        "seconds": last - t0,
        "cpu_s": cpu,
        "transitions": transitions,
        "rejected": rejected,
        "replay_size": algo.size,
        "publisher": pub_result,
    }


def learner_ingest(
    cfg, broker: EmbeddedBroker, streams: list[list[tuple[int, dict]]], messages: int, tmp: Path
) -> dict:
    """Recorded batches over mosquitto: bare paho against the learner's receive path, same messages."""
    tp = Topics(cfg.run)
    per_copy = sum(len(s) for s in streams)
    copies = max(1, -(-messages // per_copy))
    comp = _compression(cfg)
    msgs, transitions = [], 0
    for sender, seq, count, arrays in _copies(streams, copies):
        msgs.append((tp.samples(sender), encode_batch(cfg.run, sender, seq, 1, arrays, count=count, **comp)))
        transitions += count
        if len(msgs) >= messages:
            break
    n, total = _write_messages(tmp / "ingest.bin", msgs)
    del msgs
    bs = BrokerSettings(url=broker.url)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    pub = ctx.Process(target=_publisher_main, args=(bs.host, bs.port, str(tmp / "ingest.bin"), child), daemon=True)
    pub.start()
    try:
        parent.recv()
        a = _recv_paho(bs.host, bs.port, tp.all_samples, n, parent, timeout=300)
        b = _recv_learner(broker.url, cfg, tp.all_samples, n, parent, timeout=300)
        parent.send(False)
    finally:
        pub.join(20)
        if pub.is_alive():
            pub.kill()
    out = {
        "messages": n,
        "transitions": transitions,
        "payload_bytes": total,
        "compression": comp.get("compression", "none"),
    }
    for key, r in (("paho", a), ("learner", b)):
        secs = r["seconds"] if r["seconds"] > 0 else float("nan")
        got_t = r.get("transitions", transitions * r["messages"] / n)
        out[key] = {
            **{k: v for k, v in r.items() if k != "publisher"},
            "transitions_per_s": got_t / secs,
            "mb_per_s": r["bytes"] / secs / 1e6,
            "cpu_us_per_transition": r["cpu_s"] / max(got_t, 1) * 1e6,
            "publisher_s": (r.get("publisher") or {}).get("seconds"),
        }
    return out


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


def _fill(replay, batches, target: int) -> tuple[int, float]:
    """Add ``(source, count, arrays)`` from ``batches`` until ``target`` transitions; (added, CPU s in add)."""
    added, cpu = 0, 0.0
    for source, count, arrays in batches:
        c0 = time.process_time()
        replay.add(arrays, count, source=source)
        cpu += time.process_time() - c0
        added += count
        if added >= target:
            break
    return added, cpu


def _recorded_batches(path: str):
    """The recorded batches over and over, each copy of the recording under its own senders."""
    batches = [decode_batch(p) for _, p in _read_messages(Path(path))]
    copy = 0
    while True:
        for b in batches:
            yield f"{b.worker}/{copy}", b.count, b.arrays
        copy += 1


def _streamed_batches(cfg, workers: int, seed: int):
    """Continuous streams: ``workers`` DQN actors of ``num_envs`` envs each, random actions (epsilon 1, as
    every worker starts), their batches as ``take()`` makes them, round robin."""
    registry = get_registry()
    info = registry.algorithm(cfg.algorithm.name)
    n = cfg.env.num_envs
    sets = []
    for w in range(workers):
        envs = EnvSet(lambda: make_env(cfg.env.id, cfg.env.kwargs), n, seed=seed + 1000 * w)
        space, act_space = envs.envs[0].observation_space, envs.envs[0].action_space
        ctx = ActorContext(num_envs=n, first_env_index=w * n, total_envs=workers * n, seed=seed + w)
        fwd = info.make_forward(cfg.algorithm.params, space, act_space, "numpy")  # never called: random actions
        sets.append((envs, info.make_actor(cfg.algorithm.params, space, act_space, ctx, forward=fwd)))
    rng = np.random.default_rng(seed)
    n_act = sets[0][0].envs[0].action_space.n
    yield None  # ready: envs made and reset (the caller takes its RSS baseline here)
    while True:
        for w, (envs, actor) in enumerate(sets):
            actions = rng.integers(0, n_act, n)
            o, r, no, te, tr, _ = envs.step(actions)
            actor.record(o, actions, {}, r, no, te, tr)
            if actor.pending() >= cfg.worker.batch_size:
                count = actor.pending()
                yield f"w{w}", count, actor.take()


def _replay_main(cfg_dict: dict, source: str, path: str, workers: int, conn) -> None:
    """Replay helper process: fill a FrameReplay of buffer_size to capacity and a tenth more."""
    from mqttrl.config import from_dict
    from mqttrl_plugins.dqn.frames import frame_layout
    from mqttrl_plugins.dqn.replay import FrameReplay

    registry = get_registry()
    cfg = from_dict(cfg_dict, lambda n: registry.algorithm(n).params)
    env = make_env(cfg.env.id, cfg.env.kwargs)
    space = env.observation_space
    env.close()
    layout = frame_layout(cfg.algorithm.params.frames, space)
    if source == "recorded":
        batches = _recorded_batches(path)
    else:
        batches = _streamed_batches(cfg, workers, seed=7)
        next(batches)
    capacity = cfg.algorithm.params.buffer_size
    target = capacity + capacity // 10  # past full: the ring overwrites and the store reuses freed frames
    t0 = time.perf_counter()
    rss0 = _rss()
    replay = FrameReplay(capacity, layout, tuple(int(s) for s in space.shape))
    added, cpu = _fill(replay, batches, target)
    rss1 = _rss()
    conn.send(
        {
            "source": source,
            "workers": workers if source == "stream" else None,
            "capacity": capacity,
            "size": replay.size,
            "added": added,
            "nbytes": replay.nbytes(),
            "frames_stored": replay.frames_stored(),
            "frame_slots": len(replay.frames),
            "frame_nbytes": replay.frame_nbytes,
            "rss_growth": rss1 - rss0,
            "add_us_per_transition": cpu / added * 1e6,
            "fill_s": time.perf_counter() - t0,
        }
    )


def replay_memory(cfg, streams: list[list[tuple[int, dict]]], tmp: Path, source: str, workers: int) -> dict:
    """Fill a FrameReplay of buffer_size in a fresh process (a clean RSS): with continuous streams of
    ``workers`` actors stepping the env (``source="stream"``), or the recorded batches over and over."""
    if source == "recorded":
        msgs = []
        for s, stream in enumerate(streams):
            for seq, (count, arrays) in enumerate(stream):
                msgs.append(("-", encode_batch(cfg.run, f"s{s}", seq, 1, arrays, count=count)))
        _write_messages(tmp / "replay.bin", msgs)
        del msgs
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    args = (cfg.to_dict(), source, str(tmp / "replay.bin"), workers, child)
    proc = ctx.Process(target=_replay_main, args=args, daemon=True)
    proc.start()
    try:
        if not parent.poll(1800):
            raise RuntimeError("the replay fill did not answer within 1800 s")
        r = parent.recv()
    finally:
        proc.join(30)
    size = max(r["size"], 1)
    return {
        **r,
        "bytes_per_transition": r["nbytes"] / size,
        "rss_bytes_per_transition": r["rss_growth"] / size,
        "frames_per_transition": r["frames_stored"] / size,
    }


def supervisor_restart(broker_url: str, run: str, tmp: Path) -> float | None:
    """Start `mqttrl workers --processes 2`, SIGKILL one worker, time until it heartbeats again."""
    tp = Topics(run)
    watch = MqttClient(
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
    p.add_argument("--algo", default="dqn", choices=["dqn", "ppo"], help="picks configs/cartpole_<algo>.toml")
    p.add_argument("--config", help="run config (default configs/cartpole_<algo>.toml)")
    p.add_argument("--env", help="override env.id of the config")
    p.add_argument("--pixels", action="store_true", help="the Pong preset: --config configs/atari_pong_dqn.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override (repeatable)")
    p.add_argument("--envs", type=int, default=8, help="envs per worker process")
    p.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    p.add_argument("--ingest-messages", type=int, default=200, help="pixel mode: batches published for ingest")
    p.add_argument(
        "--replay-fill",
        default="stream",
        choices=["stream", "recorded"],
        help="pixel mode: fill the replay with continuous streams of --replay-workers actors stepping the env "
        "(random actions; about buffer_size / raw steps/s seconds) or with the recorded batches over and over "
        "(fast; each copy a new sender, so more, shorter streams: more frames per transition than a real run)",
    )
    p.add_argument("--replay-workers", type=int, default=2, help="pixel mode: actors streaming into the replay")
    p.add_argument(
        "--restart",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure the supervisor restarting a killed worker (default: on, off for pixel games)",
    )
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    registry = get_registry()
    config = args.config or (
        REPO / "configs" / "atari_pong_dqn.toml" if args.pixels else REPO / "configs" / f"cartpole_{args.algo}.toml"
    )
    overrides = [f"env.num_envs={args.envs}", "run=bench-workers", *args.overrides]
    if args.env:
        overrides.append(f"env.id={args.env}")
    cfg = load_config(config, overrides, lambda n: registry.algorithm(n).params)
    info = registry.algorithm(cfg.algorithm.name)
    env = make_env(cfg.env.id, cfg.env.kwargs)
    obs_shape = tuple(int(x) for x in env.observation_space.shape)
    learner = info.make_learner(cfg.algorithm.params, env.observation_space, env.action_space, "cpu", 0)
    tensors, winfo = learner.export_weights()
    weights = (tensors, winfo)
    del learner  # a pixel DQN learner holds a replay of buffer_size: gone before anything is measured
    import torch

    torch.set_num_threads(1)
    figures: dict = {
        "config": str(config),
        "env": cfg.env.id,
        "algo": cfg.algorithm.name,
        "envs": args.envs,
        "compression": _compression(cfg).get("compression", "none"),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    streams: list[list[tuple[int, dict]]] = []
    max_record = 64  # batches recorded per worker loop (pixel mode: ~2 MB each before compression)
    with EmbeddedBroker("mosquitto") as broker, tempfile.TemporaryDirectory() as tmp:
        figures["raw_sampled"] = raw_sampled(cfg.env.id, args.seconds, cfg.env.kwargs)
        figures["raw_1env"] = raw_single_env(cfg.env.id, args.seconds, cfg.env.kwargs)
        figures["raw_envset"] = raw_rate(cfg.env.id, args.envs, args.seconds, cfg.env.kwargs)
        loops: dict[str, dict] = {}
        for backend in ("torch", "numpy"):
            fwd = info.make_forward(cfg.algorithm.params, env.observation_space, env.action_space, backend)
            streams.append([])
            loops[backend] = worker_loop(cfg, info, fwd, weights, broker.url, args.seconds, streams[-1], max_record)
            figures[f"{backend}_steps_per_s"] = loops[backend]["steps_per_s"]
        # central inference: a server process serving the retained config + weights published here
        tp = Topics(cfg.run)
        pub = MqttClient(BrokerSettings(url=broker.url), client_id="bench-learner").start()
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
            probe = np.zeros((1, *obs_shape), obs_dtype(env.observation_space))
            while time.monotonic() < deadline:  # wait until the server answers
                try:
                    remote(probe)
                    break
                except Exception:
                    time.sleep(0.5)
            remote.latencies.clear()
            streams.append([])
            loops["remote"] = worker_loop(cfg, info, remote, weights, broker.url, args.seconds, streams[-1], max_record)
            figures["remote_steps_per_s"] = loops["remote"]["steps_per_s"]
            lat = np.asarray(remote.latencies) * 1000
            figures["remote_rtt_ms_p50"] = float(np.percentile(lat, 50)) if len(lat) else None
            figures["remote_rtt_ms_p99"] = float(np.percentile(lat, 99)) if len(lat) else None
            remote.close()
            streams = [s for s in streams if s]
            pixels = bool(streams) and "frames" in streams[0][0][1]
            restart = args.restart if args.restart is not None else not pixels
            if restart:
                figures["supervisor_restart_s"] = supervisor_restart(broker.url, cfg.run, Path(tmp))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(20)
            pub.stop(flush_timeout=1)
        sent_bytes = sum(x["payload_bytes"] for x in loops.values())
        sent_transitions = sum(x["transitions"] for x in loops.values())
        figures["wire_bytes_per_transition_sent"] = sent_bytes / sent_transitions if sent_transitions else None
        figures["recorded_batches"] = sum(len(s) for s in streams)
        if pixels:
            print("measuring wire encodings, learner ingest and replay memory ...", flush=True)
            figures["wire"] = wire_bytes(cfg, [b for s in streams for b in s], obs_shape)
            figures["ingest"] = learner_ingest(cfg, broker, streams, args.ingest_messages, Path(tmp))
            figures["replay"] = replay_memory(cfg, streams, Path(tmp), args.replay_fill, args.replay_workers)
    report(figures, args.envs)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def report(figures: dict, envs: int) -> None:
    raw, sampled = figures["raw_envset"], figures["raw_sampled"]
    print(
        f"\nworker throughput, {figures['algo']} policy, {envs} envs per process, {figures['env']} "
        f"({figures['config']}, compression {figures['compression']}); {figures['cores']} cores, "
        f"Python {figures['python']}, torch {figures['torch']}, {figures['date']}"
    )
    print("| mode | env steps/s per process | / raw, action_space.sample() | / raw, precomputed actions |")
    print("|---|---|---|---|")
    print(f"| raw env, 1 env, action_space.sample() (ANCHORS' baseline) | {sampled:,.0f} | 1.00 | - |")
    print(f"| raw env, 1 env, precomputed random actions | {figures['raw_1env']:,.0f} | - | - |")
    print(f"| raw env, {envs} envs (EnvSet), precomputed random actions | {raw:,.0f} | - | 1.00 |")
    best = 0.0
    for mode, key in (
        ("local torch", "torch_steps_per_s"),
        ("local numpy", "numpy_steps_per_s"),
        ("central inference", "remote_steps_per_s"),
    ):
        best = max(best, figures[key] / raw)
        print(f"| {mode} | {figures[key]:,.0f} | {figures[key] / sampled:.2f} | {figures[key] / raw:.2f} |")
    if figures.get("remote_rtt_ms_p50") is not None:
        print(
            f"central inference round trip: p50 {figures['remote_rtt_ms_p50']:.2f} ms, "
            f"p99 {figures['remote_rtt_ms_p99']:.2f} ms"
        )
    if "supervisor_restart_s" in figures:
        r = figures["supervisor_restart_s"]
        print(
            f"supervisor: killed worker heartbeating again after {r:.1f} s" if r else "supervisor: restart not observed"
        )
    sent = figures.get("wire_bytes_per_transition_sent")
    if "wire" not in figures:
        return
    print(f"best worker mode / raw {envs}-env EnvSet: {best:.2f} (goal >= 0.6)")
    print(
        f"\nwire bytes per transition as the worker loops sent them ({figures['compression']}): {sent:,.0f} B "
        f"(goal <= 1,800 B)"
    )
    n_batches = figures["recorded_batches"]
    print(f"the same {n_batches} recorded batches encoded each way (CPU us per transition, this process):")
    print("| encoding | bytes per transition | bytes per message | encode us | decode us |")
    print("|---|---|---|---|---|")
    for w in figures["wire"]:
        print(
            f"| {w['encoding']} | {w['bytes_per_transition']:,.0f} | {w['bytes_per_message']:,.0f} "
            f"| {w['encode_us_per_transition']:.1f} | {w['decode_us_per_transition']:.1f} |"
        )
    g = figures["ingest"]
    print(
        f"\nlearner ingest: {g['messages']} recorded batches ({g['transitions']:,} transitions, "
        f"{g['payload_bytes'] / g['messages'] / 1024:,.0f} KiB per message, {g['compression']}) published at QoS 1 "
        f"by another process, all at once"
    )
    print("| receiver | messages | transitions/s | MB/s (payload) | CPU us per transition | refused |")
    print("|---|---|---|---|---|---|")
    for key, label in (
        ("paho", "bare paho, counts only"),
        ("learner", "learner receive path: MqttClient + LearnerCore.on_samples + DQNLearner.add (in process)"),
    ):
        x = g[key]
        refused = sum((x.get("rejected") or {}).values())
        print(
            f"| {label} | {x['messages']}/{g['messages']} | {x['transitions_per_s']:,.0f} | {x['mb_per_s']:.1f} "
            f"| {x['cpu_us_per_transition']:.1f} | {refused if 'rejected' in x else '-'} |"
        )
    if g["paho"]["transitions_per_s"]:
        print(f"learner / bare paho: {g['learner']['transitions_per_s'] / g['paho']['transitions_per_s']:.2f}")
    rp = figures["replay"]
    goal = 1.1 * rp["frame_nbytes"]
    how = (
        f"continuous streams of {rp['workers']} actors x {envs} envs, random actions"
        if rp["source"] == "stream"
        else f"the {figures['recorded_batches']} recorded batches over and over, one sender per copy"
    )
    print(
        f"\nreplay: a FrameReplay of {rp['capacity']:,} filled with {rp['added']:,} transitions ({how}) in "
        f"{rp['fill_s']:.0f} s; size {rp['size']:,}, {rp['frames_per_transition']:.4f} frames stored per "
        f"transition, {rp['frame_slots']:,} frame slots allocated"
    )
    print(
        f"nbytes() / size: {rp['bytes_per_transition']:,.0f} B; process RSS growth / size: "
        f"{rp['rss_bytes_per_transition']:,.0f} B (goal <= 1.1 x {rp['frame_nbytes']:,} = {goal:,.0f} B); "
        f"add {rp['add_us_per_transition']:.1f} us per transition"
    )


if __name__ == "__main__":
    main()
