"""Supervised child processes: start, watch, restart with backoff, stop cleanly.

Used by ``mqttrl train`` (learner, workers, inference servers) and ``mqttrl workers``
(N worker processes on one game PC, the SEED trainer's actor_processes, each
process stepping several envs). Children are started with ``subprocess``
(spawn semantics), so the same code runs on Windows.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

from mqttrl.system.procs import child_popen_kwargs, request_stop

log = logging.getLogger("mqttrl.supervisor")


class Child:
    """A supervised process; its output goes to a log file.

    ``restart_args`` are added to ``argv`` when it is started again (the learner's ``--resume``),
    ``first_args`` only to its first start (the learner's ``--init-from``: a restart resumes);
    after ``max_restarts`` restarts (None: no limit) the supervisor gives it up; :meth:`stop`
    waits ``stop_timeout`` s for it before killing it.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict | None = None,
        *,
        restart_args: list[str] | None = None,
        first_args: list[str] | None = None,
        max_restarts: int | None = None,
        stop_timeout: float = 20.0,
    ):
        self.name, self.argv, self.log_path, self.env = name, argv, log_path, env
        self.restart_args = list(restart_args or [])
        self.first_args = list(first_args or [])
        self.max_restarts = max_restarts
        self.stop_timeout = stop_timeout
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._log = None
        self.started_at = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is not None:
            self._log.close()
        self._log = open(self.log_path, "ab")
        argv = self.argv + (self.first_args if self.restarts == 0 else [])
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env, **child_popen_kwargs()
        )
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        """Start it again, with its ``restart_args`` (once)."""
        self.restarts += 1
        self.argv = self.argv + [a for a in self.restart_args if a not in self.argv]
        self.start()

    def last_line(self) -> str:
        """The last line of its log (a node's one-line reason when it ends on an error)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 4096))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    @property
    def exhausted(self) -> bool:
        """It may not be restarted any more."""
        return self.max_restarts is not None and self.restarts >= self.max_restarts

    def stop(self, timeout: float | None = None) -> None:
        """Ask it to stop, wait ``timeout`` s, then kill it; killed at once when the request cannot be
        sent (:func:`~mqttrl.system.procs.request_stop`: a Windows console event that cannot reach it)."""
        timeout = self.stop_timeout if timeout is None else timeout
        if self.proc is None:
            return
        if self.proc.poll() is None:
            why = request_stop(self.proc)
            if why is not None:
                log.warning("%s: the stop request could not be sent (%s); terminating it", self.name, why)
                self._kill()
            else:
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %.0fs; killing it", self.name, timeout)
                    self._kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _kill(self) -> None:
        """SIGKILL, or TerminateProcess on Windows (unless it is gone already); waits for it to be gone."""
        try:
            if self.proc.poll() is None:
                self.proc.kill()
        except OSError as e:  # it went meanwhile (Popen.kill handles that on Windows too)
            log.debug("%s: kill: %s", self.name, e)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            log.error("%s (pid %s) did not go after it was killed", self.name, self.proc.pid)


class Supervisor:
    """Restarts children that exit; backs off when one keeps crashing right after start.

    The one restart policy of ``mqttrl train`` and ``mqttrl workers``: a child that lived over
    ``healthy_after_s`` (30 s) is started again at once, one that died younger after 0.5 s doubling
    per restart (up to ``max_backoff_s``); a child past its ``max_restarts`` is given up
    (:attr:`given_up`), and so at once is one that exits with one of ``final_codes`` (a code a
    restart cannot mend: ``mqttrl train`` gives a learner that found the disk full, exit 6, no
    second try that would fill it again). With ``give_up_after_s``, :meth:`hopeless` says why the
    whole fleet is given up once no child has stayed up ``healthy_after_s`` for that long (a broker
    that is gone).
    """

    def __init__(
        self,
        children: list[Child],
        max_backoff_s: float = 30.0,
        *,
        give_up_after_s: float | None = None,
        healthy_after_s: float = 30.0,
        final_codes: tuple[int, ...] = (),
    ):
        self.children = children
        self.final_codes = tuple(final_codes)
        self.max_backoff_s = max_backoff_s
        self.give_up_after_s = give_up_after_s
        self.healthy_after_s = healthy_after_s
        self._due: dict[str, float] = {}
        #: the children that exited once too often, in the order they were given up
        self.given_up: list[Child] = []
        self._healthy_at = time.monotonic()
        #: the child that exited last and its exit code
        self.last_exit: tuple[Child, int | None] | None = None

    def start(self) -> None:
        for c in self.children:
            c.start()
        self._healthy_at = time.monotonic()

    def hopeless(self) -> str | None:
        """Why to give up every child (one line), or None: no child has stayed up
        ``healthy_after_s`` for ``give_up_after_s`` (None: never give up)."""
        if self.give_up_after_s is None:
            return None
        now = time.monotonic()
        if any(c.alive() and now - c.started_at >= self.healthy_after_s for c in self.children):
            self._healthy_at = now
        if now - self._healthy_at < self.give_up_after_s or self.last_exit is None:
            return None
        child, code = self.last_exit
        return (
            f"no process stayed up {self.healthy_after_s:.0f}s in {self.give_up_after_s:.0f}s of restarts; "
            f"the last, {child.name}, exited with {code}: {child.last_line() or '(no output)'}"
        )

    def check(self) -> list[Child]:
        """Restart dead children (after a backoff if they died young); returns the restarted ones."""
        restarted = []
        now = time.monotonic()
        for c in self.children:
            if c.alive() or c in self.given_up:
                continue
            code = c.proc.returncode if c.proc else None
            if code in self.final_codes:
                log.error(
                    "%s exited with %s, which a restart does not mend; not restarting it (see %s)",
                    c.name,
                    code,
                    c.log_path,
                )
                self.given_up.append(c)
                continue
            if c.exhausted:
                log.error(
                    "%s exited with %s %d times; not restarting it (see %s)",
                    c.name,
                    c.proc.returncode if c.proc else None,
                    c.restarts + 1,
                    c.log_path,
                )
                self.given_up.append(c)
                continue
            due = self._due.get(c.name)
            if due is None:
                lived = now - c.started_at
                self.last_exit = (c, c.proc.returncode if c.proc else None)
                if lived >= self.healthy_after_s:
                    self._healthy_at = now
                backoff = (
                    0.0 if lived > self.healthy_after_s else min(self.max_backoff_s, 0.5 * 2 ** min(c.restarts, 6))
                )
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
                c.restart()
                restarted.append(c)
        return restarted

    def stop(self) -> None:
        """Stop every child, the last started first (``mqttrl train``'s learner, started first, saves
        its checkpoint after the workers are gone)."""
        for c in reversed(self.children):
            try:
                c.stop()
            except Exception:  # one child's failure never leaves the others running
                log.exception("stopping %s failed; stopping the others", c.name)
                if c.proc is not None and c.proc.poll() is None:
                    c._kill()

    @property
    def restarts(self) -> dict[str, int]:
        return {c.name: c.restarts for c in self.children}
