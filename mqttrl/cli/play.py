"""``mqttrl play CONFIG``: a person plays the run's game through the screen kit; the returns are the
human baseline that the agent's scores are put beside.

The run's env is made as ``mqttrl enjoy`` makes it (``[env] launch`` starts the game, and again after
each game over), with the kit's takeover on from the first step: the kit sends no keys, the person
plays with the actions' keys (``[env.kwargs] keys``) on the game's window, and each episode's return
is read by the run's own reward readers, as in training. ``-o`` writes the episodes, their mean and
spread as JSON (``human_baseline.json``, docs/demonstrations.md). Linux (X11) only, as the kit's
takeover.

``--match PATH``: a match on the same game PC, the person and a trained policy (PATH as ``mqttrl
enjoy`` takes it) taking turns, an episode each: the person's returns are the baseline as above, the
policy's (greedy) go beside them under ``agent``, with the rounds in ``match``.

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
    p.add_argument(
        "--match",
        metavar="PATH",
        help="a match: after each of the person's episodes the trained policy at PATH (a run directory or a "
        "model, as mqttrl enjoy takes it) plays one, greedily, on the same game (default: the person alone)",
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
    policy = match_policy(args.match) if args.match else None
    person = {"takeover_key": cfg.env.kwargs.get("takeover_key") or args.key, "takeover_start": True}
    person_env = lambda: make_played_env(cfg.env, extra_kwargs={**person, "takeover_idle_s": 0.0})  # noqa: E731
    episodes, agent = [], []
    env = person_env()
    try:
        for i in range(args.episodes):
            print(f"episode {i + 1} of {args.episodes}: play with {cfg.env.kwargs.get('keys')}", flush=True)
            episodes.append(play_episode(env))
            print(f"  return {episodes[-1]['return']:g} in {episodes[-1]['length']} steps", flush=True)
            if policy is not None:  # the agent's turn on the same window: the person's env lets it go
                env.close()
                agent.append(agent_episode(cfg, policy))
                print(f"  the agent's turn: return {agent[-1]['return']:g} in {agent[-1]['length']} steps", flush=True)
                env = person_env()
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
        **({"agent": {"model": args.match, **_summary(agent)}} if agent else {}),
        **(
            {"match": [{"person": p["return"], "agent": a["return"]} for p, a in zip(episodes, agent)]} if agent else {}
        ),
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"human baseline: {out['mean']:g} ± {out['std']:.2f} over {len(episodes)} episodes; wrote {args.out}")
    if agent:
        won = sum(a["return"] > p["return"] for p, a in zip(episodes, agent))
        print(
            f"the agent: {out['agent']['mean']:g} ± {out['agent']['std']:.2f}; it beat the person in {won} of {len(agent)}"
        )


def match_policy(path: str):
    """The trained policy of ``--match`` (one line where PATH holds none)."""
    from mqttrl.config import ConfigError
    from mqttrl.policy import load_policy

    try:
        return load_policy(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"mqttrl play --match {path}: {e}") from None


def agent_episode(cfg, policy) -> dict:
    """One greedy episode of ``policy`` on the config's game (the kit presses its keys)."""
    from mqttrl.envs.run_env import make_played_env

    env = make_played_env(cfg.env)
    try:
        if env.observation_space != policy.observation_space:
            from mqttrl.config import ConfigError

            raise ConfigError(
                f"mqttrl play --match: the model sees {policy.observation_space}, this env gives {env.observation_space}"
            )
        return play_episode(env, lambda obs: int(policy.predict(obs)))
    finally:
        env.close()


def play_random(cfg, episodes: int) -> list[dict]:
    """``episodes`` episodes of uniformly random actions on the same game and readers (seed 0)."""
    import numpy as np

    from mqttrl.envs.run_env import make_played_env

    rng = np.random.default_rng(0)
    env = make_played_env(cfg.env)
    try:
        out = []
        for i in range(episodes):
            out.append(play_episode(env, lambda _: int(rng.integers(env.action_space.n))))
            print(f"random episode {i + 1} of {episodes}: return {out[-1]['return']:g}", flush=True)
        return out
    finally:
        env.close()


def _summary(episodes: list[dict]) -> dict:
    returns = [e["return"] for e in episodes]
    return {"episodes": episodes, "mean": statistics.fmean(returns), "std": statistics.pstdev(returns)}


def play_episode(env, action=lambda obs: 0) -> dict:
    """One episode: the person's (``action(obs)`` is ignored: the kit sends no keys) or a policy's."""
    obs, _ = env.reset()
    total, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(action(obs))
        total, steps, done = total + float(reward), steps + 1, terminated or truncated
    return {"return": total, "length": steps}


COMMAND = Command(
    help="a person plays the run's game through the screen kit: the human baseline",
    add_arguments=add_arguments,
    run=run,
    description=__doc__.split("\n\n")[0],
)
