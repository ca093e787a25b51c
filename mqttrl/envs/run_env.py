"""The run's env as every node sees it: made from ``[env]`` (its kwargs, its clock, its action
history), with ``[env] launch`` the game started for it, and greedy evaluation's actor beside it.

The one floor of :mod:`mqttrl.envs` that knows all the others (making, launching, the real-time
wrappers, the spec): the wrappers and the launcher below it never import it, so the package has
no import circle (held by ``lint-imports``, pyproject.toml).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym

from mqttrl.envs.launch import GameProcess, LaunchSettings, for_worker
from mqttrl.envs.launched import LaunchedEnv
from mqttrl.envs.make import make_env
from mqttrl.envs.realtime import with_action_history, with_control_hz


def make_run_env(env_config, registry=None, extra_kwargs: dict | None = None) -> gym.Env:
    """The run's env as every node sees its spaces: made from ``[env]`` (``extra_kwargs`` over
    its kwargs) and, with ``act_buf_len``, its observation carrying the last actions. Stepped
    freely (an evaluator, a learner reading spaces); a worker with ``control_hz`` wraps it in
    :class:`RealTimeEnv`. ``{index}``/``{worker}`` in its settings are those of the run's first
    worker (``w0``, index 0): a game PC's own process that is not a worker plays that game."""
    env_config = for_worker(env_config, "w0", 0)
    env = make_env(env_config.id, {**env_config.kwargs, **(extra_kwargs or {})}, registry)
    return with_action_history(with_control_hz(env, env_config), env_config)


@contextlib.contextmanager
def run_env_factory(env_config: Any, registry: Any = None, launch: bool = True) -> Iterator[Callable[[], Any]]:
    """``make()`` of the run's env as every node sees it (``make_run_env``); with ``[env] launch``
    (and ``launch``) the game is started for it first and stopped when the block ends: what reads the
    spec or checks the env on a game PC (``mqttrl train``, ``env-spec``, ``check-plugin --config``)."""
    env_config = for_worker(env_config, "w0", 0)  # as mqttrl train's first worker plays it
    settings = LaunchSettings.of(env_config, 1) if launch else None
    if settings is None:
        yield lambda: make_run_env(env_config, registry)
        return
    game = GameProcess(settings)
    try:
        yield lambda: game.make_env(lambda: make_run_env(env_config, registry))
    finally:
        game.close()


def make_played_env(env_config: Any, registry: Any = None, extra_kwargs: dict | None = None) -> gym.Env:
    """The run's env as :func:`make_run_env` makes it, with ``[env] launch``
    the game started first and a new game after each game over (``mqttrl enjoy``: an unchanged
    game that exits at game over plays all its episodes); closing the env stops the game."""
    env_config = for_worker(env_config, "w0", 0)
    settings = LaunchSettings.of(env_config, 1)
    if settings is None:
        return make_run_env(env_config, registry, extra_kwargs)
    kwargs = {**env_config.kwargs, **(extra_kwargs or {})}
    game = GameProcess(settings)
    try:
        env = LaunchedEnv(game, lambda: with_control_hz(make_env(env_config.id, kwargs, registry), env_config), True)
    except BaseException:
        game.close()
        raise
    return with_action_history(env, env_config)
