"""A simulated game PC: any env made real time, its world advancing with the wall clock.

``WallClockGame(env="CartPole-v1", world_hz=50)`` runs the inner env one tick every
``1/world_hz`` s of wall time from its reset, whether or not an action arrived: each tick
uses the newest action sent before it, and a tick with no new action since the last one
replays the old action (a *missed action*, counted in ``missed``). It speaks the real-time
protocol (:class:`~mqttrl.envs.realtime.RealTimeGame`) with pause/resume, so a worker with
``[env] control_hz`` drives it like a real game; its plain ``step`` advances one tick at once
(an evaluator measuring the policy with perfect timing). Registered with gymnasium as
``mqttrl.envs.realtime_sim:WallClock-v0``; the clock is injectable for tests.
``can_pause=False`` makes a game that cannot pause (most real ones: it plays on while its
worker idles); ``set_speed(factor)`` runs its world ``factor`` times faster than real time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from mqttrl.plugin.realtime_game import RealTimeGameEnv


class WallClockGame(RealTimeGameEnv):
    """The toolkit's real-time base class with pause/resume that stop the world (``pausable``),
    ``set_speed`` and a ``step`` of its own (one tick at once)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(
        self,
        env: str = "CartPole-v1",
        world_hz: float = 50.0,
        env_kwargs: dict | None = None,
        reset_s: float = 0.0,
        can_pause: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.inner = gym.make(env, **(env_kwargs or {}))
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self.base_tick_s = self.tick_s = 1.0 / world_hz
        self.reset_s = reset_s
        self.clock = clock
        self.sleep = sleep
        self.t0 = 0.0
        self.ticks = 0
        self.pending: list[tuple[float, Any]] = []
        self.action: Any = None
        self.fresh = False  # an action arrived since the last tick
        self.done = False
        self.obs: Any = None
        #: ticks that found no new action (the agent was late), ticks run, reads that found no tick
        self.missed = 0
        self.total_ticks = 0
        self.early_reads = 0
        self._paused_at: float | None = None
        self.paused_s = 0.0
        #: False: a game that cannot pause (most real ones): pause/resume change nothing, and a
        #: worker lets it play on while it idles
        self.pausable = can_pause
        #: the game speeds asked for through ``set_speed`` (1.0: real time), newest last
        self.speeds: list[float] = []

    def _noop(self) -> Any:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return int(space.start)
        return np.zeros(space.shape, space.dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.reset_s:
            self.sleep(self.reset_s)  # a game reloading its level
        self.obs, info = self.inner.reset(seed=seed, options=options)
        self.t0 = self.clock()
        self.ticks = 0
        self.pending = []
        self.action = self._noop()
        self.fresh = False
        self.done = False
        return self.obs, info

    # ---- the real-time protocol ------------------------------------------------------
    def send_action(self, action: Any) -> None:
        self.pending.append((self.clock(), action))

    def read_obs(self):
        """Run every tick due by now; the newest observation and the reward of those ticks."""
        now = self._paused_at if self._paused_at is not None else self.clock()
        due = math.floor((now - self.t0) / self.tick_s + 1e-9)
        reward, term, trunc, info = 0.0, False, False, {}
        if due <= self.ticks:
            self.early_reads += 1
        while self.ticks < due and not self.done:
            self.ticks += 1
            tick_at = self.t0 + self.ticks * self.tick_s
            while self.pending and self.pending[0][0] <= tick_at:
                self.action = self.pending.pop(0)[1]
                self.fresh = True
            if not self.fresh:
                self.missed += 1
            self.fresh = False
            self.obs, r, term, trunc, info = self.inner.step(self.action)
            self.total_ticks += 1
            reward += float(r)
            self.done = term or trunc
        return self.obs, reward, term, trunc, info

    def set_speed(self, factor: float) -> None:
        """The world runs ``factor`` times as fast (ticks every ``1/(world_hz * factor)`` s), from now."""
        now = self.clock()
        done = (now - self.t0) / self.tick_s  # ticks' worth of time so far, kept across the change
        self.tick_s = self.base_tick_s / float(factor)
        self.t0 = now - done * self.tick_s
        self.speeds.append(float(factor))

    def pause(self) -> None:
        if self.pausable and self._paused_at is None:
            self._paused_at = self.clock()

    def resume(self) -> None:
        if self._paused_at is not None:
            gap = self.clock() - self._paused_at
            self.t0 += gap  # the world stood still
            self.paused_s += gap
            self._paused_at = None
            self.pending = [(t + gap, a) for t, a in self.pending]

    # ---- free stepping (evaluation) --------------------------------------------------
    def step(self, action):
        self.obs, r, term, trunc, info = self.inner.step(action)
        return self.obs, r, term, trunc, info

    def close(self):
        self.inner.close()


gym.register("WallClock-v0", entry_point=WallClockGame, disable_env_checker=True)
