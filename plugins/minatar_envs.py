"""Built-in env plugin: the ``minatar/`` namespace, MinAtar games (``pip install 'mqttrl[minatar]'``).

``minatar/breakout`` is ``MinAtar/Breakout-v1`` (the minimal action set): observations are bool
``(10, 10, C)`` channels (C = 4 for breakout). Game names are case-insensitive and may carry a
version: ``minatar/Breakout-v1``, ``minatar/space_invaders``, ``minatar/SpaceInvaders``. A ``-v0``
name gives MinAtar's full action set (6 actions).

Options (the ``[env] kwargs`` of a config), see :data:`DEFAULTS`: ``sticky_action_prob`` (MinAtar's
0.1), ``difficulty_ramping`` (true), ``max_episode_steps``. MinAtar has no time limit (only
Freeway ends itself, after 2500 steps), so a good Breakout or Space Invaders agent can play one
episode forever: no episode would be reported and a greedy evaluation would never end. The
default limit of 10000 steps is far above what the MinAtar paper's agents reach in an episode, so
it only stops such endless episodes (truncated, so targets bootstrap); 0 turns it off. Anything
else goes to ``gymnasium.make`` (``render_mode`` ...).

``reset(seed=...)`` is reproducible: MinAtar reseeds the game's RNG, and this plugin also clears
the sticky-action memory, which MinAtar carries from one episode into the next.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from mqttrl import hookimpl

INSTALL = "pip install 'mqttrl[minatar]'"

#: the MinAtar games, snake_case as MinAtar names them
GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")

#: the options this plugin reads from the kwargs, with their defaults
DEFAULTS: dict[str, Any] = {
    "sticky_action_prob": 0.1,
    "difficulty_ramping": True,
    "max_episode_steps": 10_000,
}

_NAME = re.compile(r"^(?:MinAtar/)?(?P<game>[A-Za-z_]+)(?:-v(?P<version>\d+))?$")


class _SilenceImportWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Cannot import" not in record.getMessage()


def _import_minatar_gym():
    """``minatar.gym``, without MinAtar's import-time ``logging.warning`` about seaborn/matplotlib
    (only rendering needs them). That warning goes to the root logger, and logging it would also
    configure the root logger (``basicConfig``) as a side effect: a handler and a filter stop both."""
    root = logging.getLogger()
    quiet, keep = _SilenceImportWarning(), logging.NullHandler()
    root.addFilter(quiet)
    root.addHandler(keep)
    try:
        import minatar.gym
    finally:
        root.removeHandler(keep)
        root.removeFilter(quiet)
    return minatar.gym


def parse_name(name: str) -> tuple[str, int]:
    """``"Breakout-v1"`` -> ``("Breakout", 1)``: the MinAtar gym name and version (1 unless given)."""
    m = _NAME.match(name)
    key = m["game"].replace("_", "").lower() if m else ""
    games = {g.replace("_", ""): g.title().replace("_", "") for g in GAMES}
    if key not in games:
        raise gym.error.NameNotFound(
            f"minatar/{name}: unknown MinAtar game; games: {', '.join('minatar/' + g for g in GAMES)}"
        )
    assert m is not None  # no match: key is "", no game
    version = int(m["version"]) if m["version"] is not None else 1
    if version not in (0, 1):
        raise gym.error.VersionNotFound(
            f"minatar/{name}: MinAtar has v0 (6 actions) and v1 (minimal action set), not v{version}"
        )
    return games[key], version


class _ReproducibleReset(gym.Wrapper):
    """Clears MinAtar's sticky-action memory at every reset: ``Environment.last_action`` survives
    ``reset``, so without this the first step after ``reset(seed=s)`` depends on the last episode."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        unwrapped: Any = self.env.unwrapped  # MinAtar's gym env (untyped): its Environment is ``game``
        unwrapped.game.last_action = 0  # what a new Environment starts with
        return self.env.reset(seed=seed, options=options)


def make_minatar(name: str, **kwargs: Any) -> gym.Env:
    """``minatar/<game>``: the MinAtar game, bool ``(10, 10, C)`` observations."""
    try:
        mg = _import_minatar_gym()
    except ImportError:
        raise gym.error.DependencyNotInstalled(f"env minatar/{name} needs MinAtar: {INSTALL}") from None
    game, version = parse_name(name)
    env_id = f"MinAtar/{game}-v{version}"
    if env_id not in gym.registry:
        mg.register_envs()
    opts = dict(DEFAULTS)
    for key in DEFAULTS:
        if key in kwargs:
            opts[key] = kwargs.pop(key)
    env = gym.make(
        env_id,
        sticky_action_prob=float(opts["sticky_action_prob"]),
        difficulty_ramping=bool(opts["difficulty_ramping"]),
        **kwargs,
    )
    env = _ReproducibleReset(env)
    if opts["max_episode_steps"]:
        env = gym.wrappers.TimeLimit(env, int(opts["max_episode_steps"]))
    return env


@hookimpl
def mqttrl_register_envs(register: Callable[[str, Callable[..., gym.Env], str], None]) -> None:
    register(
        "minatar/",
        make_minatar,
        "MinAtar games (mqttrl[minatar]): minatar/breakout is MinAtar/Breakout-v1, bool (10, 10, C) observations",
    )
