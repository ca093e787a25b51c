"""``mqttrl-learner --init-from``: a new run starts from an earlier model (mqttrl/state/init_from.py)."""

from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from helpers.procs import node_env, script

from mqttrl.cli.common import load
from mqttrl.nodes.learner.node import LearnerNode
from mqttrl.plugin.manager import get_registry
from mqttrl.state.checkpoint import write_checkpoint
from mqttrl.state.init_from import InitFromError
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_weights, encode_weights


def _config(run: str, *overrides: str):
    return load(None, [f"run={run}", "env.id=CartPole-v1", *overrides])


def _source_learner(seed: int = 7, *overrides: str):
    """A DQN learner other than the one a new run would make (another seed): the model to start from."""
    cfg = _config("source", f"train.seed={seed}", *overrides)
    info = get_registry().algorithm("dqn")
    env = __import__("gymnasium").make("CartPole-v1")
    learner = info.make_learner(cfg.algorithm.params, env.observation_space, env.action_space, "cpu", seed)
    env.close()
    return learner


def _weights_file(tmp_path, learner) -> tuple:
    tensors, info = learner.export_weights()
    best = tmp_path / "source-run" / "best"
    best.mkdir(parents=True)
    (best / "weights.safetensors").write_bytes(encode_weights(42, "dqn", "source", tensors, info))
    return best / "weights.safetensors", tensors


def _assert_networks_hold(node: LearnerNode, tensors: dict) -> None:
    own, _ = node.algo.export_weights()
    assert set(own) == set(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(own[name], value)
    state, _ = node.algo.state_dict(include_replay=False)
    for name, value in tensors.items():  # the target network starts from the same weights
        np.testing.assert_array_equal(state[f"target.{name}"], value)


def test_init_from_a_run_directory_loads_its_best_weights_into_both_networks(tmp_path, caplog, shared_mosquitto):
    _, tensors = _weights_file(tmp_path, _source_learner())
    fresh = LearnerNode(_config("new", "train.seed=1"), BrokerSettings(url=shared_mosquitto.url), tmp_path / "a")
    own, _ = fresh.algo.export_weights()
    assert any(not np.array_equal(own[k], tensors[k]) for k in tensors)  # a fresh network differs
    with caplog.at_level("INFO", logger="mqttrl.learner"):
        node = LearnerNode(
            _config("new", "train.seed=1"),
            BrokerSettings(url=shared_mosquitto.url),
            tmp_path / "b",
            init_from=tmp_path / "source-run",
        )
    _assert_networks_hold(node, tensors)
    assert node.algo.updates == 0
    said = [r.getMessage() for r in caplog.records if "initialised" in r.getMessage()]
    assert len(said) == 1 and "model version 42 of run 'source'" in said[0]


def test_init_from_a_checkpoint_folder(tmp_path, shared_mosquitto):
    source = _source_learner(seed=11)
    state, meta = source.state_dict(include_replay=False)
    folder = tmp_path / "ckpt-0000000100"
    write_checkpoint(folder, {f"algo/{k}": v for k, v in state.items()}, {"algo": meta, "config": {"run": "source"}})
    node = LearnerNode(_config("new"), BrokerSettings(url=shared_mosquitto.url), tmp_path / "b", init_from=folder)
    _assert_networks_hold(node, source.export_weights()[0])


def test_a_model_of_another_shape_is_refused(tmp_path, shared_mosquitto):
    file, _ = _weights_file(tmp_path, _source_learner(7, "algorithm.hidden=[32]"))
    with pytest.raises(InitFromError, match="another network"):
        LearnerNode(_config("new"), BrokerSettings(url=shared_mosquitto.url), tmp_path / "b", init_from=file)


def test_the_cli_refuses_another_shape_in_one_line_with_exit_2(tmp_path, shared_mosquitto):
    file, _ = _weights_file(tmp_path, _source_learner(7, "algorithm.hidden=[32]"))
    cfg = tmp_path / "new.toml"
    cfg.write_text('run = "new"\n[env]\nid = "CartPole-v1"\n[algorithm]\nname = "dqn"\n')
    argv = [script("mqttrl-learner"), "--config", str(cfg), "--run-dir", str(tmp_path / "r"), "--init-from", str(file)]
    argv += ["--broker", shared_mosquitto.url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=node_env())
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip() and "INFO" not in line]
    assert len(lines) == 1 and "another network" in lines[0] and "Traceback" not in out.stderr, out.stderr


@pytest.mark.e2e
def test_the_first_published_model_is_the_loaded_one(tmp_path, mosquitto):
    file, tensors = _weights_file(tmp_path, _source_learner())
    run = "init-from-publish"
    node = LearnerNode(_config(run), BrokerSettings(url=mosquitto.url), tmp_path / "b", init_from=file)
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    got: list[bytes] = []
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="watch-weights", protocol=mqtt.MQTTv5)
    c.on_message = lambda c_, u, m: got.append(m.payload)
    try:
        assert node.client.wait_connected(30)
        c.connect("127.0.0.1", mosquitto.port)
        c.loop_start()
        c.subscribe(Topics(run).weights, qos=1)
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        node.stop()
        thread.join(30)
        c.loop_stop()
    first = decode_weights(got[0])
    assert first.run == run and first.version == 1  # the new run's first model, not the source's version 42
    for name, value in tensors.items():
        np.testing.assert_array_equal(first.tensors[name], value)
