"""Curves by env step: each greedy evaluation keeps the env steps its model was trained on (the
learner's count when it published the weights), in the evaluator's result, ``evaluations.csv``,
``summary.json``'s ``curve``, telemetry's eval point and ``Result.curve``."""

from __future__ import annotations

import csv
import json

import numpy as np
from helpers.evaluations import judged

from mqttrl.api import Result, make_config
from mqttrl.nodes.evaluator import model_env_steps
from mqttrl.nodes.telemetry import RunView
from mqttrl.plugin.algorithm import INGESTED_KEY
from mqttrl.state.run_dir import write_resolved
from mqttrl.trainer.record import RunRecord
from mqttrl.wire import decode_weights, encode_weights
from mqttrl.wire.episodes import EpisodeStats
from mqttrl.wire.evaluation import Evaluation
from mqttrl.wire.metrics import LearnerMetrics


def _weights(version: int, info: dict):
    tensors = {"w": np.zeros(2, np.float32)}
    return decode_weights(encode_weights(version, "dqn", "r", tensors, info))


def test_the_weights_info_carries_the_learners_env_steps_to_the_evaluator():
    assert model_env_steps(_weights(3, {INGESTED_KEY: 1234})) == 1234
    for bad in ({}, {INGESTED_KEY: -1}, {INGESTED_KEY: "12"}, {INGESTED_KEY: True}, {INGESTED_KEY: 1.5}):
        assert model_env_steps(_weights(3, bad)) is None


def _result(version: int, mean: float, **extra) -> dict:
    return {**Evaluation(version, 2, mean, 0.0, mean, mean, eval_s=0.5).to_json(), **extra}


def test_the_record_keeps_each_evaluation_at_its_models_env_steps(tmp_path):
    cfg = make_config(None, max_seconds=5)
    rec = RunRecord(cfg, tmp_path)
    rec.on_episode("w0", EpisodeStats.from_json({"env": 0, "return": 1.0, "length": 1, "env_steps": 5000}))
    # the result comes in when the workers are at 5000 steps; the model was published at 3000
    rec.on_evaluation(judged(3, 50.0, eval_s=0.1, env_steps=3000), None, b"m3")
    rec.on_evaluation(judged(4, 60.0, eval_s=0.1), None, b"m4")  # a learner that does not say
    write_resolved(cfg, tmp_path / "config.json")
    summary = {**rec.summary("time budget", 9.0, RunView(episodes=1, workers=1), 4)}
    rec.close()
    assert [(c["env_steps"], c["model_version"], c["mean"]) for c in summary["curve"]] == [
        (3000, 3, 50.0),
        (5000, 4, 60.0),
    ]
    with open(tmp_path / "evaluations.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["env_steps"], r["model_env_steps"]) for r in rows] == [("5000", "3000"), ("5000", "")]
    summary["run_dir"] = str(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    r = Result.from_run_dir(tmp_path)
    assert [(steps, mean) for steps, _, mean in r.curve] == [(3000, 50.0), (5000, 60.0)]


def test_telemetry_keeps_the_env_steps_of_an_evaluation(shared_mosquitto):
    from mqttrl.nodes.telemetry import TelemetryNode
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.wire import encode_json

    points = []

    class Keep:
        def write(self, batch):
            points.extend(batch)

        def close(self):
            pass

    node = TelemetryNode(BrokerSettings(url=shared_mosquitto.url), "r", [Keep()])
    node.on_eval("train", encode_json(_result(7, 80.0, env_steps=4200)))
    node.on_eval("train", encode_json(_result(8, 81.0)))
    evals = [p for p in points if p.measurement == "eval"]
    assert evals[0].fields["env_steps"] == 4200 and "env_steps" not in evals[1].fields


def test_scalar_storages_put_an_evaluation_at_its_models_env_steps():
    from mqttrl.plugin import ScalarMapper
    from mqttrl.plugin.storage import Point

    m = ScalarMapper()
    tags = {"run": "r", "worker": "w0"}
    m.map([Point("episode", tags, {"return": 1.0, "length": 1, "env_steps": 9000}, 0.0)])
    (s,) = m.map([Point("eval", {"run": "r", "evaluator": "e"}, {"mean": 5.0, "env_steps": 7000}, 1.0)])
    assert (s.step, s.values["eval/mean"]) == (7000, 5.0)  # not the run's 9000
    (s,) = m.map([Point("eval", {"run": "r", "evaluator": "e"}, {"mean": 6.0}, 2.0)])
    assert s.step == 9000  # an evaluation that does not say: the run's step


def test_the_summary_counts_at_least_the_env_steps_of_its_last_evaluated_model(tmp_path):
    """A model published after the learner's last metrics row (the final one, at the budget's end)
    was trained on more transitions than that row and the workers' last episodes say: the summary's
    env_steps is a lower bound of the steps made, so it is at least the curve's last point."""
    cfg = make_config(None, max_seconds=5)
    rec = RunRecord(cfg, tmp_path)
    rec.on_episode("w0", EpisodeStats.from_json({"env": 0, "return": 1.0, "length": 1, "env_steps": 5000}))
    rec.on_evaluation(judged(7, 50.0, eval_s=0.1, env_steps=5300), None, b"m7")
    summary = rec.summary("time budget", 9.0, RunView(1, learner=LearnerMetrics(0, 7, samples=5200), workers=1), 7)
    rec.close()
    assert summary["curve"][-1]["env_steps"] == 5300
    assert summary["env_steps"] == 5300


def test_the_record_counts_env_steps_from_heartbeats_between_long_episodes(tmp_path):
    """A game whose episodes are thousands of steps long (Freeway: 2,500, all 8 envs ending together)
    reports env steps with its episodes every 20,000: the budget in env steps must not wait for them."""
    rec = RunRecord(make_config(None, max_seconds=5), tmp_path)
    rec.on_env_steps("w0", 6_100)
    rec.on_env_steps("w1", 3_000)
    assert rec.env_steps == 9_100
    # an episode report that comes in later with an older count does not take steps back
    rec.on_episode("w0", EpisodeStats.from_json({"env": 0, "return": 1.0, "length": 2500, "env_steps": 5000}))
    assert rec.env_steps == 9_100
    rec.on_env_steps("w1", 4_000)
    assert rec.env_steps == 10_100
    rec.close()
    rec.on_env_steps("w0", 99_000)  # after the run's end nothing more is counted
    assert rec.env_steps == 10_100


def test_telemetry_hands_each_heartbeats_env_steps_on(shared_mosquitto):
    from mqttrl.nodes.telemetry import TelemetryNode
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.wire.heartbeat import Heartbeat

    seen = []
    node = TelemetryNode(
        BrokerSettings(url=shared_mosquitto.url), "r", [], on_env_steps=lambda w, s: seen.append((w, s))
    )
    node.on_heartbeat("w0", Heartbeat(model_version=3, env_steps=4321).encode())
    node.on_heartbeat("w1", Heartbeat(model_version=3, env_steps=17).encode())
    assert seen == [("w0", 4321), ("w1", 17)]
    assert node.workers["w0"].env_steps == 4321
