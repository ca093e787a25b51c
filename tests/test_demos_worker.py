"""A live worker whose game a person plays: the env reports the action really taken in
``info["demo_action"]``; the worker records that action instead of its own and flags the episode
as a demonstration (one short end-to-end run over a real mosquitto, and the EnvSet rule alone),
and with ``worker.record_demos_to`` writes the person's whole episodes to a dataset that reads back
whole (:mod:`mqttrl.demos.live`: the recorder alone, and a live worker over mosquitto)."""

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


class PersonLetsGo(PersonPlays):
    """The person plays the first ``hands_off_after`` steps of each episode, then the policy does."""

    def __init__(self, hands_off_after: int, **kwargs):
        super().__init__(**kwargs)
        self.hands_off_after, self.t = hands_off_after, 0

    def reset(self, **kwargs):
        self.t = 0
        return super().reset(**kwargs)

    def step(self, action):
        self.t += 1
        if self.t > self.hands_off_after:
            self._obs, reward, terminated, truncated, info = self.env.step(action)
            return self._obs, reward, terminated, truncated, info
        return super().step(action)


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
        # the heartbeats count the person's steps: here all of them (issue 45's takeover share)
        watch.wait(lambda w: w.heartbeats.get("w0", {}).get("env_steps", 0) > 0, 30, "a heartbeat with steps")
        hb = watch.heartbeats["w0"]
        assert hb["person_steps"] == hb["env_steps"] > 0, hb
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()


def test_the_recorder_writes_a_persons_whole_episodes_only(tmp_path):
    from mqttrl.config import RunConfig
    from mqttrl.demos import read_dataset
    from mqttrl.demos.live import live_recorder

    made = iter([PersonPlays(max_episode_steps=12), PersonLetsGo(5, max_episode_steps=12)])
    envs = EnvSet(lambda: next(made), 2, seed=0)
    cfg = RunConfig()
    cfg.env.id = "PersonCartPole-v0"
    cfg.worker.record_demos_to = str(tmp_path / "demos")
    rec = live_recorder(cfg, envs, "worker:w0")
    assert rec is not None and not (tmp_path / "demos").exists()  # nothing until a person's episode ends
    policy = np.zeros(2, np.int64)
    for _ in range(60):
        out = envs.step(policy)
        obs, rewards, next_obs, terminated, truncated, _ = out
        rec.step(envs, obs, envs.taken(policy), rewards, next_obs, terminated, truncated)
    ds = read_dataset(tmp_path / "demos")  # the same checks as any dataset, whole
    assert rec.written == len(ds.episodes) >= 3 and rec.skipped >= 3  # env 1's episodes: the policy took over
    for ep in ds.episodes:
        assert ep.actions.tolist() == [expert(o) for o in ep.obs[:-1]]  # every step the person's
        assert ep.played_by == "worker:w0" and ep.steps <= 12
        assert ep.terminated or ep.steps == 12
    assert RunConfig().worker.record_demos_to == ""  # off by default
    assert live_recorder(RunConfig(), envs, "w") is None


@pytest.mark.e2e
@pytest.mark.slow
def test_a_live_worker_writes_the_persons_episodes_to_a_dataset(tmp_path, mosquitto, monkeypatch):
    from pathlib import Path

    from helpers.configs import cartpole_dqn_toml
    from helpers.e2e import start_learner, start_worker
    from helpers.watch import Watcher

    from mqttrl.demos import read_dataset
    from mqttrl.demos.dataset import read_manifest

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    run = "e2e-person-rec"
    demos = tmp_path / "worker-demos"
    cfg = tmp_path / "person.toml"
    cfg.write_text(
        cartpole_dqn_toml(
            run, env={"id": "test_demos_worker:PersonCartPole-v0"}, worker={"record_demos_to": str(demos)}
        )
    )
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    worker = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: len(w.episodes) >= 4, 60, "four episodes")
        watch.wait(
            lambda w: (demos / "manifest.json").exists() and len(read_manifest(demos)["episodes"]) >= 4,
            30,
            "four episodes written",
        )
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()
    ds = read_dataset(demos)  # checked whole, as `mqttrl train --demos` reads it
    assert ds.env_id == "test_demos_worker:PersonCartPole-v0" and len(ds.episodes) >= 4
    for ep in ds.episodes:
        assert ep.actions.tolist() == [expert(o) for o in ep.obs[:-1]]
        assert ep.played_by == "worker:w0"
    # the episodes the worker reported as demonstrations have the dataset's returns
    reported = [e["return"] for e in watch.episodes if e.get("demo")]
    assert [round(ep.episode_return, 3) for ep in ds.episodes[:4]] == [round(r, 3) for r in reported[:4]]
