"""A real-time worker as a user runs it: `mqttrl-learner` and `mqttrl-worker` processes over a
real mosquitto, a simulated game PC that can set its speed: the worker calls ``set_speed`` with
``[env] game_speed`` once per game, steps it in real time and reports its control periods."""

from __future__ import annotations

import json
import time

import paho.mqtt.client as mqtt
import pytest
from helpers.paths import REPO
from helpers.procs import Proc, node_env, script

from mqttrl.transport.topics import Topics

pytestmark = [pytest.mark.e2e]

RUN = "rt-speed"


def test_a_real_time_worker_sets_the_game_speed_and_steps_on_its_clock(tmp_path, mosquitto):
    record = tmp_path / "speed.txt"
    cfg = tmp_path / "rt.toml"
    cfg.write_text(
        f"""run = "{RUN}"
[env]
id = "helpers.speed_game:SpeedGame-v0"
kwargs = {{ env = "CartPole-v1", world_hz = 20.0, record_to = "{record}" }}
num_envs = 2
control_hz = 20.0
game_speed = 2.5
[algorithm]
name = "dqn"
hidden = [16]
learning_starts = 100
[worker]
heartbeat_interval_s = 0.5
[learner]
publish_every = 10
"""
    )
    env = node_env(PYTHONPATH=str(REPO / "tests"))
    beats: list[dict] = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="rt-speed-test")
    client.on_connect = lambda c, *_: c.subscribe(Topics(RUN).all_heartbeats, 0)
    client.on_message = lambda _c, _u, msg: beats.append(json.loads(msg.payload))
    client.connect("127.0.0.1", mosquitto.port)
    client.loop_start()
    url = mosquitto.url
    learner = Proc(
        [script("mqttrl-learner"), "--config", str(cfg), "--broker", url, "--run-dir", str(tmp_path / "run")],
        tmp_path / "learner.log",
        env,
    )
    worker = Proc([script("mqttrl-worker"), "--broker", url, "--run", RUN, "--name", "w0"], tmp_path / "w0.log", env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rt = [b["realtime"] for b in beats if (b.get("realtime") or {}).get("periods", 0) >= 40]
            if rt:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"no real-time heartbeat with 40 periods; worker log:\n{worker.text()[-3000:]}")
    finally:
        client.loop_stop()
        worker.terminate()
        learner.terminate()
    calls = record.read_text().split("\n")[:-1]
    # each of the worker's 2 games was told once; nothing else (the learner only reads spaces) made that call
    assert len(calls) == 2 and {c.split()[1] for c in calls} == {"2.5"}
    assert len({c.split()[0] for c in calls}) == 1
    assert rt[-1]["hist"] and sum(rt[-1]["hist"]) == rt[-1]["periods"]
