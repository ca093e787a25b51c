"""Tests of the DQN plugin: n-step math, epsilons, replay, checkpoints, learning."""

from __future__ import annotations

import json

import attrs
import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.dqn_kit import ACT, OBS, as_batch, random_arrays, small_params, through_checkpoint_formats

from mqttrl.config import ConfigError, build
from mqttrl.plugin.algorithm import ActorContext, AsyncLearner, SyncLearner
from mqttrl.wire import Rejected
from mqttrl_plugins.dqn import make_forward
from mqttrl_plugins.dqn.actor import DQNActor, epsilon_ladder
from mqttrl_plugins.dqn.common import DQNParams, sample_spec
from mqttrl_plugins.dqn.learner import DQNLearner, SumTree

torch.set_num_threads(1)


def make_actor(params, obs_space, act_space, ctx: ActorContext) -> DQNActor:
    """An actor over a local numpy forward (as a worker builds it)."""
    return DQNActor(
        params, obs_space, act_space, ctx, forward=make_forward(params, obs_space, act_space, "numpy", ctx.seed)
    )


# ---------------------------------------------------------------- n-step transitions


def play(actor: DQNActor, rewards, end: str):
    """One env: obs_t = [t, 0]; the episode ends at the last step ("terminated" or "truncated")."""
    T = len(rewards)
    for t, r in enumerate(rewards):
        last = t == T - 1
        nxt = np.array([[99.0, 0.0]] if last else [[t + 1.0, 0.0]], np.float32)
        actor.record(
            np.array([[t, 0.0]], np.float32),
            np.array([t % 3]),
            {},
            np.array([r], np.float32),
            nxt,
            np.array([last and end == "terminated"]),
            np.array([last and end == "truncated"]),
        )


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_n_step_returns_and_discounts(end):
    actor = make_actor(small_params(n_step=3, gamma=0.5), OBS, ACT, ActorContext(num_envs=1))
    play(actor, [1.0, 2.0, 3.0, 4.0, 5.0], end)
    out = actor.take()
    assert actor.pending() == 0
    np.testing.assert_array_equal(out["obs"][:, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(out["action"], [0, 1, 2, 0, 1])
    np.testing.assert_allclose(out["reward"], [1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2 + 1.25, 4 + 2.5, 5])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [3, 4, 99, 99, 99])
    if end == "terminated":
        np.testing.assert_allclose(out["discount"], [0.125, 0.125, 0, 0, 0])
    else:  # truncation bootstraps from the final obs with gamma ** (steps summed)
        np.testing.assert_allclose(out["discount"], [0.125, 0.125, 0.125, 0.25, 0.5])
    fields = sample_spec(actor.params, OBS, ACT).fields
    assert set(out) == {k for k, f in fields.items() if not f.optional}  # no takeover: no intervention field
    for name, field in fields.items():
        if name in out:
            assert out[name].dtype == np.dtype(field.dtype) and out[name].flags.c_contiguous


def test_n_step_windows_do_not_cross_episodes_or_envs():
    actor = make_actor(small_params(n_step=3, gamma=0.5), OBS, ACT, ActorContext(num_envs=2))
    f = np.array([False, False])
    obs = np.zeros((2, 2), np.float32)
    # env 0 terminates after 2 steps, env 1 runs on; then env 0 starts a new episode
    actor.record(obs, np.array([0, 0]), {}, np.array([1.0, 10.0]), obs + 1, f, f)
    actor.record(obs + 1, np.array([0, 0]), {}, np.array([2.0, 20.0]), obs + 2, np.array([True, False]), f)
    assert actor.pending() == 2  # env 0's two steps
    actor.record(obs + 5, np.array([0, 0]), {}, np.array([7.0, 30.0]), obs + 6, f, f)
    out = actor.take()
    np.testing.assert_allclose(out["reward"], [1 + 0.5 * 2, 2, 10 + 0.5 * 20 + 0.25 * 30])
    np.testing.assert_allclose(out["discount"], [0, 0, 0.125])
    assert actor.pending() == 0
    # env 0's new episode holds only its own step
    actor.record(obs, np.array([0, 0]), {}, np.array([3.0, 40.0]), obs, np.array([False, True]), f)
    out = actor.take()
    np.testing.assert_allclose(out["reward"], [20 + 0.5 * 30 + 0.25 * 40, 30 + 0.5 * 40, 40])
    np.testing.assert_allclose(out["discount"], [0, 0, 0])


def test_one_step_transition_is_plain_td():
    actor = make_actor(small_params(n_step=1, gamma=0.9), OBS, ACT, ActorContext(num_envs=1))
    play(actor, [1.0, 2.0], "truncated")
    out = actor.take()
    np.testing.assert_allclose(out["reward"], [1, 2])
    np.testing.assert_allclose(out["discount"], [0.9, 0.9])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [1, 99])


# ---------------------------------------------------------------- exploration


def test_epsilon_ladder_values():
    assert epsilon_ladder(0, 1, 0.4, 7) == pytest.approx(0.4)
    assert epsilon_ladder(0, 8, 0.4, 7) == pytest.approx(0.4)
    assert epsilon_ladder(7, 8, 0.4, 7) == pytest.approx(0.4**8)
    assert epsilon_ladder(1, 3, 0.4, 7) == pytest.approx(0.4**4.5)
    # an actor owning envs 2 and 3 of 4
    p = small_params(epsilon_start=1.0, epsilon_decay_steps=100)
    actor = make_actor(p, OBS, ACT, ActorContext(num_envs=2, first_env_index=2, total_envs=4))
    ladder = np.array([0.4 ** (1 + 7 * 2 / 3), 0.4**8])
    np.testing.assert_allclose(actor.epsilons(), [1.0, 1.0])
    actor.env_steps = 50  # halfway through the linear decay
    np.testing.assert_allclose(actor.epsilons(), 0.5 + 0.5 * ladder)
    actor.env_steps = 10_000
    np.testing.assert_allclose(actor.epsilons(), ladder)


def test_epsilon_decay_counts_recorded_env_steps():
    p = small_params(epsilon_start=1.0, epsilon_decay_steps=8, n_step=1)
    actor = make_actor(p, OBS, ACT, ActorContext(num_envs=2, total_envs=2))
    f = np.zeros(2, bool)
    for _ in range(2):
        actor.record(
            np.zeros((2, 2), np.float32), np.zeros(2, int), {}, np.zeros(2), np.zeros((2, 2), np.float32), f, f
        )
    assert actor.env_steps == 4
    np.testing.assert_allclose(actor.epsilons(), [0.7, 0.5 + 0.5 * 0.4**8])


def test_greedy_ignores_epsilon_and_exploration_is_random():
    actor = make_actor(small_params(epsilon_start=1.0, epsilon_decay_steps=10**9), OBS, ACT, ActorContext(num_envs=256))
    obs = np.random.default_rng(0).normal(size=(256, 2)).astype(np.float32)
    best = actor.forward(obs)["q"].argmax(1)
    greedy, _ = actor.act(obs, greedy=True)
    np.testing.assert_array_equal(greedy, best)
    explored, extras = actor.act(obs)
    np.testing.assert_allclose(extras["epsilon"], 1.0)
    assert explored.dtype == np.int64 and set(np.unique(explored)) == {0, 1, 2}
    assert (explored != best).mean() > 0.5  # random actions differ from greedy about 2/3 of the time


def test_unsupported_spaces_are_named():
    with pytest.raises(TypeError, match="Discrete action space.*Box"):
        DQNActor(
            small_params(),
            OBS,
            gym.spaces.Box(-1, 1, (1,)),
            ActorContext(num_envs=1),
            make_forward(small_params(), OBS, ACT, "numpy"),
        )
    with pytest.raises(TypeError, match="Box observation space.*Discrete"):
        DQNLearner(small_params(), gym.spaces.Discrete(4), ACT, "cpu", 0)


def test_params_are_validated():
    with pytest.raises(ConfigError, match="algorithm.gamma"):
        build(DQNParams, {"gamma": 1.5}, "algorithm")
    with pytest.raises(ConfigError, match="hidden"):
        build(DQNParams, {"hidden": [64, 0]}, "algorithm")
    with pytest.raises(ConfigError, match="buffer_size"):
        build(DQNParams, {"buffer_size": 8, "batch_size": 64}, "algorithm")
    p = build(DQNParams, {"hidden": [8], "lr": 1}, "algorithm")
    assert p.hidden == [8] and p.lr == 1.0


# ---------------------------------------------------------------- weights


def test_weights_round_trip_and_atomic_load():
    p = small_params()
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    # the torch forward, so the test can check its network object is swapped only on success
    actor = DQNActor(p, OBS, ACT, ActorContext(num_envs=4, seed=5), forward=make_forward(p, OBS, ACT, "torch"))
    tensors, info = learner.export_weights()
    assert info == {"obs_dim": 2, "n_actions": 3, "hidden": [32, 32], "dueling": p.dueling}
    assert all(v.dtype == np.float32 for v in tensors.values())
    obs = np.random.default_rng(1).normal(size=(4, 2)).astype(np.float32)
    ro = {k: v.copy() for k, v in tensors.items()}
    for v in ro.values():
        v.flags.writeable = False
    actor.load_weights(ro, json.loads(json.dumps(info)))
    with torch.no_grad():
        np.testing.assert_array_equal(actor.forward(obs)["q"], learner.online(torch.from_numpy(obs)).numpy())
    before = actor.forward.net
    bad = dict(tensors)
    bad[sorted(bad)[-1]] = np.zeros((7, 7), np.float32)
    with pytest.raises(ValueError, match="shape"):
        actor.load_weights(bad, info)
    assert actor.forward.net is before
    with pytest.raises(ValueError, match="n_actions"):
        actor.load_weights(tensors, {**info, "n_actions": 5})


# ---------------------------------------------------------------- replay


def test_add_read_only_batch_and_wraparound():
    rng = np.random.default_rng(0)
    learner = DQNLearner(small_params(buffer_size=100), OBS, ACT, "cpu", 0)
    arrays = random_arrays(70, rng)
    batch = as_batch(arrays)
    assert not batch.arrays["obs"].flags.writeable
    assert learner.add(batch) == 70
    replay = learner.replay
    np.testing.assert_array_equal(replay.obs[:70], arrays["obs"])
    np.testing.assert_array_equal(replay.scalars["action"][:70], arrays["action"])
    more = random_arrays(50, rng)
    assert learner.add(as_batch(more)) == 50
    assert (learner.size, replay.pos, learner.samples_added) == (100, 20, 120)
    np.testing.assert_array_equal(replay.scalars["reward"][70:], more["reward"][:30])
    np.testing.assert_array_equal(replay.scalars["reward"][:20], more["reward"][30:])


def test_add_refuses_mismatched_batches_loudly():
    learner = DQNLearner(small_params(), OBS, ACT, "cpu", 0)
    arrays = random_arrays(10, np.random.default_rng(0))
    arrays["action"] = arrays["action"] + 3  # out of the action range
    with pytest.raises(Rejected, match="out_of_range"):
        learner.add(as_batch(arrays))
    arrays = random_arrays(10, np.random.default_rng(0))
    arrays["obs"] = arrays["obs"].astype(np.float64)
    with pytest.raises(Rejected, match="dtype"):
        learner.add(as_batch(arrays))
    assert learner.samples_added == 0 and learner.size == 0


def test_pacing_follows_replay_ratio():
    p = small_params(batch_size=16, replay_ratio=4.0, learning_starts=64, max_update_debt=10)
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    rng = np.random.default_rng(0)
    learner.add(as_batch(random_arrays(48, rng)))
    assert not learner.train_due() and not learner.behind()  # before learning_starts: never behind
    learner.add(as_batch(random_arrays(16, rng)))  # 64 samples * 4 / 16 = 16 updates owed
    assert learner.train_due() and learner.behind()
    n = 0
    while learner.train_due():
        learner.train_step()
        n += 1
    assert n == 16 and learner.updates == 16 and not learner.behind()


def test_lr_anneals_by_env_steps_and_resumes_where_it_was():
    """lr_anneal_env_steps: Adam's lr falls linearly with the transitions taken in, stays at
    lr * lr_final_frac after them, and a learner loaded from a checkpoint steps with the same lr."""
    p = small_params(lr=1e-2, batch_size=16, learning_starts=64, lr_anneal_env_steps=256, lr_final_frac=0.1)
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(6):  # 64 transitions each: 1/4, 1/2, 3/4, all, then past the end
        learner.add(as_batch(random_arrays(64, rng)))
        metrics = learner.train_step()
        seen.append((metrics["lr"], learner.optimizer.param_groups[0]["lr"]))
    want = [1e-2 * (1 - f * 0.9) for f in (0.25, 0.5, 0.75, 1.0, 1.0, 1.0)]
    np.testing.assert_allclose([s[0] for s in seen], want, rtol=1e-12)
    np.testing.assert_allclose([s[1] for s in seen], want, rtol=1e-12)
    half = DQNLearner(p, OBS, ACT, "cpu", 0)
    half.add(as_batch(random_arrays(128, rng)))
    tensors, meta = half.state_dict(include_replay=True)
    again = DQNLearner(p, OBS, ACT, "cpu", 0)
    again.load_state_dict(tensors, meta)
    again.train_step()
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * (1 - 0.5 * 0.9))
    constant = DQNLearner(small_params(lr=1e-2, batch_size=16, learning_starts=64), OBS, ACT, "cpu", 0)
    constant.add(as_batch(random_arrays(640, rng)))
    assert "lr" not in constant.train_step() and constant.optimizer.param_groups[0]["lr"] == 1e-2


def test_a_backlog_owes_at_most_forgive_debt_above_updates():
    """A broker handing over an outage's backlog at once must not pause workers for minutes:
    the debt beyond forgive_debt_above is written off, counted, and survives a checkpoint."""
    p = small_params(batch_size=16, replay_ratio=4.0, learning_starts=64, max_update_debt=10, forgive_debt_above=20)
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    rng = np.random.default_rng(0)
    # the cap is never below what 4 batches of each sender owe (4 x 16) plus the warm-up's debt (64
    # samples before learning starts: 16 updates), so the batches in flight at a pause stay owed
    learner.add(as_batch(random_arrays(64, rng)))  # 16 owed: under the cap of 64 + 16
    assert learner.forgiven == 0
    for _ in range(8):  # the backlog: 8 more batches at once, 16 owed each; beyond 80 forgiven
        learner.add(as_batch(random_arrays(64, rng)))
    assert learner.forgiven == 64 and learner.behind()
    n = 0
    while learner.train_due():
        learner.train_step()
        n += 1
    assert n == 80 and not learner.behind()
    assert learner.train_step()["updates_forgiven"] == 64
    tensors, meta = learner.state_dict(include_replay=False)
    again = DQNLearner(p, OBS, ACT, "cpu", 0)
    again.load_state_dict(tensors, meta)
    assert again.forgiven == 64


def test_sum_tree_sampling_matches_priorities():
    tree = SumTree(5)  # not a power of two: padded leaves stay at 0
    prio = np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    tree.set(np.arange(5), prio)
    tree.set(np.array([1, 1]), np.array([2.0, 2.0]))  # duplicate indices are fine
    assert tree.total() == pytest.approx(prio.sum())
    rng = np.random.default_rng(0)
    idx = tree.find(rng.random(200_000) * tree.total())
    freq = np.bincount(idx, minlength=tree.leaves) / len(idx)
    np.testing.assert_allclose(freq[:5], prio / prio.sum(), atol=0.01)
    assert freq[5:].sum() == 0


def test_prioritized_learner_samples_by_priority_with_is_weights():
    p = small_params(
        prioritized=True, initial_priority="max", per_alpha=1.0, per_beta0=0.5, batch_size=64, buffer_size=64
    )
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    learner.add(as_batch(random_arrays(64, np.random.default_rng(0))))
    prio = np.ones(64)
    prio[:8] = 8.0  # 8 transitions with 8x priority hold 64 of the 120 units of mass
    learner.tree.set(np.arange(64), prio)
    counts = np.zeros(64)
    for _ in range(300):
        idx, w = learner._sample()
        counts += np.bincount(idx, minlength=64)
        np.testing.assert_allclose(w, (prio[idx] / 1.0) ** -0.5)
    assert counts[:8].sum() / counts.sum() == pytest.approx(64 / 120, abs=0.01)


@pytest.mark.parametrize("double", [True, False])
def test_bootstrap_target_double_and_plain(double):
    """Every sample shares (reward, discount, next_obs), so the batch target is one number."""
    learner = DQNLearner(small_params(double=double), OBS, ACT, "cpu", 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a target net that disagrees with the online net
        for t in learner.target.parameters():
            t.add_(torch.randn(t.shape, generator=g))
        cands = torch.from_numpy(np.random.default_rng(2).normal(size=(256, 2)).astype(np.float32))
        qo, qt = learner.online(cands), learner.target(cands)
        k = int(torch.nonzero(qo.argmax(1) != qt.argmax(1))[0, 0])  # online and target pick different actions
    s_next, qo, qt = cands[k].numpy(), qo[k].numpy(), qt[k].numpy()
    arrays = random_arrays(64, np.random.default_rng(3))
    arrays.update(
        reward=np.full(64, 0.5, np.float32), discount=np.full(64, 0.9, np.float32), next_obs=np.tile(s_next, (64, 1))
    )
    learner.add(as_batch(arrays))
    double_target = 0.5 + 0.9 * qt[qo.argmax()]
    plain_target = 0.5 + 0.9 * qt.max()
    assert abs(double_target - plain_target) > 1e-3
    got = learner.train_step()["target_mean"]
    assert got == pytest.approx(double_target if double else plain_target, rel=1e-5, abs=1e-5)


# ---------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("prioritized", [False, True])
def test_state_dict_round_trip_continues_identically(prioritized):
    p = small_params(prioritized=prioritized, initial_priority="max", tau=0.5, target_update_every=3)
    rng = np.random.default_rng(0)
    a = DQNLearner(p, OBS, ACT, "cpu", 0)
    for _ in range(4):
        a.add(as_batch(random_arrays(40, rng)))
    for _ in range(7):
        a.train_step()
    tensors, meta = through_checkpoint_formats(*a.state_dict(include_replay=True))
    assert any(k.startswith("optim.state.") and k.endswith(".exp_avg") for k in tensors)

    b = DQNLearner(p, OBS, ACT, "cpu", 123)  # other seed: everything must come from the checkpoint
    b.load_state_dict(tensors, meta)
    assert (b.updates, b.samples_added, b.size, b.replay.pos) == (a.updates, a.samples_added, a.size, a.replay.pos)
    obs = torch.from_numpy(rng.normal(size=(16, 2)).astype(np.float32))
    with torch.no_grad():
        np.testing.assert_array_equal(a.online(obs).numpy(), b.online(obs).numpy())
        np.testing.assert_array_equal(a.target(obs).numpy(), b.target(obs).numpy())
    for _ in range(5):  # crosses a target update
        ma, mb = a.train_step(), b.train_step()
        assert ma == mb
    more = random_arrays(40, rng)  # new samples enter with the restored max priority, at the restored position
    a.add(as_batch(more))
    b.add(as_batch(more))
    for _ in range(5):
        assert a.train_step() == b.train_step()
    with torch.no_grad():
        np.testing.assert_array_equal(a.online(obs).numpy(), b.online(obs).numpy())


def test_state_dict_without_replay_keeps_nets_and_optimizer():
    p = small_params()
    a = DQNLearner(p, OBS, ACT, "cpu", 0)
    a.add(as_batch(random_arrays(64, np.random.default_rng(0))))
    a.train_step()
    tensors, meta = through_checkpoint_formats(*a.state_dict(include_replay=False))
    assert not any(k.startswith("replay.") for k in tensors)
    b = DQNLearner(p, OBS, ACT, "cpu", 1)
    b.load_state_dict(tensors, meta)
    assert b.size == 0 and b.updates == 1
    assert b.optimizer.state_dict()["param_groups"] == a.optimizer.state_dict()["param_groups"]
    with pytest.raises(ValueError, match="network"):
        DQNLearner(attrs.evolve(p, hidden=[16]), OBS, ACT, "cpu", 0).load_state_dict(tensors, meta)


# ---------------------------------------------------------------- learning


class OneStep(gym.Env):
    """A one-step bandit (``end="terminated"``): action 0 pays 1, the others 0.

    With ``end="truncated"`` every action pays 1 and the episode is cut after
    one step, so Q must bootstrap to 1 / (1 - gamma).
    """

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, end: str):
        self.end = end

    def reset(self, *, seed=None, options=None):
        return np.array([0.5, -0.5], np.float32), {}

    def step(self, action):
        obs = np.array([0.5, -0.5], np.float32)
        if self.end == "terminated":
            return obs, float(action == 0), True, False, {}
        return obs, 1.0, False, True, {}


@pytest.mark.parametrize("end,expected", [("terminated", [1.0, 0.0]), ("truncated", [2.0, 2.0])])
@pytest.mark.slow
def test_learns_one_step_values(end, expected):
    env = OneStep(end)
    p = small_params(
        gamma=0.5,
        n_step=2,
        lr=3e-3,
        batch_size=32,
        learning_starts=64,
        replay_ratio=16.0,
        target_update_every=20,
        epsilon_decay_steps=0,
        epsilon_base=1.0,
    )
    actor = make_actor(p, env.observation_space, env.action_space, ActorContext(num_envs=4, total_envs=4))
    learner = DQNLearner(p, env.observation_space, env.action_space, "cpu", 0)
    obs = np.stack([env.reset()[0]] * 4)
    losses = []
    while learner.updates < 600:
        actions, extras = actor.act(obs)
        steps = [env.step(int(a)) for a in actions]
        rewards = np.array([s[1] for s in steps], np.float32)
        actor.record(
            obs,
            actions,
            extras,
            rewards,
            np.stack([s[0] for s in steps]),
            np.array([s[2] for s in steps]),
            np.array([s[3] for s in steps]),
        )
        if actor.pending() >= 32:
            learner.add(as_batch(actor.take()))
        while learner.train_due():
            losses.append(learner.train_step()["loss"])
    with torch.no_grad():
        q = learner.online(torch.from_numpy(obs[:1])).numpy()[0]
    np.testing.assert_allclose(q, expected, atol=0.1)
    assert np.mean(losses[-50:]) < 0.1 * np.mean(losses[:50])
    actor.load_weights(*learner.export_weights())
    greedy, _ = actor.act(obs, greedy=True)
    if end == "terminated":
        np.testing.assert_array_equal(greedy, 0)


# ---------------------------------------------------------------- forwards (torch-free workers, inference servers)


@pytest.mark.parametrize("dueling", [True, False])
def test_numpy_forward_matches_torch(dueling):
    from mqttrl_plugins.dqn.numpy_net import NumpyQForward

    p = small_params(dueling=dueling)
    learner = DQNLearner(p, OBS, ACT, "cpu", 3)
    tensors, info = learner.export_weights()
    fwd_np, fwd_t = make_forward(p, OBS, ACT, "numpy"), make_forward(p, OBS, ACT, "torch")
    assert isinstance(fwd_np, NumpyQForward)
    fwd_np.load_weights(tensors, info)
    fwd_t.load_weights(tensors, info)
    obs = np.random.default_rng(2).normal(size=(64, 2)).astype(np.float32)
    q_np, q_t = fwd_np(obs)["q"], fwd_t(obs)["q"]
    assert q_np.dtype == np.float32 and q_np.shape == (64, 3)
    np.testing.assert_allclose(q_np, q_t, rtol=1e-5, atol=1e-5)
    # an actor on the numpy forward picks the same greedy actions as one on torch
    a_np = DQNActor(p, OBS, ACT, ActorContext(num_envs=64), forward=fwd_np).act(obs, greedy=True)[0]
    a_t = DQNActor(p, OBS, ACT, ActorContext(num_envs=64), forward=fwd_t).act(obs, greedy=True)[0]
    assert (a_np == a_t).mean() > 0.98  # ties at float32 precision aside


def test_numpy_forward_refuses_weights_of_another_network():
    p = small_params()
    tensors, info = DQNLearner(p, OBS, ACT, "cpu", 0).export_weights()
    fwd = make_forward(p, OBS, ACT, "numpy")
    with pytest.raises(ValueError, match="missing"):
        fwd.load_weights({k: v for k, v in tensors.items() if "trunk.0" not in k}, info)
    before = fwd.layers
    with pytest.raises(ValueError, match="missing"):
        fwd.load_weights({}, info)
    assert fwd.layers is before  # a refused load leaves the old weights in place


# ---------------------------------------------------------------- the algorithm seam


def test_registered_parts_satisfy_the_async_protocols():
    from mqttrl.plugin.algorithm import Actor, Forward, SyncActor
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithm("dqn")
    assert info.mode == "async" and info.params is DQNParams and info.backends[0] == "numpy"
    p = small_params()
    learner = info.make_learner(p, OBS, ACT, "cpu", 0)
    assert isinstance(learner, DQNLearner)
    assert isinstance(learner, AsyncLearner) and not isinstance(learner, SyncLearner)
    for backend in info.backends:
        fwd = info.make_forward(p, OBS, ACT, backend, seed=1)
        assert isinstance(fwd, Forward)
        actor = info.make_actor(p, OBS, ACT, ActorContext(num_envs=2), fwd)
        assert isinstance(actor, Actor) and not isinstance(actor, SyncActor)
        assert actor.forward is fwd  # the actor acts over the forward it is given, never its own
        fwd.close()
    with pytest.raises(ValueError, match="backend"):
        info.make_forward(p, OBS, ACT, "jax")
    with pytest.raises(TypeError, match="forward"):
        info.make_actor(p, OBS, ACT, ActorContext(num_envs=2))  # a forward is required


def test_forward_seed_picks_the_initial_weights():
    p = small_params()
    obs = np.random.default_rng(0).normal(size=(8, 2)).astype(np.float32)
    for backend in ("numpy", "torch"):
        a, b, c = (make_forward(p, OBS, ACT, backend, seed=s)(obs)["q"] for s in (1, 1, 2))
        np.testing.assert_array_equal(a, b)
        assert not np.allclose(a, c)


# ---------------------------------------------------------------- Ape-X priorities computed by the actors


class _LinearQ:
    """A known Q-function: Q(s, a) = s . W[:, a], so priorities can be computed by hand."""

    def __init__(self, w: np.ndarray):
        self.w = w

    def load_weights(self, tensors, info):
        pass

    def __call__(self, obs):
        return {"q": np.asarray(obs, np.float64).reshape(len(obs), -1) @ self.w}

    def close(self):
        pass


def test_actor_sends_its_n_step_td_errors_as_priorities():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(2, 3))
    p = small_params(prioritized=True, n_step=2, gamma=0.9)
    actor = DQNActor(p, OBS, ACT, ActorContext(num_envs=2, seed=0), _LinearQ(w))
    obs = rng.normal(size=(2, 2)).astype(np.float32)
    steps = []
    for t in range(6):
        actions, extras = actor.act(obs)
        next_obs = rng.normal(size=(2, 2)).astype(np.float32)
        rewards = rng.normal(size=2)
        term = np.array([t == 3, False])
        trunc = np.array([False, t == 5])
        actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
        steps.append((obs.copy(), actions.copy(), rewards, next_obs.copy()))
        obs = next_obs
    batch = actor.take()
    assert "priority" in batch and batch["priority"].dtype == np.float32
    q = lambda s: np.asarray(s, np.float64) @ w  # noqa: E731
    # every transition: |reward + discount * max_a Q(next_obs) - Q(obs, action)|, by hand
    q_taken = np.array([q(o)[a] for o, a in zip(batch["obs"], batch["action"])])
    target = batch["reward"].astype(np.float64) + batch["discount"] * np.array([q(o).max() for o in batch["next_obs"]])
    np.testing.assert_allclose(batch["priority"], np.abs(target - q_taken), rtol=1e-4, atol=1e-5)
    assert (batch["discount"] == 0).any() and (batch["discount"] > 0).any()  # both kinds were checked


def test_learner_inserts_the_actors_priorities_not_the_running_max():
    p = small_params(prioritized=True, per_alpha=0.5, buffer_size=64)
    learner = DQNLearner(p, OBS, ACT, "cpu", 0)
    arrays = random_arrays(10, np.random.default_rng(0))
    sent = np.linspace(0.0, 9.0, 10).astype(np.float32)
    learner.add(as_batch({**arrays, "priority": sent}))
    np.testing.assert_allclose(learner.tree.get(np.arange(10)), (sent + p.per_eps) ** 0.5)
    with pytest.raises(Rejected, match="priority"):
        learner.add(as_batch(arrays))  # this run's batches must carry them
    with pytest.raises(Rejected):
        learner.add(as_batch({**arrays, "priority": -sent - 1}))  # negative: refused


# ---------------------------------------------------------------- fleet defaults: exploration without --index


def test_workers_without_an_index_explore_differently_by_name():
    import zlib

    from mqttrl_plugins.dqn.actor import ladder_of

    phases = [zlib.crc32(name.encode()) / 2**32 for name in ("pc-1", "pc-2", "gamebox")]
    ladders = [ladder_of(ActorContext(num_envs=4, ladder_phase=ph), 0.4, 7.0) for ph in phases]
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert not np.allclose(ladders[a], ladders[b])
    for lad in ladders:  # each worker's envs span the whole ladder: from base down to base ** (1 + alpha)
        assert np.all(lad <= 0.4 + 1e-12) and np.all(lad >= 0.4**8 - 1e-12)
        assert lad.max() / lad.min() > 10
    # with an index, the classic ladder over all envs of the run
    indexed = ladder_of(ActorContext(num_envs=2, first_env_index=2, total_envs=4), 0.4, 7.0)
    np.testing.assert_allclose(indexed, [epsilon_ladder(i, 4, 0.4, 7.0) for i in (2, 3)])
