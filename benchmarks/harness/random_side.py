"""The random side of a comparison: uniformly random actions, episode after episode, on the env made
as mqttrl makes it. Its curve is the running mean of its episodes (a random policy has no greedy
one), so it lies on the same plot as the learners; its figures add the mean and spread."""

from __future__ import annotations

import statistics
import time

import numpy as np

from mqttrl.envs.make import make_env

from .figures import run_figures, training_figures
from .scenario import RandomPolicy, Scenario


def run(side: RandomPolicy, scenario: Scenario, seed: int) -> dict:
    """``side.episodes`` episodes (fewer when the scenario's seconds run out): curve and figures."""
    env = make_env(side.env)
    rng = np.random.default_rng(seed)
    env.action_space.seed(int(rng.integers(2**31)))
    t0, steps, returns, episodes, curve = time.monotonic(), 0, [], [], []
    try:
        while len(returns) < side.episodes and (not scenario.seconds or time.monotonic() - t0 < scenario.seconds):
            env.reset(seed=int(rng.integers(2**31)))
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, steps, done = total + float(reward), steps + 1, terminated or truncated
            returns.append(total)
            episodes.append((steps, total))
            curve.append([steps, round(time.monotonic() - t0, 2), statistics.fmean(returns)])
            print(f"  {side.name} seed {seed}: episode {len(returns)} return {total:g} ({steps} env steps)", flush=True)
    finally:
        env.close()
    figures = run_figures(curve, scenario.target)
    wall = round(time.monotonic() - t0, 1)
    figures.update(
        env_steps=steps, wall_s=wall, episodes=len(returns), mean=statistics.fmean(returns) if returns else None
    )
    figures.update(std=statistics.pstdev(returns) if returns else None)
    figures.update(training_figures(episodes, steps, wall))
    return {"seed": seed, "curve": curve, "figures": figures, "returns": returns}
