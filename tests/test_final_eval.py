"""The evaluator node at the end of a budget (``mqttrl train``'s train.final_eval): the final model
is evaluated after what is under way, and Ctrl-C ends the wait. A real evaluator node on a real
broker (CartPole, the DQN plugin's own exported weights, published as the learner does), its
evaluation slowed where a test needs it to be under way."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from mqttrl.config import from_dict
from mqttrl.envs.make import make_env
from mqttrl.nodes import evaluator as evaluator_mod
from mqttrl.nodes.evaluator import EvaluatorNode
from mqttrl.plugin.algorithm import INGESTED_KEY
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.topics import Topics
from mqttrl.wire import encode_weights

RUNS = (f"fe{i}" for i in itertools.count())


def weights(version: int, run: str, env_steps: int | None = None) -> bytes:
    registry = get_registry()
    config = from_dict({"run": run, "env": {"id": "CartPole-v1"}}, lambda name: registry.algorithm(name).params)
    env = make_env("CartPole-v1", {}, registry)
    learner = registry.algorithm("dqn").make_learner(
        config.algorithm.params, env.observation_space, env.action_space, "cpu", 0
    )
    env.close()
    tensors, info = learner.export_weights()
    if env_steps is not None:  # as the learner says it at publication
        info = {**info, INGESTED_KEY: env_steps}
    return encode_weights(version, "dqn", run, tensors, info, published_at=time.time())


class Run:
    """An evaluator node in a thread (as ``mqttrl train`` runs it) and a publisher of weights."""

    def __init__(self, broker: BrokerSettings, every_s: float = 0.0, every_env_steps: int = 0):
        registry = get_registry()
        self.run = next(RUNS)
        config = from_dict(
            {"run": self.run, "env": {"id": "CartPole-v1"}, "train": {"eval_episodes": 2}},
            lambda name: registry.algorithm(name).params,
        )
        self.results: list[int] = []
        self.node = EvaluatorNode(
            broker,
            self.run,
            2,
            every_s=every_s,
            name="train",
            config=config,
            on_result=lambda result, w, payload: self.results.append(result.evaluation.model_version),
            every_env_steps=every_env_steps,
        ).start()
        self.thread = threading.Thread(target=self.node.serve, daemon=True)
        self.thread.start()
        self.publisher = MqttClient(broker, client_id=f"fe-publisher-{self.run}").start(wait=30)

    def publish(self, version: int, env_steps: int | None = None) -> None:
        payload = weights(version, self.run, env_steps)
        self.publisher.publish(Topics(self.run).weights, payload, qos=1, retain=True)

    def wait_evaluating(self, evaluate_calls: list) -> None:
        deadline = time.monotonic() + 20
        while not evaluate_calls:
            assert time.monotonic() < deadline, "no evaluation started"
            time.sleep(0.02)

    def is_alive(self) -> bool:
        return self.thread.is_alive()


@pytest.fixture
def evaluator(shared_mosquitto):
    run = Run(BrokerSettings(url=shared_mosquitto.url))
    yield run
    run.node.stop()
    run.publisher.stop(flush_timeout=1)


def slow_evaluations(monkeypatch, seconds: float) -> list:
    """Each evaluation takes ``seconds`` longer; returns the list of model versions it started."""
    real, started = evaluator_mod.evaluate_model, []

    def slow(actor, make, w, episodes):
        started.append(w.version)
        time.sleep(seconds)
        return real(actor, make, w, episodes)

    monkeypatch.setattr(evaluator_mod, "evaluate_model", slow)
    return started


def test_the_final_model_is_evaluated_after_the_one_under_way(evaluator, monkeypatch):
    started = slow_evaluations(monkeypatch, 0.5)
    evaluator.publish(3)
    evaluator.wait_evaluating(started)  # version 3 is under way
    evaluator.publish(7)
    assert evaluator.node.final(timeout=30)
    assert evaluator.results == [3, 7] and not evaluator.is_alive()


def test_ctrl_c_ends_the_wait_for_the_final_evaluation(evaluator, monkeypatch):
    started = slow_evaluations(monkeypatch, 3.0)
    evaluator.publish(3)
    evaluator.wait_evaluating(started)
    evaluator.publish(7)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    assert not evaluator.node.final(timeout=60, cancel=cancel)
    assert time.monotonic() - t0 < 1.5  # not the 3 s of the evaluation under way, nor the timeout
    assert evaluator.results == []


def test_a_final_evaluation_that_overruns_its_time_is_given_up(evaluator, monkeypatch):
    started = slow_evaluations(monkeypatch, 3.0)
    evaluator.publish(7)
    evaluator.wait_evaluating(started)
    t0 = time.monotonic()
    assert not evaluator.node.final(timeout=0.5)
    assert 0.4 < time.monotonic() - t0 < 1.5
    t0 = time.monotonic()
    evaluator.node.stop()  # never blocks, although the final evaluation was asked for already
    assert time.monotonic() - t0 < 0.1


def test_an_evaluated_model_is_not_evaluated_again_at_the_end(evaluator, monkeypatch):
    started = slow_evaluations(monkeypatch, 0.0)
    evaluator.publish(5)
    evaluator.wait_evaluating(started)
    deadline = time.monotonic() + 20
    while evaluator.results != [5]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert evaluator.node.final(timeout=30)
    assert evaluator.results == [5] and started == [5]


def test_evaluation_seeds_depend_on_the_model_version_only():
    """Every evaluator gives a model the same start states; successive versions get disjoint ones."""
    from mqttrl.envs.rollout import EVAL_SEED_BASE, evaluation_seed

    assert evaluation_seed(0, 20) == EVAL_SEED_BASE == 10**6
    assert evaluation_seed(3, 20) == 10**6 + 60
    seeds = [set(range(evaluation_seed(v, 20), evaluation_seed(v, 20) + 20)) for v in range(5)]
    assert all(not (a & b) for a, b in itertools.combinations(seeds, 2))


def test_by_data_the_first_model_past_each_mark_is_evaluated(shared_mosquitto):
    """``train.eval_every_env_steps = 1000`` (and a period of an hour, which never comes): of models
    trained on 400, 1,200, 1,500, 2,100, 2,900 and 3,100 env steps, those at 1,200, 2,100 and 3,100."""
    run = Run(BrokerSettings(url=shared_mosquitto.url), every_s=3600.0, every_env_steps=1000)
    try:
        expected = []
        for version, steps in enumerate((400, 1200, 1500, 2100, 2900, 3100), 1):
            run.publish(version, steps)
            if steps in (1200, 2100, 3100):
                expected.append(version)
                deadline = time.monotonic() + 20
                while run.results != expected:
                    assert time.monotonic() < deadline, (run.results, expected)
                    time.sleep(0.02)
            else:
                time.sleep(0.6)  # the loop looks every 0.2 s: it would have started by now
                assert run.results == expected, (steps, run.results)
    finally:
        run.node.stop()
        run.publisher.stop(flush_timeout=1)
