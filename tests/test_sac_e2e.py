"""SAC end to end: a learner and a torch-free worker on a real mosquitto, a few hundred env steps."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher

from mqttrl.plugin.algorithm import UPDATES_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def with_path_first(folder) -> str:
    """PYTHONPATH with ``folder`` in front (a harness or a blocker for one process)."""
    return os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def pendulum_learner(tmp_path, broker_url: str, overrides: dict[str, str], env=None) -> Proc:
    """``mqttrl-learner`` on configs/pendulum_sac.toml with ``--set`` overrides."""
    return Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(REPO / "configs" / "pendulum_sac.toml"),
            *[a for k, v in overrides.items() for a in ("--set", f"{k}={v}")],
            "--broker",
            broker_url,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        tmp_path / "learner.log",
        env=env,
    )


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
    learner = pendulum_learner(tmp_path, mosquitto.url, overrides)
    path = with_path_first(blocker)
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


SLOW_FIRST_UPDATE = '''
"""Test harness: this learner's first SAC update takes {seconds} s (a big network's first update on
a GPU, or a loaded machine); the ones after run as usual."""
import time

from mqttrl_plugins.sac.learner import SACLearner

_first = SACLearner.train_step


def _slow_first(self):
    if self.updates == 0:
        time.sleep({seconds})
    return _first(self)


SACLearner.train_step = _slow_first
'''


@pytest.mark.parametrize(
    "control_hz, in_flight",
    [
        (0, 1500),  # free running: thousands of steps a second, a few batches in flight
        # a game's clock: the learner keeps up, so the batch that fills the replay to learning_starts
        # finds it idle, waiting for a message (it once went on to update before pausing anyone)
        (200, 200),
    ],
    ids=["free-running", "real-time"],
)
def test_workers_wait_for_the_first_trained_model_however_slow_the_first_update(
    tmp_path, mosquitto, control_hz, in_flight
):
    """The warm-up hold over a real broker: a Pendulum worker is paused when the replay reaches
    learning_starts, before the learner's first update (3 s here) runs, and plays on once the
    first trained model is out. Without it a free-running worker made ~10k transitions with the
    untrained policy while the first update ran."""
    run, starts = f"e2e-sac-hold-{control_hz}", 500
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "sitecustomize.py").write_text(SLOW_FIRST_UPDATE.format(seconds=3.0))
    watch = Watcher(mosquitto.port, run)
    overrides = {
        "run": run,
        "algorithm.hidden": "[32, 32]",
        "algorithm.learning_starts": str(starts),
        "learner.publish_every": "1",
        "learner.metrics_interval_s": "0.5",
        "env.control_hz": str(control_hz),
    }
    learner = pendulum_learner(tmp_path, mosquitto.url, overrides, env=node_env(PYTHONPATH=with_path_first(harness)))
    worker = Proc(
        [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", "w0", "--index", "0"],
        tmp_path / "w0.log",
    )
    try:
        watch.wait(lambda w: len(w.weights_versions) >= 3 and w.latest["updates"] >= 200, 90, "200 updates, 3 models")
        untrained = watch.weights_versions[0]
        made_untrained = watch.transitions_by_version.get(untrained, 0)
        # learning_starts, and what was in flight when the pause went out (a few batches)
        assert starts <= made_untrained <= starts + in_flight, (made_untrained, watch.transitions_by_version)
        # the weights say which model is untrained (actors that explore at random until then read it)
        assert watch.weights_info[untrained][UPDATES_KEY] == 0
        assert watch.weights_info[watch.weights_versions[-1]][UPDATES_KEY] >= 1
        # it waited through the 3 s update (heartbeats count the seconds idled so far)
        watch.wait(lambda w: w.heartbeats["w0"]["paused_s"] >= 2.5, 20, "a heartbeat counting the wait")
        assert worker.p.poll() is None and learner.p.poll() is None
    finally:
        assert worker.terminate() == 0, worker.text()[-2000:]
        assert learner.terminate(60) == 0, learner.text()[-2000:]
        watch.close()
