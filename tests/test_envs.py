"""A game that crashes does not take the worker down (issue "No sample lost", item 2).

``EnvSet`` makes a crashed env afresh (backing off between attempts, ``EnvFailing`` when
one keeps failing); the actors end the crashed episode as truncated at the last
observation it really reached (``Actor.truncate``); the worker shell fills the failed
row of the vector step with a real transition. Every env here is a real gymnasium env
(CartPole) behind a wrapper that raises on the calls a test chooses.
"""

from __future__ import annotations

import threading

import attrs
import gymnasium as gym
import numpy as np
import pytest
from helpers.fake_node import FakeNode

from mqttrl.config import AlgorithmSection, RunConfig
from mqttrl.envs.rollout import EnvFailing, EnvSet
from mqttrl.nodes.worker import envs as envs_mod
from mqttrl.nodes.worker import node as node_mod
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, Message
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import EpisodeReport, decode_batch, decode_json, encode_json, encode_weights
from mqttrl_plugins.dqn import make_forward as dqn_forward
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import DQNParams
from mqttrl_plugins.ppo import make_forward as ppo_forward
from mqttrl_plugins.ppo.actor import PPOActor
from mqttrl_plugins.ppo.common import PPOParams

ENV_ID = "CrashingCartPole-v0"


class Crashing(gym.Wrapper):
    """CartPole whose ``step`` / ``reset`` / ``close`` raise when the test says so."""

    def __init__(self, plan: Plan):
        super().__init__(gym.make("CartPole-v1"))
        self.plan = plan
        self.fail_step = False  # the next step raises
        self.fail_reset = False  # the next reset raises
        self.fail_close = False
        self.closed = False
        self.steps = 0
        self.obs: np.ndarray | None = None

    def reset(self, **kwargs):
        first = self.obs is None and self.plan.fail_new_resets > 0
        if self.fail_reset or first:
            self.fail_reset = False
            self.plan.fail_new_resets -= first
            raise RuntimeError("boom: reset")
        self.obs, info = self.env.reset(**kwargs)
        return self.obs, info

    def step(self, action):
        self.steps += 1
        every = self.plan.fail_every
        if self.fail_step or self.plan.fail_all_steps or (every and self.steps % every == 0):
            self.fail_step = False
            self.plan.crashed_at.append(self.obs.copy())
            raise RuntimeError(f"boom: step {self.steps}")
        obs, r, term, trunc, info = self.env.step(action)
        self.plan.log.append((self.obs.copy(), int(action), float(r), obs.copy(), bool(term), bool(trunc)))
        self.obs = obs
        return obs, r, term, trunc, info

    def close(self):
        self.closed = True
        if self.fail_close:
            raise RuntimeError("boom: close")
        super().close()


@attrs.define
class Plan:
    """What the factory's envs do; ``made`` is every env it made, in order."""

    fail_all_steps: bool = False
    fail_every: int = 0  # every env's n-th, 2n-th, ... step raises
    fail_makes: int = 0  # the next this many make() calls raise
    fail_new_resets: int = 0  # the first reset of the next this many envs made raises
    made: list[Crashing] = attrs.Factory(list)
    #: every transition an env really made: (obs, action, reward, next_obs, terminated, truncated)
    log: list[tuple] = attrs.Factory(list)
    #: the observation each env was at when its step raised
    crashed_at: list[np.ndarray] = attrs.Factory(list)

    def make(self) -> Crashing:
        if self.fail_makes:
            self.fail_makes -= 1
            raise OSError("boom: the game client did not start")
        env = Crashing(self)
        self.made.append(env)
        return env


def env_set(plan: Plan, n: int = 3, **kw) -> tuple[EnvSet, list[float]]:
    sleeps: list[float] = []
    return EnvSet(plan.make, n, seed=0, env_id=ENV_ID, sleep=sleeps.append, **kw), sleeps


ZEROS = np.zeros(3, np.int64)


# ---- EnvSet -------------------------------------------------------------------------------------
def test_a_crashed_step_makes_that_env_afresh_and_the_others_step_on():
    plan = Plan()
    envs, sleeps = env_set(plan)
    reference, _ = env_set(Plan())  # the same envs, none crashing
    envs.step(ZEROS)
    reference.step(ZEROS)
    plan.made[1].fail_step = True
    plan.made[1].fail_close = True  # a close that raises is logged and ignored
    before = envs.obs.copy()
    obs, rewards, next_obs, term, trunc, ended = envs.step(np.array([0, 1, 1]))
    ref = reference.step(np.array([0, 1, 1]))
    assert envs.failed == [1] and envs.env_restarts == 1 and sleeps == []
    assert plan.made[1].closed and envs.envs[1] is plan.made[3] and len(plan.made) == 4
    for i in (0, 2):  # the others made their real steps
        assert np.array_equal(next_obs[i], ref[2][i]) and rewards[i] == ref[1][i]
    # the failed row is a placeholder: no transition, no episode reported
    assert np.array_equal(obs[1], before[1]) and np.array_equal(next_obs[1], before[1]) and rewards[1] == 0
    assert not term[1] and not trunc[1] and ended == []
    # its next step starts the new env's episode
    assert np.array_equal(envs.obs[1], plan.made[3].obs) and (envs.returns[1], envs.lengths[1]) == (0, 0)
    assert envs.lengths[0] == 2
    envs.step(ZEROS)
    assert envs.failed == [] and envs.lengths[1] == 1


def test_step_env_gives_a_real_transition_of_the_env_made_afresh():
    plan = Plan()
    envs, _ = env_set(plan)
    plan.made[2].fail_step = True
    envs.step(ZEROS)
    start = envs.obs[2].copy()
    got = envs.step_env(2, np.int64(1))
    assert got is not None
    obs, r, next_obs, term, trunc, end = got
    o, a, logged_r, n, *_ = plan.log[-1]  # what the new env really did
    assert np.array_equal(o, start) and a == 1 and logged_r == r == 1.0 and np.array_equal(n, next_obs)
    assert np.array_equal(obs, start)
    assert (term, trunc, end) == (False, False, None)
    assert np.array_equal(envs.obs[2], next_obs) and envs.lengths[2] == 1 and envs.failures[2] == 0


def test_backoff_grows_between_attempts_and_an_env_that_keeps_failing_raises_envfailing():
    plan = Plan(fail_all_steps=True)
    envs, sleeps = env_set(plan, n=2)
    envs.step(np.array([0, 0]))  # both fail once: each is made afresh at once
    assert envs.failed == [0, 1] and sleeps == [] and envs.env_restarts == 2
    for _ in range(3):  # env 0 fails again and again: 0.5 s, 1 s, 2 s before its next attempts
        assert envs.step_env(0, 0) is None
    assert sleeps == [0.5, 1.0, 2.0] and envs.env_restarts == 5
    with pytest.raises(EnvFailing) as e:
        envs.step_env(0, 0)
    msg = str(e.value)
    assert msg == (
        f"env 0 ({ENV_ID}) failed 5 times in a row (max_consecutive_failures=5); "
        "last: step raised RuntimeError: boom: step 1"
    )
    assert "\n" not in msg and isinstance(e.value.__cause__, RuntimeError)


def test_backoff_is_capped_and_failed_starts_count_as_failures():
    plan = Plan(fail_all_steps=True)
    envs, sleeps = env_set(plan, n=1, max_consecutive_failures=8, backoff_s=0.5, max_backoff_s=1.5)
    envs.step(np.array([0]))
    plan.fail_makes, plan.fail_new_resets = 1, 1  # the next restart: make raises, then reset raises
    assert envs.step_env(0, 0) is None
    assert sleeps == [0.5, 1.0, 1.5] and envs.failures[0] == 4 and envs.env_restarts == 4
    assert envs.step_env(0, 0) is None
    with pytest.raises(EnvFailing, match=r"failed 8 times in a row .* last: step raised RuntimeError"):
        while True:
            envs.step_env(0, 0)
    assert sleeps == [0.5, 1.0, 1.5, 1.5, 1.5, 1.5]


def test_failures_with_successful_steps_between_are_not_in_a_row():
    plan = Plan()
    envs, sleeps = env_set(plan, n=2, max_consecutive_failures=2)
    for _ in range(10):  # env 0 fails every other step, 10 times; max 2 in a row is never reached
        envs.envs[0].fail_step = True
        envs.step(np.array([0, 0]))
        assert envs.failed == [0]
        envs.step(np.array([0, 0]))
        assert envs.failed == []
    assert envs.env_restarts == 10 and sleeps == []
    for k in range(6):  # envs 0 and 1 take turns to fail: each has a successful step between its failures
        envs.envs[k % 2].fail_step = True
        envs.step(np.array([0, 0]))
        assert envs.failed == [k % 2]
    assert envs.env_restarts == 16 and sleeps == []


def test_a_reset_that_raises_after_an_episode_end_keeps_the_real_step():
    plan = Plan()
    envs, _ = env_set(plan, n=1)
    for env in plan.made:
        env.fail_reset = True
    ended = []
    for _ in range(500):
        *_, term, trunc, ended = envs.step(np.array([1]))  # always right: CartPole falls soon
        if ended:
            break
    assert ended and ended[0].terminated and ended[0].length == plan.made[0].steps
    assert envs.failed == [] and term[0] and envs.env_restarts == 1 and envs.envs[0] is plan.made[1]
    assert np.array_equal(envs.obs[0], plan.made[1].obs)


# ---- the actors ---------------------------------------------------------------------------------
OBS = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


def dqn_actor(num_envs: int = 2) -> DQNActor:
    p = DQNParams(hidden=[8], n_step=3, gamma=0.5)
    return DQNActor(p, OBS, ACT, ActorContext(num_envs=num_envs), dqn_forward(p, OBS, ACT, "numpy", 0))


def rows(out: dict, obs0: float | None = None) -> list[tuple]:
    """Transitions as sortable tuples (optionally only those whose obs[1] is ``obs0``)."""
    got = [
        (tuple(o), int(a), round(float(r), 6), tuple(n), round(float(d), 6))
        for o, a, r, n, d in zip(out["obs"], out["action"], out["reward"], out["next_obs"], out["discount"])
    ]
    return sorted(t for t in got if obs0 is None or t[0][1] == obs0)


def dqn_steps(actor, steps: int, truncate_last: bool) -> np.ndarray:
    """Env 0 and env 1 (obs [t, env]); after ``steps`` steps env 1 reaches obs [99, 1]."""
    f = np.zeros(2, bool)
    final = np.array([99.0, 1.0], np.float32)
    for t in range(steps):
        obs = np.array([[t, 0], [t, 1]], np.float32)
        nxt = np.array([[t + 1, 0], [t + 1, 1]], np.float32)
        trunc = f.copy()
        if t == steps - 1:
            nxt[1] = final
            trunc[1] = truncate_last
        actor.record(obs, np.array([t % 3, (t + 1) % 3]), {}, np.array([1.0, t + 1.0]), nxt, f, trunc)
    return final


@pytest.mark.parametrize("steps", [1, 2, 3, 5])
def test_dqn_truncate_emits_what_a_truncated_episode_end_emits(steps):
    failed, truncated = dqn_actor(), dqn_actor()
    final = dqn_steps(failed, steps, truncate_last=False)
    failed.truncate(1, final)  # the step after these failed: env 1 really got to `final`
    dqn_steps(truncated, steps, truncate_last=True)
    got, want = failed.take(), truncated.take()
    assert rows(got, 1.0) == rows(want, 1.0)
    assert len(rows(got, 1.0)) == steps  # one transition per real step: none for the failed one
    assert rows(got, 0.0) == rows(want, 0.0)  # env 0 is untouched
    # the next record for env 1 starts a new episode: no window reaches back before the failure
    f = np.zeros(2, bool)
    failed.record(
        np.array([[50, 0], [50, 1]], np.float32), np.array([0, 0]), {}, np.ones(2), np.ones((2, 2)), f, f | True
    )
    after = rows(failed.take(), 1.0)
    assert [t[0] for t in after] == [(50.0, 1.0)]


def test_dqn_truncate_without_an_open_episode_does_nothing():
    actor = dqn_actor()
    actor.truncate(0, np.zeros(2, np.float32))
    assert actor.pending() == 0


def ppo_actor(num_envs: int = 2) -> PPOActor:
    p = PPOParams(hidden=[8], rollout_steps=6, gamma=0.9)
    return PPOActor(
        p,
        OBS,
        gym.spaces.Discrete(2),
        ActorContext(num_envs=num_envs),
        ppo_forward(p, OBS, gym.spaces.Discrete(2), "numpy", 0),
    )


def ppo_steps(actor: PPOActor, steps: int, truncate_last: bool, start: int = 0) -> np.ndarray:
    f = np.zeros(2, bool)
    final = np.array([9.0, -3.0], np.float32)
    for t in range(start, start + steps):
        obs = np.array([[t, 0], [t, 1]], np.float32) / 10
        nxt = np.array([[t + 1, 0], [t + 1, 1]], np.float32) / 10
        trunc = f.copy()
        if t == start + steps - 1:
            nxt[1] = final
            trunc[1] = truncate_last
        actions, extras = actor.act(obs)
        actor.record(obs, actions, extras, np.array([1.0, 2.0]), nxt, f, trunc)
    return final


def test_ppo_truncate_ends_the_previous_row_with_a_bootstrap_like_a_truncation():
    failed, truncated = ppo_actor(), ppo_actor()
    final = ppo_steps(failed, 3, truncate_last=False)
    before = failed.buf_reward.copy()
    failed.truncate(1, final)
    ppo_steps(truncated, 3, truncate_last=True)
    v = float(failed._values(final[None])[0])
    assert failed.buf_ended[2, 1] == 1 and failed.buf_reward[2, 1] == pytest.approx(2.0 + 0.9 * v)
    assert v != 0  # the bootstrap is really there
    np.testing.assert_array_equal(failed.buf_ended, truncated.buf_ended)
    np.testing.assert_allclose(failed.buf_reward, truncated.buf_reward, rtol=1e-6)
    assert failed.t == 3  # nothing recorded for the failed step
    assert np.array_equal(failed.buf_reward[:, 0], before[:, 0])  # env 0 untouched
    failed.truncate(1, final)  # its episode already ended: nothing more
    np.testing.assert_allclose(failed.buf_reward, truncated.buf_reward, rtol=1e-6)


def test_ppo_truncate_at_the_rollouts_first_step_does_nothing():
    actor = ppo_actor()
    ppo_steps(actor, 6, truncate_last=False)  # a whole rollout: it bootstrapped from the last obs
    assert actor.t == 0 and actor.pending() == 12
    actor.truncate(1, np.ones(2, np.float32))
    assert actor.t == 0 and not actor.buf_ended.any() and not actor.buf_reward.any()


# ---- the worker shell ---------------------------------------------------------------------------
RUN = "crash"


class Recording:
    """The real DQN actor, with every call the worker makes written down."""

    def __init__(self, inner: DQNActor):
        self.inner = inner
        self.records: list[tuple] = []
        self.truncates: list[tuple[int, np.ndarray]] = []

    def load_weights(self, tensors, info):
        self.inner.load_weights(tensors, info)

    def act(self, obs, greedy=False):
        return self.inner.act(obs, greedy)

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated):
        self.records.append(
            tuple(np.array(x, copy=True) for x in (obs, actions, rewards, next_obs, terminated, truncated))
        )
        self.inner.record(obs, actions, extras, rewards, next_obs, terminated, truncated)

    def truncate(self, env_index, final_obs):
        self.truncates.append((env_index, np.array(final_obs, copy=True)))
        self.inner.truncate(env_index, final_obs)

    def pending(self):
        return self.inner.pending()

    def take(self):
        return self.inner.take()


def test_the_worker_steps_on_through_crashing_games(monkeypatch):
    """The real shell (WorkerNode.run over a fake MQTT node), DQN, 4 CartPoles that crash every
    37th step each: it keeps running, records only real transitions, truncates each crashed
    episode at its last real observation, reports only whole episodes, heartbeats env_restarts."""
    plan = Plan(fail_every=37)
    dqn = get_registry().algorithm("dqn")
    actors: list[Recording] = []

    def make_actor(*args):
        actors.append(Recording(dqn.make_actor(*args)))
        return actors[-1]

    info = attrs.evolve(dqn, make_actor=make_actor)
    registry = type("R", (), {"algorithm": lambda self, name: info})()
    monkeypatch.setattr(node_mod, "get_registry", lambda: registry)
    monkeypatch.setattr(envs_mod, "make_env", lambda env_id, kwargs, registry: plan.make())
    settings = BrokerSettings(url="mqtt://127.0.0.1:1", protocol="5")  # never connects: the node is a fake
    worker = node_mod.WorkerNode(settings, RUN, name="w0", num_envs=4, seed=1, wait_timeout=10)
    worker.client = FakeNode(settings)
    params = DQNParams(hidden=[16])
    cfg = RunConfig(run=RUN, algorithm=AlgorithmSection(name="dqn", params=params)).to_dict()
    cfg["worker"].update(heartbeat_interval_s=0.001, batch_size=64)
    topics = Topics(RUN)
    obs_space, act_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    tensors, winfo = dqn.make_learner(params, obs_space, act_space, "cpu", 0).export_weights()
    worker.client.inbox.put(Message(topics.config, encode_json(cfg), True))
    worker.client.inbox.put(Message(topics.weights, encode_weights(0, "dqn", RUN, tensors, winfo), True))

    t = threading.Thread(target=worker.run, kwargs={"max_env_steps": 4000}, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        worker.stop()
        pytest.fail(f"the worker did not finish (env steps {worker.env_steps})")
    assert worker.env_steps == 4000

    actor = actors[0]
    restarts = sum(1 for e in plan.made if e.closed) - 4  # the last four were closed at the end
    assert restarts > 50 and len(plan.made) == 4 + restarts
    assert worker.env_restarts == restarts == len(actor.truncates)
    # every recorded row is a transition an env really made
    real = {(o.tobytes(), a, np.float32(r).tobytes(), n.tobytes()) for o, a, r, n, *_ in plan.log}
    recorded = 0
    for obs, actions, rewards, next_obs, _term, _trunc in actor.records:
        for i in range(len(obs)):
            key = (obs[i].tobytes(), int(actions[i]), np.float32(rewards[i]).tobytes(), next_obs[i].tobytes())
            assert key in real, f"a recorded row that no env made: {obs[i]} {actions[i]} -> {next_obs[i]}"
            recorded += 1
    assert recorded == len(plan.log) == 4000
    # each crashed episode was truncated at the last observation its env really reached
    assert len(plan.crashed_at) == restarts
    for (_, final), crashed_at in zip(actor.truncates, plan.crashed_at):
        assert np.array_equal(final, crashed_at)
    # only whole episodes are reported: as many as the envs ended, each as long as it really was
    episodes = [
        e
        for _t, p in worker.client.published
        if topics.parse(_t)[0] == Kind.EPISODES
        for e in EpisodeReport.decode(p).episodes
    ]
    ends = [x for x in plan.log if x[4] or x[5]]
    assert len(episodes) == len(ends) == worker.episodes
    # heartbeats carry env_restarts; the batches are valid DQN samples
    beats = [
        decode_json(p)["env_restarts"] for _t, p in worker.client.published if topics.parse(_t)[0] == Kind.HEARTBEAT
    ]
    assert beats == sorted(beats) and 0 < beats[-1] <= restarts
    spec = dqn.sample_spec(params, obs_space, act_space)
    batches = [decode_batch(p) for _t, p in worker.client.published if topics.parse(_t)[0] == Kind.SAMPLES]
    for b in batches:
        spec.validate(b.arrays, b.count)
    # one n-step transition per real step, none lost: all but the windows still open at the end
    assert sum(b.count for b in batches) == 4000 - int(actor.inner.w_len.sum())
