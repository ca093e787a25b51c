"""Random replay rows for the DQN heads' tests: CartPole-shaped floats or MinAtar-sized frames."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
IMAGE_OBS = gym.spaces.Box(0, 255, (10, 10, 4), np.uint8)  # MinAtar-sized: the minatar_cnn torso


def random_arrays(n: int, rng: np.random.Generator, space=CARTPOLE_OBS) -> dict:
    """``n`` transitions of random observations, actions, rewards and discounts (some terminal)."""
    if space.dtype == np.uint8:
        obs, next_obs = (rng.integers(0, 256, (n, *space.shape), dtype=np.uint8) for _ in range(2))
    else:
        obs, next_obs = (rng.normal(size=(n, *space.shape)).astype(np.float32) for _ in range(2))
    return {
        "obs": obs,
        "action": rng.integers(0, ACT.n, n),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": next_obs,
        "discount": rng.choice(np.array([0.0, 0.97], np.float32), n),
    }
