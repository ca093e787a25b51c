"""The actor and the env factory of a greedy evaluation (the evaluator, ``mqttrl evaluate``, a
benchmark's chaos run): the run's algorithm made for its spaces, read from its env spec."""

from __future__ import annotations

from mqttrl.envs.fit import spaces_of_run
from mqttrl.envs.rollout import EVAL_SEED_BASE
from mqttrl.envs.run_env import make_run_env
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry


def greedy_actor(config, episodes: int, seed: int = EVAL_SEED_BASE):
    """An actor and an env factory for greedy evaluation of ``episodes`` episodes side by side
    (``seed`` seeds the actor's own generators; the episodes' seeds are :func:`evaluation_seed`'s)."""
    registry = get_registry()
    make = lambda: make_run_env(config.env, registry)  # noqa: E731
    obs_space, act_space = spaces_of_run(config, registry)  # the spec: the game is needed only to evaluate
    info = registry.algorithm(config.algorithm.name)
    params = config.algorithm.params
    # the backend a worker prefers ("numpy" for the built-ins: no torch needed, fast for small MLPs)
    forward = info.make_forward(params, obs_space, act_space, info.backends[0], seed)
    actor = info.make_actor(params, obs_space, act_space, ActorContext(num_envs=episodes, seed=seed), forward)
    return actor, make
