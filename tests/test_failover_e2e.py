"""A learner and workers given two independent brokers (``--broker A,B``): when A dies, the run
goes on on B, which holds none of the run's retained messages until the learner arrives."""

from __future__ import annotations

import signal

import pytest
from helpers.configs import cartpole_dqn_toml
from helpers.procs import Proc, node_env, script
from helpers.servers import Mosquitto
from helpers.watch import Watcher


@pytest.mark.e2e
@pytest.mark.slow
def test_a_learner_that_fails_over_brings_config_and_weights_to_the_new_broker(tmp_path):
    """The learner alone (no samples, so no new model versions) moves from A to B. Its birth on B
    carries the config and the newest weights, retained: a worker that starts on B only finds a
    model at once and trains; a worker that was on A moves to B and goes on."""
    run = "e2e-failover"
    a, b = Mosquitto(tmp_path / "a"), Mosquitto(tmp_path / "b")
    for m in (a, b):
        m.workdir.mkdir()
        m.start()
    cfg = tmp_path / "run.toml"
    cfg.write_text(cartpole_dqn_toml(run))
    env = node_env()
    on_a = Watcher(a.port, run)
    on_b = Watcher(b.port, run)
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(cfg),
            "--broker",
            f"{a.url},{b.url}",
            "--run-dir",
            str(tmp_path / "r"),
        ],
        tmp_path / "learner.log",
        env,
    )
    workers: list[Proc] = []
    try:
        on_a.wait(lambda w: w.weights_versions and w.latest, 60, "the learner's weights and metrics on A")
        assert on_b.weights_versions == [] and on_b.states == {}, "B knows nothing of the run yet"
        version = max(on_a.weights_versions)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        on_b.wait(lambda w: w.latest, 30, "the learner's metrics on B (it moved)")
        assert on_b.weights_versions and on_b.weights_versions[0] == version, on_b.weights_versions
        assert on_b.states.get("learner", {}).get("status") == "online", on_b.states
        assert learner.text().count(f"moving to {b.url}") == 1

        # a worker that knows only B gets config and weights from the learner's birth there, and trains
        workers.append(
            Proc(
                [script("mqttrl-worker"), "--broker", b.url, "--run", run, "--name", "late", "--wait-timeout", "30"],
                tmp_path / "late.log",
                env,
            )
        )
        on_b.wait(
            lambda w: w.latest.get("workers", {}).get("late", {}).get("samples", 0) > 0 and w.version > version,
            60,
            "the late worker's samples accepted and new model versions",
        )
    finally:
        for w in workers:
            w.terminate()
        learner.terminate(60)
        on_a.close()
        on_b.close()
        for m in (a, b):
            if m.proc is not None and m.proc.poll() is None:
                m.stop()
    for p in (learner, *workers):
        assert "Traceback" not in p.text(), p.text()[-3000:]
