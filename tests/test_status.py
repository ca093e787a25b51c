"""``mqttrl status``: prints into a pipe, fits 80 columns, shows no negative lag and no null fields."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from rich.console import Console

from mqttrl.cli.fleet import FleetView
from mqttrl.transport.topics import Topics

BIN = Path(sys.executable).parent


def feed(view: FleetView, topic: str, body: dict) -> None:
    view.handle(topic, json.dumps(body).encode())


def view_with_a_worker_ahead() -> FleetView:
    """The learner's metrics say version 7; the worker's newer heartbeat already says 8."""
    view = FleetView("r1")
    t = Topics("r1")
    feed(view, t.learner_state, {"status": "online", "model_version": 7})
    feed(view, t.learner_metrics, {"model_version": 7, "updates": 9000, "updates_per_s": 120.0})
    feed(view, t.heartbeat("w0"), {"env_steps": 1000, "model_version": 8, "time": 100.0})
    feed(view, t.heartbeat("w1"), {"env_steps": 500, "model_version": 4, "time": 100.0})
    return view


def test_lag_is_never_negative():
    view = view_with_a_worker_ahead()
    lags = {row["node"]: row.get("lag") for row in view.rows()}
    assert lags == {"learner": None, "w0": 0, "w1": 3}


def test_json_rows_hold_no_nulls():
    """A worker seen once has no step rate yet: the key is left out, not null."""
    rows = view_with_a_worker_ahead().rows()
    assert all(v is not None for row in rows for v in row.values()), rows
    assert "rate" not in rows[1] and rows[1]["steps"] == 1000


def test_the_table_fits_80_columns():
    view = view_with_a_worker_ahead()
    feed(view, Topics("r1").heartbeat("worker-with-a-long-name-7"), {"env_steps": 123456789, "model_version": 7})
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(view.table())
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "node" in line)
    for title in ("status", "steps/s", "model", "lag", "return", "restarts"):
        assert title in header, header  # no column title cut or wrapped


def test_a_person_s_share_of_the_steps_is_a_column_once_someone_took_a_game_over():
    view = view_with_a_worker_ahead()
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(view.table())
    assert "person" not in out.getvalue()  # nobody took over: no column
    feed(view, Topics("r1").heartbeat("w1"), {"env_steps": 800, "model_version": 4, "time": 101.0, "person_steps": 200})
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(view.table())
    lines = out.getvalue().splitlines()
    assert "person" in next(line for line in lines if "node" in line) and max(len(line) for line in lines) <= 80
    assert next(line for line in lines if line.strip().startswith("w1")).split()[-1] == "25%"
    assert next(line for line in lines if line.strip().startswith("w0")).split()[-1] == "-"
    assert {row["node"]: row.get("person_steps") for row in view.rows()} == {"learner": None, "w0": None, "w1": 200}


def test_status_prints_into_a_pipe(mosquitto, tmp_path):
    """Live mode with stdout not a terminal prints the table every --every seconds (it printed nothing)."""
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect("127.0.0.1", mosquitto.port)
    publisher.loop_start()
    t = Topics("piped")
    publisher.publish(t.learner_state, json.dumps({"status": "online", "model_version": 3}), qos=1, retain=True)
    env = {**os.environ, "COLUMNS": "80"}
    argv = [str(BIN / "mqttrl"), "status", "--run", "piped", "--broker", mosquitto.url, "--every", "0.5"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # two tables printed, on a loaded machine too (a fixed sleep raced the interpreter's start)
        deadline = time.monotonic() + 60
        while sum("mqttrl run piped" in line for line in lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(timeout=5)
        err = proc.stderr.read()
        publisher.loop_stop()
        publisher.disconnect()
    out = "".join(lines)
    assert "Traceback" not in err, err
    assert out.count("mqttrl run piped") >= 2, out + err
    assert "learner" in out and "online" in out


def _held_run(port: int, run: str) -> mqtt.Client:
    """A broker holding one run's retained learner state (what a learner leaves)."""
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()
    body = json.dumps({"status": "online", "model_version": 3})
    publisher.publish(Topics(run).learner_state, body, qos=1, retain=True).wait_for_publish(5)
    return publisher


def test_a_misspelled_run_is_one_line_naming_the_runs_there_and_exit_2(mosquitto):
    """It printed an empty table with the learner "unknown" and exited 0."""
    publisher = _held_run(mosquitto.port, "cartpole-dqn")
    argv = [str(BIN / "mqttrl"), "status", "--run", "cartpol-dqn", "--broker", mosquitto.url]
    try:
        done = subprocess.run([*argv, "--once", "0.5", "--wait-s", "1.5"], capture_output=True, text=True, timeout=60)
    finally:
        publisher.loop_stop()
        publisher.disconnect()
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mqttrl status: nothing of run 'cartpol-dqn' on {mosquitto.url} after 1.5s"), lines
    assert "(did you mean cartpole-dqn?); runs on this broker: cartpole-dqn (online)" in lines[0]


def test_live_a_misspelled_run_is_said_once_and_watched_on(mosquitto):
    publisher = _held_run(mosquitto.port, "cartpole-dqn")
    argv = [str(BIN / "mqttrl"), "status", "--run", "cartpol-dqn", "--broker", mosquitto.url]
    proc = subprocess.Popen([*argv, "--every", "0.5", "--wait-s", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(5)  # the interpreter's start, then 1 s of nothing, then tables every 0.5 s
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        publisher.loop_stop()
        publisher.disconnect()
    said = [line for line in err.decode().splitlines() if "nothing of run 'cartpol-dqn'" in line]
    assert len(said) == 1 and said[0].endswith("(still watching)"), err.decode()
    assert "runs on this broker: cartpole-dqn (online)" in said[0]
    assert out.decode().count("mqttrl run cartpol-dqn") >= 2  # it keeps watching
