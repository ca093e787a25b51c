"""Greedy evaluation the same way for every library: ``episodes`` episodes of one env made as mqttrl
makes it, reset seeds ``first_seed + i`` (a baseline's curve and mqttrl's last checkpoint alike)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from mqttrl.envs.make import make_env


def greedy_mean(act: Callable, env_id: str, episodes: int, first_seed: int = 10**6) -> float:
    """The mean return of ``episodes`` episodes of ``act(obs) -> action`` on ``env_id``."""
    env = make_env(env_id)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=first_seed + i)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return statistics.fmean(returns)
