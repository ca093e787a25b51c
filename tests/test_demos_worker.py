"""A live worker whose game a person plays: the env reports the action really taken in
``info["demo_action"]``; the worker records that action instead of its own and flags the episode
as a demonstration (one short end-to-end run over a real mosquitto, and the EnvSet rule alone)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.envs.rollout import EnvSet


def expert(obs) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


class PersonPlays(gym.Wrapper):
    """CartPole played by a "person" (a scripted one): the agent's action is ignored, the person's
    is taken and reported in ``info["demo_action"]``."""

    def __init__(self, **kwargs):
        super().__init__(gym.make("CartPole-v1", **kwargs))
        self._obs = None

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action):
        taken = expert(self._obs)
        self._obs, reward, terminated, truncated, info = self.env.step(taken)
        return self._obs, reward, terminated, truncated, {**info, "demo_action": taken}


gym.register("PersonCartPole-v0", entry_point=PersonPlays)


def test_the_envset_reports_the_actions_taken_and_flags_the_episode():
    envs = EnvSet(lambda: PersonPlays(), 2, seed=0)
    plain = EnvSet(lambda: gym.make("CartPole-v1"), 1, seed=0)
    ended = []
    for _ in range(40):
        obs = envs.obs.copy()
        mine = np.zeros(2, np.int64)  # the policy always says 0
        _, _, _, _, _, e = envs.step(mine)
        np.testing.assert_array_equal(envs.taken(mine), [expert(o) for o in obs])
        ended += e
        plain.step(np.zeros(1, np.int64))
        assert plain.taken(np.zeros(1, np.int64)).tolist() == [0]  # no report: the policy's own
    envs2 = EnvSet(lambda: PersonPlays(max_episode_steps=10), 1, seed=0)
    for _ in range(10):
        _, _, _, _, _, e = envs2.step(np.zeros(1, np.int64))
    assert [x.demo for x in e] == [True]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_live_worker_sends_the_persons_actions_and_flags_the_episodes(tmp_path, mosquitto, monkeypatch):
    from pathlib import Path

    from helpers.configs import cartpole_dqn_toml
    from helpers.e2e import start_learner, start_worker
    from helpers.watch import Watcher

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # the workers import this module's env
    run = "e2e-person"
    cfg = tmp_path / "person.toml"
    cfg.write_text(cartpole_dqn_toml(run, env={"id": "test_demos_worker:PersonCartPole-v0"}))
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    worker = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: "w0" in w.last_batch and len(w.episodes) >= 2, 60, "a batch and two episodes")
        batch = watch.last_batch["w0"]
        obs, actions = np.asarray(batch.arrays["obs"]), np.asarray(batch.arrays["action"])
        # every recorded action is the person's (the policy explores at epsilon 1 here: half would differ)
        assert actions.tolist() == [expert(o) for o in obs]
        assert all(e.get("demo") is True for e in watch.episodes[:2]), watch.episodes[:2]
        watch.wait(lambda w: w.metrics and w.metrics[-1]["samples"] > 0, 30, "samples admitted")
        assert sum(watch.metrics[-1]["rejected"].values()) == 0
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()
