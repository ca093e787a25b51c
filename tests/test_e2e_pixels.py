"""Image observations end to end over a real mosquitto: learner and worker processes, uint8 frame
stacks (DQN, as frames, compressed) and bool grids (PPO), and a MinAtar smoke run.

The image envs are tests/pixel_env.py (no ROMs needed): the worker and learner processes import it
through ``pixel_env:<Id>`` with the tests folder on their PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher
from safetensors.numpy import load_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TESTS = Path(__file__).resolve().parent

DQN_CONFIG = """
run = "{run}"
[env]
id = "pixel_env:PixelDot-v0"
num_envs = 4
[algorithm]
name = "dqn"
network = "minatar_cnn"
batch_size = 32
learning_starts = 300
buffer_size = 5000
replay_ratio = 4.0
[worker]
batch_size = 64
[learner]
publish_every = 20
checkpoint_every = 100
metrics_interval_s = 0.5
[train]
workers = 1
"""

PPO_CONFIG = """
run = "{run}"
[env]
id = "pixel_env:BoolGrid-v0"
num_envs = 4
[algorithm]
name = "ppo"
network = "minatar_cnn"
rollout_steps = 32
epochs = 2
minibatch_size = 64
[learner]
metrics_interval_s = 0.5
[train]
workers = 1
"""


def env_with_tests() -> dict:
    return node_env(PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def start(tmp_path: Path, argv: list[str], name: str) -> Proc:
    return Proc(argv, tmp_path / f"{name}-{time.monotonic_ns()}.log", env=env_with_tests())


def running(procs, pred):
    """``pred`` for Watcher.wait, failing at once (with the log) when a node process exits."""

    def check(w):
        for p in procs:
            if p.p.poll() is not None:
                pytest.fail(f"{p.argv[0]} exited with {p.p.returncode}:\n{p.text()[-3000:]}")
        return pred(w)

    return check


def run_pair(tmp_path, mosquitto, config: str, run: str):
    cfg = tmp_path / f"{run}.toml"
    cfg.write_text(config.format(run=run))
    learner = start(
        tmp_path,
        [script("mqttrl-learner"), "--config", str(cfg), "--broker", mosquitto.url, "--run-dir", str(tmp_path / "run")],
        "learner",
    )
    worker = start(
        tmp_path,
        [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", "w0", "--index", "0"],
        "w0",
    )
    return learner, worker


def test_uint8_frame_stacks_train_dqn_as_compressed_frames(tmp_path, mosquitto):
    """DQN on stacked uint8 frames: batches cross the broker as zstd-compressed frames, the learner
    accepts every one, trains, and its replay keeps about one frame per transition (checkpoint)."""
    run = "e2e-pixels-dqn"
    watch = Watcher(mosquitto.port, run)
    learner, worker = run_pair(tmp_path, mosquitto, DQN_CONFIG, run)
    try:
        nodes = (learner, worker)
        watch.wait(running(nodes, lambda w: w.latest.get("updates", 0) > 250), 180, "250 updates on pixel transitions")
        m = watch.latest
        assert sum(m["rejected"].values()) == 0, m["rejected"]
        assert m["missing_batches"] == 0
        batch = watch.last_batch["w0"]
        assert set(batch.arrays) >= {"frames", "frame_ids", "obs_ref", "next_obs_ref"}
        assert batch.arrays["frames"].dtype == np.uint8
        # a few frames per transition (a batch repeats the frames of windows still open), not the
        # 8 of two 4-frame stacks
        assert watch.frames_seen < 3 * watch.transitions_seen
        watch.wait(running(nodes, lambda w: any((tmp_path / "run").rglob("state.safetensors"))), 60, "a checkpoint")
    finally:
        assert worker.terminate() == 0, worker.text()[-3000:]
        assert learner.terminate(60) == 0, learner.text()[-3000:]
        watch.close()
    checkpoint = max((tmp_path / "run").rglob("state.safetensors"), key=lambda p: p.stat().st_mtime)
    tensors = load_file(str(checkpoint))
    frames, refs = tensors["algo/replay.frames"], tensors["algo/replay.obs_ref"]
    assert frames.dtype == np.uint8 and refs.shape[1] == 4
    assert len(frames) <= 1.5 * len(refs) + 64  # each frame once, not 4 per observation


def test_bool_grids_train_ppo_end_to_end(tmp_path, mosquitto):
    """PPO on bool (8, 8, 2) observations: rounds complete over the broker, obs stay bool on the wire."""
    run = "e2e-pixels-ppo"
    watch = Watcher(mosquitto.port, run)
    learner, worker = run_pair(tmp_path, mosquitto, PPO_CONFIG, run)
    try:
        watch.wait(
            running((learner, worker), lambda w: len(set(w.weights_versions)) >= 4 and "rejected" in w.latest),
            180,
            "4 model versions (3 rounds) and learner metrics",
        )
        m = watch.latest
        assert sum(m["rejected"].values()) == 0, m["rejected"]
        batch = watch.last_batch["w0"]
        assert batch.arrays["obs"].dtype == np.bool_ and batch.arrays["obs"].shape[1:] == (8, 8, 2)
    finally:
        assert worker.terminate() == 0, worker.text()[-3000:]
        assert learner.terminate(60) == 0, learner.text()[-3000:]
        watch.close()


def test_minatar_breakout_smoke(tmp_path):
    """`mqttrl train` on the shipped MinAtar config, briefly: the env plugin, the CNN and the frames
    path, with the rainbow preset (C51, noisy nets, priorities computed by the actor from frames)."""
    pytest.importorskip("minatar")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqttrl",
            "train",
            "configs/minatar_breakout_dqn.toml",
            "--run-dir",
            str(run_dir),
            "--no-progress",
            "--set",
            "train.max_seconds=12",  # ~12k env steps, ~1.4k updates and 3 evaluations here
            "--set",
            "train.eval_every_s=4",
            "--set",
            "algorithm.learning_starts=1000",
            "--set",
            'algorithm.preset="rainbow"',
            "--set",
            "algorithm.v_min=0",
            "--set",
            "algorithm.v_max=20",
        ],
        cwd=TESTS.parent,
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]  # target_return = "none": the budget is the end
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] > 1000 and summary["updates"] > 0, summary
    evals = (run_dir / "evaluations.csv").read_text().splitlines()
    assert len(evals) >= 2, evals  # a header and at least one greedy evaluation
