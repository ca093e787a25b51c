"""The worker starts its game, and starts it again when it exits, crashes or hangs.

Real games quit at game over, crash, or hang (the peers' users wrap them in their own relaunch
loops: SoulsGym reboots on a timer, ViZDoom's maintainers say "wrap it and reboot it"). With
``[env] launch`` set, the worker owns the game's process: :class:`GameProcess` starts it before the
env is made and waits until the env can be made (its window or API is up, bounded by
``launch_ready_s``); when the env's step or reset raises (the game exited, its window closed, no
observation within ``obs_timeout_s``, frames that stopped changing) the env set remakes the env and
the game is stopped (SIGTERM, then SIGKILL: a hung or stopped game does not answer SIGTERM) and
started again, one log line each, counted. More than ``launch_max_per_hour`` starts in an hour is a
game that cannot run: :class:`GameKeepsFailing` ends the worker (its supervisor says so).

One launched game per worker process (``env.num_envs = 1``); several games on one PC are several
workers (``mqttrl workers --processes N``), each filling ``{index}`` and ``{worker}`` in the env's
settings with its own (:func:`for_worker`): its own display, window title, port or save folder.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from mqttrl.config.settings import ConfigError
from mqttrl.envs.faketime import faked_speed, faketime_env
from mqttrl.envs.rollout import EnvFailing

log = logging.getLogger("mqttrl.envs")

#: between tries to make the env while a (re)launched game comes up
READY_POLL_S = 0.5
#: SIGTERM, then this long, then SIGKILL
STOP_GRACE_S = 5.0
#: a game that dies while it starts is started again after 0.5 s, 1 s, 2 s ... at most this long
MAX_BACKOFF_S = 30.0


#: the game an env is being made for on this thread (GameProcess.make_env): see launched_game_pid
_making = threading.local()


def launched_game_pid() -> int | None:
    """The pid of the game the calling thread's launcher is making an env for, while its ``make()``
    runs (:meth:`GameProcess.make_env`); None anywhere else. An env that finds its game by window
    title can then take its own game's window (that process's or its process group's) and not
    another copy of the game with the same title on the same display."""
    return getattr(_making, "pid", None)


#: what a worker fills in, ``{index}`` and ``{worker}``, in ``[env] launch*`` and ``[env.kwargs]``
_PLACEHOLDER = re.compile(r"\{(index|worker)\}")


def for_worker(env_config: Any, worker: str, index: int | None) -> Any:
    """``env_config`` as the worker ``worker`` (``--index index``) plays it: ``{index}`` and
    ``{worker}`` replaced by its own in ``launch``, ``launch_cwd``, ``launch_env`` and the string values
    of ``kwargs`` (nested lists and tables too), so that one config runs several games on one PC
    (``mqttrl workers --processes N``), each with its own display, window or port. Other braces are
    left as they are. ``{index}`` in a worker started without ``--index`` is one line (ConfigError)."""
    used: set[str] = set()

    def replace(match: re.Match) -> str:
        used.add(match.group(1))
        return _value_of(match.group(1))

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(replace, value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    def _value_of(name: str) -> str:
        if name == "worker":
            return worker
        if index is None:
            raise ConfigError(
                "the run's [env] settings use {index}: start each worker of this game PC with --index N "
                "(mqttrl workers --processes N gives each its own)"
            )
        return str(index)

    filled = {
        "kwargs": fill(env_config.kwargs),
        "launch": fill(list(env_config.launch)),
        "launch_cwd": fill(env_config.launch_cwd),
        "launch_env": fill(dict(env_config.launch_env)),
    }
    # a new config (its validators run again) only where a placeholder was there: make_run_env
    # passes every config through here, an evaluator's for each env it makes
    return attrs.evolve(env_config, **filled) if used else env_config


class GameKeepsFailing(EnvFailing):
    """The game was started more than ``launch_max_per_hour`` times within an hour, or never came up."""


class StopWhileLaunching(EnvFailing):
    """The worker was asked to stop while it waited for its game to come up: not a failure, but it
    ends the env set's remaking as a failing game would (the worker stops cleanly)."""


@attrs.frozen
class LaunchSettings:
    command: tuple[str, ...]
    cwd: str = ""
    env: dict = attrs.field(factory=dict)
    ready_s: float = 60.0
    max_per_hour: int = 20
    #: ``[env] launch_each_episode``: a new process for every episode (a game that cannot restart itself)
    each_episode: bool = False

    @classmethod
    def of(cls, env_config: Any, num_envs: int | None = None) -> LaunchSettings | None:
        """The run's ``[env] launch*`` settings, or None when the game is started by hand. ``num_envs``:
        the envs of this process (a worker's ``--num-envs``), default the config's."""
        command = tuple(env_config.launch)
        if not command:
            return None
        num_envs = num_envs if num_envs is not None else env_config.num_envs
        if num_envs != 1:
            raise ConfigError(
                f"env.launch is set and this process has {num_envs} envs: a worker launches one game for "
                "one env; set env.num_envs = 1 and start a worker per game (mqttrl workers --processes N)"
            )
        env = dict(env_config.launch_env)
        speed = faked_speed(env_config)
        if speed:  # a game with no speed setting, sped up under libfaketime (mqttrl.envs.faketime)
            env.update(faketime_env(speed, {**os.environ, **env}))
        return cls(
            command,
            env_config.launch_cwd,
            env,
            env_config.launch_ready_s,
            env_config.launch_max_per_hour,
            bool(getattr(env_config, "launch_each_episode", False)),
        )


def _popen_kwargs() -> dict:
    """The game in a process group of its own: its children (a launcher script's game) are stopped
    with it, and the terminal's Ctrl-C reaches the worker, which stops the game itself."""
    if sys.platform == "win32":
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


class GameProcess:
    """The game's process: started, waited for, stopped and started again (see the module docstring).

    ``clock`` and ``sleep`` are injectable for tests; a worker passes its stop event's wait as ``sleep``
    and its ``is_set`` as ``stopping``, so that a stop is taken at once while the game comes up. Not
    thread-safe: the worker's env thread owns it.
    """

    def __init__(
        self,
        settings: LaunchSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        stopping: Callable[[], bool] = lambda: False,
    ):
        self.settings = settings
        self.clock, self.sleep = clock, sleep
        #: the worker's stop asked for: the wait for a game coming up ends (StopWhileLaunching)
        self.stopping = stopping
        self.proc: subprocess.Popen | None = None
        #: every start of the game, and those after the first (what heartbeats and summary.json count)
        self.launches = 0
        self.relaunches = 0
        #: of the relaunches, those after a crash (not a game over, nor a fresh game for an evaluation)
        self.crashes = 0
        #: seconds from each relaunch's stop to the env made again, all relaunches
        self.relaunch_s = 0.0
        self._relaunched_at: float | None = None
        #: the starts within the hour that count against ``launch_max_per_hour`` (not game overs)
        self._starts: collections.deque[float] = collections.deque()

    # ---- the process ---------------------------------------------------------------------------
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, counted: bool = True) -> None:
        """Start the game (within the hourly bound, which a start after a game over, not
        ``counted``, is not held to); one log line with its pid and command."""
        now = self.clock()
        while self._starts and now - self._starts[0] > 3600.0:
            self._starts.popleft()
        if counted and len(self._starts) >= self.settings.max_per_hour:
            raise GameKeepsFailing(
                f"the game crashed and was started {len(self._starts)} times in the last hour "
                f"(env.launch_max_per_hour = {self.settings.max_per_hour}; a game over does not count); "
                "it cannot run here: its output is in this worker's log"
            )
        if counted:
            self._starts.append(now)
        env = {**os.environ, **{str(k): str(v) for k, v in self.settings.env.items()}}
        try:
            self.proc = subprocess.Popen(
                list(self.settings.command),
                cwd=self.settings.cwd or None,
                env=env,  # its output goes where the worker's goes (under mqttrl train: the worker's log)
                stdin=subprocess.DEVNULL,
                **_popen_kwargs(),
            )
        except OSError as e:  # no such program, not executable, a cwd that is not there
            raise ConfigError(f"env.launch {shlex.join(self.settings.command)!r} cannot start: {e}") from None
        self.launches += 1
        log.info("started the game (pid %d): %s", self.proc.pid, shlex.join(self.settings.command))

    def stop(self) -> None:
        """Stop the game: SIGTERM (a stopped process is continued so that it can take it), SIGKILL after
        a grace period; its whole process group on POSIX."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        if hasattr(signal, "SIGCONT"):  # POSIX: a stopped (hung by SIGSTOP) game must run to take SIGTERM
            _signal_group(proc, signal.SIGCONT)
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
            proc.wait(STOP_GRACE_S)

    def relaunch(self, why: str, crash: bool = True) -> None:
        """Stop the game whatever its state, and start it again; one warning line with why. Not a
        ``crash`` (a game over, a fresh game for an evaluation): one info line, and not held to
        ``launch_max_per_hour``."""
        was = "exited" if self.proc is not None and self.proc.poll() is not None else "running"
        if self._relaunched_at is None:  # a game that dies while it comes up: one relaunch's time
            self._relaunched_at = self.clock()
        self.stop()
        self.relaunches += 1
        if crash:
            self.crashes += 1
            log.warning("relaunching the game (%s; it was %s): relaunch %d", why, was, self.relaunches)
        else:
            log.info("a new game: %s (relaunch %d)", why, self.relaunches)
        self.start(counted=crash)

    def exit_status(self, wait_s: float = 0.0) -> int | None:
        """The game's exit status once it exited (waiting up to ``wait_s`` for it), None while it runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(wait_s) if wait_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            return None

    # ---- the env over it -------------------------------------------------------------------------
    def make_env(self, make: Callable[[], Any]) -> Any:
        """``make()`` once the game is up: the game started if it is not running, then ``make`` tried
        every 0.5 s until it succeeds or ``launch_ready_s`` passes (GameKeepsFailing, naming the last error)."""
        if not self.running():
            if self.launches:
                self.relaunch("it was not running")
            else:
                self.start()
        deadline = self.clock() + self.settings.ready_s
        said, early_deaths = False, 0
        while True:
            if self.stopping():
                raise StopWhileLaunching("stopped while waiting for the game to come up")
            try:
                env = self._made_for_game(make)
            except Exception as e:
                if not self.running():  # the game died while coming up: start it again, backing off
                    early_deaths += 1
                    self.sleep(min(MAX_BACKOFF_S, 0.5 * 2 ** (early_deaths - 1)))
                    self.relaunch(f"it exited with {self.proc.returncode if self.proc else None} while starting")
                    deadline = self.clock() + self.settings.ready_s
                elif self.clock() > deadline:
                    raise GameKeepsFailing(
                        f"the game did not come up within env.launch_ready_s = {self.settings.ready_s:g} s: "
                        f"making the env raised {type(e).__name__}: {e}"
                    ) from None
                elif not said:
                    said = True
                    log.info("waiting for the game to come up (%s: %s)", type(e).__name__, e)
                self.sleep(READY_POLL_S)
            else:
                if self._relaunched_at is not None:  # the time a relaunch cost (heartbeats: relaunch_s)
                    self.relaunch_s += self.clock() - self._relaunched_at
                    self._relaunched_at = None
                return env

    def _made_for_game(self, make: Callable[[], Any]) -> Any:
        """``make()`` with this game's pid as :func:`launched_game_pid` while it runs."""
        _making.pid = self.proc.pid if self.proc is not None else None
        try:
            return make()
        finally:
            _making.pid = None

    def close(self) -> None:
        """Stop the game with the worker: a launched game does not outlive it."""
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the game's process group (POSIX), or to the process (Windows: terminate/kill)."""
    try:
        if sys.platform == "win32":
            if sig == signal.SIGTERM:
                proc.terminate()
            else:
                proc.kill()
        else:
            os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass
