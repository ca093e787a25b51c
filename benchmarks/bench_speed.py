"""Game speed under libfaketime on a game nobody here wrote: env steps per hour of freegames' Pacman
(Tk/turtle) launched by mqttrl's worker machinery (``make_worker_envs``: ``[env] launch`` under
libfaketime at ``game_speed``, the control clock at ``control_hz x game_speed``) on an Xvfb display,
a random policy, the screen kit capturing its window. Per speed: steps per hour, capture-to-action
p50/p99 (the env set's own ``act_latency``), the overrun share (the clock's ``PeriodStats``) and the
game's relaunches (a game over is a new process). docs/real-games.md "Speed".

    .venv/bin/python -m benchmarks.bench_speed --speeds 1 4 --seconds 75
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.machine import REPO
from benchmarks.harness.xvfb import Xvfb

OUT = REPO / "benchmarks" / "results" / "bench" / "game_speed.json"


def no_reward(frame) -> tuple[float, bool]:
    """The benchmark times the loop, not a score."""
    return 0.0, False


def run_speed(speed: float, seconds: float, workdir: Path) -> dict:
    from mqttrl.config import load_config
    from mqttrl.nodes.worker.envs import make_worker_envs
    from mqttrl.observe.timing import combine_latency

    xvfb = Xvfb(workdir, "1024x768")  # Pacman opens at x=370, 420 px wide
    sets = [
        f"env.game_speed={speed:g}",
        "env.control_hz=10",  # Pacman's tick, 100 ms of game time
        'env.kwargs.reward="benchmarks.bench_speed:no_reward"',
        f'env.kwargs.display="{xvfb.display}"',
        "env.kwargs.step_s=0.1",
        f'env.launch=["{sys.executable}", "-m", "freegames.pacman"]',
        f'env.launch_env={{DISPLAY = "{xvfb.display}"}}',
        "env.launch_max_per_hour=100000",
    ]
    cfg = load_config(REPO / "configs" / "freegames_pacman_dqn.toml", overrides=sets)
    cfg.env.kwargs.pop("step_s", None)
    built = make_worker_envs(cfg, "w0", 0, threading.Event())
    envs, rng = built.envs, np.random.default_rng(0)
    try:
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            envs.step(rng.integers(0, envs.envs[0].action_space.n, size=1))
            n += 1
        wall = time.monotonic() - t0
        stats, lat = built.period_stats, combine_latency({"w0": envs.act_latency.report()})
        return {
            "game_speed": speed,
            "seconds": round(wall, 1),
            "env_steps": n,
            "env_steps_per_hour": round(n / wall * 3600),
            "capture_to_action_p50_ms": lat.get("p50_ms"),
            "capture_to_action_p99_ms": lat.get("p99_ms"),
            "capture_to_action_mean_ms": lat.get("mean_ms"),
            "overrun_share": round(stats.overruns / max(1, n), 4),
            "skipped": stats.skipped,
            "relaunches": built.game.relaunches if built.game else 0,
        }
    finally:
        envs.close()
        if built.game:
            built.game.close()
        xvfb.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--speeds", type=float, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--seconds", type=float, default=75.0)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    import tempfile

    rows = []
    for speed in args.speeds:
        rows.append(run_speed(speed, args.seconds, Path(tempfile.mkdtemp(prefix="bench-speed-"))))
        print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(json.dumps({"bench": "game_speed", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
