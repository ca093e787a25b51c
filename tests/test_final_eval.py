"""`mqttrl train`'s evaluator at the end of a budget (train.final_eval): the final model is
evaluated after what is under way, and Ctrl-C ends the wait. A real evaluator (CartPole, the DQN
plugin's own exported weights), its evaluation slowed where a test needs it to be under way."""

from __future__ import annotations

import threading
import time

import pytest

from mqttrl.config import from_dict
from mqttrl.envs.make import make_env
from mqttrl.local import train as train_mod
from mqttrl.local.train import Evaluator
from mqttrl.plugin.manager import get_registry
from mqttrl.wire import encode_weights


def weights(version: int) -> bytes:
    registry = get_registry()
    config = from_dict({"run": "fe", "env": {"id": "CartPole-v1"}}, lambda name: registry.algorithm(name).params)
    env = make_env("CartPole-v1", {}, registry)
    learner = registry.algorithm("dqn").make_learner(
        config.algorithm.params, env.observation_space, env.action_space, "cpu", 0
    )
    env.close()
    tensors, info = learner.export_weights()
    return encode_weights(version, "dqn", "fe", tensors, info)


@pytest.fixture
def evaluator():
    registry = get_registry()
    config = from_dict(
        {"run": "fe", "env": {"id": "CartPole-v1"}, "train": {"eval_episodes": 2}},
        lambda name: registry.algorithm(name).params,
    )
    results: list[int] = []
    ev = Evaluator(config, None, lambda version, returns, eval_s, payload: results.append(version))
    ev.results = results
    ev.start()
    yield ev
    ev.stop()


def slow_evaluations(monkeypatch, seconds: float) -> None:
    real = train_mod.evaluate

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "evaluate", slow)


def test_the_final_model_is_evaluated_after_the_one_under_way(evaluator, monkeypatch):
    slow_evaluations(monkeypatch, 0.5)
    assert evaluator.submit(weights(3))
    time.sleep(0.1)  # version 3 is under way
    assert evaluator.final(weights(7), timeout=30)
    assert evaluator.results == [3, 7] and not evaluator.is_alive()


def test_ctrl_c_ends_the_wait_for_the_final_evaluation(evaluator, monkeypatch):
    slow_evaluations(monkeypatch, 3.0)
    assert evaluator.submit(weights(3))
    time.sleep(0.1)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    assert not evaluator.final(weights(7), timeout=60, cancel=cancel)
    assert time.monotonic() - t0 < 1.5  # not the 3 s of the evaluation under way, nor the timeout
    assert evaluator.results == []


def test_a_final_evaluation_that_overruns_its_time_is_given_up(evaluator, monkeypatch):
    slow_evaluations(monkeypatch, 3.0)
    t0 = time.monotonic()
    assert not evaluator.final(weights(7), timeout=0.5)
    assert 0.4 < time.monotonic() - t0 < 1.5
    evaluator.stop()  # never blocks, although the queue holds the end already
