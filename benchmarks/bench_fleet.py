#!/usr/bin/env python
"""How many workers one learner and one mosquitto hold: N simulated workers against the real ones.

Not a test: it prints figures and draws how each grows with N. For each fleet size N it starts
its own mosquitto on a free port and a real learner (``mqttrl-learner``, CartPole), then N
simulated workers spread over a few processes. A simulated worker is a bare paho client with
the worker's own pure core (:class:`mqttrl.nodes.worker.core.WorkerCore`) and nothing else: it
speaks the real protocol (client id, birth message and last will on its state topic, the
config, weights, flow and learner-state subscriptions, heartbeats from the core, sample
batches numbered and stamped by the core), but instead of playing it replays a batch that a
real worker recorded on the wire at the start. All the clients of one process share one
thread and one ``selectors`` loop (paho's external-loop API), so a thousand fit on 2 cores.

Per N, in one run (DQN learner with training held off, so what it spends is ingest and
membership, not gradient steps):

1. idle: the learner with no worker (the baseline the per-unit figures are taken above);
   join: N workers connect at once; time until the learner's metrics count N online;
2. heartbeats only (``--phase-s`` seconds): learner CPU (% of one core) and mosquitto CPU,
   learner CPU per worker and per heartbeat;
3. samples: every worker sends the recorded batch so that the fleet sends ``--rate``
   transitions/s in all; learner CPU per accepted sample (the part above the heartbeat
   phase), samples lost or refused;
4. last-will storm: the processes holding half the fleet are killed (SIGKILL: sockets drop,
   mosquitto publishes their last wills); time until the learner's metrics count them offline;
5. PPO rounds (a second learner, PPO with a small share per worker): N members, each answers a
   new model with its share; the learner's own round record says how long each round took
   from publishing the model to the last share (median over ``--rounds``), and the cycle time
   from one model to the next (training included);

and mosquitto's resident memory (RSS) with N connected. CPU figures are CPU time of that
process over the phase (all its threads) divided by wall time: on a 2-core machine the
simulated workers compete with the learner and mosquitto for the cores, which inflates wall
times (join, storm, rounds) but not CPU-per-unit figures.

    python -m benchmarks.bench_fleet                          # N = 100, 300, 1000; ~6 minutes
    python -m benchmarks.bench_fleet --sizes 50 --phase-s 5   # a quick look
    python -m benchmarks.bench_fleet --from-json fleet.json   # report and plot saved results
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import platform
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from benchmarks.harness.plots import save_figure
from mqttrl.broker.embedded import EmbeddedBroker
from mqttrl.config import from_dict
from mqttrl.nodes.worker.core import WorkerCore, WorkerRules
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import decode_batch, encode_batch, encode_json

DQN_SETS = [
    # ingest and membership only: no gradient step, one model version
    "algorithm.learning_starts=1000000000",
    "algorithm.buffer_size=200000",
    "learner.metrics_interval_s=0.25",
    "learner.checkpoint_every=0",
]
PPO_SETS = [
    # a small share per member, so the round's training stays small next to its bookkeeping
    "env.num_envs=1",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=256",
    "algorithm.epochs=1",
    "learner.metrics_interval_s=0.25",
    "learner.checkpoint_every=0",
    "learner.round_timeout_s=60",
]


# ---- process and machine figures ------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Meter:
    """CPU share (of one core) of a few processes, or groups of processes, over a phase."""

    def __init__(self, pids: dict[str, int | list[int]]):
        self.pids = {k: p if isinstance(p, list) else [p] for k, p in pids.items()}
        self.t0 = time.monotonic()
        self.c0 = {k: self._cpu(ps) for k, ps in self.pids.items()}

    @staticmethod
    def _cpu(pids: list[int]) -> float:
        total = 0.0
        for p in pids:
            try:
                total += cpu_s(p)
            except OSError:  # gone (a killed simulator process)
                pass
        return total

    def read(self) -> dict[str, float]:
        dt = time.monotonic() - self.t0
        return {k: (self._cpu(ps) - self.c0[k]) / dt for k, ps in self.pids.items()} | {"seconds": dt}


# ---- the learner and what it says -----------------------------------------------------
class LearnerWatch:
    """A subscriber to the learner's metrics (its newest figures) and state."""

    def __init__(self, port: int, topics: Topics):
        self.latest: dict = {}
        self.history: list[tuple[float, int]] = []  # (monotonic time, workers_online)
        self.sizes: list[int] = []  # metrics payload sizes
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-watch-{os.getpid()}")
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, *_: c.subscribe(topics.learner_metrics, 0)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client, userdata, msg):
        m = json.loads(msg.payload)
        with self._lock:
            self.latest = m
            self.history.append((time.monotonic(), int(m.get("workers_online", 0))))
            self.sizes.append(len(msg.payload))

    def get(self, key: str, default=0):
        with self._lock:
            return self.latest.get(key, default)

    def wait(self, pred, timeout: float) -> float | None:
        """Seconds until ``pred(latest metrics)`` holds, or None."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with self._lock:
                ok = bool(self.latest) and pred(self.latest)
            if ok:
                return time.monotonic() - t0
            time.sleep(0.02)
        return None

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def run_name(config: str) -> str:
    return tomllib.loads(Path(config).read_text())["run"]


def start_learner(config: str, port: int, run_dir: Path, sets: list[str]) -> subprocess.Popen:
    script = Path(sys.executable).parent / "mqttrl-learner"
    argv = [str(script), "--config", config, "--broker", f"mqtt://127.0.0.1:{port}", "--run-dir", str(run_dir)]
    for s in sets:
        argv += ["--set", s]
    log = open(run_dir.parent / f"{run_dir.name}.log", "wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def record_batch(port: int, run: str, out: Path, timeout: float = 60.0) -> int:
    """Run one real worker until it sends a sample batch; save that batch's arrays (``.npz``) as
    it crossed the wire. Returns its transition count."""
    from mqttrl.nodes.worker.node import WorkerNode
    from mqttrl.transport.client import BrokerSettings

    topics = Topics(run)
    got: list[bytes] = []
    spy = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-spy-{os.getpid()}")
    spy.on_message = lambda c, u, m: got.append(m.payload)
    spy.on_connect = lambda c, *_: c.subscribe(topics.filter(Kind.SAMPLES), 1)
    spy.connect("127.0.0.1", port)
    spy.loop_start()
    worker = WorkerNode(BrokerSettings(f"mqtt://127.0.0.1:{port}"), run, name="recorder", wait_timeout=timeout)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not got and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    worker.stop()
    thread.join(timeout=15)
    spy.loop_stop()
    spy.disconnect()
    if not got:
        raise RuntimeError("the recording worker sent no batch; see the learner's log")
    batch = decode_batch(got[0])
    np.savez(out, **{k: np.asarray(v) for k, v in batch.arrays.items()})
    return batch.count


# ---- simulated workers ------------------------------------------------------------------
class SimWorker:
    """One simulated worker: a paho client driven by the process's selector loop, and the
    worker's core for its state."""

    def __init__(self, name: str, topics: Topics, registry):
        self.name = name
        self.topics = topics
        self.registry = registry
        self.core = WorkerCore(topics.run, name, self._parse_config)
        self.next_batch = 0.0
        self.sent = 0
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"mqttrl-worker-{topics.run}-{name}", protocol=mqtt.MQTTv5
        )
        self.client.will_set(topics.worker_state(name), self._state("offline", "connection lost"), 1, True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.connected = False
        self.handlers = {
            Kind.CONFIG: self.core.on_config,
            Kind.WEIGHTS: self.core.on_weights,
            Kind.FLOW: self.core.on_flow,
            Kind.LEARNER_STATE: self.core.on_learner_state,
        }

    def _parse_config(self, data: dict):
        """As the worker does; the rules (sync mode, heartbeat interval) follow from the config."""
        cfg = from_dict(data, lambda name: self.registry.algorithm(name).params)
        self.core.begin(WorkerRules.from_config(cfg, self.registry.algorithm(cfg.algorithm.name).mode))
        return cfg

    def _state(self, status: str, reason: str = "") -> bytes:
        return encode_json(
            {"status": status, "reason": reason, "worker": self.name, "incarnation": self.core.incarnation}
        )

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        for kind in self.handlers:
            client.subscribe(*self.topics.subscription(kind))
        client.publish(self.topics.worker_state(self.name), self._state("online"), 1, True)
        self.connected = True

    def _on_message(self, client, userdata, msg):
        kind, _ = self.topics.parse(msg.topic)
        try:
            self.handlers[kind](msg.payload)
            load = self.core.weights_to_load()
            if load is not None:
                self.core.loaded(load.weights)
        except Exception:  # a refusal is the real worker's business too: counted, not fatal
            pass


def sim_main(port: int, run: str, names: list[str], batch_npz: str, count: int, batch_every_s: float, ctrl) -> None:
    """A process of simulated workers. ``ctrl`` (a Pipe) takes "samples", "quiet", "stats", "stop"."""
    registry = get_registry()
    topics = Topics(run)

    with np.load(batch_npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    sims = [SimWorker(n, topics, registry) for n in names]
    sel = selectors.DefaultSelector()
    props = Properties(PacketTypes.CONNECT)
    for s in sims:
        s.client.connect("127.0.0.1", port, keepalive=30, clean_start=True, properties=props)
        sel.register(s.client.socket(), selectors.EVENT_READ, s)
    sending = False
    stats = {"batches": 0, "heartbeats": 0}
    next_misc = 0.0
    rng = np.random.default_rng(os.getpid())
    while True:
        if ctrl.poll():
            cmd = ctrl.recv()
            if cmd == "stop":
                break
            if cmd == "samples":
                sending = True
                now = time.monotonic()
                for s in sims:  # spread the fleet's batches evenly over the interval
                    s.next_batch = now + rng.uniform(0, batch_every_s)
            elif cmd == "quiet":
                sending = False
            elif cmd == "stats":
                ctrl.send(
                    {
                        **stats,
                        "connected": sum(s.connected for s in sims),
                        "versions": sorted({s.core.version for s in sims}),
                    }
                )
        for key, _ in sel.select(timeout=0.005):
            key.data.client.loop_read(max_packets=10)
        now = time.monotonic()
        for s in sims:
            c = s.client
            if s.connected and s.core.version >= 0:
                if s.core.heartbeat_due(now):
                    hb = s.core.heartbeat(time.time(), os.getpid(), 0, {}, {})
                    c.publish(topics.heartbeat(s.name), encode_json(hb), 0)
                    stats["heartbeats"] += 1
                if s.core.rules.sync:
                    due = s.core.config is not None and not s.core.awaiting_model
                else:
                    due = sending and now >= s.next_batch
                if due:
                    seq, version = s.core.batch_sent()
                    payload = encode_batch(
                        run, s.name, seq, version, arrays, incarnation=s.core.incarnation, epoch=s.core.epoch,
                        count=count,
                    )  # fmt: skip
                    c.publish(topics.samples(s.name), payload, 1)
                    stats["batches"] += 1
                    s.next_batch = max(s.next_batch + batch_every_s, now)
            if c.want_write():
                c.loop_write()
        if now >= next_misc:
            next_misc = now + 1.0
            for s in sims:
                s.client.loop_misc()
    for s in sims:
        s.client.disconnect()
        s.client.loop_write()


class Fleet:
    """N simulated workers in ``procs`` processes (spawned: no fork of this process's threads)."""

    def __init__(self, port: int, run: str, n: int, procs: int, batch_npz: Path, count: int, batch_every_s: float):
        ctx = mp.get_context("spawn")
        names = [f"sim{i:04d}" for i in range(n)]
        self.parts = []
        for k in range(procs):
            mine = names[k::procs]
            if not mine:
                continue
            here, there = ctx.Pipe()
            p = ctx.Process(target=sim_main, args=(port, run, mine, str(batch_npz), count, batch_every_s, there))
            p.start()
            self.parts.append((p, here, len(mine)))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p, *_ in self.parts]

    def tell(self, cmd: str) -> None:
        for p, conn, _ in self.parts:
            if p.is_alive():
                conn.send(cmd)

    def stats(self) -> dict:
        out = {"batches": 0, "heartbeats": 0, "connected": 0, "versions": set()}
        for p, conn, _ in self.parts:
            if not p.is_alive():
                continue
            conn.send("stats")
            s = conn.recv()
            for k in ("batches", "heartbeats", "connected"):
                out[k] += s[k]
            out["versions"] |= set(s["versions"])
        return out

    def kill_half(self) -> int:
        """SIGKILL the processes holding (about) half the fleet; returns how many workers they held."""
        killed, total = 0, sum(n for *_, n in self.parts)
        for p, _, n in self.parts:
            if killed >= total / 2:
                break
            os.kill(p.pid, signal.SIGKILL)
            killed += n
        return killed

    def stop(self) -> None:
        self.tell("stop")
        for p, *_ in self.parts:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# ---- one fleet size -------------------------------------------------------------------------
def run_size(n: int, args, work: Path) -> dict:
    res: dict = {"n": n}
    procs = max(2, min(args.procs, n))
    with EmbeddedBroker("mosquitto") as broker:
        port = broker.port
        mosq = broker._proc.pid
        res["mosquitto_rss_mb_idle"] = rss_mb(mosq)
        # -- DQN: join, heartbeats, samples, last-will storm
        run = run_name(args.dqn_config)
        learner = start_learner(args.dqn_config, port, work / f"dqn-{n}", DQN_SETS)
        watch = LearnerWatch(port, Topics(run))
        try:
            if watch.wait(lambda m: True, 60) is None:
                raise RuntimeError(f"no learner metrics in 60 s; see {work / f'dqn-{n}.log'}")
            npz = work / "dqn_batch.npz"
            count = record_batch(port, run, npz)
            time.sleep(1.0)
            meter = Meter({"learner": learner.pid, "mosquitto": mosq})
            time.sleep(args.phase_s)
            res["idle"] = meter.read()  # no worker: the learner's own loop and metrics
            res["batch_transitions"] = count
            batch_every_s = count * n / args.rate
            t0 = time.monotonic()
            fleet = Fleet(port, run, n, procs, npz, count, batch_every_s)
            joined = watch.wait(lambda m: m.get("workers_online", 0) >= n, 120)
            res["join_s"] = joined
            res["joined"] = watch.get("workers_online")
            print(f"N={n}: {res['joined']} online after {time.monotonic() - t0:.1f} s", flush=True)
            time.sleep(2)

            meter = Meter({"learner": learner.pid, "mosquitto": mosq, "simulators": fleet.pids})
            hb0 = fleet.stats()["heartbeats"]
            time.sleep(args.phase_s)
            cpu = meter.read()
            hbs = fleet.stats()["heartbeats"] - hb0
            res["heartbeat_phase"] = {
                "learner_cpu": cpu["learner"],
                "mosquitto_cpu": cpu["mosquitto"],
                "simulators_cpu": cpu["simulators"],
                "heartbeats_per_s": hbs / cpu["seconds"],
                # above the idle learner's own loop and metrics
                "learner_cpu_us_per_heartbeat": 1e6
                * max(cpu["learner"] - res["idle"]["learner"], 0)
                / max(hbs / cpu["seconds"], 1e-9),
                "learner_cpu_per_worker_pct": 100 * max(cpu["learner"] - res["idle"]["learner"], 0) / n,
                "metrics_payload_bytes": watch.sizes[-1] if watch.sizes else None,
            }
            res["mosquitto_rss_mb"] = rss_mb(mosq)
            print(f"N={n}: heartbeats {res['heartbeat_phase']}", flush=True)

            samples0 = watch.get("samples")
            missing0 = watch.get("missing_batches")
            fleet.tell("samples")
            time.sleep(1.0)
            meter = Meter({"learner": learner.pid, "mosquitto": mosq, "simulators": fleet.pids})
            s0 = watch.get("samples")
            time.sleep(args.phase_s)
            cpu = meter.read()
            got = watch.get("samples") - s0
            fleet.tell("quiet")
            time.sleep(2.0)
            sent = fleet.stats()["batches"] * count
            accepted = watch.get("samples") - samples0
            hp = res["heartbeat_phase"]
            res["sample_phase"] = {
                "learner_cpu": cpu["learner"],
                "mosquitto_cpu": cpu["mosquitto"],
                "simulators_cpu": cpu["simulators"],
                "samples_per_s": got / cpu["seconds"],
                "learner_cpu_us_per_sample": 1e6 * max(cpu["learner"] - hp["learner_cpu"], 0) / max(got / cpu["seconds"], 1e-9),
                "sent": sent,
                "accepted": accepted,
                "missing_batches": watch.get("missing_batches") - missing0,
                "rejected": watch.get("rejected", {}),
                "inbox": watch.get("inbox"),
            }  # fmt: skip
            print(f"N={n}: samples {res['sample_phase']}", flush=True)

            online = watch.get("workers_online")
            t_kill = time.monotonic()
            killed = fleet.kill_half()
            noticed = watch.wait(lambda m: m.get("workers_online", 0) <= online - killed, 120)
            res["storm"] = {"killed": killed, "noticed_s": noticed, "online_after": watch.get("workers_online")}
            print(f"N={n}: last-will storm {res['storm']} ({time.monotonic() - t_kill:.1f} s)", flush=True)
            fleet.stop()
        finally:
            watch.close()
            learner.send_signal(signal.SIGINT)
            learner.wait(timeout=60)

        # -- PPO rounds with N members
        run = run_name(args.ppo_config)
        learner = start_learner(args.ppo_config, port, work / f"ppo-{n}", PPO_SETS)
        watch = LearnerWatch(port, Topics(run))
        try:
            if watch.wait(lambda m: True, 60) is None:
                raise RuntimeError(f"no learner metrics in 60 s; see {work / f'ppo-{n}.log'}")
            npz = work / "ppo_batch.npz"
            count = record_batch(port, run, npz)
            meter = Meter({"learner": learner.pid, "mosquitto": mosq})
            fleet = Fleet(port, run, n, procs, npz, count, 1.0)
            rounds_file = work / f"ppo-{n}" / "rounds.jsonl"
            t0 = time.monotonic()
            full: list[dict] = []
            while time.monotonic() - t0 < args.phase_s * 3 and len(full) < args.rounds:
                time.sleep(0.5)
                rows = [json.loads(x) for x in rounds_file.read_text().splitlines()] if rounds_file.exists() else []
                full = [r for r in rows if len(r["workers"]) >= n]
            cpu = meter.read()
            waits = [r["seconds"] for r in full]
            cycles = [b["time"] - a["time"] for a, b in itertools.pairwise(full)]
            res["ppo"] = {
                "full_rounds": len(full),
                "round_wait_s_median": statistics.median(waits) if waits else None,
                "cycle_s_median": statistics.median(cycles) if cycles else None,
                "transitions_per_round": full[0]["transitions"] if full else None,
                "learner_cpu": cpu["learner"],
                "mosquitto_cpu": cpu["mosquitto"],
                "mosquitto_rss_mb": rss_mb(mosq),
            }
            print(f"N={n}: PPO {res['ppo']}", flush=True)
            fleet.stop()
        finally:
            watch.close()
            learner.send_signal(signal.SIGINT)
            learner.wait(timeout=60)
    return res


# ---- report ---------------------------------------------------------------------------------
def _f(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def report(res: dict) -> None:
    print()
    print(f"{res['cores']} cores, Python {res['python']}, {res['date']}; {res['rate']:,} transitions/s in all")
    print(
        "| N | join (s) | learner CPU, heartbeats only | per worker | per heartbeat (µs) | metrics msg (kB) "
        "| learner CPU with samples | per sample (µs) | accepted / sent | will storm: killed, noticed in (s) "
        "| PPO round wait (s) | PPO cycle (s) | mosquitto CPU (hb / samples) | mosquitto RSS (MB) |"
    )
    print("|---" * 14 + "|")
    for r in res["sizes"]:
        h, s, st, p = r["heartbeat_phase"], r["sample_phase"], r["storm"], r["ppo"]
        print(
            f"| {r['n']} | {_f(r['join_s'])} | {100 * h['learner_cpu']:.1f}% | {h['learner_cpu_per_worker_pct']:.3f}% "
            f"| {_f(h['learner_cpu_us_per_heartbeat'], 0)} | {_f((h['metrics_payload_bytes'] or 0) / 1000)} "
            f"| {100 * s['learner_cpu']:.1f}% | {_f(s['learner_cpu_us_per_sample'], 2)} | {s['accepted']:,} / {s['sent']:,} "
            f"| {st['killed']}, {_f(st['noticed_s'], 2)} | {_f(p['round_wait_s_median'], 2)} | {_f(p['cycle_s_median'], 2)} "
            f"| {100 * h['mosquitto_cpu']:.1f}% / {100 * s['mosquitto_cpu']:.1f}% | {_f(r['mosquitto_rss_mb'])} |"
        )


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["sizes"]
    n = [r["n"] for r in rows]
    panels = [
        ("learner CPU, % of one core", [100 * r["heartbeat_phase"]["learner_cpu"] for r in rows], "heartbeats only"),
        (None, [100 * r["sample_phase"]["learner_cpu"] for r in rows], f"with {res['rate']:,} samples/s"),
        ("seconds", [r["storm"]["noticed_s"] for r in rows], "last-will storm (half the fleet) noticed in"),
        (None, [r["ppo"]["round_wait_s_median"] for r in rows], "PPO round: model to last share"),
        (None, [r["ppo"]["cycle_s_median"] for r in rows], "PPO cycle: model to next model"),
        (None, [r["join_s"] for r in rows], "join: all online in"),
        ("mosquitto", [r["mosquitto_rss_mb"] for r in rows], "RSS (MB)"),
        (None, [100 * r["sample_phase"]["mosquitto_cpu"] for r in rows], "CPU with samples (% of a core)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    groups = [panels[0:2], panels[2:6], panels[6:8]]
    titles = ["learner CPU (% of one core)", "seconds", "mosquitto"]
    for ax, group, title in zip(axes, groups, titles):
        for _, ys, label in group:
            ax.plot(n, [float("nan") if y is None else y for y in ys], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xticks(n, [str(x) for x in n])
        ax.set_xlabel("simulated workers (N)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"one learner, one mosquitto, N workers ({res['cores']} cores)")
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000], help="fleet sizes N")
    p.add_argument("--procs", type=int, default=4, help="processes the simulated workers are spread over")
    p.add_argument("--rate", type=int, default=10000, help="transitions/s the whole fleet sends in the sample phase")
    p.add_argument("--phase-s", type=float, default=15.0, help="seconds of each measured phase")
    p.add_argument("--rounds", type=int, default=5, help="PPO rounds with every member to wait for")
    p.add_argument("--dqn-config", default="configs/cartpole_dqn.toml")
    p.add_argument("--ppo-config", default="configs/cartpole_ppo.toml")
    p.add_argument("--json", help="save the figures here")
    p.add_argument("--plot", default="docs/img/fleet.png", help="the figure (PNG)")
    p.add_argument("--from-json", metavar="FILE", help="run nothing: report and plot saved results")
    args = p.parse_args()
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
    else:
        res = {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "rate": args.rate,
            "mosquitto": subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[0],
            "sizes": [],
        }
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            for n in args.sizes:
                res["sizes"].append(run_size(n, args, Path(tmp)))
                if args.json:
                    Path(args.json).write_text(json.dumps(res, indent=1, default=list))
    report(res)
    plot(res, Path(args.plot))


if __name__ == "__main__":
    main()
