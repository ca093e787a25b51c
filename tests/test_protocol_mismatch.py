"""A worker and a learner of other wire protocol versions (issue 46): each side says so in one line
with both versions, instead of "is a learner running?" on one side and "silent; marked offline"
on the other. The other version is played by a plain paho client against a real mosquitto."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time

import paho.mqtt.client as mqtt
from helpers.learner_core_kit import birth, make, reason
from helpers.procs import node_env, script

from mqttrl import PROTOCOL_VERSION
from mqttrl.cli.common import load
from mqttrl.config import RunConfig
from mqttrl.nodes.learner.node import LearnerNode
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics
from mqttrl.wire import encode_batch, encode_json

OTHER = PROTOCOL_VERSION + 98  # a protocol no mqttrl speaks yet


def publisher(port: int) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def other_batch(run: str, worker: str, seq: int) -> bytes:
    """A sample batch whose protocol byte is another version's (the byte after the magic)."""
    import numpy as np

    payload = bytearray(encode_batch(run, worker, seq, 0, {"obs": np.zeros((2, 4), np.float32)}))
    payload[4] = OTHER
    return bytes(payload)


def test_a_worker_ends_in_one_line_when_the_run_speaks_another_protocol(mosquitto):
    """It waited for weights for ever ("is a learner running?"); now: exit 2, one line, both versions."""
    run, t = "proto-w", Topics("proto-w")
    pub = publisher(mosquitto.port)
    config = {**RunConfig(run=run).to_dict(), "protocol": OTHER}
    pub.publish(t.config, json.dumps(config), qos=1, retain=True).wait_for_publish(5)
    state = {"status": "online", "run": run, "mqttrl": "9.9.9", "protocol": OTHER}
    pub.publish(t.learner_state, json.dumps(state), qos=1, retain=True).wait_for_publish(5)
    argv = [script("mqttrl-worker"), "--run", run, "--broker", mosquitto.url, "--name", "w0", "--wait-timeout", "15"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=node_env())
    finally:
        pub.loop_stop()
        pub.disconnect()
    err = done.stderr
    assert done.returncode == 2, err
    assert "Traceback" not in err and "still waiting" not in err and "rejected" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"mqttrl: config error: the learner of run 'proto-w' speaks protocol {OTHER}"), last
    assert f"this worker protocol {PROTOCOL_VERSION}" in last and "install the learner's mqttrl version" in last
    assert sum(f"protocol {OTHER}" in line for line in err.splitlines()) == 1, err


def _learner(tmp_path, mosquitto, run: str) -> tuple[LearnerNode, threading.Thread]:
    cfg = load(None, [f"run={run}", "env.id=CartPole-v1", "learner.metrics_interval_s=0.5"])
    node = LearnerNode(cfg, BrokerSettings(url=mosquitto.url), tmp_path / "run")
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    assert node.client.wait_connected(30)  # subscribed: what comes now is handled once it reads its inbox
    return node, thread


def _refused(node: LearnerNode, n: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while node.rejections.snapshot().get("protocol_version", 0) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return node.rejections.snapshot().get("protocol_version", 0)


def test_the_learner_says_once_per_worker_that_it_speaks_another_protocol(tmp_path, mosquitto, caplog):
    """Birth, heartbeats and batches of another version: refused and counted as protocol_version,
    one WARNING per worker naming it and both versions; it never becomes a member."""
    caplog.set_level(logging.INFO, logger="mqttrl")
    run, t = "proto-l", Topics("proto-l")
    node, thread = _learner(tmp_path, mosquitto, run)
    pub = publisher(mosquitto.port)
    try:
        state = {"status": "online", "worker": "gamepc", "mqttrl": "9.9.9", "protocol": OTHER, "incarnation": "a"}
        pub.publish(t.worker_state("gamepc"), json.dumps(state), qos=1, retain=True)
        assert _refused(node, 1) == 1
        for seq in range(3):
            pub.publish(t.heartbeat("gamepc"), json.dumps({"model_version": 0, "env_steps": 10}), qos=1)
            pub.publish(t.samples("gamepc"), other_batch(run, "gamepc", seq), qos=1)
        for seq in range(2):  # a worker whose birth the learner missed: its batches' protocol byte says it
            pub.publish(t.samples("nobirth"), other_batch(run, "nobirth", seq), qos=1)
        assert _refused(node, 9) == 9
    finally:
        pub.loop_stop()
        pub.disconnect()
        node.stop()
        thread.join(30)
    lines = [r.getMessage() for r in caplog.records if f"speaks protocol {OTHER}" in r.getMessage()]
    mine = f"this learner protocol {PROTOCOL_VERSION}"
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"worker gamepc speaks protocol {OTHER} (mqttrl 9.9.9), {mine}"), lines
    assert lines[1].startswith(f"worker nobirth speaks protocol {OTHER}, {mine}"), lines
    assert all(r.levelno == logging.WARNING for r in caplog.records if f"speaks protocol {OTHER}" in r.getMessage())
    assert not any("rejected" in r.getMessage() and "protocol" in r.getMessage() for r in caplog.records)
    assert "gamepc" not in node.core.workers and "nobirth" not in node.core.workers


def test_a_member_whose_name_a_process_of_another_protocol_takes_leaves_and_may_come_back():
    core, _ = make()
    birth(core, "w0", incarnation="a")
    other = {"status": "online", "incarnation": "b", "protocol": OTHER}
    assert reason(core.on_worker_state, "w0", encode_json(other), 1.0) == "protocol_version"
    assert not core.workers["w0"].online and core.online() == set()
    assert reason(core.on_heartbeat, "w0", encode_json({"model_version": 0, "env_steps": 1}), 2.0) == "protocol_version"
    birth(core, "w0", 3.0, incarnation="c")  # a process of this version under the name again
    assert core.online() == {"w0"}


def test_one_batch_of_another_protocol_refuses_that_batch_not_the_sender():
    """A batch whose protocol byte differs is refused (and said once); the sender's next batch of
    this version is judged on its own: only a birth of another protocol refuses a worker unread."""
    core, _ = make()
    birth(core, "w0", incarnation="a")
    assert reason(core.on_samples, "w0", other_batch(core.rules.run, "w0", 0), 1.0) == "protocol_version"
    assert reason(core.on_samples, "w0", other_batch(core.rules.run, "w0", 1), 1.1) == "protocol_version"
    hb = encode_json({"model_version": 0, "env_steps": 1})
    core.on_heartbeat("w0", hb, 1.2)  # not refused: the worker's birth was of this version
    assert core.workers["w0"].online
