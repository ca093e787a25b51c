#!/usr/bin/env python
"""Real-time control under load: simulated game PCs, one game per worker process, rtgym beside them.

Not a test: it prints figures (and writes them as JSON with ``--out``). For each fleet size N it
runs ``mqttrl train configs/cartpole_realtime.toml`` with N workers, each stepping one simulated
game PC (``mqttrl.envs.realtime_sim:WallClock-v0``: CartPole advancing one tick every 1/hz s
of wall time, a late action is a missed action) on a ``--hz`` control clock, with a DQN whose
network is Nature-CNN-sized (an MLP of ``--hidden`` units, ~1.7M parameters at 1300) so that
each worker runs a real forward every period and decodes and loads a 6.8 MB model pushed every
second (``learner.weights_every_s = 1``), while the learner trains that network on the same two
cores. The worker's own figures (heartbeats -> learner metrics -> ``summary.json``'s
``realtime``) give the control-period error (how late each observation was read against the
anchored schedule) p50/p99/max, overruns (later than 10 % of a period), whole periods skipped
and the time they cover ("lost").

In the same run, under the same load, ``--rtgym`` processes (default 1) step rtgym 0.16's
``RealTimeEnv`` (its elastic clock; dummy interface) at the same rate with the same policy
work: the same MLP's forward every step and the same 6.8 MB weights decoded and loaded every
second inline (as tmrl's worker does). Its error is measured against rtgym's own schedule
(the observation's capture time minus the time rtgym scheduled it for), and its lost time is
wall time minus steps x period: rtgym restarts its schedule from "now" after an overrun past
its tolerance, and that time is never made up.

    flock /work/notes/bench.lock nice -n 5 .venv/bin/python benchmarks/bench_realtime.py --quick
    .venv/bin/python benchmarks/bench_realtime.py --workers 1 8 16 32 --seconds 60

Needs ``pip install rtgym`` for the side-by-side (not an mqttrl dependency; without it the
rtgym column is left out). Not covered here (said so in docs/benchmarks.md): a broker restart
and a learner kill during the run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "cartpole_realtime.toml"


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
    e = np.asarray(errors[1:])  # the first capture follows the reset's own schedule
    period = 1.0 / hz
    return {
        "steps": steps,
        "elapsed_s": round(elapsed, 2),
        "p50_ms": round(float(np.percentile(e, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(e, 99)) * 1000, 3),
        "max_ms": round(float(e.max()) * 1000, 3),
        "overruns": int((e > 0.1 * period).sum()),
        "lost_s": round(max(0.0, elapsed - steps * period), 2),
    }


# ---- the mqttrl side ----------------------------------------------------------------------
def run_mqttrl(n: int, seconds: float, hz: float, hidden: int, run_dir: Path, replay_ratio: float) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "mqttrl",
        "train",
        str(CONFIG),
        "--workers",
        str(n),
        "--max-seconds",
        str(seconds),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        "--set",
        f"env.control_hz={hz}",
        "--set",
        f"env.kwargs.world_hz={hz}",
        "--set",
        f"algorithm.hidden=[{hidden}, {hidden}]",
        "--set",
        "algorithm.dueling=false",
        "--set",
        "algorithm.learning_starts=64",
        "--set",
        "algorithm.max_update_debt=100000000",  # the learner never holds the games back
        "--set",
        f"algorithm.replay_ratio={replay_ratio}",
        "--set",
        "learner.weights_every_s=1.0",
        "--set",
        "learner.publish_every=1",
        "--set",
        "train.target_return=none",
        "--set",
        "train.eval_every_s=1000",
        "--set",
        "train.eval_episodes=1",
        "--set",
        "train.final_eval=false",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 300)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"mqttrl train failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    rt = summary.get("realtime") or {}
    windows = [json.loads(line) for line in (run_dir / "learner_metrics.jsonl").read_text().splitlines() if line]
    worst_window_p99 = max(
        (
            w["realtime"]["period_err_ms"]["p99"]
            for w in windows
            if (w.get("realtime") or {}).get("period_err_ms", {}).get("p99") is not None
        ),
        default=None,
    )
    versions = summary.get("model_version")
    timing = (summary.get("timing") or {}).get("workers") or {}
    return {
        "workers": n,
        "wall_s": round(wall, 1),
        "periods": rt.get("periods"),
        "p50_ms": (rt.get("run_err_ms") or {}).get("p50"),
        "p99_ms": (rt.get("run_err_ms") or {}).get("p99"),
        "max_ms": (rt.get("run_err_ms") or {}).get("max"),
        "worst_window_p99_ms": worst_window_p99,
        "overruns": rt.get("overruns"),
        "skipped": rt.get("skipped"),
        "lost_s": rt.get("lost_s"),
        "reset_s": rt.get("reset_s"),
        "model_versions": versions,
        "worker_ms_per_call": {
            b: round(1000 * v["s"] / v["n"], 3) for b, v in timing.items() if isinstance(v, dict) and v.get("n")
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8, 16, 32])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--hidden", type=int, default=1300, help="MLP width: 1300 -> ~1.7M parameters (Nature CNN)")
    ap.add_argument(
        "--replay-ratio",
        type=float,
        default=8.0,
        help="the learner's replay ratio: 8 gives about one update (and one model) a second per game at 20 Hz",
    )
    ap.add_argument("--rtgym", type=int, default=1, help="rtgym processes beside the fleet (0: none)")
    ap.add_argument("--quick", action="store_true", help="N = 1 and 8, 30 s each")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--rtgym-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rtgym_child:
        print(json.dumps(rtgym_child(args.seconds, args.hz, args.hidden)))
        return
    if args.quick:
        args.workers, args.seconds = [1, 8], 30.0
    try:
        import rtgym  # noqa: F401

        have_rtgym = args.rtgym > 0
    except ImportError:
        print("rtgym is not installed (pip install rtgym): mqttrl only")
        have_rtgym = False
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-realtime-"))
    for n in args.workers:
        children = []
        if have_rtgym:
            # rtgym starts a few seconds in, when the fleet is up, and stops before it does
            child_s = max(5.0, args.seconds - 12.0)
            cmd = [sys.executable, __file__, "--rtgym-child", "--seconds", str(child_s), "--hz", str(args.hz)]
            cmd += ["--hidden", str(args.hidden)]
            delayed = f"sleep 8; exec {' '.join(cmd)}"
            children = [
                subprocess.Popen(["bash", "-c", delayed], stdout=subprocess.PIPE, text=True) for _ in range(args.rtgym)
            ]
        row = run_mqttrl(n, args.seconds, args.hz, args.hidden, tmp / f"n{n}", args.replay_ratio)
        row["rtgym"] = [json.loads(c.communicate(timeout=120)[0].strip().splitlines()[-1]) for c in children]
        results.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(
        f"{'N':>3} | {'periods':>7} | {'p50 ms':>6} | {'p99 ms':>6} | {'max ms':>7} | {'overruns':>8} | {'lost s':>6} || rtgym p50/p99/max ms, overruns, lost s"
    )
    for r in results:
        rt = r["rtgym"][0] if r["rtgym"] else None
        side = (
            f"{rt['p50_ms']:.2f}/{rt['p99_ms']:.1f}/{rt['max_ms']:.0f}, {rt['overruns']} of {rt['steps']}, {rt['lost_s']}"
            if rt
            else "-"
        )
        print(
            f"{r['workers']:>3} | {r['periods']!s:>7} | {r['p50_ms']!s:>6} | {r['p99_ms']!s:>6} | {r['max_ms']!s:>7} | "
            f"{r['overruns']!s:>8} | {r['lost_s']!s:>6} || {side}"
        )
    if args.out:
        args.out.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1)
        )
    print(f"runs in {tmp}", file=sys.stderr)


if __name__ == "__main__":
    main()
