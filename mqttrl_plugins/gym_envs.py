"""Built-in env plugin: the ``gym/`` namespace maps to ``gymnasium.make``.

Plain gymnasium ids work without any plugin; this namespace exists so configs
can say explicitly that an env comes from gymnasium (``gym/CartPole-v1``).
"""

import gymnasium as gym

from mqttrl.plugin.spec import hookimpl


def _make(env_id: str, **kwargs):
    return gym.make(env_id, **kwargs)


@hookimpl
def mqttrl_register_envs(register):
    register("gym/", _make, "any gymnasium id, e.g. gym/CartPole-v1")
