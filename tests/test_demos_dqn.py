"""DQN learning from demonstrations (plugins/dqn/demo_replay.py): the n-step transitions match the
actors', demonstration rows go into every batch at the set ratio, the replay's ring never evicts
them, the margin loss pushes the demonstrated action up, and the learner node's seam refuses what
it cannot use."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.config import DemosConfig
from mqttrl.demos import DatasetWriter, Episode, read_dataset
from mqttrl.wire import SampleBatch
from mqttrl_plugins.dqn.common import DQNParams
from mqttrl_plugins.dqn.demo_replay import DemoReplay, nstep_transitions

torch = pytest.importorskip("torch")

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _ep(T: int, terminated: bool, action: int = 1, start: float = 0.0) -> Episode:
    obs = (start + np.arange(T + 1, dtype=np.float32))[:, None].repeat(4, axis=1)
    return Episode(obs, np.full(T, action, np.int64), np.arange(1, T + 1, dtype=np.float32), terminated, not terminated)


def test_nstep_transitions_match_the_actors_rule():
    g = 0.5
    t = nstep_transitions([_ep(4, terminated=True)], gamma=g, n_step=2)
    np.testing.assert_allclose(t["reward"], [1 + g * 2, 2 + g * 3, 3 + g * 4, 4])
    np.testing.assert_allclose(t["discount"], [g**2, g**2, 0.0, 0.0])  # the end is inside the last two windows
    np.testing.assert_array_equal(t["next_obs"][:, 0], [2, 3, 4, 4])
    np.testing.assert_array_equal(t["obs"][:, 0], [0, 1, 2, 3])
    cut = nstep_transitions([_ep(3, terminated=False)], gamma=g, n_step=2)
    np.testing.assert_allclose(cut["discount"], [g**2, g**2, g])  # truncated: still bootstraps from the last obs
    np.testing.assert_array_equal(cut["next_obs"][:, 0], [2, 3, 3])


def test_extra_rows_give_the_set_share_of_the_batch():
    d = DemoReplay(nstep_transitions([_ep(5, True)], 0.9, 1), ratio=0.25)
    n = d.extra_rows(96)
    assert n == 32 and n / (96 + n) == 0.25
    assert DemoReplay(d.arrays, ratio=0.0).extra_rows(96) == 0


def _learner(buffer_size=64, **params):
    from mqttrl_plugins.dqn.learner import DQNLearner

    p = DQNParams(hidden=[16], batch_size=8, buffer_size=buffer_size, learning_starts=8, n_step=1, **params)
    return DQNLearner(p, OBS, ACT, "cpu", seed=0)


def _batch(n: int, seq: int, value: float) -> SampleBatch:
    obs = np.full((n, 4), value, np.float32)
    arrays = {
        "obs": obs,
        "next_obs": obs,
        "action": np.zeros(n, np.int64),
        "reward": np.zeros(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }
    return SampleBatch("r", "w", seq, 0, n, arrays)


def _dataset(tmp_path, episodes, obs_space=OBS):
    w = DatasetWriter(tmp_path / "ds", "CartPole-v1", obs_space, ACT)
    for ep in episodes:
        w.add(ep)
    return read_dataset(tmp_path / "ds")


def test_the_demo_part_is_never_evicted_and_is_in_every_batch(tmp_path, monkeypatch):
    from mqttrl_plugins.dqn.demo_replay import learn_from_demos

    learner = _learner(buffer_size=32)
    ds = _dataset(tmp_path, [_ep(10, True, start=1000.0)])  # demo observations are >= 1000
    learn_from_demos(learner, ds, DemosConfig(ratio=0.5, pretrain_updates=0), True)
    before = {k: v.copy() for k, v in learner.demos.arrays.items()}
    seen_demo = []
    real_mix = DemoReplay.mix

    def spy(self, weights, batch, device):
        weights, batch = real_mix(self, weights, batch, device)
        seen_demo.append((batch["obs"][:, 0] >= 1000).float().mean().item())
        return weights, batch

    monkeypatch.setattr(DemoReplay, "mix", spy)
    for seq in range(20):  # 20 x 16 worker transitions through a 32-slot ring: overwritten 10 times
        learner.add(_batch(16, seq, float(seq)))
        learner.train_step()
    assert learner.size == 32 and learner.samples_added == 320
    ring_obs = learner.replay.sample(np.arange(32))["obs"][:, 0]
    assert ring_obs.min() >= 18  # only the newest worker samples are left in the ring
    for k, v in before.items():
        np.testing.assert_array_equal(learner.demos.arrays[k], v)  # the demonstrations are all still there
    assert seen_demo == [0.5] * 20  # every batch: 8 replay rows + 8 demonstration rows


def test_pretraining_with_the_margin_loss_makes_the_greedy_action_the_demonstrators(tmp_path):
    from mqttrl_plugins.dqn.demo_replay import learn_from_demos

    learner = _learner()
    rng = np.random.default_rng(0)
    episodes = []
    for i in range(4):  # the demonstrator: action 1 when obs[0] > 0, else 0
        obs = rng.normal(size=(21, 4)).astype(np.float32)
        acts = (obs[:-1, 0] > 0).astype(np.int64)
        episodes.append(Episode(obs, acts, np.zeros(20, np.float32), True, False))
    ds = _dataset(tmp_path, episodes)
    figures = learn_from_demos(learner, ds, DemosConfig(margin_loss=1.0, pretrain_updates=300), True)
    assert figures["demo_pretrain_updates"] == 300 and learner.updates == 0  # pacing starts with the workers
    test_obs = rng.normal(size=(200, 4)).astype(np.float32)
    with torch.no_grad():
        greedy = learner.online(torch.from_numpy(test_obs)).argmax(1).numpy()
    assert (greedy == (test_obs[:, 0] > 0)).mean() > 0.9


def test_a_resumed_learner_takes_the_demos_without_pretraining(tmp_path):
    from mqttrl_plugins.dqn.demo_replay import learn_from_demos

    learner = _learner()
    ds = _dataset(tmp_path, [_ep(10, True)])
    before = [p.detach().clone() for p in learner.online.parameters()]
    figures = learn_from_demos(learner, ds, DemosConfig(pretrain_updates=50), False)
    assert "demo_pretrain_updates" not in figures and learner.demos.size == 10
    assert all(torch.equal(a, b) for a, b in zip(before, learner.online.parameters()))


def test_train_refuses_a_corrupt_dataset_with_one_line_before_starting(tmp_path, capsys):
    from pathlib import Path

    from mqttrl.cli import main

    ds = tmp_path / "ds"
    w = DatasetWriter(ds, "CartPole-v1", OBS, ACT)
    w.add(_ep(5, True))
    f = ds / "episodes" / "000000.safetensors"
    f.write_bytes(f.read_bytes()[:-8])
    config = Path(__file__).parent.parent / "configs" / "cartpole_dqn.toml"
    with pytest.raises(SystemExit) as e:
        main(["train", str(config), "--demos", str(ds), "--run-dir", str(tmp_path / "run")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "000000.safetensors: truncated" in err[0], err
    assert not (tmp_path / "run").exists()  # nothing was started


def test_train_refuses_another_games_dataset(tmp_path, capsys):
    from pathlib import Path

    from mqttrl.cli import main

    w = DatasetWriter(tmp_path / "ds", "Other-v0", gym.spaces.Box(-1, 1, (8,), np.float32), ACT)
    w.add(Episode(np.zeros((3, 8), np.float32), np.zeros(2, np.int64), np.zeros(2, np.float32), True, False))
    config = Path(__file__).parent.parent / "configs" / "cartpole_dqn.toml"
    with pytest.raises(SystemExit) as e:
        main(["train", str(config), "--demos", str(tmp_path / "ds"), "--run-dir", str(tmp_path / "run")])
    assert e.value.code == 2
    assert "observation space" in capsys.readouterr().err


def _node_config(tmp_path, path, algorithm="dqn"):
    from mqttrl.config import load_config
    from mqttrl.plugin.manager import get_registry

    registry = get_registry()
    sets = [f"algorithm.name={algorithm}", f"demos.path={json.dumps(str(path))}", "demos.pretrain_updates=20"]
    sets += ["algorithm.hidden=[16]", "algorithm.batch_size=8"] if algorithm == "dqn" else ["algorithm.hidden=[16]"]
    return load_config(None, sets, lambda n: registry.algorithm(n).params)


def test_the_learner_node_hands_the_dataset_to_the_algorithm(tmp_path, caplog, mosquitto):
    """The node's side of the seam: demos.path -> read, checked, learn_from_demos (pretraining in a new run)."""
    from mqttrl.nodes.learner.node import LearnerNode
    from mqttrl.transport.client import BrokerSettings

    _dataset(tmp_path, [_ep(12, True)], gym.make("CartPole-v1").observation_space)
    caplog.set_level("INFO", "mqttrl.learner")
    node = LearnerNode(_node_config(tmp_path, tmp_path / "ds"), BrokerSettings(url=mosquitto.url), tmp_path / "run")
    assert node.algo.demos is not None and node.algo.demos.size == 12
    assert "demo_pretrain_updates 20" in caplog.text


def test_the_learner_node_refuses_demos_for_an_algorithm_without_the_seam(tmp_path, monkeypatch, mosquitto):
    import attrs

    from mqttrl.config import ConfigError
    from mqttrl.nodes.learner import node as learner_node
    from mqttrl.plugin.manager import get_registry
    from mqttrl.transport.client import BrokerSettings

    registry = get_registry()
    without = attrs.evolve(registry.algorithm("dqn"), learn_from_demos=None)
    monkeypatch.setattr(type(registry), "algorithm", lambda self, name: without)
    _dataset(tmp_path, [_ep(5, True)], gym.make("CartPole-v1").observation_space)
    with pytest.raises(ConfigError, match="does not learn from demonstrations"):
        learner_node.LearnerNode(
            _node_config(tmp_path, tmp_path / "ds"), BrokerSettings(url=mosquitto.url), tmp_path / "run"
        )


def _demo_rows_per_update(tmp_path, bonus: float, updates: int = 30) -> tuple[float, object]:
    from mqttrl_plugins.dqn.demo_replay import learn_from_demos

    learner = _learner(buffer_size=64, prioritized=True, initial_priority="max")
    ds = _dataset(tmp_path / f"b{bonus}", [_ep(10, True, start=1000.0)])
    learn_from_demos(learner, ds, DemosConfig(ratio=0.0, priority_bonus=bonus, pretrain_updates=0), True)
    rows = []
    real_mix = DemoReplay.mix

    def spy(self, weights, batch, device):
        weights, batch = real_mix(self, weights, batch, device)
        rows.append(int((batch["obs"][:, 0] >= 1000).sum()))
        assert len(weights) == len(batch["obs"]) and float(max(weights)) <= 1.0 + 1e-9
        return weights, batch

    DemoReplay.mix = spy
    try:
        for seq in range(updates):
            learner.add(_batch(16, seq, float(seq)))
            learner.train_step()
    finally:
        DemoReplay.mix = real_mix
    return float(np.mean(rows)), learner


def test_priority_bonus_draws_demonstrations_by_priority_with_the_bonus(tmp_path):
    """demos.priority_bonus (DQfD's epsilon_d): the demonstration transitions are drawn by priority
    against the replay's (ratio 0 here: none would be drawn at a ratio), every one trained on gets
    (|TD error| + per_eps + bonus) ** per_alpha, and a larger bonus draws more of them."""
    small, _ = _demo_rows_per_update(tmp_path, bonus=0.001)
    large, learner = _demo_rows_per_update(tmp_path, bonus=50.0)
    demos, p = learner.demos, learner.params
    assert demos.by_priority and demos.replay_stats is not None
    floor = (50.0 + p.per_eps) ** p.per_alpha
    assert demos.priorities.min() >= floor  # every demonstration keeps the bonus
    trained = demos._idx
    assert len(trained) > 0
    # the rows trained on last were re-prioritized from their TD error: above the bonus, not the initial value
    initial = (1.0 + p.per_eps + 50.0) ** p.per_alpha
    assert np.all(demos.priorities[trained] >= floor) and np.any(demos.priorities[trained] != initial)
    assert large > small and large >= 4, (small, large)  # the bonus raises the demonstrations' share
    # against the same replay, a larger bonus gives the same transitions a larger share of the mass
    replay_mass = learner.tree.total()
    low = DemoReplay(demos.arrays, ratio=0.0, priority_bonus=0.001, per_alpha=p.per_alpha, per_eps=p.per_eps)
    high = DemoReplay(demos.arrays, ratio=0.0, priority_bonus=50.0, per_alpha=p.per_alpha, per_eps=p.per_eps)
    assert high.share(replay_mass) > 3 * low.share(replay_mass)


def test_priority_bonus_without_prioritized_replay_is_one_line(tmp_path):
    from mqttrl.config import ConfigError
    from mqttrl_plugins.dqn.demo_replay import learn_from_demos

    learner = _learner(prioritized=False)
    with pytest.raises(ConfigError, match="needs prioritized replay"):
        learn_from_demos(learner, _dataset(tmp_path, [_ep(5, True)]), DemosConfig(priority_bonus=1.0), True)
