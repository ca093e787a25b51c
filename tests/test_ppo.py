"""Tests of the PPO plugin: GAE and truncation bootstrapping, rollouts, the clipped
objective, obs normalisation, continuous actions, checkpoints, learning, and the
split into a torch-free half (numpy forward, numpy sampling) and a torch half."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from mqttrl.config import ConfigError, build
from mqttrl.envs.rollout import EnvSet
from mqttrl.plugin.algorithm import Actor, ActorContext, AsyncLearner, Forward, SyncActor, SyncLearner
from mqttrl.wire import SampleBatch, decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.ppo import make_forward
from mqttrl_plugins.ppo.actor import PPOActor
from mqttrl_plugins.ppo.common import PPOParams, compute_gae, normalize_obs, sample_spec
from mqttrl_plugins.ppo.learner import PPOLearner, TorchForward
from mqttrl_plugins.ppo.numpy_net import NumpyForward

torch.set_num_threads(1)

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(2)
BOX_ACT = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 0.5], np.float32), dtype=np.float32)
BACKENDS = ["numpy", "torch"]


def make_actor(params, obs_space, act_space, ctx: ActorContext, backend: str) -> PPOActor:
    """An actor whose forward is local numpy or local torch (as a worker builds it)."""
    forward = make_forward(params, obs_space, act_space, backend, seed=ctx.seed)
    assert isinstance(forward, NumpyForward if backend == "numpy" else TorchForward)
    return PPOActor(params, obs_space, act_space, ctx, forward=forward)


def as_batch(arrays: dict, worker: str = "w", version: int = 0) -> SampleBatch:
    """Through the wire, as the learner receives it: read-only views into one payload."""
    return decode_batch(encode_batch("r", worker, 0, version, arrays))


def through_wire(learner: PPOLearner):
    msg = decode_weights(encode_weights(1, "ppo", "r", *learner.export_weights()))
    return msg.tensors, msg.info


def collect(actor: PPOActor, envs: EnvSet) -> dict:
    while not actor.pending():
        actions, extras = actor.act(envs.obs)
        obs, rewards, next_obs, term, trunc, _ = envs.step(actions)
        actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
    return actor.take()


# ---------------------------------------------------------------- GAE and truncation


def test_compute_gae_matches_the_definition():
    rng = np.random.default_rng(0)
    T, E, gamma, lam = 7, 3, 0.9, 0.7
    rewards, values = rng.normal(size=(T, E)), rng.normal(size=(T, E))
    ended = rng.random((T, E)) < 0.3
    last_value = rng.normal(size=E)
    adv, ret = compute_gae(rewards, values, ended.astype(float), last_value, gamma, lam)
    for e in range(E):
        for t in range(T):
            # A_t = sum_k (gamma lam)^k delta_{t+k}, up to the end of the episode or the rollout
            total, k = 0.0, 0
            while True:
                s = t + k
                nxt = 0.0 if ended[s, e] else (last_value[e] if s == T - 1 else values[s + 1, e])
                total += (gamma * lam) ** k * (rewards[s, e] + gamma * nxt - values[s, e])
                if ended[s, e] or s == T - 1:
                    break
                k += 1
            assert adv[t, e] == pytest.approx(total, abs=1e-12)
    np.testing.assert_allclose(ret, adv + values)


def value_is_first_coordinate(actor: PPOActor, learner: PPOLearner) -> None:
    """Critic V(obs) = relu(obs[0]) exactly (hidden=[1], relu)."""
    tensors, info = learner.export_weights()
    tensors = {k: np.zeros_like(v) for k, v in tensors.items()}
    tensors["critic.0.weight"][0, 0] = 1.0
    tensors["critic.2.weight"][0, 0] = 1.0
    actor.load_weights(tensors, info)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollout_advantages_with_termination_and_truncation_bootstrap(backend):
    gamma, lam = 0.9, 0.8
    params = PPOParams(rollout_steps=6, gamma=gamma, gae_lambda=lam, hidden=[1], activation="relu")
    actor = make_actor(params, OBS, ACT, ActorContext(num_envs=1), backend)
    value_is_first_coordinate(actor, PPOLearner(params, OBS, ACT))
    # obs[0] is the value of each state. Step 1 terminates, step 3 is truncated with final obs of
    # value 7 (the env then resets to obs 30); after step 5 the next obs has value 9.
    obs0 = [1.0, 2.0, 10.0, 3.0, 30.0, 4.0]
    nxt0 = [2.0, 5.0, 3.0, 7.0, 4.0, 9.0]
    term = [False, True, False, False, False, False]
    trunc = [False, False, False, True, False, False]
    rewards = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    for t in range(6):
        assert actor.pending() == 0
        o = np.array([[obs0[t], 0.0]], np.float32)
        actions, extras = actor.act(o)
        assert extras["value"][0] == pytest.approx(obs0[t])
        actor.record(
            o,
            actions,
            extras,
            np.array([rewards[t]], np.float32),
            np.array([[nxt0[t], 0.0]], np.float32),
            np.array([term[t]]),
            np.array([trunc[t]]),
        )
    assert actor.pending() == 6
    out = actor.take()
    assert actor.pending() == 0

    # directly: the truncated step's reward gets gamma * V(final obs) = gamma * 7
    r = np.array(rewards, np.float64)
    r[3] += gamma * 7.0
    v = np.array(obs0)
    delta = np.array(
        [
            r[0] + gamma * v[1] - v[0],
            r[1] - v[1],  # terminated: no bootstrap
            r[2] + gamma * v[3] - v[2],
            r[3] - v[3],  # truncated: bootstrap is in the reward
            r[4] + gamma * v[5] - v[4],
            r[5] + gamma * 9.0 - v[5],  # end of rollout: bootstrap from V(next obs) = 9
        ]
    )
    gl = gamma * lam
    adv = np.array(
        [
            delta[0] + gl * delta[1],
            delta[1],
            delta[2] + gl * delta[3],
            delta[3],
            delta[4] + gl * delta[5],
            delta[5],
        ]
    )
    np.testing.assert_allclose(out["advantage"], adv, rtol=1e-6)
    np.testing.assert_allclose(out["ret"], adv + v, rtol=1e-6)
    np.testing.assert_allclose(out["value"], v)
    np.testing.assert_array_equal(out["obs"][:, 0], obs0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminated_and_truncated_together_does_not_bootstrap(backend):
    params = PPOParams(rollout_steps=1, gamma=0.5, gae_lambda=1.0, hidden=[1], activation="relu")
    actor = make_actor(params, OBS, ACT, ActorContext(num_envs=1), backend)
    value_is_first_coordinate(actor, PPOLearner(params, OBS, ACT))
    o = np.array([[3.0, 0.0]], np.float32)
    actions, extras = actor.act(o)
    actor.record(
        o,
        actions,
        extras,
        np.array([1.0], np.float32),
        np.array([[100.0, 0.0]], np.float32),
        np.array([True]),
        np.array([True]),
    )
    assert actor.take()["advantage"][0] == pytest.approx(1.0 - 3.0)


# ---------------------------------------------------------------- rollouts and the spec


@pytest.mark.parametrize("backend", BACKENDS)
def test_pending_stays_zero_until_the_share_is_collected_and_take_matches_the_spec(backend):
    params = PPOParams(rollout_steps=5, hidden=[16])
    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    envs = EnvSet(make, 3, seed=0)
    space_o, space_a = envs.envs[0].observation_space, envs.envs[0].action_space
    actor = make_actor(params, space_o, space_a, ActorContext(num_envs=3), backend)
    actor.load_weights(*PPOLearner(params, space_o, space_a).export_weights())
    for step in range(5):
        assert actor.pending() == 0
        actions, extras = actor.act(envs.obs)
        assert actions.dtype == np.int64 and set(extras) == {"logprob", "value"}
        obs, rewards, next_obs, term, trunc, _ = envs.step(actions)
        actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
    assert actor.pending() == 15
    out = actor.take()
    spec = sample_spec(params, space_o, space_a)
    spec.validate(out, 15)
    for name, field in spec.fields.items():
        assert out[name].dtype == np.dtype(field.dtype) and out[name].flags.c_contiguous
    assert actor.pending() == 0 and actor.take() == {}
    # wire round trip, then the spec again (as the learner node checks it)
    b = as_batch(out)
    spec.validate(b.arrays, b.count)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_act_takes_any_batch_and_record_needs_sampling_extras(backend):
    params = PPOParams(rollout_steps=2, hidden=[8])
    actor = make_actor(params, OBS, ACT, ActorContext(num_envs=2), backend)
    actions, extras = actor.act(np.zeros((5, 2), np.float32), greedy=True)
    assert actions.shape == (5,) and extras == {}
    with pytest.raises(ValueError, match="one per env"):
        actor.act(np.zeros((5, 2), np.float32))
    with pytest.raises(ValueError, match="extras"):
        actor.record(
            np.zeros((2, 2)),
            np.zeros(2, np.int64),
            {},
            np.zeros(2),
            np.zeros((2, 2)),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_version_mid_rollout_drops_the_partial_rollout(backend):
    params = PPOParams(rollout_steps=3, hidden=[8])
    learner = PPOLearner(params, OBS, ACT)
    actor = make_actor(params, OBS, ACT, ActorContext(num_envs=1), backend)
    actor.load_weights(*through_wire(learner))
    o = np.zeros((1, 2), np.float32)
    f = np.zeros(1, bool)

    def step():
        a, ex = actor.act(o)
        actor.record(o, a, ex, np.ones(1, np.float32), o, f, f)

    step()
    step()
    actor.load_weights(*through_wire(learner))  # the same version again: the rollout goes on
    step()
    assert actor.pending() == 3
    actor.take()
    step()
    learner.rounds += 1  # a round went on without this worker
    actor.load_weights(*through_wire(learner))
    step()
    step()
    assert actor.pending() == 0
    step()
    assert actor.pending() == 3
    step()
    actor.discard()  # what the sync worker calls when a round went on without it
    assert actor.pending() == 0 and actor.take() == {}
    step()
    step()
    assert actor.pending() == 0
    step()
    assert actor.pending() == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_weights_rejects_other_spaces_and_bad_tensors_without_replacing_anything(backend):
    actor = make_actor(PPOParams(hidden=[8]), OBS, ACT, ActorContext(num_envs=1), backend)
    x = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    initial = actor.forward(x)["value"].copy()
    other = PPOLearner(PPOParams(hidden=[8]), gym.spaces.Box(-1, 1, (3,), np.float32), ACT)
    with pytest.raises(ValueError, match="obs_dim"):
        actor.load_weights(*other.export_weights())
    with pytest.raises(ValueError, match="obs_dim"):  # the forward checks too (an inference server has no actor)
        actor.forward.load_weights(*other.export_weights())
    good, info = PPOLearner(PPOParams(hidden=[8]), OBS, ACT).export_weights()
    tensors = dict(good)
    del tensors["critic.0.bias"]
    with pytest.raises(ValueError, match="missing"):
        actor.load_weights(tensors, info)
    with pytest.raises(ValueError, match="shape"):
        actor.load_weights({**good, "critic.0.bias": np.zeros(9, np.float32)}, info)
    np.testing.assert_array_equal(actor.forward(x)["value"], initial)  # the failed loads replaced nothing
    assert actor.round == -1
    actor.load_weights(good, info)
    assert not np.allclose(actor.forward(x)["value"], initial)
    with pytest.raises(ValueError, match="obs_norm.mean"):  # obs_norm on, statistics missing
        make_forward(PPOParams(hidden=[8], obs_norm=True), OBS, ACT, backend).load_weights(
            good, {**info, "obs_norm": True}
        )


# ---------------------------------------------------------------- the clipped objective


def random_rollout(params, learner, n_envs=4, seed=0, act_space=ACT, obs_shift=0.0, backend="numpy"):
    """A batch made by an actor holding the learner's current weights, on random obs."""
    actor = make_actor(params, OBS, act_space, ActorContext(num_envs=n_envs, seed=seed), backend)
    actor.load_weights(*through_wire(learner))
    rng = np.random.default_rng(seed)
    f = np.zeros(n_envs, bool)
    while not actor.pending():
        o = (rng.normal(size=(n_envs, 2)) * 3 + obs_shift).astype(np.float32)
        a, ex = actor.act(o)
        actor.record(o, a, ex, rng.normal(size=n_envs).astype(np.float32), o + 1, rng.random(n_envs) < 0.1, f)
    return actor.take()


@pytest.mark.parametrize("backend", BACKENDS)
def test_identical_policies_give_ratio_one_and_no_clipping(backend):
    params = PPOParams(rollout_steps=16, hidden=[16], epochs=1, minibatch_size=64)
    learner = PPOLearner(params, OBS, ACT, seed=1)
    m = learner.train_round([as_batch(random_rollout(params, learner, backend=backend))])
    assert m["updates"] == 1 and m["transitions"] == 64
    assert abs(m["approx_kl"]) < 1e-6
    assert m["clipfrac"] == 0.0
    assert abs(m["policy_loss"]) < 1e-5  # ratio 1 and normalised advantages: -mean(adv) = 0


def test_clipped_ratio_gives_the_policy_no_gradient():
    # (no advantage normalisation: it would make some advantages negative, and for those the
    # unclipped term is the pessimistic one, so they rightly keep their gradient)
    params = PPOParams(
        rollout_steps=16, hidden=[16], epochs=1, minibatch_size=64, clip_coef=0.2, anneal_clip=False, norm_adv=False
    )
    learner = PPOLearner(params, OBS, ACT, seed=2)
    arrays = random_rollout(params, learner)
    arrays["logprob"] = arrays["logprob"] - 1.0  # ratio e > 1.2 everywhere
    arrays["advantage"] = np.abs(arrays["advantage"]) + 1.0  # positive: the clipped branch is the min
    actor_before = {k: v.clone() for k, v in learner.agent.actor.state_dict().items()}
    critic_before = {k: v.clone() for k, v in learner.agent.critic.state_dict().items()}
    m = learner.train_round([as_batch(arrays)])
    assert m["clipfrac"] == 1.0
    for k, v in learner.agent.actor.state_dict().items():
        assert torch.equal(v, actor_before[k]), k
    assert any(not torch.equal(v, critic_before[k]) for k, v in learner.agent.critic.state_dict().items())


def test_minibatches_epochs_and_schedules():
    params = PPOParams(rollout_steps=16, hidden=[16], epochs=3, minibatch_size=32, lr=1e-3, anneal_env_steps=256)
    learner = PPOLearner(params, OBS, ACT)
    b = [as_batch(random_rollout(params, learner, seed=s), worker=f"w{s}") for s in range(2)]  # 2 x 64
    m = learner.train_round(b)
    assert m["updates"] == 3 * 4 and learner.updates == 12 and learner.rounds == 1 and learner.samples_added == 128
    assert m["lr"] == pytest.approx(1e-3) and m["clip_coef"] == pytest.approx(0.2)
    m = learner.train_round(b)
    assert m["lr"] == pytest.approx(0.5e-3) and m["clip_coef"] == pytest.approx(0.1)
    learner.train_round(b)
    learner.train_round(b)
    assert learner.current_lr() == 0.0
    assert learner.train_round([])["transitions"] == 0 and learner.rounds == 4


def test_learner_is_exactly_a_sync_learner():
    learner = PPOLearner(PPOParams(hidden=[8]), OBS, ACT)
    assert isinstance(learner, SyncLearner) and not isinstance(learner, AsyncLearner)
    for name in ("add", "train_due", "behind", "train_step"):  # no stubs of the async protocol
        assert not hasattr(learner, name), name


# ---------------------------------------------------------------- observation normalisation


@pytest.mark.parametrize("backend", BACKENDS)
def test_obs_norm_stats_travel_with_the_weights_and_are_updated_after_training(backend):
    params = PPOParams(rollout_steps=32, hidden=[16], epochs=1, minibatch_size=128, obs_norm=True)
    learner = PPOLearner(params, OBS, ACT, seed=3)
    batch1 = random_rollout(params, learner, seed=1, obs_shift=50.0, backend=backend)
    learner.train_round([as_batch(batch1)])
    # folded in after training: the statistics now describe round 1's raw observations
    np.testing.assert_allclose(learner.obs_rms.mean, batch1["obs"].mean(0), rtol=1e-4)
    np.testing.assert_allclose(learner.obs_rms.var, batch1["obs"].var(0), rtol=1e-3)
    tensors, info = through_wire(learner)
    np.testing.assert_array_equal(tensors["obs_norm.mean"], learner.obs_rms.mean)
    np.testing.assert_array_equal(tensors["obs_norm.var"], learner.obs_rms.var)

    # the actor normalises exactly like the learner: the same values and logprobs (to float32 rounding)
    actor = make_actor(params, OBS, ACT, ActorContext(num_envs=128, seed=4), backend)
    actor.load_weights(tensors, info)
    obs = batch1["obs"]
    a, ex = actor.act(obs)
    x = torch.from_numpy(normalize_obs(obs, learner.obs_rms.mean, learner.obs_rms.var, params.obs_clip))
    with torch.no_grad():
        logprob, _, value = learner.agent.evaluate(x, torch.from_numpy(a))
    np.testing.assert_allclose(ex["value"], value.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex["logprob"], logprob.numpy(), rtol=1e-5, atol=1e-5)

    # round 2: trained with the statistics the actors used, so the first step has ratio 1
    batch2 = random_rollout(params, learner, seed=2, obs_shift=-20.0, backend=backend)
    m = learner.train_round([as_batch(batch2)])
    assert abs(m["approx_kl"]) < 1e-6 and m["clipfrac"] == 0.0
    both = np.concatenate([batch1["obs"], batch2["obs"]]).astype(np.float64)
    np.testing.assert_allclose(learner.obs_rms.mean, both.mean(0), rtol=1e-4)


def test_obs_norm_off_exports_no_stats():
    tensors, info = PPOLearner(PPOParams(hidden=[8]), OBS, ACT).export_weights()
    assert not any(k.startswith("obs_norm.") for k in tensors) and info["obs_norm"] is False


# ---------------------------------------------------------------- continuous actions


@pytest.mark.parametrize("backend", BACKENDS)
def test_box_actions_are_clipped_for_the_env_and_raw_in_the_batch(backend):
    params = PPOParams(rollout_steps=50, hidden=[16], log_std_init=1.0, epochs=1, minibatch_size=200)
    learner = PPOLearner(params, OBS, BOX_ACT, seed=5)
    actor = make_actor(params, OBS, BOX_ACT, ActorContext(num_envs=4, seed=6), backend)
    actor.load_weights(*through_wire(learner))
    rng = np.random.default_rng(0)
    f = np.zeros(4, bool)
    clipped_somewhere = False
    while not actor.pending():
        o = rng.normal(size=(4, 2)).astype(np.float32)
        a, ex = actor.act(o)
        assert a.dtype == np.float32 and a.shape == (4, 2)
        assert BOX_ACT.contains(a[0]) and (a >= BOX_ACT.low).all() and (a <= BOX_ACT.high).all()
        assert np.isfinite(ex["logprob"]).all() and ex["raw_action"].shape == (4, 2)
        np.testing.assert_array_equal(a, np.clip(ex["raw_action"], BOX_ACT.low, BOX_ACT.high))
        clipped_somewhere |= bool((a != ex["raw_action"]).any())
        actor.record(o, a, ex, rng.normal(size=4).astype(np.float32), o, f, f)
    assert clipped_somewhere
    out = actor.take()
    sample_spec(params, OBS, BOX_ACT).validate(out, 200)
    assert (out["action"] < BOX_ACT.low).any() or (out["action"] > BOX_ACT.high).any()  # raw samples
    greedy, _ = actor.act(np.zeros((3, 2), np.float32), greedy=True)
    assert greedy.shape == (3, 2) and (greedy >= BOX_ACT.low).all() and (greedy <= BOX_ACT.high).all()
    # the learner computes the same log-probabilities from the raw samples
    m = learner.train_round([as_batch(out)])
    assert abs(m["approx_kl"]) < 1e-5 and m["clipfrac"] == 0.0 and np.isfinite(m["log_std_mean"])


# ---------------------------------------------------------------- checkpoints


def test_state_dict_round_trip_gives_identical_training():
    params = PPOParams(rollout_steps=16, hidden=[16], epochs=2, minibatch_size=32, obs_norm=True)
    a = PPOLearner(params, OBS, ACT, seed=7)
    batch = as_batch(random_rollout(params, a, seed=8, obs_shift=5.0))
    a.train_round([batch])
    tensors, meta = a.state_dict(include_replay=True)
    tensors = st_load(st_save({k: np.ascontiguousarray(v) for k, v in tensors.items()}))  # as on disk
    meta = json.loads(json.dumps(meta))
    b = PPOLearner(params, OBS, ACT, seed=99)
    b.load_state_dict(tensors, meta)
    assert (b.updates, b.rounds, b.samples_added) == (a.updates, a.rounds, a.samples_added)
    wa, ia = a.export_weights()
    wb, ib = b.export_weights()
    assert ia == ib and set(wa) == set(wb)
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])
    ma, mb = a.train_round([batch]), b.train_round([batch])  # same minibatch order, same Adam state
    assert ma == mb
    for k, v in a.export_weights()[0].items():
        np.testing.assert_array_equal(v, b.export_weights()[0][k])
    with pytest.raises(ValueError, match="not a ppo checkpoint"):
        b.load_state_dict(tensors, {**meta, "algorithm": "dqn"})
    with pytest.raises(ValueError, match="differs"):
        PPOLearner(PPOParams(hidden=[8], obs_norm=True), OBS, ACT).load_state_dict(tensors, meta)


# ---------------------------------------------------------------- forwards: numpy == torch, actor == learner


def trained_learner(params, act_space, seed=0):
    """A learner after one round (weights off their init; with obs_norm, statistics far from 0/1)."""
    learner = PPOLearner(params, OBS, act_space, seed=seed)
    learner.train_round([as_batch(random_rollout(params, learner, seed=seed, act_space=act_space, obs_shift=7.0))])
    return learner


@pytest.mark.parametrize("act_space", [ACT, gym.spaces.Discrete(5), BOX_ACT], ids=["discrete2", "discrete5", "box"])
@pytest.mark.parametrize("obs_norm", [False, True], ids=["raw", "obs_norm"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_numpy_forward_equals_torch_forward_and_the_learners_network(act_space, obs_norm, activation):
    params = PPOParams(
        rollout_steps=16,
        hidden=[32, 16],
        activation=activation,
        obs_norm=obs_norm,
        epochs=2,
        minibatch_size=32,
        log_std_init=-0.5,
    )
    learner = trained_learner(params, act_space)
    tensors, info = through_wire(learner)  # read-only arrays, as a worker gets them
    fwd_np, fwd_t = make_forward(params, OBS, act_space, "numpy"), make_forward(params, OBS, act_space, "torch")
    fwd_np.load_weights(tensors, info)
    fwd_t.load_weights(tensors, info)
    obs = (np.random.default_rng(1).normal(size=(300, 2)) * 10 + 7).astype(np.float32)
    a, b = fwd_np(obs), fwd_t(obs)
    keys = {"mean", "log_std", "value"} if act_space is BOX_ACT else {"logits", "value"}
    assert set(a) == set(b) == keys
    for k in keys:
        assert a[k].dtype == b[k].dtype == np.float32, k
        assert a[k].shape == b[k].shape == ((300,) if k == "value" else (300, info["act_dim"])), k
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5, err_msg=k)
    # ... and the learner's own network on its own normalised inputs (normalisation happens inside the forward)
    x = torch.from_numpy(normalize_obs(obs, *learner._stats(), params.obs_clip))
    with torch.no_grad():
        out, value = learner.agent.actor(x).numpy(), learner.agent.value(x).numpy()
    np.testing.assert_allclose(a["value"], value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a["mean" if act_space is BOX_ACT else "logits"], out, rtol=1e-5, atol=1e-5)
    if act_space is BOX_ACT:
        np.testing.assert_allclose(a["log_std"], np.broadcast_to(tensors["actor_logstd"], (300, 2)), rtol=0, atol=0)
    # a single observation and an empty batch work too (an inference server may get either)
    assert fwd_np(obs[:1])["value"].shape == (1,) and fwd_np(obs[:0])["value"].shape == (0,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("act_space", [gym.spaces.Discrete(4), BOX_ACT], ids=["discrete", "box"])
@pytest.mark.parametrize("obs_norm", [False, True], ids=["raw", "obs_norm"])
def test_actor_logprobs_equal_the_learners_so_the_first_ratio_is_one(backend, act_space, obs_norm):
    params = PPOParams(
        rollout_steps=32,
        hidden=[32, 32],
        obs_norm=obs_norm,
        epochs=1,
        minibatch_size=10**6,
        log_std_init=0.3,
        anneal_clip=False,
    )
    learner = trained_learner(params, act_space, seed=3)
    actor = make_actor(params, OBS, act_space, ActorContext(num_envs=256, seed=9), backend)
    actor.load_weights(*through_wire(learner))
    obs = (np.random.default_rng(2).normal(size=(256, 2)) * 5 + 7).astype(np.float32)
    actions, ex = actor.act(obs)
    raw = ex["raw_action"] if act_space is BOX_ACT else actions
    x = torch.from_numpy(normalize_obs(obs, *learner._stats(), params.obs_clip))
    with torch.no_grad():
        logprob, _, value = learner.agent.evaluate(x, torch.from_numpy(raw))
    assert ex["logprob"].dtype == ex["value"].dtype == np.float32
    np.testing.assert_allclose(ex["logprob"], logprob.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex["value"], value.numpy(), rtol=1e-5, atol=1e-5)
    # through train_round: one minibatch, first (and only) gradient step sees ratio 1
    m = learner.train_round(
        [
            as_batch(
                random_rollout(params, learner, n_envs=8, seed=4, act_space=act_space, obs_shift=7.0, backend=backend)
            )
        ]
    )
    assert m["epochs_done"] == 1 and abs(m["approx_kl"]) < 1e-7 and m["clipfrac"] == 0.0


def test_numpy_sampling_follows_the_policy_and_is_seeded():
    n = 40_000
    params = PPOParams(hidden=[4])
    # Categorical: constant logits (zero weights, chosen output bias) and a known distribution
    learner = PPOLearner(params, OBS, gym.spaces.Discrete(3))
    tensors, info = learner.export_weights()
    tensors = {k: np.zeros_like(v) for k, v in tensors.items()}
    tensors["actor.2.bias"] = np.log(np.array([0.2, 0.5, 0.3], np.float32))
    actor = make_actor(params, OBS, gym.spaces.Discrete(3), ActorContext(num_envs=n, seed=1), "numpy")
    actor.load_weights(tensors, info)
    a, ex = actor.act(np.zeros((n, 2), np.float32))
    freq = np.bincount(a, minlength=3) / n
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.01)
    np.testing.assert_allclose(ex["logprob"], np.log([0.2, 0.5, 0.3])[a], rtol=1e-6)
    assert actor.act(np.zeros((3, 2), np.float32), greedy=True)[0].tolist() == [1, 1, 1]
    # the same seed, the same samples; another seed, others
    twin = make_actor(params, OBS, gym.spaces.Discrete(3), ActorContext(num_envs=n, seed=1), "torch")
    twin.load_weights(tensors, info)
    np.testing.assert_array_equal(twin.act(np.zeros((n, 2), np.float32))[0], a)
    other = make_actor(params, OBS, gym.spaces.Discrete(3), ActorContext(num_envs=n, seed=2), "numpy")
    other.load_weights(tensors, info)
    assert not np.array_equal(other.act(np.zeros((n, 2), np.float32))[0], a)
    # Gaussian: mean from the output bias, std from the log-std; raw samples before clipping
    box = gym.spaces.Box(-100, 100, (2,), np.float32)
    tensors, info = PPOLearner(params, OBS, box).export_weights()
    tensors = {k: np.zeros_like(v) for k, v in tensors.items()}
    tensors["actor.2.bias"] = np.array([1.0, -2.0], np.float32)
    tensors["actor_logstd"] = np.log(np.array([[0.5, 2.0]], np.float32))
    actor = make_actor(params, OBS, box, ActorContext(num_envs=n, seed=1), "numpy")
    actor.load_weights(tensors, info)
    _, ex = actor.act(np.zeros((n, 2), np.float32))
    raw = ex["raw_action"]
    np.testing.assert_allclose(raw.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(raw.std(0), [0.5, 2.0], rtol=0.03)
    expected = (-0.5 * ((raw - [1.0, -2.0]) / [0.5, 2.0]) ** 2 - np.log([0.5, 2.0]) - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(ex["logprob"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(actor.act(np.zeros((2, 2), np.float32), greedy=True)[0], [[1.0, -2.0]] * 2)


def test_actor_needs_a_forward_and_workers_prefer_numpy():
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithm("ppo")
    # numpy first even where torch imports: same outputs (see the equality tests), cheaper for small MLPs
    assert info.backends[0] == "numpy"
    params = PPOParams(hidden=[8])
    for backend in info.backends:
        forward = info.make_forward(params, OBS, ACT, backend, seed=3)
        assert isinstance(forward, Forward)
        actor = info.make_actor(params, OBS, ACT, ActorContext(num_envs=2, seed=3), forward)
        assert isinstance(actor, SyncActor) and isinstance(actor, Actor)
        assert actor.forward is forward  # the actor acts over the forward it is given, never its own
        forward.close()
    with pytest.raises(TypeError, match="forward"):
        PPOActor(params, OBS, ACT, ActorContext(num_envs=2, seed=3))
    with pytest.raises(ValueError, match="backend"):
        make_forward(PPOParams(), OBS, ACT, "jax")


class FakeRemote:
    """A forward that answers from another process's weights (like an inference server) and ignores loads."""

    def __init__(self, inner):
        self.inner, self.loads, self.calls = inner, 0, 0

    def load_weights(self, tensors, info):
        self.loads += 1

    def __call__(self, obs):
        self.calls += 1
        return {k: np.array(v) for k, v in self.inner(obs).items()}


def test_actor_with_a_remote_style_forward():
    params = PPOParams(rollout_steps=4, hidden=[8], epochs=1)
    learner = PPOLearner(params, OBS, ACT, seed=1)
    server = make_forward(params, OBS, ACT, "numpy")
    server.load_weights(*through_wire(learner))
    remote = FakeRemote(server)
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=2, seed=0), forward=remote)
    actor.load_weights({}, {**learner._info(), "round": 0})  # a remote forward does not need the tensors
    assert remote.loads == 1 and actor.round == 0
    rng = np.random.default_rng(0)
    f = np.zeros(2, bool)
    while not actor.pending():
        o = rng.normal(size=(2, 2)).astype(np.float32)
        a, ex = actor.act(o)
        actor.record(o, a, ex, np.ones(2, np.float32), o, f, f)
    assert remote.calls == 4 + 1  # one per step, plus V(next obs) after the last
    m = learner.train_round([as_batch(actor.take())])
    assert abs(m["approx_kl"]) < 1e-7


# ---------------------------------------------------------------- a worker without torch


TORCH_FREE_WORKER = r"""
import json, sys
try:
    import torch
except ImportError as e:
    blocked = str(e)
else:
    raise SystemExit("torch imported although it should be blocked")

import gymnasium as gym
import numpy as np
from mqttrl.plugin.algorithm import Actor, ActorContext, AsyncLearner, Forward, SyncActor, SyncLearner
from mqttrl.plugin.manager import get_registry
from mqttrl.envs.rollout import EnvSet
from mqttrl.wire import decode_weights
from mqttrl_plugins.ppo.actor import PPOActor
from mqttrl_plugins.ppo.common import PPOParams, sample_spec

weights = decode_weights(open(sys.argv[1], "rb").read())
info = get_registry().algorithm("ppo")  # the registry loads the plugin without torch
params = PPOParams(**json.loads(sys.argv[2]))
envs = EnvSet(lambda: gym.make("CartPole-v1"), 4, seed=11)
space_o, space_a = envs.envs[0].observation_space, envs.envs[0].action_space
forward = info.make_forward(params, space_o, space_a, "numpy")
actor = info.make_actor(params, space_o, space_a, ActorContext(num_envs=4, seed=5), forward=forward)
actor.load_weights(weights.tensors, weights.info)
# the forward a worker builds by default: the first backend (numpy), which needs no torch
default = PPOActor(params, space_o, space_a, ActorContext(num_envs=1), info.make_forward(params, space_o, space_a, info.backends[0]))
steps = 0
while not actor.pending():
    actions, extras = actor.act(envs.obs)
    obs, rewards, next_obs, term, trunc, _ = envs.step(actions)
    actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
    steps += 1
out = actor.take()
sample_spec(params, space_o, space_a).validate(out, len(out["logprob"]))
np.savez(sys.argv[3], **out)
try:
    info.make_learner(params, space_o, space_a, "cpu", 0)
except ImportError:
    learner_needs_torch = True
else:
    learner_needs_torch = False
print(json.dumps({"blocked": blocked, "steps": steps, "default_forward": type(default.forward).__name__,
                  "forward": type(actor.forward).__name__, "learner_needs_torch": learner_needs_torch,
                  "torch_loaded": "torch" in sys.modules and sys.modules["torch"] is not None}))
"""


def test_worker_side_runs_without_torch(tmp_path):
    """A thin worker: torch cannot be imported, the plugin still imports, acts with the numpy forward on
    weights a torch learner exported (through a safetensors weights message), and makes a full rollout
    whose logprobs and values the learner reproduces."""
    blocker = tmp_path / "blocker" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("torch is blocked for this test")\n')
    params = PPOParams(rollout_steps=16, hidden=[32, 32], obs_norm=True, epochs=1, minibatch_size=64)
    space_o, space_a = gym.make("CartPole-v1").observation_space, gym.make("CartPole-v1").action_space
    learner = PPOLearner(params, space_o, space_a, seed=0)
    learner.obs_rms.update(np.random.default_rng(0).normal(0.1, 0.5, (500, 4)))  # statistics that matter
    weights_file = tmp_path / "weights.safetensors"
    weights_file.write_bytes(encode_weights(3, "ppo", "thin", *learner.export_weights()))
    out_file = tmp_path / "rollout.npz"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "blocker"), os.environ.get("PYTHONPATH", "")])}
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(TORCH_FREE_WORKER),
            str(weights_file),
            json.dumps({"rollout_steps": 16, "hidden": [32, 32], "obs_norm": True}),
            str(out_file),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["blocked"] == "torch is blocked for this test"
    assert res == {
        **res,
        "steps": 16,
        "forward": "NumpyForward",
        "default_forward": "NumpyForward",
        "learner_needs_torch": True,
        "torch_loaded": False,
    }
    with np.load(out_file) as z:
        out = {k: z[k] for k in z.files}
    assert len(out["logprob"]) == 64
    x = torch.from_numpy(normalize_obs(out["obs"], *learner._stats(), params.obs_clip))
    with torch.no_grad():
        logprob, _, value = learner.agent.evaluate(x, torch.from_numpy(out["action"]))
    np.testing.assert_allclose(out["logprob"], logprob.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["value"], value.numpy(), rtol=1e-5, atol=1e-5)
    m = learner.train_round([as_batch(out)])
    assert abs(m["approx_kl"]) < 1e-6 and m["clipfrac"] == 0.0


# ---------------------------------------------------------------- config and registration


def test_params_are_validated():
    with pytest.raises(ConfigError, match="activation"):
        build(PPOParams, {"activation": "gelu"}, "algorithm")
    with pytest.raises(ConfigError, match="rollout_steps"):
        build(PPOParams, {"rollout_steps": 0}, "algorithm")
    with pytest.raises(ConfigError, match="gae_lambda"):
        build(PPOParams, {"gae_lambda": 1.5}, "algorithm")
    with pytest.raises(ConfigError, match="unknown key"):
        build(PPOParams, {"n_steps": 32}, "algorithm")
    assert build(PPOParams, {"hidden": [32], "obs_norm": True}, "algorithm").hidden == [32]


def test_registered_as_a_sync_algorithm():
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithm("ppo")
    assert info.mode == "sync" and info.params is PPOParams
    assert isinstance(info.make_forward(PPOParams(hidden=[8]), OBS, ACT, "numpy"), NumpyForward)
    assert isinstance(info.make_forward(PPOParams(hidden=[8]), OBS, ACT, "torch"), TorchForward)
    assert isinstance(info.make_learner(PPOParams(hidden=[8]), OBS, ACT, "cpu", 0), PPOLearner)
    with pytest.raises(TypeError, match="Discrete or float Box"):
        sample_spec(PPOParams(), OBS, gym.spaces.MultiDiscrete([2, 2]))


# ---------------------------------------------------------------- learning


def test_a_few_rounds_on_cartpole_improve_the_return():
    """2 actors x 4 envs x 64 steps a round, as the sync loop runs them (a few seconds)."""
    from mqttrl.envs.rollout import evaluate

    params = PPOParams()
    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    envsets = [EnvSet(make, 4, seed=100 * w) for w in range(2)]
    space_o, space_a = envsets[0].envs[0].observation_space, envsets[0].envs[0].action_space
    learner = PPOLearner(params, space_o, space_a, seed=0)
    untrained = make_actor(params, space_o, space_a, ActorContext(num_envs=10), "numpy")
    untrained.load_weights(*through_wire(learner))
    # the workers' actors use the numpy forward, as on a worker without torch
    actors = [make_actor(params, space_o, space_a, ActorContext(num_envs=4, seed=w), "numpy") for w in range(2)]
    for _ in range(12):
        tensors, info = through_wire(learner)
        batches = []
        for w, (actor, envs) in enumerate(zip(actors, envsets)):
            actor.load_weights(tensors, info)
            batches.append(as_batch(collect(actor, envs), worker=f"w{w}"))
        m = learner.train_round(batches)
        assert np.isfinite([m["policy_loss"], m["value_loss"], m["approx_kl"], m["entropy"]]).all()
        assert m["transitions"] == 512
    assert m["explained_variance"] > 0.2
    trained = make_actor(params, space_o, space_a, ActorContext(num_envs=10), "numpy")
    trained.load_weights(*through_wire(learner))
    before = np.mean(evaluate(untrained, make, 10, seed=5))
    after = np.mean(evaluate(trained, make, 10, seed=5))
    assert after > max(100.0, 3 * before), (before, after)
