"""Built-in env plugin: the ``gym/`` namespace maps to ``gymnasium.make``.

Plain gymnasium ids work without any plugin; this namespace exists so configs
can say explicitly that an env comes from gymnasium (``gym/CartPole-v1``).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym

from mqttrl import hookimpl


def _make(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, **kwargs)


@hookimpl
def mqttrl_register_envs(register: Callable[[str, Callable[..., gym.Env], str], None]) -> None:
    register("gym/", _make, "any gymnasium id, e.g. gym/CartPole-v1")
