"""Shrink-and-perturb resets (``reset_every``), C51's edge-atom mass in the learner's metrics and
the warning when it stays high, and the target period in env steps."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mqttrl.wire import decode_batch, encode_batch  # noqa: E402
from mqttrl_plugins.dqn.common import DQNParams, net_info  # noqa: E402
from mqttrl_plugins.dqn.learner import DQNLearner, _net_from_info  # noqa: E402
from mqttrl_plugins.dqn.resets import shrink_and_perturb  # noqa: E402
from mqttrl_plugins.dqn.support_watch import SupportWatch  # noqa: E402

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def _params(**kw) -> DQNParams:
    base = dict(hidden=[16, 16], batch_size=16, buffer_size=500, learning_starts=16, replay_ratio=4.0)
    return DQNParams(**{**base, **kw})


def _batch(n: int, rng, reward_scale: float = 1.0):
    arrays = {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n).astype(np.int64),
        "reward": (reward_scale * rng.normal(size=n)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "discount": rng.choice(np.array([0.0, 0.97], np.float32), n),
    }
    return decode_batch(encode_batch("r", "w", 0, 0, arrays))


def test_shrink_and_perturb_mixes_each_parameter_with_a_fresh_init():
    p = _params()
    info = net_info(4, 2, p)
    net, fresh = _net_from_info(info), _net_from_info(info)
    before = copy.deepcopy(net)
    changed = shrink_and_perturb(net, fresh, 0.5, 0.0, {"value", "advantage"})
    assert changed == len(list(net.parameters()))
    for (name, got), old, new in zip(net.named_parameters(), before.parameters(), fresh.parameters()):
        alpha = 0.0 if name.split(".")[0] in ("value", "advantage") else 0.5
        torch.testing.assert_close(got, alpha * old + (1 - alpha) * new)
    assert shrink_and_perturb(net, fresh, 1.0, 1.0, set()) == 0  # alpha 1: nothing changes


def _fresh(learner, seed: int, updates: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1_000_003 + updates)
        return _net_from_info(net_info(4, 2, learner.params))


def test_the_learner_resets_every_n_updates_from_a_seeded_fresh_net():
    rng = np.random.default_rng(0)
    learner = DQNLearner(_params(reset_every=3, reset_alpha=0.8, reset_head_alpha=0.0), OBS, ACT, "cpu", 5)
    learner.add(_batch(64, rng))
    for _ in range(2):
        learner.train_step()
    assert learner.optimizer.state  # Adam has its moments
    before, fresh = copy.deepcopy(learner.online), _fresh(learner, 5, 2)
    learner._reset_networks()
    for (name, got), old, new in zip(learner.online.named_parameters(), before.parameters(), fresh.parameters()):
        alpha = 0.0 if name.split(".")[0] in ("value", "advantage") else 0.8
        torch.testing.assert_close(got, alpha * old + (1 - alpha) * new)
    assert not learner.optimizer.state  # the moments start afresh
    learner.train_step()  # update 3: a reset after its step (the head is the fresh net's again)
    assert not learner.optimizer.state
    for (name, got), new in zip(learner.online.named_parameters(), _fresh(learner, 5, 3).parameters()):
        if name.split(".")[0] in ("value", "advantage"):
            torch.testing.assert_close(got, new)
    plain = DQNLearner(_params(), OBS, ACT, "cpu", 5)  # no resets: the moments stay
    plain.add(_batch(64, rng))
    for _ in range(3):
        plain.train_step()
    assert plain.optimizer.state


def test_c51_reports_the_share_of_target_mass_on_the_edge_atoms():
    rng = np.random.default_rng(1)
    narrow = DQNLearner(_params(distributional="c51", n_atoms=11, v_min=-0.01, v_max=0.01), OBS, ACT, "cpu", 0)
    wide = DQNLearner(_params(distributional="c51", n_atoms=11, v_min=-100.0, v_max=100.0), OBS, ACT, "cpu", 0)
    for learner in (narrow, wide):
        learner.add(_batch(64, rng, reward_scale=5.0))
    got_narrow = [narrow.train_step()["target_edge_mass"] for _ in range(2)][-1]
    got_wide = [wide.train_step()["target_edge_mass"] for _ in range(2)][-1]
    assert got_narrow > 0.9 and got_wide < 0.1
    plain = DQNLearner(_params(), OBS, ACT, "cpu", 0)
    plain.add(_batch(64, rng))
    assert "target_edge_mass" not in plain.train_step()


def test_a_c51_learner_warns_once_when_its_support_is_outgrown(caplog):
    """A support far narrower than the returns: one warning naming the support and the fix, after
    the watch's window; a wide support (its untrained head's 11 atoms put 18 % on the edges): none."""
    rng = np.random.default_rng(2)
    narrow = DQNLearner(_params(distributional="c51", n_atoms=11, v_min=-0.01, v_max=0.01), OBS, ACT, "cpu", 0)
    wide = DQNLearner(_params(distributional="c51", n_atoms=11, v_min=-100.0, v_max=100.0), OBS, ACT, "cpu", 0)
    for learner in (narrow, wide):
        learner._support_watch.window = 20
        learner.add(_batch(64, rng, reward_scale=5.0))
    with caplog.at_level("WARNING", logger="mqttrl.dqn"):
        for _ in range(19):
            narrow.train_step()
        assert not caplog.records  # not before the window is full
        for _ in range(30):
            narrow.train_step()
            wide.train_step()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "[-0.01, 0.01] is too narrow" in lines[0] and "v_min / v_max" in lines[0]


def test_the_support_watch_warns_again_only_after_the_edge_mass_came_down(caplog):
    watch = SupportWatch(-10.0, 10.0, 51, window=10)
    assert watch.threshold == pytest.approx(4 / 51)
    with caplog.at_level("WARNING", logger="mqttrl.dqn"):
        warned = [watch.observe(0.2) for _ in range(30)]
        assert warned.count(True) == 1 and warned.index(True) == 9  # the 10th update fills the window
        assert not watch.observe(None)  # an update with no figure (a GPU's first) changes nothing
        warned = [watch.observe(0.05) for _ in range(30)]  # below the threshold, above half of it
        assert not any(warned) and watch.warned
        warned = [watch.observe(0.0) for _ in range(30)] + [watch.observe(0.2) for _ in range(30)]
        assert warned.count(True) == 1
    assert len(caplog.records) == 2 and "[-10, 10]" in caplog.records[0].getMessage()


def test_target_period_in_env_steps_is_converted_at_the_replay_ratio():
    assert DQNParams(target_update_env_steps=1000, replay_ratio=8.0, batch_size=64).target_update_every == 125
    assert DQNParams(target_update_env_steps=300, replay_ratio=16.0, batch_size=128).target_update_every == 38
    assert DQNParams(target_update_env_steps=1, replay_ratio=1.0, batch_size=128).target_update_every == 1
    assert DQNParams(target_update_every=77).target_update_every == 77  # 0: the updates setting stands
