"""Stepping a set of envs with an algorithm's actor: shared by workers and evaluators.

Envs are stepped one by one (no vector-env autoreset quirks): where an episode
ends, the true final observation goes to the actor as ``next_obs`` and the env
is reset for the next step. Policy calls are batched over all envs.
"""

from __future__ import annotations

from typing import Callable

import attrs
import gymnasium as gym
import numpy as np


@attrs.define
class EpisodeEnd:
    env_index: int
    episode_return: float
    length: int
    terminated: bool


class EnvSet:
    def __init__(self, make: Callable[[], gym.Env], num_envs: int, seed: int):
        self.envs = [make() for _ in range(num_envs)]
        self.num_envs = num_envs
        obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        self.obs = np.stack(obs).astype(np.float32, copy=False)
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.total_steps = 0

    def step(self, actions: np.ndarray):
        """Step all envs; returns (obs, rewards, next_obs, terminated, truncated, ended)."""
        n = self.num_envs
        obs = self.obs
        next_obs = np.empty_like(obs)
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        new_obs = np.empty_like(obs)
        ended: list[EpisodeEnd] = []
        for i, env in enumerate(self.envs):
            a = actions[i]
            o, r, term, trunc, _ = env.step(a.item() if a.ndim == 0 else a)
            next_obs[i] = o
            rewards[i] = r
            terminated[i] = term
            truncated[i] = trunc
            self.returns[i] += r
            self.lengths[i] += 1
            if term or trunc:
                ended.append(EpisodeEnd(i, float(self.returns[i]), int(self.lengths[i]), bool(term)))
                self.returns[i] = 0.0
                self.lengths[i] = 0
                new_obs[i] = env.reset()[0]
            else:
                new_obs[i] = o
        self.obs = new_obs
        self.total_steps += n
        return obs, rewards, next_obs, terminated, truncated, ended

    def close(self) -> None:
        for env in self.envs:
            env.close()


def evaluate(actor, make: Callable[[], gym.Env], episodes: int, seed: int, max_steps: int = 100_000) -> list[float]:
    """Greedy returns of ``episodes`` episodes, run side by side with batched policy calls."""
    envs = [make() for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
    returns = np.zeros(episodes)
    active = np.ones(episodes, dtype=bool)
    steps = 0
    while active.any() and steps < max_steps:
        idx = np.flatnonzero(active)
        actions, _ = actor.act(obs[idx], greedy=True)
        for j, i in enumerate(idx):
            a = actions[j]
            o, r, term, trunc, _ = envs[i].step(a.item() if a.ndim == 0 else a)
            returns[i] += r
            obs[i] = o
            if term or trunc:
                active[i] = False
        steps += 1
    for env in envs:
        env.close()
    return returns.tolist()
