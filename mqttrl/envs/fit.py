"""Does the run's algorithm fit its env? Asked once, before anything starts.

``mqttrl train`` used to start its broker, write a run directory and only then learn from the
learner (as "an internal error") that DQN cannot act in Pendulum's Box actions. :func:`run_spaces`
makes the run's env once and reads its spaces; :func:`check_fit` refuses an algorithm whose
declared action spaces (``AlgorithmInfo.action_spaces``, else its ``sample_spec``) do not take
them, as a :class:`ConfigError` (exit 2) naming the algorithms that do.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from mqttrl.config.env_spec import spec_of_config
from mqttrl.config.settings import ConfigError
from mqttrl.envs.run_env import run_env_factory


class EnvMismatch(ConfigError):
    """The algorithm cannot act in the env's action space (or read its observations)."""


def run_spaces(env_config: Any, registry: Any, launch: bool = True) -> tuple[gym.Space, gym.Space]:
    """The run env's (observation, action) spaces, as every node sees them: made once and closed.
    An unknown id is an UnknownEnvError (exit 2), a missing package a MissingDependency (exit 5).
    With ``[env] launch`` (and ``launch``) the game is started for it and stopped after."""
    with run_env_factory(env_config, registry, launch) as make:
        env = make()
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()


def spaces_of_run(config: Any, registry: Any) -> tuple[gym.Space, gym.Space]:
    """The run's spaces for a node that needs only them: its env spec (``env.spec``: no env is made,
    no game or display needed), else its env made here once (never a game launched here)."""
    spec = spec_of_config(config)
    return spec.spaces if spec is not None else run_spaces(config.env, registry, launch=False)


def _refusal(info: Any, params: Any, obs_space: gym.Space, act_space: gym.Space) -> str | None:
    """Why algorithm ``info`` cannot run on these spaces, or None when it can."""
    if info.action_spaces and not isinstance(act_space, tuple(info.action_spaces)):
        wanted = " or ".join(cls.__name__ for cls in info.action_spaces)
        return f"needs a {wanted} action space"
    try:
        info.sample_spec(params if params is not None else info.params(), obs_space, act_space)
    except (TypeError, ValueError, NotImplementedError) as e:
        return str(e)
    return None


def fitting_algorithms(registry: Any, obs_space: gym.Space, act_space: gym.Space) -> list[str]:
    """The installed algorithms that can run on these spaces with their default settings."""
    fitting = []
    for name in sorted(registry.algorithms):
        info = registry.algorithm(name)
        try:
            if _refusal(info, None, obs_space, act_space) is None:
                fitting.append(name)
        except Exception:  # a plugin whose defaults cannot be built is not offered
            continue
    return fitting


def check_fit(algorithm: str, params: Any, env_id: str, spaces: tuple[gym.Space, gym.Space], registry: Any) -> None:
    """Raise :class:`EnvMismatch` when ``algorithm`` cannot run on ``spaces`` (env ``env_id``)."""
    obs_space, act_space = spaces
    info = registry.algorithm(algorithm)
    why = _refusal(info, params, obs_space, act_space)
    if why is None:
        return
    others = [n for n in fitting_algorithms(registry, obs_space, act_space) if n != algorithm]
    hint = f"algorithms that fit: {', '.join(others)} (set algorithm.name)" if others else "no installed algorithm fits"
    raise EnvMismatch(f"algorithm {algorithm!r} cannot run on env {env_id!r}: {why} (its actions: {act_space}); {hint}")
