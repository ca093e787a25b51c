"""The ``tensorboard`` and ``wandb`` storages, driven through the storage interface telemetry uses.

TensorBoard's event files are read back with TensorBoard's own reader (EventAccumulator);
the W&B run is written offline (WANDB_MODE=offline, no network) and its ``.wandb`` file read
back record by record with wandb's own protobuf classes.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from mqttrl.conformance import check_storage
from mqttrl.plugin import ScalarMapper, Scalars
from mqttrl.plugin.manager import get_registry
from mqttrl.plugin.storage import Point, Storage

RUN = "tb-run"
T0 = 1_700_000_000.0


def telemetry_points(run: str = RUN) -> list[list[Point]]:
    """Batches as telemetry writes them: episodes, learner metrics, an evaluation, aggregates."""
    tags = {"run": run}
    w0, w1 = {**tags, "worker": "w0"}, {**tags, "worker": "w1"}
    return [
        [
            Point("episode", w0, {"return": 10.0, "length": 10, "model_version": 1, "env_steps": 100}, T0 + 1),
            Point("episode", w0, {"return": 12.0, "length": 12, "model_version": 1, "env_steps": 112}, T0 + 2),
        ],
        [Point("episode", w1, {"return": 20.0, "length": 20, "model_version": 1, "env_steps": 50}, T0 + 3)],
        [
            Point(
                "learner",
                tags,
                {
                    "updates": 40,
                    "updates_per_s": 8.0,
                    "samples": 160,
                    "samples_per_s": 32.5,
                    "model_version": 2,
                    "workers_online": 2,
                    "inbox": 0,
                    "missing_batches": 0,
                    "rejected_total": 3,
                    "train_loss": 0.25,
                    "train_q_mean": 1.5,
                },
                T0 + 4,
            ),
            Point("rejections", {**tags, "reason": "stale"}, {"count": 3}, T0 + 4),
        ],
        [
            Point(
                "eval", {**tags, "evaluator": "train"}, {"mean": 150.0, "std": 5.0, "min": 140.0, "max": 160.0}, T0 + 5
            )
        ],
        [
            Point("episode_stats", w0, {"mean_return": 11.0, "mean_length": 11.0, "episodes": 2}, T0 + 6),
            Point(
                "worker",
                w0,
                {
                    "online": 1,
                    "env_steps": 110,  # an older count than the episode's 112: changes nothing
                    "env_steps_per_s": 1000.0,
                    "outbox": 0,
                    "dropped": 0,
                    "version_lag": None,  # not known yet: left out
                    "last_return": 12.0,
                },
                T0 + 6,
            ),
            Point(
                "worker",
                w1,
                {"online": 1, "env_steps": 80, "env_steps_per_s": 500.0, "outbox": 2, "dropped": 0},
                T0 + 6,
            ),
            Point(
                "episode_stats",
                {**tags, "worker": "all"},
                {"mean_return": 14.0, "mean_length": 14.0, "episodes": 3},
                T0 + 6,
            ),
            Point("best", tags, {"mean_return": 14.0, "model_version": 2}, T0 + 6),
            Point("telemetry", tags, {"loop_ms": 0.2, "messages_per_s": 12.0, "pending_points": 0}, T0 + 6),
        ],
    ]


#: name -> [(step, value)] that telemetry_points() gives (env steps: w0 112 + w1 80 at the end)
EXPECTED = {
    "episode/return": [(100, 10.0), (112, 12.0), (162, 20.0)],
    "episode/length": [(100, 10.0), (112, 12.0), (162, 20.0)],
    "worker/w0/return": [(100, 10.0), (112, 12.0)],
    "worker/w1/return": [(162, 20.0)],
    "learner/loss": [(162, 0.25)],
    "learner/q_mean": [(162, 1.5)],
    "learner/updates": [(162, 40.0)],
    "learner/model_version": [(162, 2.0)],
    "learner/rejected_total": [(162, 3.0)],
    "throughput/samples_per_s": [(162, 32.5)],
    "throughput/updates_per_s": [(162, 8.0)],
    "rejections/stale": [(162, 3.0)],
    "eval/mean": [(162, 150.0)],
    "eval/max": [(162, 160.0)],
    "worker/w0/mean_return": [(162, 11.0)],
    "worker/w0/env_steps_per_s": [(162, 1000.0)],
    "worker/w1/env_steps_per_s": [(192, 500.0)],
    "worker/w1/outbox": [(192, 2.0)],
    "worker/w0/online": [(162, 1.0)],
    "throughput/env_steps_per_s": [(192, 1500.0)],
    "episode/mean_return": [(192, 14.0)],
    "episode/count": [(192, 3.0)],
    "best/mean_return": [(192, 14.0)],
    "telemetry/loop_ms": [(192, 0.2)],
}


def by_name(scalars: list[Scalars]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = {}
    for s in scalars:
        for k, v in s.values.items():
            out.setdefault(k, []).append((s.step, v))
    return out


def test_mapper_names_and_env_step_axis():
    m = ScalarMapper()
    got = by_name([s for batch in telemetry_points() for s in m.map(batch)])
    for name, want in EXPECTED.items():
        assert got[name] == want, name
    assert "worker/w0/version_lag" not in got  # None: not known yet
    assert not any(k.endswith("last_return") for k in got)  # the episodes carry it already


def test_mapper_env_steps_survive_a_restarted_worker_and_never_go_back():
    m = ScalarMapper()
    tags = {"run": "r", "worker": "w0"}
    steps = []
    for counter in (1000, 2000, 1990, 30, 500):  # 1990: an older heartbeat; 30: the worker restarted
        (s,) = m.map([Point("episode", tags, {"return": 1.0, "length": 1, "env_steps": counter}, T0)])
        steps.append(s.step)
    assert steps == [1000, 2000, 2000, 2030, 2500]


def test_mapper_seconds_axis_odd_names_and_unknown_measurements():
    m = ScalarMapper("seconds")
    (a,) = m.map([Point("episode", {"run": "r", "worker": "w 1,x=y"}, {"return": 1.0, "length": 2}, T0)])
    (b,) = m.map([Point("gpu", {"run": "r", "device": "cuda:0"}, {"util": 0.5, "name": "H100", "ok": True}, T0 + 7.9)])
    assert (a.step, b.step) == (0, 7)
    assert set(a.values) == {"episode/return", "episode/length", "worker/w_1_x_y/return", "worker/w_1_x_y/length"}
    assert b.values == {"gpu/cuda_0/util": 0.5, "gpu/cuda_0/ok": 1.0}  # strings are not scalars
    with pytest.raises(ValueError, match="step='steps'"):
        ScalarMapper("steps")


# ---- tensorboard -------------------------------------------------------------------------------


def read_events(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar under ``logdir`` as TensorBoard itself reads it: tag -> [(step, value, wall_time)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_files_hold_every_scalar(tmp_path):
    from mqttrl_plugins.tensorboard_storage import TensorBoardStorage

    st = TensorBoardStorage({"dir": str(tmp_path / "tb")})
    assert isinstance(st, Storage)
    for batch in telemetry_points():
        st.write(batch)
    st.close()
    assert st.pending == 0 and st.errors == 0 and not st._thread.is_alive()
    logdir = tmp_path / "tb" / RUN  # <dir>/<run>: one TensorBoard run per mqttrl run
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    events = read_events(logdir)
    for name, want in EXPECTED.items():
        got = [(step, pytest.approx(value)) for step, value, _ in events[name]]
        assert got == want, name
    # each scalar carries the wall-clock time telemetry received its point
    assert [t for _, _, t in events["episode/return"]] == pytest.approx([T0 + 1, T0 + 2, T0 + 3])
    assert [t for _, _, t in events["eval/mean"]] == pytest.approx([T0 + 5])


def test_tensorboard_logdir_option_and_the_registry(tmp_path):
    factory = get_registry().storage("tensorboard")
    st = factory({"logdir": str(tmp_path / "exact"), "step": "seconds"})
    st.write(telemetry_points()[0])
    st.close()
    assert read_events(tmp_path / "exact")["episode/return"] == [(0, 10.0, T0 + 1), (1, 12.0, T0 + 2)]


def test_check_plugin_passes_for_tensorboard(tmp_path):
    results = check_storage(get_registry().storage("tensorboard"), {"dir": str(tmp_path)})
    assert all(r.ok for r in results), results
    assert read_events(tmp_path / "check")  # check_storage's points, run "check"


def test_write_returns_at_once_while_the_backend_is_slow(tmp_path, monkeypatch):
    """Telemetry's loop never waits for event records: they are made on the storage's own thread."""
    from mqttrl_plugins.tensorboard_storage import TensorBoardStorage

    st = TensorBoardStorage({"dir": str(tmp_path)})
    release = threading.Event()
    emit = st._emit
    threads = set()

    def slow_emit(s):
        threads.add(threading.current_thread().name)
        release.wait(10)
        emit(s)

    monkeypatch.setattr(st, "_emit", slow_emit)
    t0 = time.perf_counter()
    for batch in telemetry_points():
        st.write(batch)
    took = time.perf_counter() - t0
    assert took < 0.05, took
    assert st.pending > 0  # accepted, not stored yet: telemetry reports it as pending_points
    release.set()
    st.close()
    assert st.pending == 0
    assert threads == {"tensorboard-storage"}
    assert read_events(tmp_path / RUN)["eval/mean"][0][1] == 150.0


def test_backlog_is_bounded(tmp_path, monkeypatch):
    from mqttrl_plugins.tensorboard_storage import TensorBoardStorage

    st = TensorBoardStorage({"dir": str(tmp_path), "max_pending": "3"})
    release = threading.Event()
    monkeypatch.setattr(st, "_ready", lambda scalars: release.wait(10))
    point = telemetry_points()[1]  # one point per batch
    for _ in range(10):
        st.write(point)
    assert st.pending <= 4 and st.dropped >= 6  # the oldest went; one batch may already be in the writer's hands
    release.set()
    st.close()
    assert st.pending == 0


# ---- wandb ---------------------------------------------------------------------------------------


def read_wandb_records(path: Path) -> list:
    """The records of a ``.wandb`` file (a LevelDB-style log of wandb's protobuf ``Record`` s)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    block, pos, buf, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record still being written
            break
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(buf)
            records.append(record)
            buf = b""
    return records


def wandb_run(wandb_dir: Path, timeout: float = 30.0) -> dict:
    """What an offline run holds: its name, project, config and history rows.

    ``run.finish()`` can return before wandb's service process has written the file out (seen on a
    loaded machine: only the header there), so this waits, within ``timeout``, for the run's closing
    ``exit`` record."""
    (run_dir,) = (wandb_dir / "wandb").glob("offline-run-*")
    (file,) = run_dir.glob("*.wandb")
    deadline = time.monotonic() + timeout
    records = read_wandb_records(file)
    while not any(r.WhichOneof("record_type") == "exit" for r in records) and time.monotonic() < deadline:
        time.sleep(0.1)
        records = read_wandb_records(file)
    out: dict = {"name": None, "project": None, "config": {}, "history": []}
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["name"], out["project"] = r.run.display_name, r.run.project
            out["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
    return out


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


@pytest.mark.slow
def test_wandb_offline_run_holds_config_and_every_scalar(tmp_path, wandb_offline):
    from mqttrl_plugins.wandb_storage import WandbStorage

    st = WandbStorage({"dir": str(tmp_path), "project": "mqttrl-test"})
    st.run_config({"run": RUN, "algorithm": {"name": "dqn", "params": {"lr": 0.001}}, "train": {"seed": 3}})
    for batch in telemetry_points():
        st.write(batch)
    st.close()
    assert st.pending == 0 and st.errors == 0 and st.start_failures == 0
    run = wandb_run(tmp_path)
    assert (run["name"], run["project"]) == (RUN, "mqttrl-test")
    assert run["config"]["algorithm"] == {"name": "dqn", "params": {"lr": 0.001}}
    assert run["config"]["train"] == {"seed": 3}
    got: dict[str, list] = {}
    for row in run["history"]:
        for k, v in row.items():
            if not k.startswith("_") and k != "env_steps":
                got.setdefault(k, []).append((row["env_steps"], v))  # every row carries its step
    for name, want in EXPECTED.items():
        assert got[name] == [(step, pytest.approx(v)) for step, v in want], name


def test_wandb_keeps_points_until_its_run_can_start(tmp_path, wandb_offline, monkeypatch):
    """wandb.init failing (no API key, no network) loses nothing: tried again, then every point is logged."""
    import wandb

    from mqttrl_plugins.wandb_storage import WandbStorage

    real_init, calls = wandb.init, []

    def flaky_init(**kwargs):
        calls.append(kwargs["name"])
        if len(calls) == 1:
            raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")
        return real_init(**kwargs)

    monkeypatch.setattr(wandb, "init", flaky_init)
    st = WandbStorage({"dir": str(tmp_path), "retry_s": "0.3"})
    for batch in telemetry_points():
        st.write(batch)
    deadline = time.monotonic() + 20
    while st.pending and time.monotonic() < deadline:
        time.sleep(0.05)
    st.close()
    assert calls == [RUN, RUN] and st.start_failures == 1 and st.pending == 0
    returns = [row["episode/return"] for row in wandb_run(tmp_path)["history"] if "episode/return" in row]
    assert returns == [10.0, 12.0, 20.0]


def test_check_plugin_wandb_fails_at_close_when_no_run_can_start(tmp_path, wandb_offline, monkeypatch):
    import wandb

    def no_key(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_key)
    results = check_storage(get_registry().storage("wandb"), {"dir": str(tmp_path)})
    assert [r.ok for r in results] == [True, True, True, True, False]
    assert "points still pending after close()" in results[-1].detail


def test_check_plugin_passes_for_wandb_offline(tmp_path, wandb_offline):
    results = check_storage(get_registry().storage("wandb"), {"dir": str(tmp_path)})
    assert all(r.ok for r in results), results
    assert any("episode/return" in row for row in wandb_run(tmp_path)["history"])


# ---- through a real telemetry node and mosquitto -----------------------------------------------


def test_telemetry_node_feeds_tensorboard_and_wandb_the_run_and_its_config(tmp_path, mosquitto, wandb_offline):
    """The telemetry node over a real broker: episodes, learner metrics and the retained run config
    reach both storages (TensorBoard events read back, the W&B run's config set from the learner's)."""
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings, make_storages
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.transport.topics import Topics
    from mqttrl.wire import encode_json

    run = "tele-tb"
    tp = Topics(run)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tele-tb-pub", protocol=mqtt.MQTTv5)
    pub.connect("127.0.0.1", mosquitto.port)
    pub.loop_start()
    config = {"run": run, "algorithm": {"name": "dqn", "params": {"lr": 0.0005}}, "protocol": 1}
    pub.publish(tp.config, encode_json(config), qos=1, retain=True).wait_for_publish(5)
    storages = make_storages(
        ["tensorboard", "wandb"],
        {"tensorboard": {"logdir": str(tmp_path / "tb")}, "wandb": {"dir": str(tmp_path)}},
    )
    node = TelemetryNode(BrokerSettings(url=mosquitto.url), run, storages, TelemetrySettings(interval_s=0.3))
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    try:
        assert node.client.wait_connected(15)
        # connected means its SUBSCRIBEs are sent, not yet granted: the retained config arriving says
        # the broker has them (one connection's packets are handled in order), the pause covers the rest
        deadline = time.monotonic() + 15
        while node.config != config and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        for i in range(10):
            episode = {"return": float(i), "length": i + 1, "model_version": 1, "env_steps": 10 * (i + 1)}
            pub.publish(tp.episodes("w0"), encode_json(episode), qos=1).wait_for_publish(5)
        metrics = {"updates": 7, "model_version": 2, "samples": 100, "samples_per_s": 50.0, "train": {"loss": 0.5}}
        pub.publish(tp.learner_metrics, encode_json(metrics), qos=1).wait_for_publish(5)
        deadline = time.monotonic() + 20
        while (node.episodes < 10 or not node.learner) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.8)  # a few aggregate intervals
    finally:
        node.stop()
        thread.join(30)
        pub.loop_stop()
    assert not thread.is_alive() and node.config == config
    events = read_events(tmp_path / "tb")
    assert [(s, v) for s, v, _ in events["episode/return"]] == [(10 * (i + 1), float(i)) for i in range(10)]
    assert [(s, v) for s, v, _ in events["learner/loss"]] == [(100, 0.5)]
    assert events["throughput/samples_per_s"][0][1] == 50.0
    assert "episode/mean_return" in events and "telemetry/loop_ms" in events
    w = wandb_run(tmp_path)
    assert w["name"] == run and w["config"]["algorithm"]["params"] == {"lr": 0.0005}
    assert [row["episode/return"] for row in w["history"] if "episode/return" in row] == [float(i) for i in range(10)]


def test_a_worker_seen_only_by_its_episodes_does_not_reset_the_env_step_axis():
    """The telemetry node's aggregate tick between two episodes of a worker whose heartbeat has not come
    yet used to report env_steps=0 for it, which the mapper took for a restart: every later step was
    shifted (CI saw (30, 1.0) for (20, 1.0)). Unknown is None, and the axis stays the episodes' own."""
    from mqttrl.nodes.telemetry import WorkerView
    from mqttrl.plugin import ScalarMapper
    from mqttrl.plugin.storage import Point

    view = WorkerView("w0")  # what the telemetry node knows of a worker whose heartbeat has not come
    assert view.env_steps is None
    mapper = ScalarMapper()
    tags = {"run": "r", "worker": "w0"}
    steps = []
    for i in range(3):
        episode = Point("episode", tags, {"return": float(i), "length": 1, "env_steps": 10 * (i + 1)}, float(i))
        tick = Point("worker", tags, {"online": 1, "env_steps": view.env_steps, "env_steps_per_s": 0.0}, i + 0.5)
        steps += [s.step for s in mapper.map([episode]) if "episode/return" in s.values]
        mapper.map([tick])
    assert steps == [10, 20, 30]
