"""A base class for a game that runs on its own clock: the real-time protocol with its defaults.

rtgym's ``RealTimeGymInterface`` is the model: the author writes how an action is sent and how an
observation is read, and the base class does the rest. A worker with ``[env] control_hz`` calls
:meth:`send_action` at each period's start and :meth:`read_obs` at its end (its own clock:
docs/real-time.md); :meth:`step` (``mqttrl enjoy``, an evaluator, a script) does the same at the
run's rate, set by :meth:`set_control_hz`. The optional parts have defaults that do nothing:
:meth:`pause`/:meth:`resume` (set :attr:`pausable` when they really stop the game's clock, else a
worker with nothing to do lets the game play on rather than "pausing" it) and :meth:`set_speed`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

import gymnasium as gym

log = logging.getLogger("mqttrl.envs")


class RealTimeGameEnv(gym.Env):
    """Subclass it, set ``observation_space`` and ``action_space``, and write :meth:`send_action`,
    :meth:`read_obs` and ``reset(seed=None, options=None)`` (gymnasium's: call
    ``super().reset(seed=seed)`` first); everything else has a default."""

    # typed as gymnasium's Env types it (an instance attribute: a ClassVar here would contradict it)
    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012
    #: True when :meth:`pause`/:meth:`resume` really stop and restart the game's clock: a worker then
    #: pauses the game while it has nothing useful to do (else the game plays on, unrecorded)
    pausable: ClassVar[bool] = False
    #: seconds from one read to the next in :meth:`step` (``1 / control_hz``; 0: read at once)
    period: float = 0.0
    _last_read_at: float = 0.0

    # ---- what a game writes ----------------------------------------------------------------
    def send_action(self, action: Any) -> None:
        """Apply ``action`` now and return at once (no waiting on the game)."""
        raise NotImplementedError(f"{type(self).__name__}.send_action(action): send the action to the game")

    def read_obs(self) -> tuple[Any, float, bool, bool, dict]:
        """``(obs, reward, terminated, truncated, info)`` for the time since the last read: the newest
        observation and the reward gathered meanwhile; no waiting."""
        raise NotImplementedError(f"{type(self).__name__}.read_obs(): read the game's newest observation")

    # ---- the defaults ------------------------------------------------------------------------
    def pause(self) -> None:
        """Stop the game's clock (nothing by default; see :attr:`pausable`)."""

    def resume(self) -> None:
        """Start the game's clock again (nothing by default)."""

    def set_speed(self, factor: float) -> None:
        """Run the game ``factor`` times as fast (``[env] game_speed``); by default the game keeps its
        own speed and says so once."""
        if not getattr(self, "_said_speed", False):
            self._said_speed = True
            log.warning("%s has no speed control: [env] game_speed = %g is ignored", type(self).__name__, factor)

    def set_control_hz(self, hz: float) -> None:
        """The run's ``[env] control_hz``: :meth:`step` lasts ``1 / hz`` s, as the worker's periods do."""
        self.period = 1.0 / hz if hz else 0.0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """:meth:`send_action`, a wait until :attr:`period` after the last read, :meth:`read_obs`."""
        self.send_action(action)
        wait = self._last_read_at + self.period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        out = self.read_obs()
        self._last_read_at = time.monotonic()
        return out
