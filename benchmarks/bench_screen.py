"""The screen kit on a real window: DQN learns Catch from its pixels, and how long a frame takes
to become a key press.

Catch (plugins/screen/demo_game.py, pygame) runs as its own process on an Xvfb display of
1920x1080; mqttrl plays it only through the screen kit (mss capture of the window, XTest keys,
reward and game over read from the HUD's pixels by ``CatchScore``).

1. **Training**: ``mqttrl.train`` of configs/screen_catch_dqn.toml (embedded broker, learner and
   one worker process): DQN with the MinAtar CNN on 32x32 gray frames (2 stacked), 50 steps a
   second, for ``--train-seconds``.
   Greedy evaluations would play the same window as the worker, so none run: the score is the mean
   return of the last 20 training episodes (the worker explores with epsilon 0.05), against a
   random policy measured first on the same game. Episodes: 3 lives, at most 300 steps (6 s), +1 a
   catch, -1 a miss. The learning curve goes to docs/img/screen_catch_dqn.png.
2. **Capture-to-action latency**: from the start of a window grab to the moment the keys of the
   action chosen from it are sent: grab, shrink to 84x84 gray and stack 4, the reward function, a
   Nature-CNN DQN forward in numpy (what a worker runs), the key events. At 20 Hz, for the
   160x160 game window and for a full-HD region (the whole 1920x1080 screen shrunk to 84x84).

    flock /work/notes/bench.lock nice -n 5 .venv/bin/python benchmarks/bench_screen.py
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

# one BLAS thread, as mqttrl's nodes run numpy (mqttrl/__init__.py): set before numpy loads
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from bench_minatar import save_figure  # noqa: E402
from helpers.xvfb import Game, Xvfb  # noqa: E402

from mqttrl_plugins.screen import make_screen_env  # noqa: E402

CONFIG = REPO / "configs" / "screen_catch_dqn.toml"
TITLE = "mqttrl catch"
GAME_ARGS = ("--lives", "3", "--ball-speed", "300", "--paddle-speed", "400", "--seed", "0")


def env_kwargs(display: str, **over) -> dict:
    """The config's ``[env.kwargs]`` on ``display``, with ``over`` changed."""
    kw = tomllib.loads(CONFIG.read_text())["env"]["kwargs"]
    return kw | {"display": display} | over


def random_returns(display: str, episodes: int, seed: int = 0) -> list[float]:
    """Returns of a uniformly random policy on the same game and settings."""
    rng = np.random.default_rng(seed)
    env = make_screen_env(**env_kwargs(display))
    out = []
    try:
        for _ in range(episodes):
            env.reset()
            total, done = 0.0, False
            while not done:
                _, r, term, trunc, _ = env.step(int(rng.integers(3)))
                total, done = total + r, term or trunc
            out.append(total)
    finally:
        env.close()
    return out


def train(display: str, seconds: float, run_dir: Path) -> tuple[object, list[dict]]:
    import mqttrl

    result = mqttrl.train(
        str(CONFIG),
        max_seconds=seconds,
        overrides={"env.kwargs.display": display},
        run_dir=run_dir,
        progress=False,
    )
    rows = list(csv.DictReader((run_dir / "episodes.csv").open()))
    return result, rows


def plot(rows: list[dict], random_mean: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.array([float(r["worker_env_steps"]) for r in rows])
    rets = np.array([float(r["return"]) for r in rows])
    k = 20
    smooth = np.convolve(rets, np.ones(k) / k, mode="valid") if len(rets) >= k else rets
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(steps, rets, ".", alpha=0.3, label="episode return")
    ax.plot(steps[len(steps) - len(smooth) :], smooth, label=f"mean of {k}")
    ax.axhline(random_mean, color="gray", ls="--", label=f"random policy ({random_mean:.2f})")
    ax.set_xlabel("env steps (50 Hz, real time)")
    ax.set_ylabel("return (catches - misses)")
    ax.set_title("DQN on Catch through the screen kit (pixels in, XTest keys out)")
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, path)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1000.0, q))


def latency(display: str, steps: int, region: list[int] | None) -> dict[str, float]:
    """Capture-to-action timings (ms) over ``steps`` steps at 20 Hz, 84x84 gray, 4 stacked."""
    from mqttrl.plugin.manager import get_registry

    where = {"region": region} if region else {"window": TITLE, "window_exact": True}
    kw = env_kwargs(display, size=84, frame_stack=4, step_s=0.0) | where
    if region:
        kw.pop("window")
        kw.pop("window_exact")
    env = make_screen_env(**kw)
    info = get_registry().algorithm("dqn")
    params = info.params(network="nature_cnn")
    forward = info.make_forward(params, env.observation_space, env.action_space, "numpy", 0)
    parts: dict[str, list[float]] = {k: [] for k in ("grab", "shrink_reward", "forward", "keys", "total")}
    try:
        env.reset()
        next_at = time.perf_counter()
        for _ in range(steps):
            next_at += 0.05
            time.sleep(max(0.0, next_at - time.perf_counter()))
            t0 = time.perf_counter()
            obs, _, done, _, _ = env.read_obs()  # grab, shrink and stack, the reward function
            t1 = time.perf_counter()
            action = int(forward(obs[None])["q"].argmax())
            t2 = time.perf_counter()
            env.send_action(action)
            t3 = time.perf_counter()
            for k, v in zip(parts, (env.last_grab_s, t1 - t0 - env.last_grab_s, t2 - t1, t3 - t2, t3 - t0)):
                parts[k].append(v)
            if done:
                env.keyboard.tap(["Return"])
        shape = env.last_bgra.shape
    finally:
        env.close()
    out = {f"{k}_p50_ms": pct(v, 50) for k, v in parts.items()}
    out |= {f"{k}_p99_ms": pct(v, 99) for k, v in parts.items()}
    out["capture_px"] = f"{shape[1]}x{shape[0]}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-seconds", type=float, default=420.0)
    p.add_argument("--random-episodes", type=int, default=10)
    p.add_argument("--latency-steps", type=int, default=400)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--figure", type=Path, default=REPO / "docs" / "img" / "screen_catch_dqn.png")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-screen-"))
    x = Xvfb(work, "1920x1080")
    game = Game(x.display, work, TITLE, *GAME_ARGS)
    try:
        game.wait_window()
        for name, region in (("window 160x160", None), ("full HD 1920x1080", [0, 0, 1920, 1080])):
            lat = latency(x.display, args.latency_steps, region)
            print(f"latency, {name} -> 84x84:", {k: round(v, 3) if isinstance(v, float) else v for k, v in lat.items()})
        if args.skip_train:
            return
        rand = random_returns(x.display, args.random_episodes)
        rmean = statistics.mean(rand)
        print(f"random policy: mean return {rmean:.2f} over {len(rand)} episodes ({rand})")
        t = time.monotonic()
        result, rows = train(x.display, args.train_seconds, work / "run")
        last = [float(r["return"]) for r in rows[-20:]]
        best20 = max(
            (statistics.mean(float(r["return"]) for r in rows[i : i + 20]) for i in range(max(len(rows) - 19, 1))),
            default=float("nan"),
        )
        print(
            f"DQN: {result.env_steps} env steps, {len(rows)} episodes, {result.updates} updates in "
            f"{time.monotonic() - t:.0f} s; mean return of the last 20 episodes {statistics.mean(last):.2f}, "
            f"best mean of 20 consecutive {best20:.2f} (random {rmean:.2f}); run dir {work / 'run'}"
        )
        plot(rows, rmean, args.figure)
    finally:
        game.stop()
        x.stop()


if __name__ == "__main__":
    main()
