"""Stepping a set of envs with an algorithm's actor: shared by workers and evaluators.

Envs are stepped one by one (no vector-env autoreset quirks): where an episode
ends, the true final observation goes to the actor as ``next_obs`` and the env
is reset for the next step. Policy calls are batched over all envs.
"""

from __future__ import annotations

from collections.abc import Callable

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
        obs = self.obs
        # python scalars for discrete actions (tolist is far cheaper than per-element .item())
        acts = actions.tolist() if actions.ndim == 1 else list(actions)
        results = [env.step(a) for env, a in zip(self.envs, acts)]
        next_obs = np.array([r[0] for r in results], dtype=np.float32).reshape(obs.shape)
        rewards64 = np.array([r[1] for r in results], dtype=np.float64)  # episode returns keep full precision
        rewards = rewards64.astype(np.float32)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        self.returns += rewards64
        self.lengths += 1
        new_obs = next_obs
        ended: list[EpisodeEnd] = []
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            new_obs = next_obs.copy()
            for i in done:
                ended.append(EpisodeEnd(int(i), float(self.returns[i]), int(self.lengths[i]), bool(terminated[i])))
                self.returns[i] = 0.0
                self.lengths[i] = 0
                new_obs[i] = self.envs[i].reset()[0]
        self.obs = new_obs
        self.total_steps += self.num_envs
        return obs, rewards, next_obs, terminated, truncated, ended

    def close(self) -> None:
        for env in self.envs:
            env.close()


def greedy_actor(config, episodes: int, seed: int = 10**6):
    """An actor and an env factory for greedy evaluation of ``episodes`` episodes side by side."""
    from mqttrl.algorithm import ActorContext
    from mqttrl.envs.make import make_env
    from mqttrl.plugin.manager import get_registry

    registry = get_registry()
    make = lambda: make_env(config.env.id, config.env.kwargs, registry)  # noqa: E731
    env = make()
    info = registry.algorithm(config.algorithm.name)
    params, obs_space, act_space = config.algorithm.params, env.observation_space, env.action_space
    # the backend a worker prefers ("numpy" for the built-ins: no torch needed, fast for small MLPs)
    forward = info.make_forward(params, obs_space, act_space, info.backends[0], seed)
    actor = info.make_actor(params, obs_space, act_space, ActorContext(num_envs=episodes, seed=seed), forward)
    env.close()
    return actor, make


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
