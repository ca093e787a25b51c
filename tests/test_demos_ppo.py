"""PPO from demonstrations (plugins/ppo/demo_clone.py): behaviour cloning makes the greedy policy the
demonstrator's and the critic value its returns; a resumed learner is left alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.config import DemosConfig
from mqttrl.demos import DatasetWriter, Episode, read_dataset
from mqttrl_plugins.ppo.common import PPOParams
from mqttrl_plugins.ppo.demo_clone import learn_from_demos, returns_to_go

torch = pytest.importorskip("torch")

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _dataset(tmp_path):
    rng = np.random.default_rng(0)
    w = DatasetWriter(tmp_path / "ds", "CartPole-v1", OBS, ACT)
    for _ in range(4):  # the demonstrator: action 1 when obs[1] > 0
        obs = rng.normal(size=(51, 4)).astype(np.float32)
        w.add(Episode(obs, (obs[:-1, 1] > 0).astype(np.int64), np.ones(50, np.float32), True, False))
    return read_dataset(tmp_path / "ds")


def _learner(**params):
    from mqttrl_plugins.ppo.learner import PPOLearner

    return PPOLearner(PPOParams(hidden=[32, 32], minibatch_size=64, lr=3e-3, **params), OBS, ACT, "cpu", seed=0)


def test_returns_to_go():
    ep = Episode(np.zeros((4, 4), np.float32), np.zeros(3, np.int64), np.array([1, 2, 3], np.float32), True, False)
    np.testing.assert_allclose(returns_to_go(ep, 0.5), [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


def test_cloning_makes_the_greedy_policy_the_demonstrators(tmp_path):
    learner = _learner(obs_norm=True)
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=150), True)
    assert figures["demo_greedy_agreement"] > 0.9 and learner.updates == 0 and learner.rounds == 0
    assert learner.obs_rms.count > 200  # the statistics took in the demonstrations' observations
    test = np.random.default_rng(1).normal(size=(300, 4)).astype(np.float32)
    from mqttrl_plugins.ppo.common import normalize_obs

    x = torch.from_numpy(normalize_obs(test, learner.obs_rms.mean, learner.obs_rms.var, 10.0))
    with torch.no_grad():
        logits, value = learner.agent(x)
    assert (logits.argmax(1).numpy() == (test[:, 1] > 0)).mean() > 0.9
    assert float(value.mean()) > 5.0  # the critic learned the demonstrations' returns (up to ~40 at gamma 0.98)


def test_a_resumed_learner_is_left_alone(tmp_path):
    learner = _learner()
    before = [p.detach().clone() for p in learner.agent.parameters()]
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=50), False)
    assert "demo_clone_updates" not in figures
    assert all(torch.equal(a, b) for a, b in zip(before, learner.agent.parameters()))
