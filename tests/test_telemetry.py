"""Telemetry against real servers: mosquitto for the run, VictoriaMetrics as the InfluxDB-compatible store."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from helpers.procs import node_env, script

from benchmarks.harness.procs import stop_server
from mqttrl.broker.embedded import _wait_port, free_port
from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics
from mqttrl.wire import encode_json
from mqttrl.wire.evaluation import Evaluation
from mqttrl_plugins.files_storage import FilesStorage
from mqttrl_plugins.influxdb_storage import InfluxStorage


class VictoriaMetrics:
    """A real VictoriaMetrics (Debian package) on a free port; accepts influxdb-client's v2 writes."""

    def __init__(self, workdir: Path):
        if not shutil.which("victoria-metrics"):
            pytest.fail("victoria-metrics is not on PATH: apt-get install victoria-metrics (scripts/test.sh does this)")
        self.workdir = workdir
        self.port = free_port()
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VictoriaMetrics:
        self.log = open(self.workdir / "vm.log", "ab")
        self.proc = subprocess.Popen(
            [
                "victoria-metrics",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.workdir / 'data'}",
                "-retentionPeriod=100y",
                "-search.disableCache",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        assert _wait_port(self.port, 15), (self.workdir / "vm.log").read_text()[-2000:]
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_server(self.proc, self.log, timeout=15)
        self.proc = None

    def export(self, selector: str) -> list[dict]:
        """All stored series matching a PromQL selector (after forcing a flush)."""
        urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=10).read()
        q = urllib.parse.urlencode({"match[]": selector, "start": "0"})
        body = urllib.request.urlopen(f"{self.url}/api/v1/export?{q}", timeout=10).read().decode()
        return [json.loads(line) for line in body.splitlines() if line.strip()]

    def values(self, selector: str) -> list[float]:
        out = []
        for series in self.export(selector):
            out += series["values"]
        return out


@pytest.fixture
def victoria(tmp_path):
    d = tmp_path / "vm"
    d.mkdir()
    vm = VictoriaMetrics(d).start()
    yield vm
    vm.stop()


def _publisher(port: int) -> mqtt.Client:
    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id=f"fake-nodes-{time.monotonic_ns()}", protocol=mqtt.MQTTv5
    )
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def _start_telemetry(mosquitto, run, storages, **settings):
    node = TelemetryNode(
        BrokerSettings(url=mosquitto.url), run, storages, TelemetrySettings(interval_s=0.5, **settings)
    )
    thread = threading.Thread(target=node.run, daemon=True)
    thread.start()
    assert node.client.wait_connected(15)
    time.sleep(0.3)
    return node, thread


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_telemetry_writes_to_victoriametrics_and_files(tmp_path, mosquitto, victoria):
    run = "tele-vm"
    tp = Topics(run)
    files = FilesStorage({"dir": str(tmp_path / "files"), "plot_every_episodes": 10, "plot_min_interval_s": 0})
    influx = InfluxStorage({"url": victoria.url, "token": "", "org": "", "bucket": "mqttrl", "flush_interval_s": 0.2})
    node, thread = _start_telemetry(mosquitto, run, [influx, files], window=5, quicksave_best=False)
    pub = _publisher(mosquitto.port)
    returns = [float(10 + 3 * i) for i in range(30)]
    try:
        pub.publish(tp.worker_state("w0"), encode_json({"status": "online"}), qos=1, retain=True)
        for step, r in enumerate(returns):
            pub.publish(
                tp.episodes("w0"),
                encode_json({"return": r, "length": int(r), "model_version": 7, "env_steps": 100 * step}),
                qos=1,
            ).wait_for_publish(5)
        metrics = {
            "updates": 1234,
            "model_version": 9,
            "samples": 5000,
            "samples_per_s": 800.0,
            "updates_per_s": 55.5,
            "workers_online": 1,
            "rejected": {"garbage": 3, "stale_version": 2},
            "train": {"loss": 0.25},
        }
        pub.publish(tp.learner_metrics, encode_json(metrics), qos=1).wait_for_publish(5)
        pub.publish(
            tp.heartbeat("w0"), encode_json({"env_steps": 1000, "model_version": 6, "time": time.time()}), qos=1
        ).wait_for_publish(5)
        pub.publish(
            tp.evaluation("train"),
            Evaluation(8, 20, 321.5, 1.0, 300.0, 340.0, eval_s=2.0).encode(),
            qos=1,
        ).wait_for_publish(5)
        _wait(
            lambda: node.episodes == 30 and node.learner is not None and node.learner.updates == 1234,
            20,
            "telemetry to take every message",
        )
        time.sleep(1.5)  # a few aggregate intervals
    finally:
        node.stop()
        thread.join(30)
        pub.loop_stop()
    assert influx.pending == 0 and influx.dropped == 0
    sel = f'{{run="{run}"'
    assert sorted(victoria.values(sel + ',worker="w0",__name__="episode_return"}')) == returns
    assert victoria.values(sel + ',__name__="learner_updates"}')[-1] == 1234
    assert victoria.values(sel + ',__name__="learner_train_loss"}')[-1] == 0.25
    assert victoria.values(sel + ',reason="garbage",__name__="rejections_count"}')[-1] == 3
    assert victoria.values(sel + ',reason="stale_version",__name__="rejections_count"}')[-1] == 2
    assert victoria.values(sel + ',__name__="eval_mean"}') == [321.5]
    # moving average over the last 5 episodes, overall and for w0; lag = learner version 9 - worker version 6
    assert victoria.values(sel + ',worker="all",__name__="episode_stats_mean_return"}')[-1] == pytest.approx(
        sum(returns[-5:]) / 5
    )
    assert victoria.values(sel + ',worker="w0",__name__="worker_version_lag"}')[-1] == 3
    # the files storage got the same episodes and drew the curves
    rows = (tmp_path / "files" / "episode.csv").read_text().splitlines()
    assert len(rows) == 31
    for png in ("returns.png", "throughput.png"):
        data = (tmp_path / "files" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_no_point_lost_when_the_database_restarts_mid_run(tmp_path, mosquitto, victoria):
    run = "tele-restart"
    tp = Topics(run)
    influx = InfluxStorage(
        {"url": victoria.url, "token": "", "org": "", "bucket": "mqttrl", "flush_interval_s": 0.2, "timeout_ms": 2000}
    )
    node, thread = _start_telemetry(mosquitto, run, [influx], quicksave_best=False)
    pub = _publisher(mosquitto.port)
    try:
        for i in range(50):
            pub.publish(tp.episodes("w0"), encode_json({"return": float(i), "length": i + 1}), qos=1).wait_for_publish(
                5
            )
        _wait(lambda: node.episodes == 50 and influx.pending == 0, 20, "first half written")
        victoria.stop()
        for i in range(50, 120):
            pub.publish(tp.episodes("w0"), encode_json({"return": float(i), "length": i + 1}), qos=1).wait_for_publish(
                5
            )
        _wait(lambda: node.episodes == 120, 20, "second half received")
        time.sleep(1.5)
        assert influx.failures > 0 and influx.pending > 0, "writes should have failed while the database was down"
        victoria.start()
        _wait(lambda: influx.pending == 0, 40, "pending points to be written after the restart")
    finally:
        node.stop()
        thread.join(30)
        pub.loop_stop()
    assert influx.dropped == 0
    got = sorted(victoria.values(f'{{run="{run}",worker="w0",__name__="episode_return"}}'))
    assert got == [float(i) for i in range(120)]


# A training run's curves, telemetry CSVs and best models: tests/test_e2e_train.py
# (test_train_with_embedded_mosquitto_writes_a_complete_run_dir, assert_curves_and_best_models).


@pytest.mark.e2e
@pytest.mark.slow
def test_quicksave_and_status_on_a_running_learner(tmp_path, mosquitto):
    from helpers.configs import write_config
    from helpers.e2e import start_learner, start_worker

    run = "e2e-quicksave"
    cfg = write_config(tmp_path, run)
    learner = start_learner(tmp_path, cfg, mosquitto.url, tmp_path / "run")
    worker = start_worker(tmp_path, mosquitto.url, run, "w0")
    try:
        assert worker.wait_for("stepping", 60), worker.text()[-2000:]
        out = subprocess.run(
            [script("mqttrl"), "quicksave", "--run", run, "--broker", mosquitto.url],
            capture_output=True,
            text=True,
            timeout=60,
            env=node_env(),
        )
        assert out.returncode == 0, out.stderr
        path = Path(out.stdout.split("checkpoint written to ")[1].split(" (")[0])
        assert path.is_dir() and (path / "meta.json").exists() and path.parent == tmp_path / "run" / "checkpoints"
        st = subprocess.run(
            [script("mqttrl"), "status", "--run", run, "--broker", mosquitto.url, "--once", "4", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=node_env(),
        )
        rows = {r["node"]: r for r in json.loads(st.stdout)}
        assert rows["learner"]["status"] == "online" and rows["w0"]["status"] == "online"
        assert rows["w0"]["steps"] > 0
    finally:
        worker.terminate()
        learner.terminate(60)
    # with the learner gone, quicksave says what to check instead of hanging
    out = subprocess.run(
        [script("mqttrl"), "quicksave", "--run", run, "--broker", mosquitto.url, "--timeout", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=node_env(),
    )
    assert out.returncode != 0 and "offline" in out.stderr and "Check that it is running" in out.stderr


def test_files_storage_draws_curves_off_the_writing_thread(tmp_path, monkeypatch):
    """A due redraw must not hold up write(): telemetry's loop calls it between messages."""
    from mqttrl.plugin.storage import Point

    release, drawing = threading.Event(), threading.Event()
    drawn_on: list[str] = []

    def slow_plot(self):
        drawn_on.append(threading.current_thread().name)
        drawing.set()
        release.wait(10)

    monkeypatch.setattr(FilesStorage, "plot", slow_plot)
    st = FilesStorage({"dir": str(tmp_path), "plot_every_episodes": 2, "plot_min_interval_s": 0})
    episodes = [Point("episode", {"worker": "w0"}, {"return": float(i), "length": 10}, time.time()) for i in range(3)]
    st.write(episodes)  # a redraw is due now; with the plot blocked, a synchronous write would hang here
    assert drawing.wait(5), "no redraw was started after plot_every_episodes episodes"
    st.write(episodes)  # and writes go on while the curves are being drawn
    release.set()
    st.close()
    assert drawn_on[0] == "files-storage-plots" and drawn_on[-1] == threading.current_thread().name
    rows = (tmp_path / "episode.csv").read_text().splitlines()
    assert len(rows) == 1 + 6, "every episode row was written while plotting"


def _red_pixels(png) -> int:
    """Pixels of matplotlib's C3 red (#d62728) in a PNG: the person's baseline line."""
    import matplotlib.image

    rgb = (matplotlib.image.imread(png)[..., :3] * 255).astype(int)
    return int((abs(rgb - [214, 39, 40]).sum(axis=-1) < 30).sum())


def test_the_files_storage_draws_the_human_baseline_on_the_returns_plot(tmp_path, caplog):
    """With ``[train] human_baseline`` (the JSON ``mqttrl play`` writes) readable here, returns.png
    holds the person's mean (a red line) and random play's beside the agent's curves; without the
    file, one line says so and the plot has no baseline."""
    import json

    pytest.importorskip("matplotlib")
    from mqttrl.plugin import Point
    from mqttrl_plugins.files_storage import FilesStorage

    baseline = tmp_path / "human_baseline.json"
    baseline.write_text(json.dumps({"mean": 12.5, "episodes": 10, "random": {"mean": 2.0, "episodes": 10}}))
    pngs = {}
    for name, path in (("with", str(baseline)), ("without", str(tmp_path / "absent.json"))):
        st = FilesStorage({"dir": str(tmp_path / name)})
        with caplog.at_level("INFO", logger="mqttrl.storage.files"):
            st.run_config({"train": {"human_baseline": path}})
        st.write([Point("eval", {"run": "r"}, {"mean": float(m)}, 100.0 + m) for m in (1, 4, 9)])
        st.plot()
        st.close()
        pngs[name] = tmp_path / name / "returns.png"
        if name == "with":
            assert st.references == {"person": 12.5, "random play": 2.0}
        else:
            assert st.references == {}
            assert any("not readable here" in r.getMessage() for r in caplog.records)
    assert _red_pixels(pngs["with"]) > 200 and _red_pixels(pngs["without"]) == 0
