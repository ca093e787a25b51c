"""A worker core and a worker node without a broker, and what it published (tests/test_worker_core.py, test_worker_idle.py)."""

from __future__ import annotations

import attrs
import gymnasium as gym
import numpy as np

from helpers.fake_node import FakeNode
from mqttrl.config import AlgorithmSection, RunConfig, from_dict
from mqttrl.nodes.worker import envs as envs_mod
from mqttrl.nodes.worker import node as node_mod
from mqttrl.nodes.worker.core import WorkerCore, WorkerRules
from mqttrl.plugin.algorithm import AlgorithmInfo
from mqttrl.transport.client import BrokerSettings, Message
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import FieldSpec, SampleSpec, encode_json, encode_weights


@attrs.define
class FakeParams:
    share_steps: int = 4


# ---- the shell over a fake MQTT node ------------------------------------------------------
class FakeForward:
    def __init__(self):
        self.closed = False

    def load_weights(self, tensors, info):
        pass

    def __call__(self, obs):
        return {"q": np.zeros((len(obs), 2), np.float32)}

    def close(self):
        self.closed = True


class FakeShareActor:
    """A sync actor whose share is ``share_steps`` vector steps; it records what the worker does."""

    def __init__(self, params, obs_space, act_space, ctx, forward):
        self.share_steps = params.share_steps
        self.num_envs = ctx.num_envs
        self.forward = forward
        self.steps = 0
        self.loaded: list[int] = []
        self.discards = 0

    def load_weights(self, tensors, info):
        self.loaded.append(int(tensors["w"][0]))

    def act(self, obs, greedy=False):
        self.forward(obs)
        return np.zeros(len(obs), np.int64), {}

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated):
        self.steps += 1

    def truncate(self, env_index, final_obs):
        pass

    def pending(self):
        return self.steps * self.num_envs if self.steps >= self.share_steps else 0

    def take(self):
        n, self.steps = self.steps * self.num_envs, 0
        return {"x": np.zeros((n, 1), np.float32)}

    def discard(self):
        self.discards += 1
        self.steps = 0


RUN = "r1"


def parse(data: dict) -> RunConfig:
    return from_dict(data, lambda name: FakeParams)


def config_payload(run: str = RUN, algorithm: str = "fake", **worker) -> bytes:
    cfg = RunConfig(run=run, algorithm=AlgorithmSection(name=algorithm, params=FakeParams()))
    data = cfg.to_dict()
    data["worker"].update(worker)
    return encode_json(data)


def weights(version: int, run: str = RUN, algorithm: str = "fake", epoch: int = 0) -> bytes:
    return encode_weights(version, algorithm, run, {"w": np.full(2, version, np.float32)}, epoch=epoch)


def make_core(sync: bool = False, configured: bool = True, **rules) -> WorkerCore:
    core = WorkerCore(RUN, "w0", parse, incarnation="inc-1")
    if configured:
        core.on_config(config_payload())
    core.begin(WorkerRules(sync=sync, **rules))
    return core


class FakeRegistry:
    def __init__(self, mode: str):
        self.info = AlgorithmInfo(
            name="fake",
            description="a fake for worker tests",
            params=FakeParams,
            mode=mode,
            sample_spec=lambda p, o, a: SampleSpec({"x": FieldSpec("float32", (1,))}),
            make_actor=FakeShareActor,
            make_learner=lambda *a: None,
            make_forward=lambda params, obs_space, act_space, backend, seed=0: FakeForward(),
            backends=("numpy",),
        )

    def algorithm(self, name):
        assert name == "fake"
        return self.info


def fake_worker(monkeypatch, mode: str, **worker_settings) -> node_mod.WorkerNode:
    registry = FakeRegistry(mode)
    monkeypatch.setattr(node_mod, "get_registry", lambda: registry)
    monkeypatch.setattr(envs_mod, "make_env", lambda env_id, kwargs, registry: gym.make("CartPole-v1"))
    settings = BrokerSettings(url="mqtt://127.0.0.1:1", protocol="5")  # never connects: the node is a fake
    worker = node_mod.WorkerNode(settings, RUN, name="w0", num_envs=2, seed=1)
    worker.client = FakeNode(settings)
    topics = Topics(RUN)
    worker.client.inbox.put(Message(topics.config, config_payload(heartbeat_interval_s=0.01, **worker_settings), True))
    worker.client.inbox.put(Message(topics.weights, weights(0), True))
    return worker


def published(worker, kind: Kind) -> list[bytes]:
    topics = Topics(RUN)
    return [p for t, p in worker.client.published if topics.parse(t)[0] == kind]
