"""A launched screen game as one gymnasium env, for the sides that are not mqttrl (SB3, a random
policy): its own Xvfb display, the game started by mqttrl's launcher (``[env] launch`` of an mqttrl
config, under libfaketime for ``[env] game_speed``) and the screen kit's env over its window, each
step lasting the worker's control period, all from that config's ``[env]``. A new episode
relaunches the game (a game over of such a game may need a new process: freegames' Pacman just
stops), as mqttrl's worker does when a reset fails; a step that raises (the game crashed) ends the
episode as truncated. So each library plays the very game, reader and keys mqttrl's worker does.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from .machine import REPO
from .xvfb import Xvfb

#: a run relaunches the game once an episode: far more often than a worker's default allows
STARTS_PER_HOUR = 100_000


def env_section(config: str) -> dict:
    """The ``[env]`` table of an mqttrl config (a path from the repository root or absolute)."""
    path = Path(config) if Path(config).is_absolute() else REPO / config
    return tomllib.loads(path.read_text())["env"]


class LaunchedScreenEnv(gym.Env):
    """The game of ``config``'s ``[env] launch`` on an Xvfb display of its own (``screen`` its size)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, config: str, screen: str = "1024x768", launch: list | None = None, **kwargs: Any):
        import attrs

        from mqttrl.config import load_config
        from mqttrl.envs.launch import GameProcess, LaunchSettings

        path = Path(config) if Path(config).is_absolute() else REPO / config
        self.env_config = load_config(path).env
        self.kwargs = {**self.env_config.kwargs, **kwargs}
        self.workdir = Path(tempfile.mkdtemp(prefix="launched-game-"))
        self.xvfb = Xvfb(self.workdir, screen)
        self.kwargs["display"] = self.xvfb.display
        # as the worker launches it: [env] launch_env, and libfaketime for [env] game_speed
        settings = LaunchSettings.of(attrs.evolve(self.env_config, launch=launch or self.env_config.launch), 1)
        assert settings is not None, f"{config}: [env] launch is not set"
        env = {**settings.env, "DISPLAY": self.xvfb.display}
        self.game = GameProcess(attrs.evolve(settings, env=env, max_per_hour=STARTS_PER_HOUR))
        self.env = self.game.make_env(self._make)
        self.action_space, self.observation_space = self.env.action_space, self.env.observation_space
        self.fresh = True  # the game just started: its first episode needs no relaunch
        self.last_obs: np.ndarray | None = None
        #: games started for this env, the first included
        self.launches = 1

    def _make(self):
        from mqttrl.envs.realtime import with_control_hz
        from mqttrl_plugins.screen import make_screen_env

        # each step lasts the worker's period (control_hz in game time, x game_speed in wall time)
        return with_control_hz(make_screen_env(**self.kwargs), self.env_config)

    def _relaunch(self, why: str) -> None:
        self.env.close()
        self.game.relaunch(why)
        self.launches += 1
        self.env = self.game.make_env(self._make)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if not self.fresh:
            self._relaunch("a new episode")
        self.fresh = False
        obs, info = self.env.reset()
        self.last_obs = obs
        return obs, info

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:  # the game crashed or hangs: this episode ends here, the next relaunches
            print(f"launched game: a step raised {type(e).__name__}: {e}; the episode ends", flush=True)
            return self.last_obs, 0.0, False, True, {}
        self.last_obs = obs
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            self.game.close()
            self.xvfb.stop()


@contextlib.contextmanager
def display_for(sides: tuple) -> Iterator[None]:
    """An Xvfb display as ``DISPLAY`` while the block runs, when a side's mqttrl config launches a
    game and this process has no display (its ``mqttrl train`` children inherit it); else nothing."""
    configs = [getattr(s, "config", "") for s in sides]
    if "DISPLAY" in os.environ or not any(c and env_section(c).get("launch") for c in configs):
        yield
        return
    xvfb = Xvfb(Path(tempfile.mkdtemp(prefix="bench-display-")), "1024x768")
    os.environ["DISPLAY"] = xvfb.display
    try:
        yield
    finally:
        del os.environ["DISPLAY"]
        xvfb.stop()
