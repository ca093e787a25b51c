"""PPO from demonstrations (plugins/ppo/demo_clone.py): behaviour cloning makes the greedy policy the
demonstrator's and the critic value its returns, even where the returns are large; the decaying
cloning term holds the policy near the demonstrator during PPO's first updates; a resumed learner
is not cloned again."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.config import DemosConfig
from mqttrl.demos import DatasetWriter, Episode, read_dataset
from mqttrl_plugins.ppo.common import PPOParams, normalize_obs
from mqttrl_plugins.ppo.demo_clone import BCAnchor, learn_from_demos, returns_to_go

torch = pytest.importorskip("torch")

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _dataset(tmp_path, reward: float = 1.0, name: str = "ds"):
    rng = np.random.default_rng(0)
    w = DatasetWriter(tmp_path / name, "CartPole-v1", OBS, ACT)
    for _ in range(4):  # the demonstrator: action 1 when obs[1] > 0
        obs = rng.normal(size=(51, 4)).astype(np.float32)
        w.add(Episode(obs, (obs[:-1, 1] > 0).astype(np.int64), np.full(50, reward, np.float32), True, False))
    return read_dataset(tmp_path / name)


def _learner(**params):
    from mqttrl_plugins.ppo.learner import PPOLearner

    params.setdefault("lr", 3e-3)
    return PPOLearner(PPOParams(hidden=[32, 32], minibatch_size=64, **params), OBS, ACT, "cpu", seed=0)


def _agreement(learner, n: int = 300) -> float:
    test = np.random.default_rng(1).normal(size=(n, 4)).astype(np.float32)
    if learner.obs_rms is not None:
        test = normalize_obs(test, learner.obs_rms.mean, learner.obs_rms.var, 10.0)
    with torch.no_grad():
        logits, _ = learner.agent(torch.from_numpy(test))
    return float((logits.argmax(1).numpy() == (test[:, 1] > 0)).mean())


def test_returns_to_go():
    ep = Episode(np.zeros((4, 4), np.float32), np.zeros(3, np.int64), np.array([1, 2, 3], np.float32), True, False)
    np.testing.assert_allclose(returns_to_go(ep, 0.5), [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


def test_cloning_makes_the_greedy_policy_the_demonstrators(tmp_path):
    learner = _learner(obs_norm=True)
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=150, bc_coef=0.0), True)
    assert figures["demo_greedy_agreement"] > 0.9 and learner.updates == 0 and learner.rounds == 0
    assert learner.obs_rms.count > 200  # the statistics took in the demonstrations' observations
    assert _agreement(learner) > 0.9
    with torch.no_grad():
        _, value = learner.agent(torch.zeros(8, 4))
    assert float(value.mean()) > 5.0  # the critic learned the demonstrations' returns (up to ~40 at gamma 0.98)
    assert learner.demo_bc is None  # bc_coef 0: no term during fine-tuning


def test_large_returns_do_not_stall_the_actors_cloning(tmp_path):
    """Returns in the thousands (LunarLander's at gamma 0.999 are hundreds): the critic's gradient is
    clipped apart from the actor's, so the actor still clones (one clipped norm over both left the
    heuristic lander's clone at 75 % agreement), and the critic starts at the returns' mean."""
    ds = _dataset(tmp_path, reward=100.0)
    learner = _learner(lr=3e-4, max_grad_norm=0.5, vf_coef=1.0, gamma=0.999)
    figures = learn_from_demos(learner, ds, DemosConfig(pretrain_updates=300, bc_coef=0.0), True)
    assert figures["demo_greedy_agreement"] > 0.9, figures
    mean_return = float(np.mean(np.concatenate([returns_to_go(ep, 0.999) for ep in ds.episodes])))
    with torch.no_grad():
        _, value = learner.agent(torch.from_numpy(np.concatenate([ep.obs[:-1] for ep in ds.episodes])))
    assert abs(float(value.mean()) - mean_return) < 0.2 * mean_return


def test_bc_weight_decays_linearly_to_zero():
    anchor = BCAnchor(np.zeros((3, 4), np.float32), np.zeros(3, np.int64), 2.0, 1000, np.random.default_rng(0))
    assert anchor.weight(0) == 2.0 and anchor.weight(500) == 1.0 and anchor.weight(1000) == 0.0
    assert anchor.weight(5000) == 0.0


def _adversarial_updates(learner, steps: int = 60) -> None:
    """PPO updates whose advantages reward the opposite of the demonstrator's action everywhere."""
    rng = np.random.default_rng(2)
    for _ in range(steps):
        obs = torch.from_numpy(rng.normal(size=(64, 4)).astype(np.float32))
        action = torch.from_numpy(rng.integers(0, 2, 64))
        advantage = torch.where(action == (obs[:, 1] > 0).long(), -1.0, 1.0)
        with torch.no_grad():
            logprob, _, value = learner.agent.evaluate(obs, action)
        learner._update(obs, action, logprob, value, advantage, value, 0.2)


def test_the_cloning_term_holds_the_policy_near_the_demonstrator(tmp_path):
    ds = _dataset(tmp_path)
    settings = DemosConfig(pretrain_updates=150, bc_env_steps=10_000)
    held, free = _learner(), _learner()
    learn_from_demos(held, ds, attrs_evolve(settings, bc_coef=2.0), True)
    learn_from_demos(free, ds, attrs_evolve(settings, bc_coef=0.0), True)
    assert held.demo_bc is not None and free.demo_bc is None
    assert _agreement(held) > 0.9 and _agreement(free) > 0.9
    _adversarial_updates(held)
    _adversarial_updates(free)
    assert _agreement(held) > 0.8 > _agreement(free) + 0.2, (_agreement(held), _agreement(free))
    # decayed: past bc_env_steps the term is gone and PPO alone moves the policy
    held.samples_added = 10_000
    assert held.demo_bc.loss(held) == 0.0
    _adversarial_updates(held)
    assert _agreement(held) < 0.6


def attrs_evolve(settings, **changes):
    import attrs

    return attrs.evolve(settings, **changes)


def test_a_resumed_learner_is_not_cloned_but_keeps_the_term(tmp_path):
    learner = _learner()
    before = [p.detach().clone() for p in learner.agent.parameters()]
    figures = learn_from_demos(learner, _dataset(tmp_path), DemosConfig(pretrain_updates=50), False)
    assert "demo_clone_updates" not in figures
    assert all(torch.equal(a, b) for a, b in zip(before, learner.agent.parameters()))
    assert learner.demo_bc is not None and figures["demo_bc_weight"] == 1.0
