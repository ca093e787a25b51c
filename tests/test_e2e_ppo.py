"""Synchronous PPO rounds over a real mosquitto with the real console scripts."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers.procs import Proc, script
from helpers.watch import Watcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CONFIG = """
run = "{run}"
[env]
id = "CartPole-v1"
num_envs = 2
[algorithm]
name = "ppo"
rollout_steps = 64
[worker]
sync_timeout_s = {sync_timeout}
heartbeat_interval_s = 0.5
[learner]
round_timeout_s = {round_timeout}
metrics_interval_s = 0.5
worker_timeout_s = 30.0
checkpoint_every = 5
[train]
workers = 3
"""


def write_config(tmp_path: Path, run: str, round_timeout=4.0, sync_timeout=60.0) -> Path:
    p = tmp_path / f"{run}.toml"
    p.write_text(CONFIG.format(run=run, round_timeout=round_timeout, sync_timeout=sync_timeout))
    return p


def learner(tmp_path, cfg, url, run_dir, *extra) -> Proc:
    return Proc(
        [script("mqttrl-learner"), "--config", str(cfg), "--broker", url, "--run-dir", str(run_dir), *extra],
        tmp_path / f"learner-{time.monotonic_ns()}.log",
    )


def worker(tmp_path, url, run, name, index) -> Proc:
    return Proc(
        [script("mqttrl-worker"), "--broker", url, "--run", run, "--name", name, "--index", str(index)],
        tmp_path / f"worker-{name}.log",
    )


def rounds(run_dir: Path) -> list[dict]:
    path = run_dir / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_rounds_survive_a_stuck_worker_and_admit_a_new_one(tmp_path, mosquitto):
    run = "ppo-rounds"
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, run)
    watch = Watcher(mosquitto.port, run)
    lp = learner(tmp_path, cfg, mosquitto.url, run_dir)
    workers = {f"w{i}": worker(tmp_path, mosquitto.url, run, f"w{i}", i) for i in range(3)}
    late = None
    try:
        watch.wait(
            lambda w: len([r for r in rounds(run_dir) if len(r["workers"]) == 3]) >= 3,
            120,
            "three full rounds of 3 workers",
        )
        # freeze w2 mid-round: its connection stays open (no last will), so only the round timeout can save the round
        os.kill(workers["w2"].p.pid, signal.SIGSTOP)
        frozen_at = time.time()
        watch.wait(
            lambda w: any(r["time"] > frozen_at and r["missing"] == ["w2"] for r in rounds(run_dir)),
            60,
            "a round that timed out without w2",
        )
        short = next(r for r in rounds(run_dir) if r["time"] > frozen_at and r["missing"] == ["w2"])
        assert short["workers"] == ["w0", "w1"] and short["seconds"] >= 4.0
        n = len(rounds(run_dir))
        watch.wait(lambda w: len(rounds(run_dir)) >= n + 3, 60, "next rounds to go on")
        os.kill(workers["w2"].p.pid, signal.SIGKILL)
        workers["w2"].p.wait()

        # a new worker joins at the next version
        version_at_join = watch.version
        late = worker(tmp_path, mosquitto.url, run, "late", 3)
        watch.wait(lambda w: any("late" in r["workers"] for r in rounds(run_dir)), 90, "the new worker in a round")
        first = next(r for r in rounds(run_dir) if "late" in r["workers"])
        assert first["version"] >= version_at_join
        # no round ever trained on samples of two versions, and each on its own version
        for r in rounds(run_dir):
            assert r["batch_versions"] == [r["version"]], r
        versions = [r["version"] for r in rounds(run_dir)]
        assert versions == sorted(set(versions))
        assert watch.latest["rejected"].get("wrong_round", 0) >= 0  # counted by reason if any arrived late
        assert lp.p.poll() is None
    finally:
        for p in workers.values():
            if p.p.poll() is None:
                p.terminate()
        if late:
            late.terminate()
        lp.terminate(60)
        watch.close()


def test_sync_timeout_says_what_to_check_and_recovers(tmp_path, mosquitto):
    run = "ppo-sync"
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, run, sync_timeout=3.0)
    watch = Watcher(mosquitto.port, run)
    lp = learner(tmp_path, cfg, mosquitto.url, run_dir)
    w0 = worker(tmp_path, mosquitto.url, run, "w0", 0)
    try:
        watch.wait(lambda w: len(rounds(run_dir)) >= 3, 90, "three rounds")
        lp.kill()
        assert w0.wait_for("no model version after", 30), w0.text()[-2000:]
        text = w0.text()
        assert "learner state: offline" in text and "Check that the learner is running" in text
        assert w0.p.poll() is None, "the worker must keep waiting, not die"
        before = watch.version
        lp = learner(tmp_path, cfg, mosquitto.url, run_dir, "--resume")
        n = len(rounds(run_dir))
        watch.wait(lambda w: len(rounds(run_dir)) >= n + 3, 90, "rounds after the learner came back")
        assert watch.version > before
        assert all(r["workers"] == ["w0"] for r in rounds(run_dir)[n:])
    finally:
        w0.terminate()
        lp.terminate(60)
        watch.close()
