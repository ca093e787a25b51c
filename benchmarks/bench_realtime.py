#!/usr/bin/env python
"""Real-time control under load and faults: simulated game PCs, rtgym and a plain sleep loop beside them.

Not a test: it prints figures (and writes them as JSON with ``--out``). For each fleet size N it
starts a mosquitto (persistence on), a learner (``mqttrl learner``, ``configs/cartpole_realtime.toml``)
and N worker processes (``mqttrl worker``), each stepping one simulated game PC
(``mqttrl.envs.realtime_sim:WallClock-v0``: CartPole advancing one tick every 1/hz s of wall
time, a late action is a missed action) on a ``--hz`` control clock, with a DQN whose network
is Nature-CNN-sized (an MLP of ``--hidden`` units, ~1.7M parameters at 1300) so that each
worker runs a real forward every period and decodes and loads a 6.8 MB model pushed every
second (``learner.weights_every_s = 1``), while the learner trains that network on the same
cores. The games cannot pause (``can_pause = false``, as most real games): they play on through
the faults, so the control loop is measured all the way through them (``--pausable`` lets them
pause while the worker is idle).

Once every worker steps, a measured window of ``--seconds`` starts. In it, by default:

- the broker is restarted (stopped cleanly, started again 1 s later) at 30 % of the window;
- the learner is SIGKILLed at 60 % and started again 2 s later with ``--resume``.

The worker's own figures come from its heartbeats (read here over MQTT; their counters and
error histogram are the run's, so the window's figures are the difference between the last
heartbeat before the window and the last one in it, whatever heartbeats the broker restart
lost): control-period error (how late each observation was read against the anchored schedule)
p50/p99 (histogram bucket upper bounds, over every game of the fleet), max, overruns (later than
10 % of a period), whole periods skipped and the time they cover ("lost").

In the same window, under the same load:

- ``--rtgym`` processes (default 1) step rtgym 0.16's ``RealTimeEnv`` (its elastic clock; dummy
  interface) at the same rate with the same policy work: the same MLP's forward every step and
  the same 6.8 MB weights decoded and loaded every second inline (as tmrl's worker does). Its
  error is measured against rtgym's own schedule (the observation's capture time minus the time
  rtgym scheduled it for), and its lost time is wall time minus steps x period: rtgym restarts
  its schedule from "now" after an overrun past its tolerance, and that time is never made up;
- one plain ``time.sleep`` loop (anchored: ``next += period; sleep(next - now)``), no work, the
  floor of what the OS gives a sleeping Python process.

    flock /work/notes/bench.lock nice -n 5 .venv/bin/python -m benchmarks.bench_realtime --quick
    flock /work/notes/bench.lock nice -n 5 .venv/bin/python -m benchmarks.bench_realtime --workers 1 8 16 32 --seconds 60

Without root (most game PCs): ``--priority no-root`` runs the fleet without ``CAP_SYS_NICE``
(``setpriv``), so the workers' ``SCHED_FIFO`` is refused as it is there and they play at the
ordinary priority; ``--priority fifo no-root`` measures both, one after the other, per N. The
knobs an unprivileged PC has: ``--learner-nice`` (the learner under ``nice``), ``--spin-ms``
(``worker.realtime_spin_s``), ``--slice-us`` (``worker.realtime_slice_s``: the control thread's
EEVDF time slice where ``SCHED_FIFO`` is refused), ``--timer-slack-ns`` (the workers' timer slack, prctl)::

    nice -n 5 .venv/bin/python -m benchmarks.bench_realtime --workers 8 --priority fifo no-root --learner-nice 10

Needs ``pip install rtgym`` for the side-by-side (not an mqttrl dependency; without it the
rtgym column is left out) and ``mosquitto`` on the PATH.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.machine import REPO as ROOT
from benchmarks.harness.procs import Broker, Proc, repo_env

CONFIG = ROOT / "configs" / "cartpole_realtime.toml"
RUN = "cartpole-realtime"  # the config's run name


def _stats(errors: list[float], period: float, elapsed: float, steps: int) -> dict:
    e = np.asarray(errors)
    return {
        "steps": steps,
        "elapsed_s": round(elapsed, 2),
        "p50_ms": round(float(np.percentile(e, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(e, 99)) * 1000, 3),
        "max_ms": round(float(e.max()) * 1000, 3),
        "overruns": int((e > 0.1 * period).sum()),
        "lost_s": round(max(0.0, elapsed - steps * period), 2),
    }


# ---- the rtgym side ---------------------------------------------------------------------
def mlp(hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [4, hidden, hidden, 2]
    return {
        f"l{i}.{k}": (rng.standard_normal((a, b)) * 0.01 if k == "w" else np.zeros(b)).astype(np.float32)
        for i, (a, b) in enumerate(itertools.pairwise(sizes))
        for k in ("w", "b")
    }


def forward(net: dict[str, np.ndarray], x: np.ndarray) -> int:
    h = x
    n = len(net) // 2
    for i in range(n):
        h = h @ net[f"l{i}.w"] + net[f"l{i}.b"]
        if i < n - 1:
            h = np.maximum(h, 0.0)
    return int(np.argmax(h))


def rtgym_child(seconds: float, hz: float, hidden: int) -> dict:
    """One rtgym env stepped for ``seconds`` with an MLP forward per step and the weights
    decoded and loaded every second inline; its period errors and lost time as JSON."""
    import gymnasium as gym
    from rtgym.envs.real_time_env import DEFAULT_CONFIG_DICT, RealTimeEnv, RealTimeGymInterface
    from safetensors.numpy import load, save

    errors: list[float] = []
    holder: dict = {}

    class Dummy(RealTimeGymInterface):
        def send_control(self, control):
            pass

        def reset(self, seed=None, options=None):
            return [np.zeros(4, np.float32)], {}

        def get_obs_rew_terminated_info(self):
            env = holder["env"]
            errors.append(time.perf_counter() - env._RealTimeEnv__t_co)  # vs rtgym's own schedule
            return [np.zeros(4, np.float32)], 0.0, False, {}

        def get_observation_space(self):
            return gym.spaces.Tuple((gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),))

        def get_action_space(self):
            return gym.spaces.Discrete(2)

        def get_default_action(self):
            return 0

    config = dict(DEFAULT_CONFIG_DICT)
    config.update(
        interface=Dummy,
        time_step_duration=1.0 / hz,
        start_obs_capture=1.0 / hz,
        time_step_timeout_factor=1.0,
        ep_max_length=10**9,
        act_buf_len=1,
        reset_act_buf=True,
    )
    env = RealTimeEnv(config)
    holder["env"] = env
    net = mlp(hidden)
    blob = save(net)  # the model as it comes over the wire, decoded and loaded every second
    obs, _ = env.reset()
    t0 = time.perf_counter()
    next_swap = t0 + 1.0
    steps = 0
    while time.perf_counter() - t0 < seconds:
        a = forward(net, np.asarray(obs[0], np.float32)[None])
        obs, *_ = env.step(a)
        steps += 1
        if time.perf_counter() >= next_swap:
            next_swap += 1.0
            for k, v in load(blob).items():
                net[k][...] = v
    elapsed = time.perf_counter() - t0
    env.wait()
    # the first capture follows the reset's own schedule
    return _stats(errors[1:], 1.0 / hz, elapsed, steps)


# ---- the plain sleep loop -------------------------------------------------------------------
def sleep_child(seconds: float, hz: float) -> dict:
    """An anchored ``time.sleep`` loop, no work: how late each wake-up is against its grid."""
    period = 1.0 / hz
    errors: list[float] = []
    t0 = time.perf_counter()
    deadline = t0
    while True:
        deadline += period
        d = deadline - time.perf_counter()
        if d > 0:
            time.sleep(d)
        t = time.perf_counter()
        errors.append(t - deadline)
        if t - t0 >= seconds:
            break
    out = _stats(errors, period, time.perf_counter() - t0, len(errors))
    out["lost_s"] = 0.0  # anchored: a late wake-up is followed by a shorter sleep
    return out


# ---- what the tail is made of: one process, one variable at a time --------------------------
def probe_child(seconds: float, hz: float, fifo: bool, spin_s: float, decode: bool) -> dict:
    """A 20 Hz anchored loop in one process, the way a worker's control thread waits: with or
    without ``SCHED_FIFO``, a spin before the deadline, and a second thread decoding a 6.8 MB
    weights message every second (the worker's decoder: checksum, checks) to see the GIL's share."""
    from mqttrl.envs.realtime_clock import ControlClock, ThreadPriority
    from mqttrl.nodes.worker.node import REALTIME_SWITCH_INTERVAL_S
    from mqttrl.wire import decode_weights, encode_weights

    sys.setswitchinterval(REALTIME_SWITCH_INTERVAL_S)
    stop = threading.Event()
    if decode:
        payload = encode_weights(1, "dqn", "probe", mlp(1300))

        def decoder() -> None:
            while not stop.wait(1.0):
                decode_weights(payload)

        threading.Thread(target=decoder, daemon=True).start()
    prio = ThreadPriority(10 if fifo else 0)
    prio.high()
    clock = ControlClock(hz, spin_s=spin_s)
    clock.start()
    errors: list[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = clock.wait()
        errors.append(t - (clock.anchor + (clock.k - 1) * clock.period))
    stop.set()
    prio.low()
    out = _stats(errors, 1.0 / hz, time.perf_counter() - t0, len(errors))
    out.update(
        fifo=fifo and prio.enabled, spin_ms=spin_s * 1000, decode=decode, spin_cpu_s=round(clock.stats.spin_s, 3)
    )
    return out


def run_probe(args) -> list[dict]:
    rows = []
    for fifo, spin, decode in [
        (False, 0.0, False),
        (False, 0.0, True),
        (True, 0.0, False),
        (True, 0.0, True),
        (True, 0.0003, True),
        (False, 0.0003, True),
    ]:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.bench_realtime",
            "--probe-child",
            "--seconds",
            str(args.seconds),
            "--hz",
            str(args.hz),
        ]
        cmd += ["--probe-fifo", str(int(fifo)), "--probe-spin", str(spin), "--probe-decode", str(int(decode))]
        load = os.getloadavg()[0]
        out = json.loads(
            subprocess.run(cmd, capture_output=True, text=True, check=True, env=repo_env())
            .stdout.strip()
            .splitlines()[-1]
        )
        out["loadavg_1m"] = round(load, 2)
        print(json.dumps(out), flush=True)
        rows.append(out)
    return rows


# ---- the mqttrl side: broker, learner, workers, faults ------------------------------------


class Heartbeats:
    """Every worker heartbeat of the run, as it arrives: ``(arrival time, heartbeat)`` per worker."""

    def __init__(self, port: int, run: str):
        import paho.mqtt.client as mqtt

        from mqttrl.transport.topics import Topics

        self.filter = Topics(run).all_heartbeats
        self.seen: dict[str, list[tuple[float, dict]]] = {}
        self._lock = threading.Lock()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-rt-{os.getpid()}")
        self.c.on_connect = lambda c, *_: c.subscribe(self.filter, 0)
        self.c.on_message = self._on_message
        self.c.reconnect_delay_set(0.2, 1)
        self.c.connect_async("127.0.0.1", port)
        self.c.loop_start()

    def _on_message(self, client, userdata, msg) -> None:
        try:
            hb = json.loads(msg.payload)
        except ValueError:
            return
        with self._lock:
            self.seen.setdefault(str(hb.get("worker")), []).append((time.monotonic(), hb))

    def stepping(self) -> set[str]:
        """The workers whose newest heartbeat counts control periods."""
        with self._lock:
            return {w for w, hbs in self.seen.items() if ((hbs[-1][1].get("realtime") or {}).get("periods") or 0) > 0}

    def newest(self, before: float) -> dict[str, tuple[float, dict]]:
        with self._lock:
            out = {}
            for w, hbs in self.seen.items():
                got = [x for x in hbs if x[0] <= before and x[1].get("realtime")]
                if got:
                    out[w] = got[-1]
            return out

    def between(self, a: float, b: float) -> dict[str, list[dict]]:
        with self._lock:
            return {w: [hb for t, hb in hbs if a < t <= b] for w, hbs in self.seen.items()}

    def worst_windows(self, a: float, b: float, k: int = 8) -> list[dict]:
        """The ``k`` heartbeat windows with the largest error in (a, b]: when (seconds into the
        measured window, at the heartbeat's arrival), which worker, max and p99 (ms)."""
        with self._lock:
            rows = [
                {"at_s": round(t - a, 1), "worker": w, **(hb["realtime"].get("period_err_ms") or {})}
                for w, hbs in self.seen.items()
                for t, hb in hbs
                if a < t <= b and hb.get("realtime") and (hb["realtime"].get("period_err_ms") or {}).get("max")
            ]
        return sorted(rows, key=lambda r: -r["max"])[:k]

    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def window_figures(start: dict, end: dict, inside: dict[str, list[dict]], period: float) -> dict:
    """The fleet's figures over the window: each worker's run counters at the end less those at
    the start (a worker that restarted meanwhile counts from zero), the exact per-heartbeat maxima
    and p99s of the heartbeats in between, and the per-block times those heartbeats report."""
    from mqttrl.observe.timing import ERROR_BUCKETS_MS, add_windows, percentile_from_histogram

    hist = [0] * (len(ERROR_BUCKETS_MS) + 1)
    sums = dict.fromkeys(("periods", "overruns", "skipped", "lost_s", "reset_s", "paused_s"), 0.0)
    restarted = []
    for w, (_t, hb_end) in end.items():
        rt_end = hb_end["realtime"]
        rt_start = (start.get(w) or (0, {"realtime": {}}))[1]["realtime"]
        if (rt_start.get("periods") or 0) > (rt_end.get("periods") or 0) or hb_end.get("incarnation") != (
            start.get(w) or (0, {})
        )[1].get("incarnation"):
            restarted.append(w)
            rt_start = {}
        h0 = rt_start.get("hist") or [0] * len(hist)
        hist = [a + int(b) - int(c) for a, b, c in zip(hist, rt_end["hist"], h0)]
        for k in sums:
            sums[k] += float(rt_end.get(k) or 0) - float(rt_start.get(k) or 0)
    windows = [hb["realtime"] for hbs in inside.values() for hb in hbs if hb.get("realtime")]
    maxes = [r["period_err_ms"]["max"] for r in windows if r["period_err_ms"].get("max") is not None]
    p99s = [r["period_err_ms"]["p99"] for r in windows if r["period_err_ms"].get("p99") is not None]
    timing = add_windows(hb.get("timing") or {} for hbs in inside.values() for hb in hbs)
    idle = sorted({str(hb["realtime"].get("idle")) for hbs in inside.values() for hb in hbs if hb.get("realtime")})
    versions = sorted({(hb.get("epoch"), hb.get("model_version")) for hbs in inside.values() for hb in hbs})
    periods = int(sums["periods"])
    return {
        "periods": periods,
        "p50_ms": percentile_from_histogram(hist, 0.5),
        "p99_ms": percentile_from_histogram(hist, 0.99),
        "p999_ms": percentile_from_histogram(hist, 0.999),
        "max_ms": max(maxes, default=None),
        "worst_window_p99_ms": max(p99s, default=None),
        "over_2ms": int(sum(hist[ERROR_BUCKETS_MS.index(2) + 1 :])),
        "overruns": int(sums["overruns"]),
        "skipped": int(sums["skipped"]),
        "lost_s": round(sums["lost_s"], 3),
        "reset_s": round(sums["reset_s"], 2),
        "paused_s": round(sums["paused_s"], 2),
        "game_s": round(periods * period, 1),
        "hist": hist,
        "workers_restarted": restarted,
        "idle_reasons_seen": idle,
        "model_versions_seen": len(versions),
        "worker_ms_per_call": {b: round(1000 * v["s"] / v["n"], 3) for b, v in timing.items() if v.get("n")},
    }


def learner_sets(
    hz: float,
    hidden: int,
    replay_ratio: float,
    pausable: bool,
    spin_ms: float | None = None,
    slice_us: float | None = None,
) -> list[str]:
    sets = [
        f"env.control_hz={hz}",
        f"env.kwargs={{env = 'CartPole-v1', world_hz = {hz}, can_pause = {'true' if pausable else 'false'}}}",
        f"algorithm.hidden=[{hidden}, {hidden}]",
        "algorithm.dueling=false",
        "algorithm.learning_starts=64",
        "algorithm.max_update_debt=100000000",  # the learner never holds the games back
        f"algorithm.replay_ratio={replay_ratio}",
        "learner.weights_every_s=1.0",
        "learner.publish_every=1",
        "learner.checkpoint_every=200",  # something to --resume from
        "worker.heartbeat_interval_s=1.0",
        "train.target_return=none",
    ]
    if spin_ms is not None:
        sets.append(f"worker.realtime_spin_s={spin_ms / 1000}")
    if slice_us is not None:
        sets.append(f"worker.realtime_slice_s={slice_us / 1e6}")
    return [a for s in sets for a in ("--set", s)]


#: ``--priority no-root``: the fleet's processes without ``CAP_SYS_NICE`` (as a game PC without root):
#: ``SCHED_FIFO`` is refused (the worker logs one line and plays at the ordinary priority), and no
#: nice below 0 either
NO_ROOT = ["setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice"]
#: prctl's PR_SET_TIMERSLACK
PR_SET_TIMERSLACK = 29


def node_argv(priority: str, timer_slack_ns: int | None) -> list[str]:
    """``python -m mqttrl`` as the fleet runs it: without ``CAP_SYS_NICE`` for ``no-root``; with
    ``timer_slack_ns``, the process's timer slack set first (prctl, inherited by its threads)."""
    if timer_slack_ns is None:
        py = [sys.executable, "-m", "mqttrl"]
    else:
        code = (
            "import ctypes, os, sys; "
            f"ctypes.CDLL(None, use_errno=True).prctl({PR_SET_TIMERSLACK}, {int(timer_slack_ns)}, 0, 0, 0); "
            "os.execv(sys.executable, [sys.executable, '-m', 'mqttrl', *sys.argv[1:]])"
        )
        py = [sys.executable, "-c", code]
    return (NO_ROOT if priority == "no-root" else []) + py


def run_fleet(n: int, args, work: Path, extra_children, priority: str = "fifo") -> dict:
    """One fleet of ``n`` workers (``priority``: ``fifo`` as root, ``no-root`` without
    ``CAP_SYS_NICE``): up, a measured window with the faults, down; its figures."""
    from mqttrl.broker.embedded import free_port

    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    broker = Broker(work / "broker", free_port())
    broker.start()
    py = node_argv(priority, args.timer_slack_ns)
    nice = ["nice", "-n", str(args.learner_nice)] if args.learner_nice else []
    conn = ["--broker", broker.url]
    sets = learner_sets(args.hz, args.hidden, args.replay_ratio, args.pausable, args.spin_ms, args.slice_us)
    learner_argv = (
        nice
        + node_argv(priority, None)
        + ["learner", "--config", str(CONFIG), "--run-dir", str(work / "run"), *sets, *conn]
    )
    learner = Proc("learner", learner_argv, logs / "learner.log")
    workers = [
        Proc(f"w{i}", py + ["worker", "--run", RUN, "--name", f"w{i}", "--index", str(i), *conn], logs / f"w{i}.log")
        for i in range(n)
    ]
    hbs = Heartbeats(broker.port, RUN)
    events: list[dict] = []
    children: list[subprocess.Popen] = []
    try:
        learner.start()
        for w in workers:
            w.start()
        deadline = time.monotonic() + args.startup_s
        while len(hbs.stepping()) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"N={n}: only {len(hbs.stepping())} of {n} workers stepping after {args.startup_s}s")
            if not learner.alive():
                raise SystemExit(f"N={n}: the learner exited; see {logs / 'learner.log'}")
            time.sleep(0.5)
        time.sleep(args.settle_s)
        t_a = time.monotonic()
        load0 = os.getloadavg()
        start = hbs.newest(t_a)
        children = extra_children(args.seconds)
        faults = [] if args.no_faults else [(0.3, "broker_restart"), (0.6, "learner_kill")]
        for frac, kind in faults:
            time.sleep(max(0.0, t_a + frac * args.seconds - time.monotonic()))
            t = time.monotonic() - t_a
            if kind == "broker_restart":
                broker.stop()
                time.sleep(1.0)
                broker.start()
            else:
                learner.kill()
                time.sleep(2.0)
                learner.argv = learner_argv + ["--resume-if-any"]
                learner.start()
            events.append({"fault": kind, "at_s": round(t, 1), "done_s": round(time.monotonic() - t_a, 1)})
        time.sleep(max(0.0, t_a + args.seconds - time.monotonic()))
        t_b = time.monotonic()
        end = hbs.newest(t_b)
        load1 = os.getloadavg()
        row = {"workers": n, "priority": priority, "window_s": round(t_b - t_a, 1), "faults": events}
        row["knobs"] = {
            "learner_nice": args.learner_nice,
            "spin_ms": args.spin_ms,
            "timer_slack_ns": args.timer_slack_ns,
            "slice_us": args.slice_us,
        }
        row.update(window_figures(start, end, hbs.between(t_a, t_b), 1.0 / args.hz))
        row["worst_windows"] = hbs.worst_windows(t_a, t_b)
        row["learner_alive_at_end"] = learner.alive()
        row["loadavg_1m"] = [round(load0[0], 2), round(load1[0], 2)]
        side = []
        for c in children:
            out, _ = c.communicate(timeout=args.seconds + 120)
            side.append(json.loads(out.strip().splitlines()[-1]))
        row["rtgym"] = side[: args.rtgym if args.have_rtgym else 0]
        row["sleep_loop"] = side[-1] if side else None
        return row
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
        for w in workers:
            w.term()
        learner.term()
        hbs.close()
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8, 16, 32], help="fleet sizes N, one after another")
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window per N")
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--hidden", type=int, default=1300, help="MLP width: 1300 -> ~1.7M parameters (Nature CNN)")
    ap.add_argument(
        "--replay-ratio",
        type=float,
        default=8.0,
        help="the learner's replay ratio: 8 gives about one update (and one model) a second per game at 20 Hz",
    )
    ap.add_argument("--rtgym", type=int, default=1, help="rtgym processes beside the fleet (0: none)")
    ap.add_argument("--no-faults", action="store_true", help="no broker restart, no learner kill")
    ap.add_argument("--pausable", action="store_true", help="games pause while their worker is idle")
    ap.add_argument("--startup-s", type=float, default=120.0, help="give up when the fleet is not stepping by then")
    ap.add_argument("--settle-s", type=float, default=5.0, help="after every worker steps, before the window")
    ap.add_argument("--quick", action="store_true", help="N = 1 and 8, 30 s each")
    ap.add_argument(
        "--priority",
        nargs="+",
        choices=["fifo", "no-root"],
        default=["fifo"],
        help="each N once per entry: fifo (as root: the workers' SCHED_FIFO), no-root (the fleet without "
        "CAP_SYS_NICE: SCHED_FIFO refused, the ordinary priority, as on a game PC without root)",
    )
    ap.add_argument("--learner-nice", type=int, default=0, help="the learner runs under nice -n this (0: not niced)")
    ap.add_argument("--spin-ms", type=float, help="worker.realtime_spin_s in ms (default: the setting's default)")
    ap.add_argument("--slice-us", type=float, help="worker.realtime_slice_s in µs (no-root: the EEVDF slice asked)")
    ap.add_argument(
        "--timer-slack-ns", type=int, help="the workers' timer slack (prctl, before exec; Linux's default 50000)"
    )
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--rtgym-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sleep-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--probe",
        action="store_true",
        help="no fleet: one 20 Hz control loop per variant (normal or SCHED_FIFO priority, spin, a weights "
        "decoder thread), --seconds each, one after another, under whatever else the machine runs",
    )
    ap.add_argument("--probe-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-fifo", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--probe-spin", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--probe-decode", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe_child:
        print(
            json.dumps(
                probe_child(args.seconds, args.hz, bool(args.probe_fifo), args.probe_spin, bool(args.probe_decode))
            )
        )
        return
    if args.probe:
        rows = run_probe(args)
        if args.out:
            args.out.write_text(
                json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "probe": rows}, indent=1)
            )
        return
    if args.rtgym_child:
        print(json.dumps(rtgym_child(args.seconds, args.hz, args.hidden)))
        return
    if args.sleep_child:
        print(json.dumps(sleep_child(args.seconds, args.hz)))
        return
    if args.quick:
        args.workers, args.seconds = [1, 8], 30.0
    if shutil.which("mosquitto") is None:
        raise SystemExit("mosquitto is not on the PATH (apt-get install mosquitto)")
    try:
        import rtgym  # noqa: F401

        args.have_rtgym = args.rtgym > 0
    except ImportError:
        print("rtgym is not installed (pip install rtgym): mqttrl and the sleep loop only")
        args.have_rtgym = False

    def children(seconds: float) -> list[subprocess.Popen]:
        me = [sys.executable, "-m", "benchmarks.bench_realtime", "--seconds", str(seconds), "--hz", str(args.hz)]
        cmds = [[*me, "--rtgym-child", "--hidden", str(args.hidden)]] * (args.rtgym if args.have_rtgym else 0)
        cmds.append([*me, "--sleep-child"])
        return [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=repo_env()) for c in cmds]

    results = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-realtime-"))
    for n in args.workers:
        for priority in args.priority:
            row = run_fleet(n, args, tmp / f"n{n}-{priority}", children, priority)
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "hist"}), flush=True)
    print_table(results)
    if args.out:
        args.out.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1)
        )
    print(f"runs in {tmp}", file=sys.stderr)


def print_table(results: list[dict]) -> None:
    print()
    print(
        f"{'N':>3} {'priority':>8} | {'periods':>7} | {'p50 ms':>6} | {'p99 ms':>6} | {'max ms':>7} | {'overruns':>8} | "
        f"{'lost s':>6} || rtgym p50/p99/max ms, overruns, lost s || sleep loop p50/p99/max ms"
    )
    for r in results:
        rt = r["rtgym"][0] if r["rtgym"] else None
        side = (
            f"{rt['p50_ms']:.2f}/{rt['p99_ms']:.1f}/{rt['max_ms']:.0f}, {rt['overruns']} of {rt['steps']}, {rt['lost_s']}"
            if rt
            else "-"
        )
        sl = r["sleep_loop"]
        sleep = f"{sl['p50_ms']:.2f}/{sl['p99_ms']:.2f}/{sl['max_ms']:.1f}" if sl else "-"
        print(
            f"{r['workers']:>3} {r['priority']:>8} | {r['periods']!s:>7} | {r['p50_ms']!s:>6} | {r['p99_ms']!s:>6} | {r['max_ms']!s:>7} | "
            f"{r['overruns']!s:>8} | {r['lost_s']!s:>6} || {side} || {sleep}"
        )


if __name__ == "__main__":
    main()
