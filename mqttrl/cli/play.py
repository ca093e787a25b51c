"""``mqttrl play CONFIG``: a person plays the run's game through the screen kit; the returns are the
human baseline that the agent's scores are put beside.

The run's env is made as ``mqttrl enjoy`` makes it (``[env] launch`` starts the game, and again after
each game over), with the kit's takeover on from the first step: the kit sends no keys, the person
plays with the actions' keys (``[env.kwargs] keys``) on the game's window, and each episode's return
is read by the run's own reward readers, as in training. ``-o`` writes the episodes, their mean and
spread as JSON (``human_baseline.json``, docs/demonstrations.md). Linux (X11) only, as the kit's
takeover.

Exit status: 0 after the episodes, 2 for a config whose env is not the screen kit (one line).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from mqttrl.cli.common import Command, load, overrides_arg
from mqttrl.cli.enjoy import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help='run config (TOML) with env.id = "screen"')
    overrides_arg(p, "override a config value (repeatable)")
    p.add_argument("--episodes", type=positive_int, default=5, metavar="N", help="episodes the person plays")
    p.add_argument("--key", default="F12", help="the kit's takeover key, if the config sets none")
    p.add_argument(
        "--random-episodes",
        type=int,
        default=0,
        metavar="N",
        help="then N episodes of uniformly random actions (the kit presses the keys): the random mean beside",
    )
    p.add_argument("-o", "--out", default="human_baseline.json", help="where the returns are written")


def run(args: argparse.Namespace) -> None:
    from mqttrl.config import ConfigError
    from mqttrl.envs.run_env import make_played_env

    cfg = load(args.config, args.overrides)
    if cfg.env.id != "screen":
        raise ConfigError(
            f'mqttrl play: {args.config} plays env {cfg.env.id!r}; a person plays through the screen kit ("screen")'
        )
    person = {"takeover_key": cfg.env.kwargs.get("takeover_key") or args.key, "takeover_start": True}
    env = make_played_env(cfg.env, extra_kwargs={**person, "takeover_idle_s": 0.0})
    episodes = []
    try:
        for i in range(args.episodes):
            print(f"episode {i + 1} of {args.episodes}: play with {cfg.env.kwargs.get('keys')}", flush=True)
            episodes.append(play_episode(env))
            print(f"  return {episodes[-1]['return']:g} in {episodes[-1]['length']} steps", flush=True)
    finally:
        env.close()
    randoms = play_random(cfg, args.random_episodes) if args.random_episodes > 0 else []
    out = {
        "env": cfg.env.id,
        "window": cfg.env.kwargs.get("window"),
        "config": str(args.config),
        "played_by": "person",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **_summary(episodes),
        **({"random": _summary(randoms)} if randoms else {}),
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"human baseline: {out['mean']:g} ± {out['std']:.2f} over {len(episodes)} episodes; wrote {args.out}")


def play_random(cfg, episodes: int) -> list[dict]:
    """``episodes`` episodes of uniformly random actions on the same game and readers (seed 0)."""
    import numpy as np

    from mqttrl.envs.run_env import make_played_env

    rng = np.random.default_rng(0)
    env = make_played_env(cfg.env)
    try:
        out = []
        for i in range(episodes):
            out.append(play_episode(env, lambda: int(rng.integers(env.action_space.n))))
            print(f"random episode {i + 1} of {episodes}: return {out[-1]['return']:g}", flush=True)
        return out
    finally:
        env.close()


def _summary(episodes: list[dict]) -> dict:
    returns = [e["return"] for e in episodes]
    return {"episodes": episodes, "mean": statistics.fmean(returns), "std": statistics.pstdev(returns)}


def play_episode(env, action=lambda: 0) -> dict:
    """One episode: the person's (``action`` is ignored: the kit sends no keys) or a policy's."""
    env.reset()
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step(action())
        total, steps, done = total + float(reward), steps + 1, terminated or truncated
    return {"return": total, "length": steps}


COMMAND = Command(
    help="a person plays the run's game through the screen kit: the human baseline",
    add_arguments=add_arguments,
    run=run,
    description=__doc__.split("\n\n")[0],
)
