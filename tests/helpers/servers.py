"""Real servers the integration tests start on free ports: mosquitto and InfluxDB 1.x."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.harness.procs import stop_server
from mqttrl.broker.embedded import _wait_port, free_port, free_ports, mosquitto_config


class Mosquitto:
    """A mosquitto process with a config written for the test; can be stopped and restarted."""

    def __init__(self, workdir: Path, persistence: bool = False, extra: str = ""):
        if not shutil.which("mosquitto"):
            pytest.fail("mosquitto is not on PATH: apt-get install mosquitto (the .ci/run script does this)")
        self.workdir = workdir
        self.port = free_port()
        self.persistence = persistence
        self.extra = extra
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        data = self.workdir / "data" if self.persistence else None
        if data:
            data.mkdir(parents=True, exist_ok=True)
        return mosquitto_config(self.port, data, self.extra)

    def ports(self) -> list[int]:
        return [self.port]

    def start(self) -> Mosquitto:
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(self.config_text())
        self.log = open(self.workdir / "mosquitto.log", "ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=self.log, stderr=subprocess.STDOUT)
        for port in self.ports():
            assert _wait_port(port, 10), f"mosquitto did not start; see {self.workdir / 'mosquitto.log'}"
        return self

    def stop(self) -> None:
        stop_server(self.proc, self.log)
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


# ---- InfluxDB 1.x (the InfluxQL the Grafana dashboard speaks) -----------------------------


class InfluxDB:
    """A private influxd (InfluxDB 1.x) with its own dirs and free ports; HTTP API helpers."""

    def __init__(self, workdir: Path):
        if not shutil.which("influxd"):
            pytest.fail("influxd is not on PATH: apt-get install influxdb (scripts/test.sh does this)")
        self.workdir = workdir
        self.port, self.rpc_port = free_ports(2)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> InfluxDB:
        import urllib.request

        w = self.workdir
        conf = w / "influxdb.conf"
        conf.write_text(
            "reporting-disabled = true\n"
            f'bind-address = "127.0.0.1:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{w}/meta"\n'
            f'[data]\n  dir = "{w}/data"\n  wal-dir = "{w}/wal"\n  query-log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
            f'[http]\n  bind-address = "127.0.0.1:{self.port}"\n  log-enabled = false\n'
            "[continuous_queries]\n  enabled = false\n"
            '[logging]\n  level = "warn"\n'
        )
        self.log = open(w / "influxd.log", "ab")
        self.proc = subprocess.Popen(["influxd", "-config", str(conf)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=0.5) as r:
                    if r.status == 204:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"influxd did not start; see {w / 'influxd.log'}:\n{(w / 'influxd.log').read_text()[-2000:]}")

    def query(self, q: str, db: str | None = None, method: str = "GET") -> dict:
        import json
        import urllib.parse
        import urllib.request

        params = {"q": q, "epoch": "s"}
        if db:
            params["db"] = db
        data = urllib.parse.urlencode(params)
        if method == "POST":
            req = urllib.request.Request(f"{self.url}/query", data=data.encode(), method="POST")
        else:
            req = urllib.request.Request(f"{self.url}/query?{data}")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def write(self, db: str, lines: list[str], precision: str = "s") -> None:
        import urllib.parse
        import urllib.request

        url = f"{self.url}/write?" + urllib.parse.urlencode({"db": db, "precision": precision})
        req = urllib.request.Request(url, data="\n".join(lines).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204, r.read()

    def stop(self) -> None:
        stop_server(self.proc, self.log)
        self.proc = None
