"""The processes a benchmark runs by hand (chaos.py, bench_realtime.py, bench_links.py): a node it can
SIGKILL, SIGSTOP and restart, a mosquitto with persistence it can restart or wipe, and the one way a
server process is stopped (the tests' servers stop the same way)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from mqttrl.broker.embedded import mosquitto_config

from .machine import REPO


def repo_env(base: dict | None = None, **extra: str) -> dict:
    """``base`` (this process's environment) with the repository root first on PYTHONPATH: a child
    started as ``python -m benchmarks.<name>``, or one that imports ``benchmarks.chaos_env``, finds
    them from any directory (a network namespace's shell, a node's own working directory)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return {**env, **extra}


def stop_server(proc: subprocess.Popen | None, log, timeout: float = 10.0) -> None:
    """SIGTERM a server (SIGKILL if it does not go in ``timeout``) and close its log."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


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

    def __init__(self, workdir: Path, port: int, extra: str = ""):
        """``extra``: lines appended to the generated mosquitto.conf."""
        self.workdir, self.port = workdir, port
        self.data = workdir / "data"
        self.conf = workdir / "mosquitto.conf"
        self.data.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(mosquitto_config(port, self.data) + extra)
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
