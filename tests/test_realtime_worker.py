"""The worker shell in real time (WorkerNode.run over a fake MQTT node, DQN) on a fake clock:
simulated game PCs advance with that clock, so the tests run in milliseconds and every figure
is exact: no missed action, no overrun, the action history in the samples, per-block timing
and control-period errors in heartbeats, and games paused while the learner holds workers back."""

from __future__ import annotations

import functools
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from helpers.fake_node import FakeNode

from mqttrl.config import AlgorithmSection, RunConfig
from mqttrl.envs import realtime as realtime_mod
from mqttrl.envs.realtime_clock import ControlClock
from mqttrl.envs.realtime_sim import WallClockGame
from mqttrl.nodes.worker import envs as envs_mod
from mqttrl.nodes.worker import node as node_mod
from mqttrl.nodes.worker.loops import RealTimeLoop
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, Message
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import decode_batch, decode_json, encode_json, encode_weights
from mqttrl_plugins.dqn.common import DQNParams

RUN = "rt"


class FakeTime:
    def __init__(self):
        self.t = 1000.0
        self.lock = threading.Lock()

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        with self.lock:
            self.t += max(0.0, d)


def start_worker(
    monkeypatch, ft: FakeTime, paused: bool, max_env_steps: int, env=None, params=None, game=None, priority=0
):
    games: list[WallClockGame] = []
    if game is None:  # CartPole's resets take microseconds: never a background one, whatever the machine's load
        monkeypatch.setattr(realtime_mod, "RESET_JOIN_S", 10.0)

    def make_env(env_id, kwargs, registry):
        games.append((game or WallClockGame)("CartPole-v1", world_hz=50.0, clock=ft.now, sleep=ft.sleep))
        return games[-1]

    monkeypatch.setattr(envs_mod, "make_env", make_env)
    monkeypatch.setattr(envs_mod, "ControlClock", functools.partial(ControlClock, now=ft.now, sleep=ft.sleep))
    settings = BrokerSettings(url="mqtt://127.0.0.1:1", protocol="5")  # never connects: the node is a fake
    worker = node_mod.WorkerNode(settings, RUN, name="w0", num_envs=2, seed=1, wait_timeout=10)
    worker.client = FakeNode(settings)
    params = params or DQNParams(hidden=[16])
    cfg = RunConfig(run=RUN, algorithm=AlgorithmSection(name="dqn", params=params)).to_dict()
    cfg["env"].update({"control_hz": 50.0, "act_buf_len": 2, **(env or {})})
    # on the fake clock the loop never sleeps: not at SCHED_FIFO (the priority has its own test)
    cfg["worker"].update(heartbeat_interval_s=0.001, batch_size=32, realtime_priority=priority)
    topics = Topics(RUN)
    obs_space, act_space = gym.spaces.Box(-np.inf, np.inf, (4 + 2 * 2,), np.float32), gym.spaces.Discrete(2)
    dqn = get_registry().algorithm("dqn")
    tensors, winfo = dqn.make_learner(params, obs_space, act_space, "cpu", 0).export_weights()
    inbox = worker.client.inbox
    inbox.put(Message(topics.config, encode_json(cfg), True))
    inbox.put(Message(topics.learner_state, encode_json({"status": "online"}), True))
    inbox.put(Message(topics.flow, encode_json({"pause": paused}), True))
    inbox.put(Message(topics.weights, encode_weights(0, "dqn", RUN, tensors, winfo), True))
    t = threading.Thread(target=worker.run, kwargs={"max_env_steps": max_env_steps}, daemon=True)
    t.start()
    return worker, games, topics, t


def finish(worker, t) -> None:
    t.join(30)
    if t.is_alive():
        worker.stop()
        pytest.fail(f"the worker did not finish (env steps {worker.env_steps})")


def published(worker, topics, kind):
    return [p for topic, p in worker.client.published if topics.parse(topic)[0] == kind]


def test_a_real_time_worker_keeps_every_period(monkeypatch):
    ft = FakeTime()
    worker, games, topics, t = start_worker(monkeypatch, ft, paused=False, max_env_steps=400)
    finish(worker, t)
    assert worker.env_steps == 400
    # every action reached its game before the tick it was meant for; one tick a period
    assert sum(g.missed for g in games) == 0 and sum(g.early_reads for g in games) == 0
    assert sum(g.total_ticks for g in games) == 400
    beats = [decode_json(p) for p in published(worker, topics, Kind.HEARTBEAT)]
    rt = [b["realtime"] for b in beats if "realtime" in b]
    assert rt and all(r["overruns"] == 0 and r["skipped"] == 0 for r in rt)
    assert worker.period_stats.periods == 400 and worker.period_stats.overruns == 0
    assert worker.period_stats.max_s == pytest.approx(0.0)
    blocks = {k for b in beats for k in b["timing"]}
    assert {"forward", "env_step", "wait"} <= blocks
    assert {"forward", "env_step", "wait", "encode", "publish", "receive"} <= set(worker.blocks.total)
    # 200 periods of 20 ms (fake) slept out: the period's time, less what the loop did in it
    assert worker.blocks.total["wait"] == pytest.approx(200 * 0.02, rel=0.01)
    # the samples carry the last two actions, one-hot, after the game's 4 numbers
    batches = [decode_batch(p) for p in published(worker, topics, Kind.SAMPLES)]
    obs = np.concatenate([b.arrays["obs"] for b in batches])
    assert obs.shape[1] == 8 and set(np.unique(obs[:, 4:])) <= {0.0, 1.0}


def test_a_worker_held_back_pauses_its_games(monkeypatch):
    """The learner's flow control holds workers back: the games are paused (the world stands
    still while 5 s pass), resumed at once when the hold is lifted; the paused time is reported."""
    ft = FakeTime()
    worker, games, topics, t = start_worker(monkeypatch, ft, paused=True, max_env_steps=100)
    deadline = time.monotonic() + 10
    while not worker.games_paused and time.monotonic() < deadline:
        time.sleep(0.005)
    assert worker.games_paused and worker.env_steps == 0
    ft.sleep(5.0)
    worker.client.inbox.put(Message(topics.flow, encode_json({"pause": False}), True))
    finish(worker, t)
    assert worker.env_steps == 100 and not worker.games_paused
    assert sum(g.total_ticks for g in games) == 100  # not one tick in the 5 s paused
    assert all(g.paused_s == pytest.approx(5.0) for g in games)
    rt = [decode_json(p).get("realtime") for p in published(worker, topics, Kind.HEARTBEAT)]
    assert rt[-1]["paused_s"] == pytest.approx(10.0)  # two games, 5 s each
    assert rt[-1]["overruns"] == 0


def test_the_worker_sets_the_game_speed_the_config_asks_for(monkeypatch):
    ft = FakeTime()
    worker, games, _topics, t = start_worker(monkeypatch, ft, paused=False, max_env_steps=20, env={"game_speed": 3.0})
    finish(worker, t)
    assert len(games) == 2 and all(g.speeds == [3.0] for g in games)


def test_the_worker_leaves_the_speed_alone_by_default(monkeypatch):
    ft = FakeTime()
    worker, games, _topics, t = start_worker(monkeypatch, ft, paused=False, max_env_steps=20)
    finish(worker, t)
    assert all(g.speeds == [] for g in games)


class SlowReset(WallClockGame):
    """Its resets after the first take 30 ms of real time (the worker's clock is fake: the
    other game is stepped many times meanwhile)."""

    def reset(self, *, seed=None, options=None):
        if self.total_ticks:
            time.sleep(0.03)
        return super().reset(seed=seed, options=options)


def test_a_game_resetting_in_the_background_leaves_no_row_in_the_samples(monkeypatch):
    """Two games, slow resets: while one resets (in the background) the other is played on,
    those steps not recorded (the actor takes every game's row at once); every transition
    recorded is a real one: each env step counted is one control period read, and the
    transitions sent are those steps less the ones played in a gap."""
    ft = FakeTime()
    played_not_recorded = []
    orig = RealTimeLoop.gap_step

    def gap_step(self, out, record):
        envs = self.envs
        played_not_recorded.append(envs.num_envs - len(envs.resetting_rows) - len(envs.failed))
        return orig(self, out, record)

    monkeypatch.setattr(RealTimeLoop, "gap_step", gap_step)
    params = DQNParams(hidden=[16], n_step=1)
    worker, games, topics, t = start_worker(
        monkeypatch, ft, paused=False, max_env_steps=600, params=params, game=SlowReset
    )
    finish(worker, t)
    assert played_not_recorded, "no reset went to the background"
    assert worker.env_steps == worker.period_stats.periods  # no phantom step while resetting
    sent = sum(len(decode_batch(p).arrays["reward"]) for p in published(worker, topics, Kind.SAMPLES))
    assert sent == worker.env_steps - sum(played_not_recorded)


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no sched_setscheduler on this OS")
def test_the_control_thread_reads_at_real_time_priority_and_does_its_chores_at_the_ordinary_one(monkeypatch):
    policies: dict[str, set] = {"read": set(), "heartbeat": set()}

    class Recording(WallClockGame):
        def read_obs(self):
            policies["read"].add(os.sched_getscheduler(0))
            return super().read_obs()

    orig = node_mod.WorkerNode.heartbeat

    def heartbeat(self):
        policies["heartbeat"].add(os.sched_getscheduler(0))
        return orig(self)

    monkeypatch.setattr(node_mod.WorkerNode, "heartbeat", heartbeat)
    ft = FakeTime()
    worker, _games, _topics, t = start_worker(
        monkeypatch, ft, paused=False, max_env_steps=40, game=Recording, priority=5
    )
    finish(worker, t)
    if worker.priority.enabled:  # root or CAP_SYS_NICE here
        assert policies["read"] == {os.SCHED_FIFO}
    else:
        assert policies["read"] == {os.SCHED_OTHER}
    assert policies["heartbeat"] == {os.SCHED_OTHER}  # a chore
