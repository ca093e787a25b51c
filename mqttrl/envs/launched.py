"""The env over a game the worker launched: a game that exits at game over is an episode's end.

Many real games quit when the game is over (an unchanged third-party pygame game: ``sys.exit()``
at the last life). That is how their episodes end, not a crash: :class:`LaunchedEnv` sees it at
the reset after an episode's end (the game's process exited with status 0, or its window closed
and the process exits with 0 within :data:`GAME_OVER_EXIT_S`), starts a new game
(:meth:`GameProcess.relaunch`, not a ``crash``: one info line, counted in ``relaunches``, not in
``crashes`` nor against ``launch_max_per_hour``), makes the env over it again and resets that.
A game that exits mid-episode, or with another status, is a crash: the reset raises and the env
set's restart path relaunches it (counted against the budget). A game that cannot start a new game
itself (it freezes at game over, or shows its end until restarted) sets ``[env]
launch_each_episode``: every reset after an episode's end is a new game. Greedy evaluation and ``mqttrl
enjoy`` play through it too (:func:`new_game` starts an evaluation on a fresh game).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from mqttrl.envs.launch import GameProcess
from mqttrl.envs.realtime import ReleasableGame, can_pause, game_of
from mqttrl.envs.realtime_guard import reset_wait_s

log = logging.getLogger("mqttrl.envs")

#: after an episode's end, how long a game whose reset failed (its window closed) has to exit
#: with status 0 for it to be a game over rather than a crash
GAME_OVER_EXIT_S = 3.0


class LaunchedEnv(gym.Wrapper):
    """``make()`` over the launched ``game``, made again on each new game (see the module docstring).

    It speaks the real-time protocol of the env it holds (``send_action``/``read_obs``, the
    controls' release, ``pausable``), so a worker's :class:`~mqttrl.envs.realtime.RealTimeEnv`
    over it drives the env of the current game. ``owns_game``: closing it stops the game
    (``mqttrl enjoy``; a worker stops its game itself)."""

    def __init__(self, game: GameProcess, make: Callable[[], gym.Env], owns_game: bool = False):
        self.game, self._make, self.owns_game = game, make, owns_game
        super().__init__(game.make_env(make))
        if _protocol_of(self.env) is None:  # a lock-step env: the worker steps it, no protocol here
            self.send_action = self.read_obs = None  # type: ignore[assignment]
        #: the last step ended an episode (a game over may follow)
        self.ended = False
        #: this game exited at a game over before: at the next end, its exit is waited for first
        self.exits_at_game_over = False

    # ---- the real-time protocol of the env it holds
    @property
    def pausable(self) -> bool:
        return can_pause(self.env)

    def send_action(self, action: Any) -> None:
        _protocol(self.env).send_action(action)

    def read_obs(self) -> tuple:
        out = _protocol(self.env).read_obs()
        self.ended = bool(out[2] or out[3])
        return out

    def release_controls(self) -> None:
        game = _protocol(self.env)
        if isinstance(game, ReleasableGame):
            game.release_controls()

    def pause(self) -> None:
        _protocol(self.env).pause()

    def resume(self) -> None:
        _protocol(self.env).resume()

    @property
    def reset_wait_s(self) -> float:
        """How long a reset may take: a new game coming up, and the env's own wait (its window)."""
        return self.game.settings.ready_s + GAME_OVER_EXIT_S + reset_wait_s(self.env)

    # ---- gymnasium
    def step(self, action):
        out = self.env.step(action)
        self.ended = bool(out[2] or out[3])
        return out

    def reset(self, **kwargs):
        """A new episode; after a game over, on a new game (see the module docstring)."""
        ended, self.ended = self.ended, False
        if ended and self.game.settings.each_episode:  # a game that cannot start a new game itself
            self.new_game("a new game for each episode (env.launch_each_episode)")
            return self.env.reset(**kwargs)
        if ended and self._exited_at_game_over(GAME_OVER_EXIT_S if self.exits_at_game_over else 0.0):
            self.new_game("the game exited at its episode's end (game over)")
            return self.env.reset(**kwargs)
        try:
            return self.env.reset(**kwargs)
        except Exception:
            if not (ended and self._exited_at_game_over(GAME_OVER_EXIT_S)):
                if ended and self.game.running():
                    self._hint_each_episode()
                raise  # a crash: the env set's restart path relaunches it, counted
        self.new_game("the game closed at its episode's end (game over)")
        return self.env.reset(**kwargs)

    def _hint_each_episode(self) -> None:
        """Once: a game still running whose reset failed after its episode's end may be one that
        stays over until restarted; then every such end is counted as a crash, and the hour's
        budget of crashes ends the worker."""
        if not self.hinted:
            self.hinted = True
            log.warning(
                "the game's reset failed after its episode's end and the game still runs: if it stays over until "
                "it is started again, set env.launch_each_episode = true (a new game each episode, not a crash)"
            )

    hinted = False

    def _exited_at_game_over(self, wait_s: float) -> bool:
        status = self.game.exit_status(wait_s)
        if status == 0:
            self.exits_at_game_over = True
        return status == 0

    def new_game(self, why: str) -> None:
        """Start a new game (not a crash) and make the env over it again: after a game over, and
        before a greedy evaluation (each of its episodes on a fresh game)."""
        try:
            self.env.close()
        except Exception:  # the game is gone: its env's handles with it
            pass
        self.game.relaunch(why, crash=False)
        self.env = self.game.make_env(self._make)

    def close(self):
        try:
            self.env.close()
        finally:
            if self.owns_game:
                self.game.close()


def _protocol_of(env: gym.Env) -> Any:
    return game_of(env)


def _protocol(env: gym.Env) -> Any:
    game = _protocol_of(env)
    if game is None:
        raise TypeError(f"{env} does not speak the real-time protocol (send_action, read_obs)")
    return game


def launched_of(env: gym.Env) -> LaunchedEnv | None:
    """The :class:`LaunchedEnv` in ``env``'s chain of wrappers, None when its game is not launched."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, LaunchedEnv):
            return env
        env = env.env
    return None


def new_game_for_evaluation(envs: list[gym.Env]) -> None:
    """Each launched game among ``envs`` started afresh: a greedy evaluation starts on a new game,
    not in the middle of the training episode's."""
    for env in envs:
        launched = launched_of(env)
        if launched is not None:
            launched.new_game("a greedy evaluation starts")
            launched.ended = False
