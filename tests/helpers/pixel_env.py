"""Two tiny image games for tests: fast, deterministic under ``reset(seed=)``, learnable, no ROMs.

- ``PixelDot-v0``: catch a falling dot. uint8 ``(4, 16, 16)``: the last 4 frames, stacked first
  (as ``atari/`` stacks them); the dot moves every step, so consecutive observations share 3 of
  their 4 frames (what frame dedup saves). Actions: 0 stay, 1 left, 2 right. The dot falls one row
  a step, drifting -1/0/+1 columns and bouncing off the sides; the paddle (7 pixels wide) on the
  bottom row catches it for +1 and a new dot appears at a random height; a miss terminates.
  Episodes are truncated after 30 steps. Random play: mean return 0.7, 20% of episodes
  truncated; following the dot catches nearly every one (mean return 2.2, 99% truncated).
- ``BoolGrid-v0``: bool ``(8, 8, 2)`` channels (HWC like MinAtar): channel 0 the agent, channel
  1 the goal. Actions: 0 up, 1 down, 2 left, 3 right. Reaching the goal gives +1 and a new goal;
  walking into the edge terminates. Truncated after 30 steps. Random play: mean return 0.14,
  20% truncated; walking to the goal: mean return 5.5, all truncated.

Tests import this module as ``helpers.pixel_env``. A process the tests start (a worker, a
learner, ``mqttrl train``) makes these envs by the ids ``pixel_env:PixelDot-v0`` and
``pixel_env:BoolGrid-v0`` (mqttrl's ``module:Env-v0``: importing the module registers the ids):
``tests/pixel_env.py`` is that module name, and imports this one; give the process ``PYTHONPATH``
with the tests folder first: ``node_env(PYTHONPATH=pixel_env.PYTHONPATH)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np

#: PYTHONPATH for a subprocess that must import ``pixel_env`` (the tests folder first, then the caller's)
PYTHONPATH = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)

PIXEL_DOT = "pixel_env:PixelDot-v0"
BOOL_GRID = "pixel_env:BoolGrid-v0"


class PixelDot(gym.Env):
    """Catch the falling dot; uint8 (stack, size, size) frames (see the module docstring)."""

    BALL, PADDLE = 255, 128

    def __init__(self, size: int = 16, stack: int = 4, half_paddle: int = 3):
        self.size, self.stack, self.half = size, stack, half_paddle
        self.observation_space = gym.spaces.Box(0, 255, (stack, size, size), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.frames = np.zeros((stack, size, size), np.uint8)

    def _spawn(self) -> None:
        self.y = int(self.np_random.integers(0, self.size // 2))
        self.x = int(self.np_random.integers(0, self.size))
        self.dx = int(self.np_random.integers(-1, 2))

    def _frame(self) -> np.ndarray:
        f = np.zeros((self.size, self.size), np.uint8)
        f[-1, max(self.pos - self.half, 0) : self.pos + self.half + 1] = self.PADDLE
        f[self.y, self.x] = self.BALL
        return f

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(self.half, self.size - self.half))
        self._spawn()
        self.frames[:] = self._frame()
        return self.frames.copy(), {}

    def step(self, action):
        a = int(action)
        if not 0 <= a < 3:
            raise ValueError(f"PixelDot: action {action!r} is not 0, 1 or 2")
        self.pos = min(max(self.pos + (0, -1, 1)[a], self.half), self.size - 1 - self.half)
        self.y += 1
        self.x += self.dx
        if not 0 <= self.x < self.size:  # bounce off the side
            self.dx = -self.dx
            self.x += 2 * self.dx
        reward, terminated = 0.0, False
        if self.y == self.size - 1:
            if abs(self.x - self.pos) <= self.half:
                reward = 1.0
                self._spawn()
            else:
                terminated = True
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = self._frame()
        return self.frames.copy(), reward, terminated, False, {}

    def expert(self) -> int:
        """The action that follows the dot (for tests: a policy that catches every dot)."""
        target = self.x + self.dx * (self.size - 1 - self.y)
        target = min(max(target, 0), self.size - 1)
        return 0 if abs(target - self.pos) <= self.half // 2 else (1 if target < self.pos else 2)


class BoolGrid(gym.Env):
    """Walk to the goal without leaving the grid; bool (size, size, 2) channels (see the module docstring)."""

    MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))  # up, down, left, right

    def __init__(self, size: int = 8):
        self.size = size
        self.observation_space = gym.spaces.Box(0, 1, (size, size, 2), np.bool_)
        self.action_space = gym.spaces.Discrete(4)

    def _new_goal(self) -> None:
        cells = self.size * self.size
        g = int(self.np_random.integers(0, cells - 1))
        g += g >= self.agent[0] * self.size + self.agent[1]  # any cell but the agent's
        self.goal = divmod(g, self.size)

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.size, self.size, 2), np.bool_)
        obs[self.agent[0], self.agent[1], 0] = True
        obs[self.goal[0], self.goal[1], 1] = True
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.agent = tuple(int(v) for v in self.np_random.integers(1, self.size - 1, 2))
        self._new_goal()
        return self._obs(), {}

    def step(self, action):
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"BoolGrid: action {action!r} is not 0 to 3")
        r, c = self.agent[0] + self.MOVES[a][0], self.agent[1] + self.MOVES[a][1]
        if not (0 <= r < self.size and 0 <= c < self.size):
            return self._obs(), 0.0, True, False, {}  # walked into the edge: stays put, episode over
        self.agent = (r, c)
        reward = 0.0
        if self.agent == self.goal:
            reward = 1.0
            self._new_goal()
        return self._obs(), reward, False, False, {}

    def expert(self) -> int:
        """The action that walks toward the goal (rows first)."""
        (r, c), (gr, gc) = self.agent, self.goal
        if r != gr:
            return 0 if gr < r else 1
        return 2 if gc < c else 3


gym.register("PixelDot-v0", entry_point=PixelDot, max_episode_steps=30)
gym.register("BoolGrid-v0", entry_point=BoolGrid, max_episode_steps=30)
