"""The pieces ``mqttrl train`` is composed of: the plan of its children, the one restart policy
(the learner's included), and the record it keeps from the nodes' episodes and evaluations."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import attrs
from helpers.evaluations import judged
from helpers.procs import node_env

from mqttrl.config import from_dict
from mqttrl.nodes.telemetry import RunView
from mqttrl.plugin.manager import get_registry
from mqttrl.trainer.plan import plan_children, storage_options
from mqttrl.trainer.record import EPISODE_COLUMNS, EVAL_COLUMNS, RunRecord
from mqttrl.trainer.run import LocalRun, _stop_reason
from mqttrl.trainer.supervisor import Child, Supervisor
from mqttrl.transport.client import BrokerSettings
from mqttrl.wire.episodes import EpisodeStats
from mqttrl.wire.metrics import LearnerMetrics


def config(**train):
    registry = get_registry()
    return from_dict(
        {"run": "tr", "env": {"id": "CartPole-v1"}, "train": {"workers": 2, **train}},
        lambda name: registry.algorithm(name).params,
    )


# ---- the plan ----------------------------------------------------------------------
def test_the_plan_starts_the_learner_first_with_resume_on_restart(tmp_path):
    plan = plan_children(config(), tmp_path, BrokerSettings(url="mqtt://h:1883"), ["--mqtt-protocol", "5"])
    names = [c.name for c in plan.children]
    assert names == ["learner", "w0", "w1"] and plan.children[0] is plan.learner
    assert plan.learner.restart_args == ["--resume-if-any"] and plan.learner.max_restarts == 3
    assert plan.learner.stop_timeout == 60.0
    assert all(c.max_restarts is None for c in plan.children[1:])  # workers: restarted for ever
    w1 = plan.children[2].argv
    assert w1[w1.index("--name") + 1] == "w1" and w1[w1.index("--index") + 1] == "1"
    assert w1[-4:] == ["--broker", "mqtt://h:1883", "--mqtt-protocol", "5"]
    assert plan.children[0].log_path == tmp_path / "logs" / "learner.log"
    assert plan.brokers["telemetry"] == plan.brokers["operator"] == BrokerSettings(url="mqtt://h:1883")


def remote_config(servers: int):
    registry = get_registry()
    return from_dict(
        {
            "run": "tr",
            "env": {"id": "CartPole-v1"},
            "train": {"workers": 2},
            "worker": {"inference": "remote"},
            "inference": {"servers": servers},
        },
        lambda name: registry.algorithm(name).params,
    )


def test_remote_workers_get_a_server_and_stop_before_it(tmp_path):
    """Workers acting remotely with no server asked for get one (they would wait for answers for
    ever), and they stop before the servers they ask (they are stopped in reverse order)."""
    broker = BrokerSettings(url="mqtt://h:1883")
    names = [c.name for c in plan_children(remote_config(0), tmp_path, broker).children]
    assert names == ["learner", "inference0", "w0", "w1"]
    stop_order = list(reversed(names))
    assert stop_order.index("w0") < stop_order.index("inference0") < stop_order.index("learner")
    names = [c.name for c in plan_children(remote_config(2), tmp_path, broker).children]
    assert names == ["learner", "inference0", "inference1", "w0", "w1"]


def test_with_credentials_each_node_logs_in_as_its_own_kind(tmp_path):
    creds = {k: (f"tr-{k}", f"pw-{k}") for k in ("learner", "worker", "inference", "telemetry", "operator")}
    creds["worker@w1"] = ("tr-worker@w1", "pw-w1")
    broker = BrokerSettings(url="mqtt://h:1883", username="admin", password="secret")
    plan = plan_children(config(), tmp_path, broker, ["--username", "admin"], creds)
    env = {c.name: (c.env["MQTTRL_USERNAME"], c.env["MQTTRL_PASSWORD"]) for c in plan.children}
    assert env == {"learner": creds["learner"], "w0": creds["worker"], "w1": creds["worker@w1"]}
    assert all("--username" not in c.argv for c in plan.children)
    assert (plan.brokers["telemetry"].username, plan.brokers["operator"].username) == ("tr-telemetry", "tr-operator")


def test_storages_write_into_the_run_directory(tmp_path):
    opts = storage_options(["files", "tensorboard", "wandb", "influxdb"], tmp_path)
    assert opts == {
        "files": {"dir": str(tmp_path / "telemetry")},
        "tensorboard": {"logdir": str(tmp_path / "tensorboard")},
        "wandb": {"dir": str(tmp_path)},
    }


# ---- one restart policy -------------------------------------------------------------
EXITS = "import sys; print(' '.join(sys.argv[1:]), flush=True); sys.exit(3)"


def supervise_until(sup: Supervisor, done, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline
        sup.check()
        time.sleep(0.02)


def test_a_learner_that_keeps_exiting_is_resumed_then_given_up(tmp_path):
    learner = Child(
        "learner",
        [sys.executable, "-c", EXITS, "--config", "c"],
        tmp_path / "learner.log",
        node_env(),
        restart_args=["--resume"],
        max_restarts=2,
    )
    sup = Supervisor([learner], max_backoff_s=0.05)
    sup.start()
    supervise_until(sup, lambda: sup.given_up)
    assert sup.given_up == [learner] and learner.restarts == 2 and learner.proc.returncode == 3
    # the first start as given, every restart with --resume (once)
    assert (tmp_path / "learner.log").read_text().splitlines() == ["--config c", "--config c --resume"] + [
        "--config c --resume"
    ]
    time.sleep(0.2)
    assert sup.check() == [] and learner.restarts == 2  # given up: never started again


def test_a_worker_is_restarted_with_backoff_for_ever(tmp_path):
    worker = Child("w0", [sys.executable, "-c", EXITS], tmp_path / "w0.log", node_env())
    sup = Supervisor([worker], max_backoff_s=0.05)
    sup.start()
    supervise_until(sup, lambda: worker.restarts >= 4)
    assert sup.given_up == []
    sup.stop()


def test_children_stop_last_started_first(tmp_path):
    stopped = []

    class Recorded(Child):
        def stop(self, timeout=None):
            stopped.append(self.name)

    sup = Supervisor([Recorded(n, ["x"], tmp_path / n) for n in ("learner", "w0", "w1")])
    sup.stop()
    assert stopped == ["w1", "w0", "learner"]  # the learner checkpoints after the workers are gone


def test_a_learner_given_up_ends_the_run_with_why(tmp_path):
    run = LocalRun(config(), tmp_path)
    run.record = RunRecord(run.config, tmp_path)
    learner = Child("learner", [sys.executable, "-c", EXITS], tmp_path / "l.log", node_env(), max_restarts=0)
    run.supervisor = Supervisor([learner])
    run.supervisor.start()
    learner.proc.wait(30)
    assert _stop_reason(run, 1.0) is None  # not checked yet
    run.supervisor.check()
    assert _stop_reason(run, 1.0) == "learner exited (3) 1 times"
    run.record.close()


# ---- the record ----------------------------------------------------------------------
class W:
    def __init__(self, version: int):
        self.version = version


def test_the_record_keeps_episodes_evaluations_the_best_and_the_solve(tmp_path):
    rec = RunRecord(config(target_return=100.0), tmp_path)
    rec.on_episode(
        "w0", EpisodeStats.from_json({"env": 0, "return": 10.0, "length": 10, "terminated": True, "env_steps": 40})
    )
    rec.on_episode(
        "w1", EpisodeStats.from_json({"env": 1, "return": 12.0, "length": 12, "terminated": False, "env_steps": 30})
    )
    rec.on_episode(
        "w0", EpisodeStats.from_json({"env": 0, "return": 11.0, "length": 11, "terminated": True, "env_steps": 25})
    )
    assert rec.env_steps == 70  # per worker the most it reported
    rec.on_evaluation(judged(3, 50.0, training_s=1.5), W(3), b"model-3")
    rec.on_evaluation(judged(5, 40.0), W(5), b"model-5")
    assert (tmp_path / "best" / "weights.safetensors").read_bytes() == b"model-3"  # only a better mean replaces it
    assert rec.solved_at is None and rec.best_eval == 50.0
    rec.on_evaluation(judged(7, 120.0), W(7), b"model-7")
    rec.on_evaluation(judged(9, 130.0), W(9), b"model-9")
    assert rec.solved_at["model_version"] == 7 and rec.solved_at["env_steps"] == 70  # the first that reached it
    assert json.loads((tmp_path / "best" / "evaluation.json").read_text())["model_version"] == 9
    assert rec.evaluation_of(5)["mean"] == 40.0 and rec.evaluation_of(6) is None
    rec.close()
    rec.on_episode(
        "w0", EpisodeStats.from_json({"env": 0, "return": 1.0, "length": 1, "env_steps": 99})
    )  # after the end: dropped
    with open(tmp_path / "episodes.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == EPISODE_COLUMNS and len(rows) == 4 and rows[2][1:4] == ["w1", "1", "12.0"]
    with open(tmp_path / "evaluations.csv") as f:
        evals = list(csv.DictReader(f))
    assert list(evals[0]) == EVAL_COLUMNS and [e["model_version"] for e in evals] == ["3", "5", "7", "9"]
    assert evals[0]["training_s"] == "1.5" and evals[1]["training_s"] == ""


def test_summary_keys_are_those_of_summary_json(tmp_path):
    rec = RunRecord(config(), tmp_path)
    view = RunView(episodes=4, learner=LearnerMetrics(updates=9, model_version=0, rejected={"stale": 1}), workers=2)
    s = rec.summary("time budget", 12.345, view, 17)
    rec.close()
    assert list(s) == [
        "run", "algorithm", "env", "seed", "stop_reason", "wall_s", "solved", "target_return", "time_to_solve_s",
        "training_time_to_solve_s", "env_steps_at_solve", "solve_eval_mean", "solve_model_version",
        "best_eval_mean", "final_eval_mean", "final_model_version", "evaluations", "curve", "env_steps", "episodes",
        "updates", "model_version", "workers", "game_relaunches", "game_crashes", "game_relaunch_s", "rejected", "realtime", "capture_to_action_ms",
        "timing",
    ]  # fmt: skip
    assert (s["wall_s"], s["episodes"], s["updates"], s["model_version"], s["rejected"]) == (
        12.35,
        4,
        9,
        17,
        {"stale": 1},
    )
    assert Path(tmp_path / "episodes.csv").exists()


def test_a_human_baseline_puts_the_human_normalised_score_in_the_summary(tmp_path):
    """``[train] human_baseline`` (issue 45): the final and best evaluations beside a person's mean."""
    (tmp_path / "h.json").write_text(json.dumps({"mean": 40.0, "episodes": [], "random": {"mean": 10.0}}))
    cfg = config()
    cfg.train.human_baseline = str(tmp_path / "h.json")
    (tmp_path / "run").mkdir()
    rec = RunRecord(cfg, tmp_path / "run")
    rec.final_eval, rec.best_eval = {"mean": 25.0, "model_version": 3}, 46.0
    s = rec.summary("time budget", 1.0, RunView(episodes=1, workers=1), 3)
    rec.close()
    assert (s["human_mean"], s["random_mean"], s["human_normalized_final"], s["human_normalized_best"]) == (
        40.0,
        10.0,
        0.5,
        1.2,
    )
    json.dumps(s, allow_nan=False)  # it goes to summary.json as it is


def test_summary_env_steps_count_the_samples_the_learner_took_in_after_the_last_episodes(tmp_path):
    """Episodes report a worker's env steps when they end; the learner's samples count the steps made
    since. summary.json's env_steps is the larger (an evaluation's model_env_steps exceeded it)."""
    rec = RunRecord(config(), tmp_path)
    rec.on_episode("w0", EpisodeStats.from_json({"return": 1.0, "length": 10, "env_steps": 100}))
    view = RunView(episodes=1, learner=LearnerMetrics(updates=3, model_version=2, samples=140), workers=1)
    assert rec.summary("time budget", 1.0, view, 2)["env_steps"] == 140
    # a learner that restarted and lost count: the episodes' figure stands
    view = attrs.evolve(view, learner=attrs.evolve(view.learner, samples=60))
    assert rec.summary("time budget", 1.0, view, 2)["env_steps"] == 100
    rec.close()


# ---- what the trainer takes from the telemetry node -------------------------------------
def test_the_telemetry_node_hands_on_each_episode_and_a_view(shared_mosquitto):
    from mqttrl.nodes.telemetry import TelemetryNode
    from mqttrl.transport.topics import Topics
    from mqttrl.wire import encode_json

    seen: list[tuple[str, float]] = []
    node = TelemetryNode(
        BrokerSettings(url=shared_mosquitto.url), "tv", [], on_episode=lambda w, e: seen.append((w, e.episode_return))
    )
    tp = Topics("tv")
    node.handle(tp.worker_state("w0"), encode_json({"status": "online"}))
    node.handle(tp.worker_state("w1"), encode_json({"status": "offline"}))
    for r in (1.0, 2.0, 3.0):
        node.handle(tp.episodes("w0"), encode_json({"return": r, "length": 5, "env_steps": 10}))
    node.handle(tp.learner_metrics, encode_json({"updates": 4, "model_version": 2, "samples_per_s": 9.0}))
    assert seen == [("w0", 1.0), ("w0", 2.0), ("w0", 3.0)]
    view = node.view(window=2)
    assert view == RunView(
        episodes=3,
        mean_return=2.5,
        learner=LearnerMetrics(updates=4, model_version=2, samples_per_s=9.0),
        learner_status="unknown",
        workers=2,
        workers_online=1,
        game_relaunches={},  # no worker launched its game
        game_crashes={},
        game_relaunch_s={},
    )
    view.learner.updates = 99  # a copy: the node's own stays as it was
    assert node.view().learner.updates == 4
