"""Supervised child processes: start, watch, restart with backoff, stop cleanly.

Used by ``mqttrl train`` (learner, workers, telemetry) and ``mqttrl workers``
(N worker processes on one game PC, the SEED trainer's actor_processes, each
process stepping several envs). Children are started with ``subprocess``
(spawn semantics), so the same code runs on Windows.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

from mqttrl.procs import child_popen_kwargs, request_stop

log = logging.getLogger("mqttrl.supervisor")


class Child:
    """A supervised process; its output goes to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None):
        self.name, self.argv, self.log_path, self.env = name, argv, log_path, env
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.started_at = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is not None:
            self._log.close()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, **child_popen_kwargs()
        )
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            request_stop(self.proc)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs; killing it", self.name, timeout)
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class Supervisor:
    """Restarts children that exit; backs off when one keeps crashing right after start."""

    def __init__(self, children: list[Child], max_backoff_s: float = 30.0):
        self.children = children
        self.max_backoff_s = max_backoff_s
        self._due: dict[str, float] = {}

    def start(self) -> None:
        for c in self.children:
            c.start()

    def check(self) -> list[Child]:
        """Restart dead children (after a backoff if they died young); returns the restarted ones."""
        restarted = []
        now = time.monotonic()
        for c in self.children:
            if c.alive():
                continue
            due = self._due.get(c.name)
            if due is None:
                lived = now - c.started_at
                backoff = 0.0 if lived > 30 else min(self.max_backoff_s, 0.5 * 2 ** min(c.restarts, 6))
                self._due[c.name] = now + backoff
                log.warning(
                    "%s exited with %s after %.0fs; restarting in %.1fs (see %s)",
                    c.name,
                    c.proc.returncode if c.proc else None,
                    lived,
                    backoff,
                    c.log_path,
                )
                continue
            if now >= due:
                del self._due[c.name]
                c.restarts += 1
                c.start()
                restarted.append(c)
        return restarted

    def stop(self) -> None:
        for c in self.children:
            c.stop()

    @property
    def restarts(self) -> dict[str, int]:
        return {c.name: c.restarts for c in self.children}
