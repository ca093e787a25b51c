"""Real-time stepping for any env: the action at the start of a period, the observation at its end.

A game runs on its own clock, so a worker's step is not "compute the next state" but: send
the action, wait for the period to end (:class:`~mqttrl.envs.realtime_clock.ControlClock`),
read what the game shows. Each action therefore lands one period late, and the last
``act_buf_len`` actions are part of the observation (:class:`ActionHistory`), so the spaces
that nets, actors and the learner see are ordinary ones.

An env may speak the real-time protocol itself (:class:`RealTimeGame`: ``send_action``,
``read_obs``, ``reset``; optionally ``pause``/``resume``/``set_speed``); any other gymnasium env
is driven in lock-step (its ``step`` runs at the period's end with the action sent at its start).
The settings are ``[env] control_hz``, ``clock``, ``overrun_tolerance``, ``act_buf_len``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import gymnasium as gym
import numpy as np

from mqttrl.envs.faketime import faked_speed, wall_hz
from mqttrl.envs.realtime_clock import ControlClock
from mqttrl.envs.realtime_guard import Deadline, reset_wait_s
from mqttrl.envs.rollout import EnvSet

log = logging.getLogger("mqttrl.realtime")

#: ``info`` key of a row that holds no transition: its game was resetting during the step
RESETTING = "mqttrl_resetting"

#: a worker with several games waits this long for a game's reset; a slower one goes on in the
#: background while the other games are served (:class:`RealTimeEnvSet`)
RESET_JOIN_S = 0.002


def _ordinary_priority(thread: threading.Thread) -> None:
    """``thread`` in the OS's ordinary scheduling class: a reset that goes on in the background
    was started by a control thread at real-time priority (inherited: a fast reset is done at
    once) and must not hold a core at that level for seconds."""
    tid = getattr(thread, "native_id", None)
    if tid is None or not hasattr(os, "sched_setscheduler"):
        return
    try:
        if os.sched_getscheduler(tid) != os.SCHED_OTHER:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        pass


@runtime_checkable
class RealTimeGame(Protocol):
    """What a game that runs on its own clock implements (looked up on ``env.unwrapped``).

    ``send_action(action)`` applies the action now and returns at once; ``read_obs()`` returns
    ``(obs, reward, terminated, truncated, info)`` for the time since the last read (the newest
    frame, the reward accumulated meanwhile); ``reset(seed=, options=)`` is gymnasium's. Optional:
    ``pause()``/``resume()`` (the game's clock stops; mqttrl pauses a game while its worker has
    nothing useful to do), ``release_controls()`` (a game that cannot pause lets go of its
    controls instead: no key held, a virtual pad neutral) and ``set_speed(factor)``.
    """

    def send_action(self, action: Any) -> None: ...

    def read_obs(self) -> tuple[Any, float, bool, bool, dict]: ...


# ---- the protocol's optional members, each a protocol of its own (asked with isinstance)
T = TypeVar("T")


@runtime_checkable
class PausableGame(Protocol):
    """A game whose clock stops on ``pause()`` and runs again on ``resume()``."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@runtime_checkable
class ReleasableGame(Protocol):
    """A game that cannot pause but lets go of its controls (no key held, a pad neutral)."""

    def release_controls(self) -> None: ...


@runtime_checkable
class SpeedableGame(Protocol):
    """A game with a speed setting of its own (``[env] game_speed`` where libfaketime is not used)."""

    def set_speed(self, factor: float) -> None: ...


@runtime_checkable
class ClockedGame(Protocol):
    """An env that paces its own steps when no worker clock does (``mqttrl enjoy``, an evaluation)."""

    def set_control_hz(self, hz: float) -> None: ...


def game_of(env: gym.Env) -> RealTimeGame | None:
    """The env's real-time protocol, where it speaks it (on the env or its unwrapped core)."""
    return _first(env, RealTimeGame)


def _first(env: gym.Env, kind: type[T]) -> T | None:
    """The env or its unwrapped core, whichever first is a ``kind`` (an optional member's protocol)."""
    for candidate in (env, env.unwrapped):
        if isinstance(candidate, kind):
            return candidate
    return None


def can_pause(env: gym.Env) -> bool:
    """Whether the game's clock stops on ``pause()``: its ``pausable`` where it says (a
    ``RealTimeGameEnv`` has no-op pause/resume unless it sets it), else both methods present."""
    game = game_of(env)
    if game is None:
        return False
    said = getattr(game, "pausable", None)  # a declared flag, not a method: RealTimeGameEnv's default
    if isinstance(said, bool):
        return said
    return isinstance(game, PausableGame)


# ---- the last actions, part of the observation -------------------------------------------
def _action_width(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    raise ValueError(f"act_buf_len: action space {space} is not Discrete, MultiDiscrete or Box")


class ActionHistory(gym.Wrapper):
    """The observation with the last ``length`` actions appended (one-hot for discrete actions):
    a flat ``Box`` observation becomes a longer flat ``Box``. The history starts with zeros at
    each reset; :meth:`push` records an action as sent (a real-time step pushes it when sent)."""

    def __init__(self, env: gym.Env, length: int):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"act_buf_len={length}: needs a flat Box observation (got {space}); "
                "for images keep act_buf_len = 0 (the frame stack shows the motion)"
            )
        self.length = length
        self.width = _action_width(env.action_space)
        low = np.concatenate([space.low.astype(np.float32), np.full(length * self.width, -np.inf, np.float32)])
        high = np.concatenate([space.high.astype(np.float32), np.full(length * self.width, np.inf, np.float32)])
        if isinstance(env.action_space, gym.spaces.Box):
            lo, hi = env.action_space.low.ravel(), env.action_space.high.ravel()
            low[space.shape[0] :] = np.tile(lo, length)
            high[space.shape[0] :] = np.tile(hi, length)
        else:
            low[space.shape[0] :] = 0.0
            high[space.shape[0] :] = 1.0
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.history = np.zeros((length, self.width), np.float32)

    def encode(self, action: Any) -> np.ndarray:
        space = self.env.action_space
        row = np.zeros(self.width, np.float32)
        if isinstance(space, gym.spaces.Discrete):
            row[int(np.asarray(action).item()) - int(space.start)] = 1.0
        elif isinstance(space, gym.spaces.MultiDiscrete):
            offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])
            row[offsets + np.asarray(action, dtype=np.int64).ravel()] = 1.0
        else:
            row[:] = np.asarray(action, np.float32).ravel()
        return row

    def push(self, action: Any) -> None:
        self.history = np.roll(self.history, -1, axis=0)
        self.history[-1] = self.encode(action)

    def observe(self, obs: Any) -> np.ndarray:
        return np.concatenate([np.asarray(obs, np.float32).ravel(), self.history.ravel()])

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.history[:] = 0.0
        return self.observe(obs), info

    def step(self, action):
        self.push(action)
        obs, r, term, trunc, info = self.env.step(action)
        return self.observe(obs), r, term, trunc, info


def with_control_hz(env: gym.Env, env_config) -> gym.Env:
    """``env`` told the run's ``[env] control_hz`` (its ``set_control_hz(hz)``, on the env or its
    unwrapped core), so that a step no worker clock paces (``mqttrl enjoy``, a greedy evaluation)
    lasts the period training used; an env without the method, or a run without ``control_hz``, is
    left as it is (a worker's RealTimeEnv paces its own steps). A launched game under libfaketime
    (``[env] game_speed``) gets the wall rate, ``control_hz x game_speed``, as the worker's clock
    does: each step is the same game time as in training."""
    hz = wall_hz(env_config)
    clocked = _first(env, ClockedGame) if hz else None
    if clocked is not None:
        clocked.set_control_hz(hz)
    return env


def with_game_speed(env: gym.Env, env_config) -> gym.Env:
    """``env`` told to run at ``[env] game_speed`` (its ``set_speed(factor)``, on the env or its
    unwrapped core) when that is set (not 0); a game with no ``set_speed`` gets one warning line
    and runs at its own speed."""
    speed = float(env_config.game_speed)
    if not speed or faked_speed(env_config, say=False):  # libfaketime speeds it up: not twice
        return env
    game = _first(env, SpeedableGame)
    if game is not None:
        game.set_speed(speed)
        return env
    global _speed_warned
    if not _speed_warned:
        _speed_warned = True
        log.warning(
            "env %s has no set_speed(factor): env.game_speed = %g is ignored, the game runs at its own speed",
            env_config.id,
            speed,
        )
    return env


_speed_warned = False


def with_action_history(env: gym.Env, env_config) -> gym.Env:
    """``env`` with the last ``[env] act_buf_len`` actions in its observation (as it is for 0)."""
    length = env_config.act_buf_len
    return ActionHistory(env, length) if length else env


# ---- the real-time step ---------------------------------------------------------------------
class RealTimeEnv(gym.Wrapper):
    """One env stepped on a :class:`ControlClock`: ``step(a)`` sends ``a`` (at the period's
    start: right after the previous observation), waits for the period's end, then reads.

    :meth:`send` may be called ahead of :meth:`step` (a worker's :class:`RealTimeEnvSet` sends
    every env's action first, then reads them in turn, so no game waits on another's period).
    A reset restarts the clock and its time is excused; ``pause``/``resume`` stop and restart
    a game that can pause (:func:`can_pause`), else they only mark the time.
    """

    def __init__(self, env: gym.Env, clock: ControlClock, obs_timeout_s: float = 0.0):
        super().__init__(env)
        self.clock = clock
        self.history: ActionHistory | None = env if isinstance(env, ActionHistory) else None
        inner = env.env if self.history is not None else env
        self.game = game_of(inner)
        self.inner = inner
        #: a lock-step env under the clock stops when it is not stepped: it always pauses
        self.pausable = can_pause(inner) if self.game is not None else True
        self._sent = False
        self._send_error: Exception | None = None
        #: a reset running on its own thread (:meth:`start_reset`): the thread and its result
        self._reset_job: tuple[threading.Thread, dict] | None = None
        self._last_obs: Any = None
        #: the observation the last :meth:`step` read
        self.last_obs: Any = None
        #: a game's read_obs and reset answer within ``obs_timeout_s`` or raise GameHung (a crash)
        self.deadline = Deadline(obs_timeout_s) if obs_timeout_s and self.game is not None else None

    @property
    def resetting(self) -> bool:
        """A reset runs on its own thread (started by :meth:`start_reset`, not yet collected)."""
        return self._reset_job is not None

    def start_reset(self, final_obs: Any, join_s: float) -> Any | None:
        """Reset on a thread of its own, waiting for it ``join_s`` seconds: its first observation
        when it was done by then (raising what it raised), as a plain reset; else None, and the
        reset goes on while the worker serves its other games: until it is done :meth:`send`
        does nothing and :meth:`step` returns at once a row that holds no transition
        (``info[RESETTING]``, the obs ``final_obs``); the step that finds it done returns the
        new episode's first observation the same way and restarts this game's clock (or raises
        what the reset raised: the env's crash path)."""
        box: dict = {}

        def run() -> None:
            try:
                box["out"] = self.reset()
            except BaseException as e:  # raised where it is collected
                box["error"] = e

        thread = threading.Thread(target=run, name="mqttrl-reset", daemon=True)
        thread.start()
        thread.join(join_s)
        if thread.is_alive():
            _ordinary_priority(thread)
            self._last_obs = final_obs
            self._reset_job = (thread, box)
            return None
        if "error" in box:
            raise box["error"]
        return box["out"][0]

    def wait_reset(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a running reset (when no game has a period to wait for)."""
        if self._reset_job is not None:
            self._reset_job[0].join(timeout)

    def _step_resetting(self):
        thread, box = self._reset_job
        if thread.is_alive():
            return self._last_obs, 0.0, False, False, {RESETTING: True}
        self._reset_job = None
        if "error" in box:
            raise box["error"]
        obs, _info = box["out"]
        self.clock.start()  # the first period starts now, when the worker can act on it
        return obs, 0.0, False, False, {RESETTING: True}

    def send(self, action: Any) -> None:
        """Apply ``action`` now (a failure is raised by the next :meth:`step`, where the
        worker's restart path handles it)."""
        if self._reset_job is not None:
            return  # the game is resetting: its row of this step holds no transition
        self._sent = True
        try:
            if self.history is not None:
                self.history.push(action)
            if self.game is not None:
                self.game.send_action(action)
            else:
                self._action = action  # lock-step: the env steps at the period's end
        except Exception as e:
            self._send_error = e

    def step(self, action):
        if self._reset_job is not None:
            return self._step_resetting()
        if not self._sent:
            self.send(action)
        self._sent = False
        if self._send_error is not None:
            err, self._send_error = self._send_error, None
            raise err
        self.clock.wait()
        if self.deadline is not None:
            obs, r, term, trunc, info = self.deadline.call("read_obs", self.game.read_obs)
        elif self.game is not None:
            obs, r, term, trunc, info = self.game.read_obs()
        else:
            obs, r, term, trunc, info = self.inner.step(self._action)
        if self.history is not None:
            obs = self.history.observe(obs)
        self.last_obs = obs
        return obs, r, term, trunc, info

    def reset(self, **kwargs):
        started = self.clock.now()
        self._sent = False
        self._send_error = None
        if self.deadline is not None:
            out = self._reset_within_deadline(**kwargs)
        else:
            out = self.env.reset(**kwargs)
        self.clock.excuse_reset(started)
        return out

    def _reset_within_deadline(self, **kwargs):
        """The reset under ``obs_timeout_s`` plus what the env says a reset may wait (a launched
        game's relaunch, the screen kit's ``window_wait_s``): a game coming up is not a hang."""
        base = self.deadline.timeout_s
        self.deadline.timeout_s = base + reset_wait_s(self.env)
        try:
            return self.deadline.call("reset", self.env.reset, **kwargs)
        finally:
            self.deadline.timeout_s = base

    def close(self):
        if self.deadline is not None:
            try:
                self.deadline.call("close", self.env.close)
            finally:
                self.deadline.close()
        else:
            self.env.close()

    def pause(self) -> None:
        if self.game is None:
            pass  # lock-step: not stepping it is its pause
        elif self.pausable and not self.clock.paused and self._reset_job is None:
            self.game.pause()
            self._game_paused = True
        elif callable(getattr(self.game, "release_controls", None)):
            self.game.release_controls()  # a game that runs on: no key held, a virtual pad neutral
        self.clock.pause()

    def resume(self) -> None:
        if self._game_paused and self.clock.paused:
            self.game.resume()
        self._game_paused = False
        self.clock.resume()

    _game_paused = False


class RealTimeEnvSet(EnvSet):
    """A worker's envs, each a :class:`RealTimeEnv` on its own clock: a step sends every
    env's action first, then waits out the period and reads each (the first read waits; the
    others' periods have ended by then), so each action goes out at its period's start."""

    def __init__(
        self,
        make: Callable[[], gym.Env],
        num_envs: int,
        seed: int,
        *,
        make_clock,
        obs_timeout_s: float = 0.0,
        background_resets: bool | None = None,
        **kwargs,
    ):
        self.make_clock = make_clock
        #: an episode's reset runs on its own thread while the other games are served (default:
        #: with more than one env; one game has nothing to serve meanwhile)
        self.background_resets = num_envs > 1 if background_resets is None else background_resets
        #: a reset not done within this long goes on in the background (a fast one stays a plain reset)
        self.reset_join_s = RESET_JOIN_S
        #: the rows of the last step that hold no transition (their game was resetting)
        self.resetting_rows: list[int] = []
        super().__init__(lambda: RealTimeEnv(make(), make_clock(), obs_timeout_s), num_envs, seed, **kwargs)

    def step(self, actions: np.ndarray, during: Callable[[], None] | None = None):
        """Send every action, run ``during`` (a worker's chores: messages, heartbeat, a batch
        out) while the period runs, then wait for its end and read every env.

        A game whose reset runs on its thread (``background_resets``) is skipped: its row is
        listed in :attr:`resetting_rows` (no transition; a caller recording transitions must
        not record that step as it is); when every game is resetting the step waits a period
        for one of them instead of spinning."""
        self.answered()  # the actions go out here, at the period's start
        acts = actions.tolist() if actions.ndim == 1 else list(actions)
        for env, a in zip(self.envs, acts):
            env.send(a)
        if during is not None:
            during()
        resetting = [i for i, env in enumerate(self.envs) if env.resetting]
        if resetting and len(resetting) == self.num_envs:
            self.envs[0].wait_reset(self.envs[0].clock.period)
        out = super().step(actions)
        if resetting:
            for i in resetting:
                if i not in self.failed:  # a resetting row is not a step of the new episode
                    self.lengths[i] -= 1
        self.resetting_rows = resetting
        return out

    def _reset(self, i: int) -> np.ndarray:
        """After env ``i``'s episode ended: its reset, on its own thread when ``background_resets``;
        one that is not done within ``reset_join_s`` goes on there (the row keeps the final
        observation until the reset is collected) while the other games are served."""
        if not self.background_resets:
            return super()._reset(i)
        final = self.envs[i].last_obs
        try:
            obs = self.envs[i].start_reset(final, self.reset_join_s)
        except Exception as e:
            self._note_failure(i, "reset", e)
            return self._restart(i)
        return final if obs is None else obs

    @property
    def spun(self) -> float:
        """Of :attr:`slept`, the seconds the clocks spun before their periods' ends."""
        return self.envs[0].clock.stats.spin_s

    @property
    def slept(self) -> float:
        """Seconds the envs' clocks slept so far (the worker's "wait" block)."""
        return self.envs[0].clock.stats.wait_s  # one PeriodStats for the worker's clocks

    def restart_clocks(self) -> None:
        """The schedules start now (after a wait that was no env's fault, e.g. for a model)."""
        for env in self.envs:
            env.clock.start()

    def reset_all(self, seed: int | None = None) -> None:
        """As :meth:`EnvSet.reset_all`, then the schedules start now. Called when no reset runs on a
        thread (a worker evaluates only then)."""
        super().reset_all(seed)
        self.resetting_rows = []
        self.restart_clocks()

    def pause(self) -> None:
        self.obs_at = None  # the first actions after a pause answer no fresh capture: not counted
        for env in self.envs:
            env.pause()

    def resume(self) -> None:
        for env in self.envs:
            env.resume()

    @property
    def pausable(self) -> bool:
        return all(env.pausable for env in self.envs)


def real_time_settings(env_config) -> dict | None:
    """The clock settings of ``[env]``, or None when the run steps freely (``control_hz = 0``)."""
    hz = wall_hz(env_config)  # a launched game under libfaketime: control_hz is game time
    if hz <= 0:
        return None
    return {"hz": hz, "mode": env_config.clock, "tolerance": env_config.overrun_tolerance}


def obs_timeout(env_config) -> float:
    """``[env] obs_timeout_s``: a real-time game silent for this long is handled like a crash."""
    return float(env_config.obs_timeout_s)
