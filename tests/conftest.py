"""Shared fixtures: a real mosquitto on a free port, and helpers to run the console scripts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqttrl.broker import _wait_port, free_port, mosquitto_config

REPO = Path(__file__).resolve().parent.parent


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

    def start(self) -> "Mosquitto":
        data = self.workdir / "data" if self.persistence else None
        if data:
            data.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(mosquitto_config(self.port, data, self.extra))
        self.log = open(self.workdir / "mosquitto.log", "ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=self.log, stderr=subprocess.STDOUT)
        assert _wait_port(self.port, 10), f"mosquitto did not start; see {self.workdir / 'mosquitto.log'}"
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


@pytest.fixture
def mosquitto(tmp_path):
    """A private mosquitto for one test (restartable)."""
    m = Mosquitto(tmp_path / "broker-run")
    m.workdir.mkdir()
    m.start()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def shared_mosquitto(tmp_path_factory):
    """One mosquitto for tests that only need a broker and use their own run names."""
    m = Mosquitto(tmp_path_factory.mktemp("shared-broker"))
    m.start()
    yield m
    m.stop()


def node_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def script(name: str) -> str:
    """Path of an installed console script (next to the running interpreter)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        found = shutil.which(name)
        assert found, f"console script {name} is not installed: pip install -e ."
        return found
    return str(path)


class Proc:
    """A node process whose output goes to a file we can search."""

    def __init__(self, argv: list[str], log_path: Path, env: dict | None = None):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env or node_env())

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            if self.p.poll() is not None:
                return needle in self.text()
            time.sleep(0.2)
        return False

    def terminate(self, timeout: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._log.close()
        return self.p.returncode

    def kill(self) -> None:
        self.p.kill()
        self.p.wait()
        self._log.close()
