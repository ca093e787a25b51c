"""A game of stacked frames and a DQN actor on it, shared by the frame tests (tests/test_frames.py, test_dqn_device_replay.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from mqttrl.plugin.algorithm import ActorContext
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import DQNParams


class _NoForward:
    def load_weights(self, tensors, info):
        pass

    def __call__(self, obs):
        return {"q": np.zeros((len(obs), 3), np.float32)}

    def close(self):
        pass


class StackedGame:
    """E envs of stacked uint8 frames, as FrameStackObservation makes them: a reset repeats the
    first frame k times (padding); each step pushes one new frame; episodes end by termination
    or truncation at random lengths. Frames are drawn from few values so that equal frames
    happen (a still screen)."""

    def __init__(self, num_envs: int, k: int, size: int, seed: int):
        self.rng = np.random.default_rng(seed)
        self.k, self.size, self.e = k, size, num_envs
        self.stacks = np.stack([self._reset() for _ in range(num_envs)])
        self.left = self.rng.integers(1, 12, num_envs)

    def _frame(self) -> np.ndarray:
        if self.rng.random() < 0.2:  # a still screen: the same bytes as a common frame
            return np.zeros((self.size, self.size), np.uint8)
        return self.rng.integers(0, 4, (self.size, self.size), dtype=np.uint8)

    def _reset(self) -> np.ndarray:
        return np.repeat(self._frame()[None], self.k, axis=0)

    def step(self):
        obs = self.stacks.copy()
        next_obs = np.concatenate([obs[:, 1:], np.stack([self._frame() for _ in range(self.e)])[:, None]], axis=1)
        self.left -= 1
        ended = self.left <= 0
        terminated = ended & (self.rng.random(self.e) < 0.5)
        truncated = ended & ~terminated
        self.stacks = next_obs.copy()
        for i in np.flatnonzero(ended):
            self.stacks[i] = self._reset()
            self.left[i] = self.rng.integers(1, 12)
        rewards = self.rng.normal(size=self.e)
        actions = self.rng.integers(0, 3, self.e)
        return obs, actions, rewards, next_obs, terminated, truncated


def frame_actor(frames: str, shape, num_envs: int, n_step: int) -> DQNActor:
    params = DQNParams(frames=frames, n_step=n_step)
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    return DQNActor(params, space, gym.spaces.Discrete(3), ActorContext(num_envs=num_envs, seed=0), _NoForward())
