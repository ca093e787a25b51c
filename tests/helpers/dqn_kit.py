"""Small DQN settings, spaces and batches that the DQN tests share (tests/test_dqn.py, test_dqn_device_replay.py)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from mqttrl.wire import SampleBatch, decode_batch, encode_batch
from mqttrl_plugins.dqn.common import DQNParams

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


ACT = gym.spaces.Discrete(3)


def small_params(**kw) -> DQNParams:
    base = dict(hidden=[32, 32], batch_size=16, buffer_size=1000, learning_starts=32, replay_ratio=4.0)
    base.update(kw)
    return DQNParams(**base)


def as_batch(arrays: dict) -> SampleBatch:
    """Through the wire, as the learner receives it: read-only views into one payload."""
    return decode_batch(encode_batch("r", "w", 0, 0, arrays))


def random_arrays(n: int, rng: np.random.Generator) -> dict:
    return {
        "obs": rng.normal(size=(n, 2)).astype(np.float32),
        "action": rng.integers(0, 3, n),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, 2)).astype(np.float32),
        "discount": rng.choice(np.array([0.0, 0.99], np.float32), n),
    }


def through_checkpoint_formats(tensors: dict, meta: dict) -> tuple[dict, dict]:
    """safetensors for the arrays and JSON for the metadata, as a checkpoint stores them."""
    return st_load(st_save({k: np.ascontiguousarray(v) for k, v in tensors.items()})), json.loads(json.dumps(meta))
