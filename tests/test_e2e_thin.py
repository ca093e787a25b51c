"""Thin workers: torch-free workers that solve CartPole, and central inference that survives a dead server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script
from helpers.watch import Watcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> Path:
    """A PYTHONPATH entry that makes `import torch` fail, as on a game PC without torch."""
    d = tmp_path_factory.mktemp("no-torch")
    (d / "torch").mkdir()
    (d / "torch" / "__init__.py").write_text(
        'raise ImportError("torch is not available on this game PC (blocked by the test)")\n'
    )
    return d


def blocked_env(no_torch: Path) -> dict:
    return node_env(PYTHONPATH=os.pathsep.join([str(no_torch), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def test_the_blocker_really_blocks_torch(no_torch):
    out = subprocess.run(
        [sys.executable, "-c", "import torch"], capture_output=True, text=True, env=blocked_env(no_torch)
    )
    assert out.returncode != 0 and "torch is not available on this game PC" in out.stderr
    # ...while everything a worker needs imports fine
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mqttrl.nodes.worker.node, mqttrl_plugins.dqn, mqttrl_plugins.ppo, sys; "
            "print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        env=blocked_env(no_torch),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("algo,limit", [("dqn", 420), ("ppo", 240)])
def test_torch_free_workers_solve_cartpole(tmp_path, mosquitto, no_torch, algo, limit):
    run = f"thin-{algo}"
    common = ["--set", f"run={run}"]
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(REPO / "configs" / f"cartpole_{algo}.toml"),
            *common,
            "--set",
            "worker.inference=numpy",
            "--broker",
            mosquitto.url,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        tmp_path / "learner.log",
    )
    workers = [
        Proc(
            [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", f"w{i}", "--index", str(i)],
            tmp_path / f"w{i}.log",
            env=blocked_env(no_torch),
        )
        for i in range(2)
    ]
    try:
        # the evaluator is torch-free too: it runs the same numpy forward as the workers
        ev = subprocess.run(
            [
                script("mqttrl"),
                "evaluate",
                "--broker",
                mosquitto.url,
                "--run",
                run,
                "--target",
                "475",
                "--every",
                "5",
                "--max-seconds",
                str(limit),
            ],
            capture_output=True,
            text=True,
            env=blocked_env(no_torch),
            timeout=limit + 60,
        )
        assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:] + workers[0].text()[-2000:]
        assert "target 475.0 reached" in ev.stdout
        for w in workers:
            assert "inference: numpy" in w.text()
            assert w.p.poll() is None, w.text()[-3000:]
    finally:
        for w in workers:
            w.terminate()
        learner.terminate(60)


def test_central_inference_goes_on_when_a_server_dies(tmp_path, mosquitto):
    run = "thin-central"
    watch = Watcher(mosquitto.port, run)
    learner = Proc(
        [
            script("mqttrl-learner"),
            "--config",
            str(REPO / "configs" / "cartpole_dqn.toml"),
            "--set",
            f"run={run}",
            "--set",
            "worker.inference=remote",
            "--set",
            "env.num_envs=2",
            "--set",
            "inference.timeout_s=1.0",
            "--set",
            "learner.max_staleness_s=60",
            "--broker",
            mosquitto.url,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        tmp_path / "learner.log",
    )
    servers = {
        n: Proc(
            [script("mqttrl"), "inference", "--broker", mosquitto.url, "--run", run, "--name", n], tmp_path / f"{n}.log"
        )
        for n in ("s0", "s1")
    }
    workers = [
        Proc(
            [script("mqttrl-worker"), "--broker", mosquitto.url, "--run", run, "--name", f"w{i}", "--index", str(i)],
            tmp_path / f"w{i}.log",
        )
        for i in range(4)
    ]
    try:
        watch.wait(
            lambda w: (
                len(w.heartbeats) == 4
                and all(h["env_steps"] > 200 for h in w.heartbeats.values())
                and w.latest.get("updates", 0) > 20
            ),
            180,
            "4 remote-inference workers stepping and training under way",
        )
        for w in workers:
            assert "inference: remote" in w.text()
        servers["s0"].kill()
        steps = {n: h["env_steps"] for n, h in watch.heartbeats.items()}
        updates = watch.latest["updates"]
        watch.wait(
            lambda w: (
                all(w.heartbeats[n]["env_steps"] > steps[n] + 500 for n in steps) and w.latest["updates"] > updates + 50
            ),
            120,
            "every worker to go on stepping through s1",
        )
        assert servers["s1"].p.poll() is None
        for w in workers:
            assert w.p.poll() is None, w.text()[-3000:]
    finally:
        for w in workers:
            w.terminate()
        servers["s1"].terminate()
        learner.terminate(60)
        watch.close()


def _last_metrics(run_dir: Path) -> dict:
    lines = (
        (run_dir / "learner_metrics.jsonl").read_text().splitlines()
        if (run_dir / "learner_metrics.jsonl").exists()
        else []
    )
    return json.loads(lines[-1]) if lines else {}


def _wait_metrics(run_dir: Path, pred, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = _last_metrics(run_dir)
        try:
            if m and pred(m):
                return m
        except (KeyError, TypeError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last metrics: {json.dumps(_last_metrics(run_dir))[:1500]}")


def test_central_inference_without_shared_subscriptions_over_amqtt(tmp_path):
    """amqtt speaks MQTT 3.1.1 and has no shared subscriptions: workers address servers by name
    (from their retained state) and move to the other one when theirs dies."""
    from mqttrl.broker.embedded import EmbeddedBroker

    run = "thin-amqtt"
    run_dir = tmp_path / "run"
    with EmbeddedBroker("amqtt") as broker:
        learner = Proc(
            [
                script("mqttrl-learner"),
                "--config",
                str(REPO / "configs" / "cartpole_dqn.toml"),
                "--set",
                f"run={run}",
                "--set",
                "worker.inference=remote",
                "--set",
                "env.num_envs=2",
                "--set",
                "inference.timeout_s=1.0",
                "--set",
                "learner.max_staleness_s=60",
                "--broker",
                broker.url,
                "--run-dir",
                str(run_dir),
            ],
            tmp_path / "learner.log",
        )
        servers = {
            n: Proc(
                [script("mqttrl"), "inference", "--broker", broker.url, "--run", run, "--name", n],
                tmp_path / f"{n}.log",
            )
            for n in ("s0", "s1")
        }
        workers = [
            Proc(
                [script("mqttrl-worker"), "--broker", broker.url, "--run", run, "--name", f"w{i}", "--index", str(i)],
                tmp_path / f"w{i}.log",
            )
            for i in range(2)
        ]
        try:
            _wait_metrics(
                run_dir,
                lambda m: m["updates"] > 20 and all(m["workers"][f"w{i}"]["env_steps"] > 500 for i in range(2)),
                180,
                "training with remote inference over amqtt",
            )
            assert all("shared=False" in s.text() for s in servers.values())
            servers["s0"].kill()
            m = _last_metrics(run_dir)
            steps = {w: m["workers"][w]["env_steps"] for w in ("w0", "w1")}
            updates = m["updates"]
            _wait_metrics(
                run_dir,
                lambda m: (
                    all(m["workers"][w]["env_steps"] > steps[w] + 1000 for w in steps) and m["updates"] > updates + 50
                ),
                120,
                "both workers stepping through s1, training going on",
            )
            for w in workers:
                assert w.p.poll() is None, w.text()[-3000:]
                assert "Traceback" not in w.text()
        finally:
            for w in workers:
                w.terminate()
            servers["s1"].terminate()
            learner.terminate(60)
