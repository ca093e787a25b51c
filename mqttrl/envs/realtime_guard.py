"""A game that hangs is a game that crashed: its calls made with a deadline.

tmrl #122: "OpenPlanet stopped sending data": a game that hangs instead of crashing blocks
the worker for ever. :class:`Deadline` runs a real-time game's ``read_obs`` and ``reset`` on one
helper thread and waits at most ``timeout_s``; past it, :class:`GameHung` is raised and the
worker's env set treats it as a crash (closes the env, makes it afresh, keeps its samples:
:class:`~mqttrl.envs.rollout.EnvSet`'s restart path). The hung call is left to its thread
(a daemon), which is abandoned: the next call gets a fresh one. The helper thread runs at its
caller's scheduling priority (a control thread at ``SCHED_FIFO`` reads its game at that level,
not through a thread of ordinary priority that waits for a core). On Windows, where a new thread
starts at ``THREAD_PRIORITY_NORMAL`` whatever its creator's, each call carries the caller's
``GetThreadPriority`` and the helper sets its own to it (``platform`` and ``win32``, the Windows
calls of :mod:`mqttrl.envs.realtime_os`, are parameters so tests run that branch on Linux).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from mqttrl.envs.realtime_os import THREAD_PRIORITY_ERROR_RETURN, THREAD_PRIORITY_NORMAL, Win32Calls


class GameHung(TimeoutError):
    """A real-time game gave no answer within its deadline (``[env] obs_timeout_s``)."""


class Deadline:
    """Calls on one daemon thread, each waited for at most ``timeout_s``."""

    def __init__(self, timeout_s: float, name: str = "game", platform: str = sys.platform, win32: Any = None):
        self.timeout_s = timeout_s
        self.name = name
        self._jobs: queue.SimpleQueue | None = None
        self._tid: int | None = None
        self._policy: tuple[int, int] | None = None
        #: Windows: the calls that read and set a thread's priority (None elsewhere, or not loadable)
        self._win32 = _win32_calls(win32) if platform == "win32" else None

    def _start(self) -> queue.SimpleQueue:
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, args=(jobs, self._win32), name=f"mqttrl-{self.name}", daemon=True)
        thread.start()
        self._tid = thread.native_id
        self._policy = _policy()  # inherited from the caller
        return jobs

    def _match_priority(self) -> None:
        """The helper thread at the caller's scheduling policy and priority (Linux; else nothing)."""
        policy = _policy()
        if policy is None or policy == self._policy or self._tid is None:
            return
        try:
            os.sched_setscheduler(self._tid, policy[0], os.sched_param(policy[1]))
        except OSError:
            return
        self._policy = policy

    @staticmethod
    def _serve(jobs: queue.SimpleQueue, win32: Any = None) -> None:
        level = THREAD_PRIORITY_NORMAL  # Windows: a new thread's, whatever its creator's
        while True:
            job = jobs.get()
            if job is None:
                return
            fn, args, kwargs, box, done, wanted = job
            if wanted not in (None, level, THREAD_PRIORITY_ERROR_RETURN) and win32.set_thread_priority(wanted):
                level = wanted  # refused: the next call tries again
            try:
                box.append((True, fn(*args, **kwargs)))
            except BaseException as e:  # handed to the caller, raised there
                box.append((False, e))
            done.set()

    def call(self, what: str, fn: Callable[..., Any], *args, **kwargs) -> Any:
        if self._jobs is None:
            self._jobs = self._start()
        else:
            self._match_priority()
        box: list = []
        done = threading.Event()
        wanted = self._win32.get_thread_priority() if self._win32 is not None else None
        self._jobs.put((fn, args, kwargs, box, done, wanted))
        if not done.wait(self.timeout_s):
            self._jobs = None  # that thread is stuck in the game: the next call gets a fresh one
            raise GameHung(f"{what} gave no answer within {self.timeout_s:g}s (env.obs_timeout_s): the game hangs")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None


def _policy() -> tuple[int, int] | None:
    """The calling thread's scheduling policy and priority, None where the OS has no such call."""
    if not hasattr(os, "sched_getscheduler"):
        return None
    try:
        return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    except OSError:
        return None


def _win32_calls(win32: Any) -> Any:
    """The Windows calls (``win32``, or ctypes' :class:`~mqttrl.envs.realtime_os.Win32Calls`); None
    where they cannot be loaded: the helper thread then keeps its ordinary priority."""
    if win32 is not None:
        return win32
    try:
        return Win32Calls()
    except (OSError, AttributeError):
        return None


def reset_wait_s(env: gym.Env) -> float:
    """Seconds a reset of ``env`` may wait by its own settings (``reset_wait_s`` on it, a wrapper
    of it or its core: a launched game's relaunch, the screen kit's wait for its window); 0 if none."""
    while True:
        wait = getattr(env, "reset_wait_s", None)
        if isinstance(wait, int | float):
            return float(wait)
        if not isinstance(env, gym.Wrapper):
            return 0.0
        env = env.env
