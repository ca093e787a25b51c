"""The processes a benchmark harness runs by hand (chaos.py, bench_realtime.py): a node it can
SIGKILL, SIGSTOP and restart, and a mosquitto with persistence it can restart or wipe."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from mqttrl.broker.embedded import mosquitto_config


class Proc:
    """One node process, restartable, its output appended to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.p: subprocess.Popen | None = None
        self.stopped = False  # SIGSTOPped

    def start(self) -> None:
        with open(self.log, "ab") as f:
            self.p = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT, env=self.env)

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.p.kill()
            self.p.wait()

    def term(self, timeout: float = 30) -> None:
        if self.stopped:
            self.cont()
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def stop(self) -> None:
        if self.alive():
            os.kill(self.p.pid, signal.SIGSTOP)
            self.stopped = True

    def cont(self) -> None:
        if self.alive():
            os.kill(self.p.pid, signal.SIGCONT)
        self.stopped = False


class Broker:
    """A mosquitto with persistence (the retained config and weights survive a clean restart)."""

    def __init__(self, workdir: Path, port: int):
        self.workdir, self.port = workdir, port
        self.data = workdir / "data"
        self.conf = workdir / "mosquitto.conf"
        self.data.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(mosquitto_config(port, self.data))
        self.p: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "mosquitto.log", "ab") as f:
            self.p = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stdout=f, stderr=subprocess.STDOUT)
        time.sleep(0.3)

    def stop(self, wipe: bool = False) -> None:
        """A clean stop (mosquitto saves its state), or with ``wipe`` a SIGKILL and its state deleted."""
        if self.p is None or self.p.poll() is not None:
            return
        if wipe:
            self.p.kill()
        else:
            self.p.terminate()
        self.p.wait(15)
        if wipe:
            shutil.rmtree(self.data, ignore_errors=True)
