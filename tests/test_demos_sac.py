"""SAC from demonstrations (plugins/sac/demo_clone.py): behaviour cloning moves the policy's mean
action to the demonstrated actions (in the env's box), leaves its log-std to SAC, and a resumed
learner is not cloned; the algorithm declares the seam, so `mqttrl train --demos` accepts SAC."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.config import DemosConfig
from mqttrl.demos import DatasetWriter, Episode, read_dataset
from mqttrl_plugins.sac.common import SACParams
from mqttrl_plugins.sac.demo_clone import learn_from_demos, squashed_actions

torch = pytest.importorskip("torch")

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)  # Pendulum's


def _demonstrator(obs: np.ndarray) -> np.ndarray:
    return np.clip(-1.5 * obs[:, :1] + 0.5 * obs[:, 1:2], -2.0, 2.0).astype(np.float32)


def _dataset(tmp_path):
    rng = np.random.default_rng(0)
    w = DatasetWriter(tmp_path / "ds", "Pendulum-v1", OBS, ACT)
    for _ in range(5):
        obs = rng.uniform(-1, 1, size=(41, 3)).astype(np.float32)
        w.add(Episode(obs, _demonstrator(obs[:-1]), np.zeros(40, np.float32), False, True))
    return read_dataset(tmp_path / "ds")


def _learner():
    from mqttrl_plugins.sac.learner import SACLearner

    return SACLearner(SACParams(hidden=[64, 64], batch_size=64), OBS, ACT, "cpu", seed=0)


def _mean_action_error(learner, obs: np.ndarray) -> float:
    with torch.no_grad():
        greedy = learner.actor.greedy(torch.from_numpy(obs)).numpy()
    return float(np.abs(greedy - _demonstrator(obs)).mean())


def test_squashed_actions_map_the_box_to_the_unit_interval():
    ep = Episode(
        np.zeros((4, 3), np.float32), np.array([[-2.0], [0.0], [1.0]], np.float32), np.zeros(3, np.float32), True, False
    )
    info = {"action_low": [-2.0], "action_high": [2.0]}
    np.testing.assert_allclose(squashed_actions([ep], info)[:, 0], [-1.0, 0.0, 0.5])


def test_cloning_moves_the_mean_action_to_the_demonstrators(tmp_path):
    learner = _learner()
    test = np.random.default_rng(1).uniform(-1, 1, size=(300, 3)).astype(np.float32)
    before = _mean_action_error(learner, test)
    log_std_before = [p.detach().clone() for p in learner.actor.log_std.parameters()]
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=400), True)
    after = _mean_action_error(learner, test)
    assert figures["demo_clone_mse"] < 0.1 * figures["demo_clone_mse_before"], figures
    assert after < 0.15 < before, (before, after)  # on states it was not trained on: the demonstrator's rule
    assert all(torch.equal(a, b) for a, b in zip(log_std_before, learner.actor.log_std.parameters()))
    assert learner.updates == 0 and learner.policy_updates == 0


def test_a_resumed_learner_is_not_cloned(tmp_path):
    learner = _learner()
    before = [p.detach().clone() for p in learner.actor.parameters()]
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=50), False)
    assert "demo_clone_updates" not in figures
    assert all(torch.equal(a, b) for a, b in zip(before, learner.actor.parameters()))


def test_sac_declares_the_seam():
    from mqttrl.plugin.manager import get_registry

    assert get_registry().algorithm("sac").learn_from_demos is learn_from_demos
