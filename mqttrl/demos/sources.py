"""Who plays for ``mqttrl record``, and the loop that records their episodes.

A player is a function ``act(obs) -> action``:

- ``module:function``: a scripted expert. A function of one argument gets the observation; one of
  two gets the env (unwrapped) and the observation, as gymnasium's own heuristic lander does
  (``gymnasium.envs.box2d.lunar_lander:heuristic``);
- a run directory, checkpoint or weights file: a trained mqttrl policy (:func:`mqttrl.load_policy`,
  numpy only), greedy;
- a person: :mod:`mqttrl.demos.keyboard`.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from .dataset import DatasetWriter
from .episode import Episode, EpisodeBuilder

log = logging.getLogger("mqttrl.record")

Act = Callable[[np.ndarray], Any]


class SourceError(ValueError):
    """A player that cannot be loaded: one line saying why."""


def function_policy(spec: str, env: gym.Env) -> Act:
    """``module:function`` as a player over ``env`` (see the module's docstring)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise SourceError(
            f"--policy {spec!r}: expected module:function, e.g. gymnasium.envs.box2d.lunar_lander:heuristic"
        )
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise SourceError(f"--policy {spec!r}: cannot import {module!r} ({e})") from None
    except AttributeError:
        raise SourceError(f"--policy {spec!r}: module {module!r} has no {name!r}") from None
    if not callable(fn):
        raise SourceError(f"--policy {spec!r}: {name!r} is not a function")
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = [None]
    if len(params) == 2:
        return lambda obs: fn(env.unwrapped, obs)
    if len(params) == 1:
        return fn
    raise SourceError(f"--policy {spec!r}: takes {len(params)} arguments; expected (obs) or (env, obs)")


def run_policy(path: str, which: str = "auto") -> tuple[Any, Act]:
    """A trained mqttrl policy (its config names the env) and its greedy player."""
    from mqttrl.policy import load_policy

    try:
        policy = load_policy(path, which=which)
    except (OSError, ValueError) as e:
        raise SourceError(str(e)) from None
    return policy, lambda obs: policy.predict(obs)


def play_episodes(
    env: gym.Env,
    act: Act,
    episodes: int,
    played_by: str,
    seed: int | None = 0,
    max_steps: int | None = None,
) -> Iterator[Episode]:
    """``episodes`` episodes of ``act`` in ``env`` (episode i reset with ``seed + i``); an episode longer
    than ``max_steps`` is cut there and recorded as truncated."""
    builder = EpisodeBuilder(env.observation_space, env.action_space, played_by)
    for i in range(episodes):
        s = None if seed is None else seed + i
        obs, _ = env.reset(seed=s)
        builder.start(obs, s)
        ep = None
        while ep is None:
            action = act(obs)
            obs, reward, terminated, truncated, _ = env.step(env_action(action, env.action_space))
            cut = max_steps is not None and builder.steps + 1 >= max_steps
            ep = builder.step(action, float(reward), obs, terminated, truncated or cut)
        yield ep


def env_action(action: Any, space: gym.Space) -> Any:
    """What the env's ``step`` takes: a Python int for Discrete, an array of the space's dtype otherwise."""
    if isinstance(space, gym.spaces.Discrete):
        return int(np.asarray(action).reshape(()))
    return np.asarray(action, dtype=space.dtype).reshape(space.shape)


def record(writer: DatasetWriter, played: Iterator[Episode], echo: Callable[[str], None] = print) -> list[float]:
    """Write each episode as it finishes (so a recording that is stopped keeps what it has); the returns."""
    returns = []
    for ep in played:
        writer.add(ep)
        returns.append(ep.episode_return)
        echo(f"episode {writer.episodes}: return {ep.episode_return:.2f}, {ep.steps} steps")
    return returns
