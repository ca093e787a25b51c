"""The best model survives restarts and is replaced only by a better one (mqttrl/state/best.py).

Against a real mosquitto: a telemetry node restarted mid-run learns the best so far from the
learner's retained state (here a paho client plays the learner) and asks for no worse model;
greedy evaluations beat training returns; a real learner refuses a worse best even when asked,
and still knows its best after a restart.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from helpers.evaluations import judged
from helpers.procs import node_env, script

from mqttrl.cli.common import load
from mqttrl.nodes.learner.node import LearnerNode
from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings
from mqttrl.state.best import GREEDY_EVAL, TRAINING_RETURNS, BestScore, read_score, write_best_dir
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_json, decode_weights, encode_json
from mqttrl.wire.evaluation import Evaluation


# ---- the ranking ---------------------------------------------------------------------------
def test_greedy_eval_beats_training_returns_and_within_a_kind_higher_wins():
    train_high = BestScore(480.0, 9, TRAINING_RETURNS, 20)
    greedy_low = BestScore(120.0, 3, GREEDY_EVAL, 10)
    assert greedy_low.beats(train_high) and not train_high.beats(greedy_low)
    assert BestScore(121.0, 4, GREEDY_EVAL, 10).beats(greedy_low)
    assert not BestScore(119.0, 4, GREEDY_EVAL, 10).beats(greedy_low)
    assert not greedy_low.beats(greedy_low)  # equal is not better
    assert train_high.beats(None)


def test_score_file_round_trip_and_a_legacy_best_json(tmp_path):
    score = BestScore(300.5, 12, GREEDY_EVAL, 10)
    write_best_dir(tmp_path / "best", {"score.json": json.dumps(score.to_json()).encode(), "w": b"x"})
    assert read_score(tmp_path / "best") == score
    assert json.loads((tmp_path / "best" / "score.json").read_text()) == {
        "score": 300.5,
        "model_version": 12,
        "judged_by": "greedy_eval",
        "episodes": 10,
    }
    legacy = tmp_path / "old"
    legacy.mkdir()
    (legacy / "best.json").write_text(json.dumps({"mean_return": 313.6, "model_version": 40, "window": 20}))
    assert read_score(legacy) == BestScore(313.6, 40, TRAINING_RETURNS, 20)
    assert read_score(tmp_path / "nothing") is None


# ---- telemetry against mosquitto, the learner played by a paho client --------------------
class FakeLearner:
    """Publishes what a learner publishes (retained state, evaluations, episodes) and collects
    the quicksave commands telemetry sends."""

    def __init__(self, port: int, run: str):
        self.tp = Topics(run)
        self.commands: queue.Queue = queue.Queue()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"fake-learner-{time.monotonic_ns()}", protocol=mqtt.MQTTv5
        )
        self.c.on_message = lambda c, u, m: self.commands.put(json.loads(m.payload))
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        self.c.subscribe(self.tp.command("quicksave"), qos=1)
        time.sleep(0.3)

    def publish(self, topic: str, body: dict, retain: bool = False) -> None:
        self.c.publish(topic, encode_json(body), qos=1, retain=retain).wait_for_publish(5)

    def state(self, best: dict | None) -> None:
        body = {"status": "online", "model_version": 10}
        if best is not None:
            body["best"] = best
        self.publish(self.tp.learner_state, body, retain=True)

    def episodes(self, ret: float, n: int, version: int) -> None:
        for _ in range(n):
            self.publish(self.tp.episodes("w0"), {"return": ret, "length": 10, "model_version": version})

    def evaluation(self, mean: float, version: int) -> None:
        self.publish(self.tp.evaluation("eval-1"), Evaluation(version, 10, mean, 0.0, mean, mean, 1.0).to_json())

    def quicksaves(self, wait: float) -> list[dict]:
        got, deadline = [], time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                got.append(self.commands.get(timeout=0.1))
            except queue.Empty:
                pass
        return got

    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def _telemetry(mosquitto, run: str) -> tuple[TelemetryNode, threading.Thread]:
    settings = TelemetrySettings(window=5, interval_s=0.2, best_min_interval_s=0.0)
    node = TelemetryNode(BrokerSettings(url=mosquitto.url), run, [], settings)
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    assert node.client.wait_connected(15)
    time.sleep(0.5)
    return node, thread


def _stop(node: TelemetryNode, thread: threading.Thread) -> None:
    node.stop()
    thread.join(15)


def test_a_restarted_telemetry_node_keeps_the_best_so_far(mosquitto):
    run = "best-restart"
    learner = FakeLearner(mosquitto.port, run)
    try:
        # the learner's retained state holds the best so far (read back from best/score.json)
        learner.state({"score": 400.0, "model_version": 7, "judged_by": "greedy_eval", "episodes": 10})
        node, thread = _telemetry(mosquitto, run)
        try:
            assert node.best == BestScore(400.0, 7, GREEDY_EVAL, 10)
            learner.episodes(450.0, 10, version=11)  # training returns never beat a greedy score
            learner.evaluation(300.0, version=12)  # a worse greedy evaluation
            assert learner.quicksaves(1.5) == []
            learner.evaluation(455.0, version=13)
            sent = learner.quicksaves(1.5)
        finally:
            _stop(node, thread)
    finally:
        learner.close()
    assert len(sent) == 1
    assert sent[0]["name"] == "best"
    assert {k: sent[0][k] for k in ("score", "model_version", "judged_by", "episodes")} == {
        "score": 455.0,
        "model_version": 13,
        "judged_by": "greedy_eval",
        "episodes": 10,
    }


def test_greedy_evaluation_judges_once_an_evaluator_reports(mosquitto):
    run = "best-greedy"
    learner = FakeLearner(mosquitto.port, run)
    try:
        learner.state(None)
        node, thread = _telemetry(mosquitto, run)
        try:
            learner.episodes(200.0, 5, version=4)  # no evaluator yet: training returns judge
            first = learner.quicksaves(1.5)
            learner.evaluation(150.0, version=5)  # lower, but greedy: it wins
            second = learner.quicksaves(1.5)
            learner.episodes(500.0, 10, version=6)  # noisy training returns no longer judge
            third = learner.quicksaves(1.5)
        finally:
            _stop(node, thread)
    finally:
        learner.close()
    assert [(q["judged_by"], q["score"], q["model_version"]) for q in first] == [("training_returns", 200.0, 4)]
    assert [(q["judged_by"], q["score"], q["model_version"]) for q in second] == [("greedy_eval", 150.0, 5)]
    assert third == []


# ---- a real learner refuses a worse best, before and after a restart ---------------------
def _learner(tmp_path, mosquitto, run: str, resume: bool) -> tuple[LearnerNode, threading.Thread]:
    cfg = load(None, [f"run={run}", "env.id=CartPole-v1", "learner.metrics_interval_s=0.5"])
    node = LearnerNode(cfg, BrokerSettings(url=mosquitto.url), tmp_path / "run", resume=resume)
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    assert node.client.wait_connected(30)
    deadline = time.monotonic() + 20
    while node.version < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return node, thread


class Asker:
    """Sends quicksave commands named best and returns the learner's replies."""

    def __init__(self, port: int, run: str):
        self.tp = Topics(run)
        self.replies: queue.Queue = queue.Queue()
        self.states: list[dict] = []
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"asker-{time.monotonic_ns()}", protocol=mqtt.MQTTv5
        )
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        self.c.subscribe([(self.tp.reply("t"), 1), (self.tp.learner_state, 1)])
        time.sleep(0.3)

    def _on_message(self, c, u, m) -> None:
        if m.topic == self.tp.learner_state:
            self.states.append(json.loads(m.payload))
        else:
            self.replies.put(json.loads(m.payload))

    def ask(self, **claim) -> dict:
        body = {"name": "best", "reply_to": self.tp.reply("t"), **claim}
        self.c.publish(self.tp.command("quicksave"), encode_json(body), qos=1).wait_for_publish(5)
        return self.replies.get(timeout=20)

    def close(self) -> None:
        self.c.loop_stop()
        self.c.disconnect()


def _claim(score: float, judged_by: str, version: int) -> dict:
    return {"score": score, "judged_by": judged_by, "model_version": version, "episodes": 10}


@pytest.mark.e2e
def test_the_learner_never_replaces_best_with_a_worse_model(tmp_path, mosquitto):
    run = "best-learner"
    best = tmp_path / "run" / "checkpoints" / "best"
    node, thread = _learner(tmp_path, mosquitto, run, resume=False)
    epoch = node.core.epoch  # a claim of version 1 names no epoch: the saved score names the model held
    asker = Asker(mosquitto.port, run)
    try:
        assert "refused" not in asker.ask(**_claim(100.0, TRAINING_RETURNS, 1))
        assert read_score(best) == BestScore(100.0, 1, TRAINING_RETURNS, 10, epoch)
        assert "does not beat" in asker.ask(**_claim(50.0, TRAINING_RETURNS, 1))["refused"]
        assert "refused" not in asker.ask(**_claim(20.0, GREEDY_EVAL, 1))  # greedy beats training returns
        assert "does not beat" in asker.ask(**_claim(10.0, GREEDY_EVAL, 1))["refused"]
        assert "without a score" in asker.ask()["refused"]  # a bare `mqttrl quicksave --name best`
        cli = subprocess.run(
            [script("mqttrl"), "quicksave", "--run", run, "--name", "best", "--broker", mosquitto.url],
            capture_output=True,
            text=True,
            timeout=60,
            env=node_env(),
        )
        assert cli.returncode == 1 and "Traceback" not in cli.stderr, cli.stderr
        assert "the learner refused" in cli.stderr and "without a score" in cli.stderr
        assert "checkpoint written" not in cli.stdout
        assert read_score(best) == BestScore(20.0, 1, GREEDY_EVAL, 10, epoch)
        assert decode_weights((best / "weights.safetensors").read_bytes()).version == 1
    finally:
        node.stop()
        thread.join(30)
        asker.close()
    # restarted: the learner reads its best back and says so in its retained state
    node, thread = _learner(tmp_path, mosquitto, run, resume=True)
    asker = Asker(mosquitto.port, run)
    try:
        time.sleep(0.5)
        online = [s for s in asker.states if s.get("status") == "online"]
        assert online and online[-1]["best"] == _claim(20.0, GREEDY_EVAL, 1) | {"model_epoch": epoch}
        assert node.core.epoch != epoch  # a new epoch; the best is still the first epoch's model
        assert "does not beat" in asker.ask(**_claim(15.0, GREEDY_EVAL, node.version))["refused"]
        # an older telemetry's command (mean_return over a window) counts as training returns
        assert "refused" in asker.ask(mean_return=499.0, window=20, model_version=node.version)
    finally:
        node.stop()
        thread.join(30)
        asker.close()
    assert read_score(best) == BestScore(20.0, 1, GREEDY_EVAL, 10, epoch)
    assert decode_json((best / "score.json").read_bytes())["judged_by"] == "greedy_eval"


# ---- mqttrl train's best/ (the evaluator's results) -----------------------------------------
def test_a_new_training_session_never_replaces_best_with_a_worse_evaluation(tmp_path):
    from mqttrl.trainer.record import RunRecord

    cfg = load(None, ["run=rec", "env.id=CartPole-v1"])
    write_best_dir(
        tmp_path / "best",
        {"weights.safetensors": b"earlier", "score.json": json.dumps(_claim(400.0, GREEDY_EVAL, 7)).encode()},
    )
    record = RunRecord(cfg, tmp_path)  # a restarted `mqttrl train --resume` in the same run directory
    try:

        def evaluation(mean: float, version: int) -> None:
            record.on_evaluation(judged(version, mean, episodes=10, eval_s=1.0), None, f"v{version}".encode())

        evaluation(300.0, 20)
        assert (tmp_path / "best" / "weights.safetensors").read_bytes() == b"earlier"
        assert read_score(tmp_path / "best") == BestScore(400.0, 7, GREEDY_EVAL, 10)
        evaluation(450.0, 21)
    finally:
        record.close()
    assert (tmp_path / "best" / "weights.safetensors").read_bytes() == b"v21"
    assert read_score(tmp_path / "best") == BestScore(450.0, 21, GREEDY_EVAL, 10)
    assert json.loads((tmp_path / "best" / "evaluation.json").read_text())["mean"] == 450.0
