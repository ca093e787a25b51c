"""A CartPole whose step raises now and then, like a game client that crashes.

``gymnasium.make("benchmarks.chaos_env:ChaosCartPole-v1", p_raise=1e-4)`` (the chaos benchmark puts
the repository root on the workers' PYTHONPATH). Each step raises ``RuntimeError`` with
probability ``p_raise``; the process and the rest of its envs carry on.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ChaosCartPole(gym.Wrapper):
    def __init__(self, p_raise: float = 1e-4, seed: int | None = None):
        super().__init__(gym.make("CartPole-v1"))
        self.p_raise = float(p_raise)
        self._rng = np.random.default_rng(seed)

    def step(self, action):
        if self._rng.random() < self.p_raise:
            raise RuntimeError("chaos: the game client crashed")
        return self.env.step(action)


if "ChaosCartPole-v1" not in gym.registry:
    gym.register("ChaosCartPole-v1", entry_point=ChaosCartPole)
