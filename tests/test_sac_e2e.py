"""SAC end to end: a learner and a torch-free worker on a real mosquitto, a few hundred env steps."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_sac_learner_trains_on_a_torch_free_workers_pendulum_transitions(tmp_path, mosquitto):
    run = "e2e-sac"
    blocker = tmp_path / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text('raise ImportError("torch is blocked on this worker")\n')
    watch = Watcher(mosquitto.port, run)
    overrides = {
        "run": run,
        "algorithm.hidden": "[32, 32]",
        "algorithm.batch_size": "32",
        "algorithm.learning_starts": "100",
        "learner.publish_every": "10",
        "learner.metrics_interval_s": "0.5",
        "worker.inference": "numpy",
    }
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(REPO / "configs" / "pendulum_sac.toml"),
            *[a for k, v in overrides.items() for a in ("--set", f"{k}={v}")],
            "--broker",
            mosquitto.url,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        tmp_path / "learner.log",
    )
    path = os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    worker = Proc(
        [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", "w0", "--index", "0"],
        tmp_path / "w0.log",
        env=node_env(PYTHONPATH=path),
    )
    try:
        watch.wait(
            lambda w: w.latest["updates"] >= 150 and len(set(w.weights_versions)) >= 5,
            60,
            "150 SAC updates and 5 model versions",
        )
        m = watch.latest
        assert m["samples"] >= 250  # a few hundred env steps accepted: utd 1 after learning_starts (100)
        assert sum(m["rejected"].values()) == 0, m["rejected"]
        versions = watch.weights_versions
        assert versions == sorted(versions)
        batch = watch.last_batch["w0"]
        action = batch.arrays["action"]
        assert action.dtype == np.float32 and action.shape[1:] == (1,) and np.abs(action).max() <= 1.0
        assert "inference: numpy" in worker.text()
        assert worker.p.poll() is None, worker.text()[-3000:]
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()
