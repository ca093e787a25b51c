"""SAC's replay memory, numpy only: a ring of one-step transitions with float observations.

DQN's replay (``mqttrl_plugins.dqn.replay``) stores one integer action per transition and
image frames; SAC's actions are float vectors, so it keeps this small ring of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: the fields a transition holds, by name: (shape after the row axis given obs_dim/act_dim, dtype)
FIELDS = ("obs", "action", "reward", "next_obs", "discount")


class Replay:
    """``capacity`` transitions; the oldest are overwritten first."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int):
        self.capacity = capacity
        self.pos = 0
        self.size = 0
        self.arrays = {
            "obs": np.zeros((capacity, obs_dim), np.float32),
            "action": np.zeros((capacity, act_dim), np.float32),
            "reward": np.zeros(capacity, np.float32),
            "next_obs": np.zeros((capacity, obs_dim), np.float32),
            "discount": np.zeros(capacity, np.float32),
        }

    def add(self, arrays: Mapping[str, np.ndarray], count: int) -> int:
        """Store a validated batch's rows (a batch larger than the ring keeps its newest); rows stored."""
        keep = slice(max(0, count - self.capacity), count)
        m = keep.stop - keep.start
        idx = (self.pos + np.arange(m)) % self.capacity
        for name, dst in self.arrays.items():
            dst[idx] = np.asarray(arrays[name])[keep]
        self.pos = int((self.pos + m) % self.capacity)
        self.size = min(self.capacity, self.size + m)
        return m

    def sample(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return {name: arr[idx] for name, arr in self.arrays.items()}

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The stored rows as tensors ``replay.<field>`` plus JSON-able metadata (checkpoints)."""
        n = self.size
        return (
            {f"replay.{name}": arr[:n].copy() for name, arr in self.arrays.items()},
            {"size": n, "pos": self.pos, "capacity": self.capacity},
        )

    def load_state(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        n = int(meta["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint replay holds {n} transitions, buffer_size is {self.capacity}")
        for name, arr in self.arrays.items():
            arr[:n] = np.asarray(tensors[f"replay.{name}"]).reshape(arr[:n].shape)
        self.size = n
        self.pos = int(meta["pos"]) if int(meta["capacity"]) == self.capacity else n % self.capacity
