"""Replay ratios up to 64 under the learner's flow control: workers that pause when the learner says
it is behind (``behind()``, seen a few ticks late as over a broker) and a learner that trains a
bounded number of updates per tick reach the configured ratio, with nothing forgiven."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")

from mqttrl.wire import decode_batch, encode_batch
from mqttrl_plugins.dqn.common import DQNParams
from mqttrl_plugins.dqn.learner import DQNLearner

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _batch(n: int, seq: int, worker: str = "w0"):
    rng = np.random.default_rng(seq)
    arrays = {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "discount": np.full(n, 0.97, np.float32),
    }
    return decode_batch(encode_batch("r", worker, seq, 0, arrays))


def simulate(params: DQNParams, workers: int, worker_batch: int, lag_ticks: int, updates_per_tick: int, ticks: int):
    """Ticks of a fleet over a broker: each worker sends one batch per tick unless the pause it saw
    ``lag_ticks`` ago was on; the learner trains up to ``updates_per_tick`` (a counted update: the
    pacing is what is tested, not the gradient). Returns the learner."""
    learner = DQNLearner(params, OBS, ACT, "cpu", 0)

    def counted_update() -> dict:
        learner.updates += 1
        return {}

    learner.train_step = counted_update
    payloads = [_batch(worker_batch, 0, f"w{k}") for k in range(workers)]
    flags = [False] * lag_ticks  # the pause signal as the workers see it, lag_ticks late
    for _ in range(ticks):
        if not flags[0]:
            for payload in payloads:
                learner.add(payload)
        for _ in range(updates_per_tick):
            if not learner.train_due():
                break
            learner.train_step()
        flags = flags[1:] + [learner.behind()]
    while learner.train_due():  # the last batches' updates
        learner.train_step()
    return learner


@pytest.mark.parametrize("ratio", [8.0, 32.0, 64.0])
@pytest.mark.parametrize("batch_size, workers, worker_batch", [(64, 1, 256), (32, 2, 256), (128, 4, 128)])
def test_the_replay_ratio_holds_up_to_64_under_flow_control(ratio, batch_size, workers, worker_batch):
    params = DQNParams(hidden=[8], batch_size=batch_size, buffer_size=100_000, learning_starts=1000, replay_ratio=ratio)
    learner = simulate(params, workers, worker_batch, lag_ticks=3, updates_per_tick=40, ticks=3000)
    achieved = learner.updates * batch_size / learner.samples_added
    assert learner.forgiven == 0, f"{learner.forgiven:.0f} updates forgiven at replay ratio {ratio}"
    assert achieved == pytest.approx(ratio, rel=0.02)
