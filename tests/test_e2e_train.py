"""`mqttrl train` as a user runs it, and a worker riding through a broker outage."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from helpers.configs import write_config
from helpers.e2e import start_learner, start_worker
from helpers.paths import REPO
from helpers.procs import node_env, script
from helpers.watch import Watcher

from mqttrl.wire import decode_weights

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run_train(tmp_path, *args, timeout=300):
    run_dir = tmp_path / "run"
    argv = [
        script("mqttrl"),
        "train",
        str(REPO / "configs" / "cartpole_dqn.toml"),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        *args,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=node_env())
    return out, run_dir


def test_train_with_embedded_mosquitto_writes_a_complete_run_dir(tmp_path):
    out, run_dir = run_train(
        tmp_path,
        "--set",
        "train.max_seconds=45",
        "--set",
        "train.eval_every_s=8",
        "--set",
        "train.target_return=10000",
        "--set",
        'train.telemetry_storages=["files", "tensorboard"]',
    )
    assert out.returncode == 3, out.stdout + out.stderr  # budget hit, target not reached: exit 3
    assert "embedded mosquitto broker" in out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "time budget"
    assert summary["solved"] is False
    assert summary["env_steps"] > 5000 and summary["updates"] > 100
    assert summary["evaluations"] >= 2
    # the budget ended the run: the model at the stop was evaluated (train.final_eval)
    assert summary["final_model_version"] == summary["model_version"] and summary["final_eval_mean"] is not None
    assert "final model (version" in out.stdout
    config = json.loads((run_dir / "config.json").read_text())
    assert config["train"]["max_seconds"] == 45.0 and config["algorithm"]["name"] == "dqn"
    with open(run_dir / "episodes.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == summary["episodes"] and {r["worker"] for r in rows} == {"w0", "w1"}
    with open(run_dir / "evaluations.csv") as f:
        evals = list(csv.DictReader(f))
    assert len(evals) == summary["evaluations"] and all(int(e["episodes"]) == 20 for e in evals)
    # each evaluation at the env steps its model was trained on (the learner's count at publication)
    model_steps = [int(e["model_env_steps"]) for e in evals]
    assert model_steps == sorted(model_steps) and 0 < model_steps[-1] <= summary["env_steps"]
    assert [c["env_steps"] for c in summary["curve"]] == model_steps
    assert (run_dir / "best" / "weights.safetensors").exists()
    assert (run_dir / "checkpoints" / "latest").exists()
    assert "not solved" in out.stdout
    # telemetry's storages write into the run directory: CSVs, and TensorBoard events that
    # TensorBoard's own reader reads (`tensorboard --logdir <run dir>/tensorboard`)
    assert (run_dir / "telemetry" / "episode.csv").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("episode/return", "eval/mean", "learner/loss", "throughput/samples_per_s", "worker/w1/return"):
        assert tag in tags, (tag, sorted(tags))
    assert 1 <= len(acc.Scalars("eval/mean")) <= summary["evaluations"]  # the last one may end after telemetry
    steps = [e.step for e in acc.Scalars("episode/return")]
    assert steps == sorted(steps) and steps[-1] > 1000  # the env-steps axis
    assert_curves_and_best_models(run_dir, summary)


def assert_curves_and_best_models(run_dir, summary) -> None:
    """What the files storage draws and what the run keeps as its best models (was a second
    50-second training run of its own in tests/test_telemetry.py; the same run shows both)."""
    tele = run_dir / "telemetry"
    episodes = (tele / "episode.csv").read_text().splitlines()
    assert len(episodes) - 1 >= 0.9 * summary["episodes"] > 0
    for name in ("learner.csv", "worker.csv", "episode_stats.csv", "eval.csv", "best.csv"):
        assert len((tele / name).read_text().splitlines()) > 1, name
    for png in ("returns.png", "throughput.png"):
        assert (tele / png).read_bytes()[:4] == b"\x89PNG"
    best = run_dir / "checkpoints" / "best"
    info = json.loads((best / "best.json").read_text())
    assert info["mean_return"] > 0 and info["model_version"] >= 1
    assert decode_weights((best / "weights.safetensors").read_bytes()).version == info["model_version"]
    assert "best" in json.loads((best / "meta.json").read_text())
    # each best model keeps its score beside it; the evaluator's best/ is judged by greedy evaluation
    assert json.loads((best / "score.json").read_text())["model_version"] == info["model_version"]
    score = json.loads((run_dir / "best" / "score.json").read_text())
    assert score["judged_by"] == "greedy_eval" and score["score"] == summary["best_eval_mean"]
    assert decode_weights((run_dir / "best" / "weights.safetensors").read_bytes()).version == score["model_version"]


def test_train_falls_back_to_amqtt(tmp_path):
    """amqtt speaks only MQTT 3.1.1: the whole run must work over it."""
    out, run_dir = run_train(
        tmp_path,
        "--embedded-broker",
        "amqtt",
        "--workers",
        "1",
        "--set",
        # a budget of env steps, not seconds: under load (CI's 2 cores busy) the learner's start-up took
        # most of a 15 s budget and the run ended before its first metrics (summary env_steps None)
        "train.max_env_steps=3000",
        "--set",
        "train.max_seconds=180",
        "--set",
        "train.target_return=10000",
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "embedded amqtt broker" in out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] > 1000 and summary["updates"] > 0, summary
    assert "MQTT 3.1.1" in (run_dir / "logs" / "learner.log").read_text()


def test_train_rejects_bad_config_with_a_clear_message(tmp_path):
    out, _ = run_train(tmp_path, "--set", "learner.publish_evry=5", timeout=60)
    assert out.returncode != 0
    assert "unknown key learner.publish_evry" in out.stderr and "publish_every" in out.stderr


def test_a_worker_idles_through_a_broker_outage_and_plays_on_after(tmp_path, mosquitto):
    """What it would make while the broker is down could not be sent (its outbox would fill): it
    idles (no env steps, WorkerCore.should_idle), says so, and plays on once the link is back."""
    run = "e2e-outage"
    cfg = write_config(tmp_path, run)
    watch = Watcher(mosquitto.port, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    w0 = start_worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: w.latest.get("updates", 0) > 50, 120, "training under way")
        steps_before = watch.heartbeats["w0"]["env_steps"]
        watch.close()
        mosquitto.restart(down_for=4)
        watch = Watcher(mosquitto.port, run)
        # it idled while the broker was down, and steps again after
        watch.wait(
            lambda w: w.heartbeats["w0"]["env_steps"] > steps_before + 2000, 60, "worker heartbeats after the outage"
        )
        assert w0.p.poll() is None and learner.p.poll() is None
        assert "idles: no connection to the broker" in w0.text()
        assert watch.heartbeats["w0"]["paused_s"] > 1.0
        updates = watch.latest.get("updates", 0)
        watch.wait(lambda w: w.latest["updates"] > updates + 50, 60, "training after the outage")
    finally:
        w0.terminate()
        learner.terminate(60)
        watch.close()
