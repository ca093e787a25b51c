"""A resumed DQN learner goes on as the one that was killed would have (issue 22, chaos.py).

The unit round trip of nets, optimizer, replay and RNGs is in tests/test_dqn.py; this file
holds what a learner killed mid-run and resumed with ``--resume`` must also carry over: how
much of a backlog it writes off (``updates_forgiven``) right after the restart, when the
batches the workers had in flight arrive at once.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from mqttrl.wire import decode_batch, encode_batch
from mqttrl_plugins.dqn.common import DQNParams
from mqttrl_plugins.dqn.learner import DQNLearner

torch.set_num_threads(1)

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(3)
SENDERS = ("w0", "w1", "w2", "w3")


def params() -> DQNParams:
    # one batch of 64 owes 64 * 16 / 16 = 64 updates; forgive_debt_above (20) is below what
    # 4 batches of every sender owe, so that (4 x 4 x 64 = 1024) is the cap of a fleet of four
    return DQNParams(
        hidden=[16],
        batch_size=16,
        buffer_size=4096,
        learning_starts=16,
        replay_ratio=16.0,
        max_update_debt=100_000,
        forgive_debt_above=20,
    )


def batch(worker: str, seq: int, rng: np.random.Generator):
    arrays = {
        "obs": rng.normal(size=(64, 2)).astype(np.float32),
        "action": rng.integers(0, 3, 64),
        "reward": rng.normal(size=64).astype(np.float32),
        "next_obs": rng.normal(size=(64, 2)).astype(np.float32),
        "discount": np.full(64, 0.99, np.float32),
    }
    return decode_batch(encode_batch("r", worker, seq, 0, arrays))


def checkpoint_round_trip(learner: DQNLearner) -> DQNLearner:
    """state_dict -> safetensors bytes and JSON -> a new learner (another seed): a --resume."""
    import json

    tensors, meta = learner.state_dict(include_replay=True)
    tensors = st_load(st_save({k: np.ascontiguousarray(v) for k, v in tensors.items()}))
    resumed = DQNLearner(params(), OBS, ACT, "cpu", 99)
    resumed.load_state_dict(tensors, json.loads(json.dumps(meta)))
    return resumed


def test_a_resumed_learner_forgives_the_in_flight_batches_as_the_killed_one_would():
    rng = np.random.default_rng(0)
    live = DQNLearner(params(), OBS, ACT, "cpu", 0)
    seq = 0
    for _ in range(3):  # every worker sends; the learner keeps up, then falls 300 updates behind
        for w in SENDERS:
            live.add(batch(w, seq, rng))
            seq += 1
        while live._debt() > 300:
            live.train_step()
    assert live.forgiven == 0
    resumed = checkpoint_round_trip(live)
    assert resumed._debt() == live._debt()

    # the batches the workers had in flight when they were told to pause, one worker after the
    # other (the broker hands over each client's queue): 2 batches each, within the cap of four senders
    burst = [batch(w, 100 + 4 * i + k, rng) for i, w in enumerate(SENDERS) for k in range(2)]
    for b in burst:
        live.add(b)
        resumed.add(b)
    assert live.forgiven == 0  # a fleet of four: nothing of this is a backlog
    assert resumed.forgiven == live.forgiven, "the resumed learner wrote off updates the killed one owed"
    assert resumed._debt() == live._debt()
    for _ in range(5):
        assert resumed.train_step() == live.train_step()
