"""Tests of the PPO plugin: GAE and truncation bootstrapping, rollouts, the clipped
objective, obs normalisation, continuous actions, checkpoints, learning."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from mqttrl.algorithm import ActorContext
from mqttrl.config import ConfigError, build
from mqttrl.rollout import EnvSet
from mqttrl.wire import SampleBatch, decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.ppo import PPOActor, PPOLearner, PPOParams, compute_gae, normalize_obs, sample_spec

torch.set_num_threads(1)

OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(2)
BOX_ACT = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 0.5], np.float32), dtype=np.float32)


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


def test_rollout_advantages_with_termination_and_truncation_bootstrap():
    gamma, lam = 0.9, 0.8
    params = PPOParams(rollout_steps=6, gamma=gamma, gae_lambda=lam, hidden=[1], activation="relu")
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=1))
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
        actor.record(o, actions, extras, np.array([rewards[t]], np.float32), np.array([[nxt0[t], 0.0]], np.float32),
                     np.array([term[t]]), np.array([trunc[t]]))
    assert actor.pending() == 6
    out = actor.take()
    assert actor.pending() == 0

    # directly: the truncated step's reward gets gamma * V(final obs) = gamma * 7
    r = np.array(rewards, np.float64)
    r[3] += gamma * 7.0
    v = np.array(obs0)
    delta = np.array([
        r[0] + gamma * v[1] - v[0],
        r[1] - v[1],                 # terminated: no bootstrap
        r[2] + gamma * v[3] - v[2],
        r[3] - v[3],                 # truncated: bootstrap is in the reward
        r[4] + gamma * v[5] - v[4],
        r[5] + gamma * 9.0 - v[5],   # end of rollout: bootstrap from V(next obs) = 9
    ])
    gl = gamma * lam
    adv = np.array([
        delta[0] + gl * delta[1],
        delta[1],
        delta[2] + gl * delta[3],
        delta[3],
        delta[4] + gl * delta[5],
        delta[5],
    ])
    np.testing.assert_allclose(out["advantage"], adv, rtol=1e-6)
    np.testing.assert_allclose(out["ret"], adv + v, rtol=1e-6)
    np.testing.assert_allclose(out["value"], v)
    np.testing.assert_array_equal(out["obs"][:, 0], obs0)


def test_terminated_and_truncated_together_does_not_bootstrap():
    params = PPOParams(rollout_steps=1, gamma=0.5, gae_lambda=1.0, hidden=[1], activation="relu")
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=1))
    value_is_first_coordinate(actor, PPOLearner(params, OBS, ACT))
    o = np.array([[3.0, 0.0]], np.float32)
    actions, extras = actor.act(o)
    actor.record(o, actions, extras, np.array([1.0], np.float32), np.array([[100.0, 0.0]], np.float32),
                 np.array([True]), np.array([True]))
    assert actor.take()["advantage"][0] == pytest.approx(1.0 - 3.0)


# ---------------------------------------------------------------- rollouts and the spec


def test_pending_stays_zero_until_the_share_is_collected_and_take_matches_the_spec():
    params = PPOParams(rollout_steps=5, hidden=[16])
    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    envs = EnvSet(make, 3, seed=0)
    space_o, space_a = envs.envs[0].observation_space, envs.envs[0].action_space
    actor = PPOActor(params, space_o, space_a, ActorContext(num_envs=3))
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


def test_greedy_act_takes_any_batch_and_record_needs_sampling_extras():
    params = PPOParams(rollout_steps=2, hidden=[8])
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=2))
    actions, extras = actor.act(np.zeros((5, 2), np.float32), greedy=True)
    assert actions.shape == (5,) and extras == {}
    with pytest.raises(ValueError, match="one per env"):
        actor.act(np.zeros((5, 2), np.float32))
    with pytest.raises(ValueError, match="extras"):
        actor.record(np.zeros((2, 2)), np.zeros(2, np.int64), {}, np.zeros(2), np.zeros((2, 2)), np.zeros(2, bool), np.zeros(2, bool))


def test_new_version_mid_rollout_drops_the_partial_rollout():
    params = PPOParams(rollout_steps=3, hidden=[8])
    learner = PPOLearner(params, OBS, ACT)
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=1))
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


def test_load_weights_rejects_other_spaces():
    actor = PPOActor(PPOParams(hidden=[8]), OBS, ACT, ActorContext(num_envs=1))
    other = PPOLearner(PPOParams(hidden=[8]), gym.spaces.Box(-1, 1, (3,), np.float32), ACT)
    with pytest.raises(ValueError, match="obs_dim"):
        actor.load_weights(*other.export_weights())
    tensors, info = PPOLearner(PPOParams(hidden=[8]), OBS, ACT).export_weights()
    del tensors["critic.0.bias"]
    with pytest.raises(ValueError, match="missing"):
        actor.load_weights(tensors, info)


# ---------------------------------------------------------------- the clipped objective


def random_rollout(params, learner, n_envs=4, seed=0, act_space=ACT, obs_shift=0.0):
    """A batch made by an actor holding the learner's current weights, on random obs."""
    actor = PPOActor(params, OBS, act_space, ActorContext(num_envs=n_envs, seed=seed))
    actor.load_weights(*through_wire(learner))
    rng = np.random.default_rng(seed)
    f = np.zeros(n_envs, bool)
    while not actor.pending():
        o = (rng.normal(size=(n_envs, 2)) * 3 + obs_shift).astype(np.float32)
        a, ex = actor.act(o)
        actor.record(o, a, ex, rng.normal(size=n_envs).astype(np.float32), o + 1, rng.random(n_envs) < 0.1, f)
    return actor.take()


def test_identical_policies_give_ratio_one_and_no_clipping():
    params = PPOParams(rollout_steps=16, hidden=[16], epochs=1, minibatch_size=64)
    learner = PPOLearner(params, OBS, ACT, seed=1)
    m = learner.train_round([as_batch(random_rollout(params, learner))])
    assert m["updates"] == 1 and m["transitions"] == 64
    assert abs(m["approx_kl"]) < 1e-6
    assert m["clipfrac"] == 0.0
    assert abs(m["policy_loss"]) < 1e-5  # ratio 1 and normalised advantages: -mean(adv) = 0


def test_clipped_ratio_gives_the_policy_no_gradient():
    # (no advantage normalisation: it would make some advantages negative, and for those the
    # unclipped term is the pessimistic one, so they rightly keep their gradient)
    params = PPOParams(rollout_steps=16, hidden=[16], epochs=1, minibatch_size=64, clip_coef=0.2, anneal_clip=False, norm_adv=False)
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


def test_sync_learner_refuses_the_async_protocol():
    learner = PPOLearner(PPOParams(hidden=[8]), OBS, ACT)
    assert not learner.train_due() and not learner.behind()
    with pytest.raises(NotImplementedError, match="train_round"):
        learner.train_step()
    with pytest.raises(NotImplementedError, match="train_round"):
        learner.add(as_batch(random_rollout(PPOParams(hidden=[8], rollout_steps=2), learner)))


# ---------------------------------------------------------------- observation normalisation


def test_obs_norm_stats_travel_with_the_weights_and_are_updated_after_training():
    params = PPOParams(rollout_steps=32, hidden=[16], epochs=1, minibatch_size=128, obs_norm=True)
    learner = PPOLearner(params, OBS, ACT, seed=3)
    batch1 = random_rollout(params, learner, seed=1, obs_shift=50.0)
    learner.train_round([as_batch(batch1)])
    # folded in after training: the statistics now describe round 1's raw observations
    np.testing.assert_allclose(learner.obs_rms.mean, batch1["obs"].mean(0), rtol=1e-4)
    np.testing.assert_allclose(learner.obs_rms.var, batch1["obs"].var(0), rtol=1e-3)
    tensors, info = through_wire(learner)
    np.testing.assert_array_equal(tensors["obs_norm.mean"], learner.obs_rms.mean)
    np.testing.assert_array_equal(tensors["obs_norm.var"], learner.obs_rms.var)

    # the actor normalises exactly like the learner: identical values and logprobs
    actor = PPOActor(params, OBS, ACT, ActorContext(num_envs=128, seed=4))
    actor.load_weights(tensors, info)
    obs = batch1["obs"]
    a, ex = actor.act(obs)
    x = torch.from_numpy(normalize_obs(obs, learner.obs_rms.mean, learner.obs_rms.var, params.obs_clip))
    with torch.no_grad():
        logprob, _, value = learner.agent.evaluate(x, torch.from_numpy(a))
    np.testing.assert_array_equal(ex["value"], value.numpy())
    np.testing.assert_array_equal(ex["logprob"], logprob.numpy())

    # round 2: trained with the statistics the actors used, so the first step has ratio 1
    batch2 = random_rollout(params, learner, seed=2, obs_shift=-20.0)
    m = learner.train_round([as_batch(batch2)])
    assert abs(m["approx_kl"]) < 1e-6 and m["clipfrac"] == 0.0
    both = np.concatenate([batch1["obs"], batch2["obs"]]).astype(np.float64)
    np.testing.assert_allclose(learner.obs_rms.mean, both.mean(0), rtol=1e-4)


def test_obs_norm_off_exports_no_stats():
    tensors, info = PPOLearner(PPOParams(hidden=[8]), OBS, ACT).export_weights()
    assert not any(k.startswith("obs_norm.") for k in tensors) and info["obs_norm"] is False


# ---------------------------------------------------------------- continuous actions


def test_box_actions_are_clipped_for_the_env_and_raw_in_the_batch():
    params = PPOParams(rollout_steps=50, hidden=[16], log_std_init=1.0, epochs=1, minibatch_size=200)
    learner = PPOLearner(params, OBS, BOX_ACT, seed=5)
    actor = PPOActor(params, OBS, BOX_ACT, ActorContext(num_envs=4, seed=6))
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
    from mqttrl.plugins import get_registry

    info = get_registry().algorithm("ppo")
    assert info.mode == "sync" and info.params is PPOParams
    with pytest.raises(TypeError, match="Discrete or float Box"):
        sample_spec(PPOParams(), OBS, gym.spaces.MultiDiscrete([2, 2]))


# ---------------------------------------------------------------- learning


def test_a_few_rounds_on_cartpole_improve_the_return():
    """2 actors x 4 envs x 64 steps a round, as the sync loop runs them (a few seconds)."""
    from mqttrl.rollout import evaluate

    params = PPOParams()
    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    envsets = [EnvSet(make, 4, seed=100 * w) for w in range(2)]
    space_o, space_a = envsets[0].envs[0].observation_space, envsets[0].envs[0].action_space
    learner = PPOLearner(params, space_o, space_a, seed=0)
    untrained = PPOActor(params, space_o, space_a, ActorContext(num_envs=10))
    untrained.load_weights(*through_wire(learner))
    actors = [PPOActor(params, space_o, space_a, ActorContext(num_envs=4, seed=w)) for w in range(2)]
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
    trained = PPOActor(params, space_o, space_a, ActorContext(num_envs=10))
    trained.load_weights(*through_wire(learner))
    before = np.mean(evaluate(untrained, make, 10, seed=5))
    after = np.mean(evaluate(trained, make, 10, seed=5))
    assert after > max(100.0, 3 * before), (before, after)
