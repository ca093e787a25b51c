"""Built-in env plugin: the ``atari/`` namespace, Atari 2600 games through ale-py (``pip install 'mqttrl[atari]'``).

``atari/Pong`` is ``ALE/Pong-v5`` at ``frameskip=1`` inside gymnasium's ``AtariPreprocessing``
(4 frames per step, the max of the last two; 84x84 grayscale; up to 30 no-ops at reset) and
``FrameStackObservation`` (4): observations are uint8 ``(4, 84, 84)``. The game name is
case-insensitive (``atari/pong``, ``atari/space_invaders``, ``atari/SpaceInvaders``), and
gymnasium-style names work too: ``atari/ALE/Pong-v5``, ``atari/Pong-v5``, ``atari/PongNoFrameskip-v4``
(a ``-v4`` name keeps v4's default of no sticky actions; the preprocessing is the same).

Options (the ``[env] kwargs`` of a config), see :data:`DEFAULTS`: ``frame_skip``, ``screen_size``
(an int or ``[width, height]``), ``grayscale``, ``noop_max``, ``terminal_on_life_loss``,
``frame_stack`` (0 or 1: no stack), ``repeat_action_probability`` (sticky actions),
``full_action_space``, ``max_episode_steps`` (agent steps; 0: only ALE's own limit of 108000
frames). Anything else goes to ``gymnasium.make`` (``mode``, ``difficulty``, ``render_mode``,
``max_num_frames_per_episode`` ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from mqttrl import hookimpl

INSTALL = "pip install 'mqttrl[atari]'"

#: the options this plugin reads from the kwargs, with their defaults
DEFAULTS: dict[str, Any] = {
    "frame_skip": 4,
    "screen_size": 84,
    "grayscale": True,
    "noop_max": 30,
    "terminal_on_life_loss": False,
    "frame_stack": 4,
    "repeat_action_probability": 0.25,  # ALE v5 (Machado et al. 2018); -v4 names default to 0.0
    "full_action_space": False,
    "max_episode_steps": 0,
}

_NAME = re.compile(r"^(?:ALE/)?(?P<game>[A-Za-z0-9_]+?)(?P<variant>NoFrameskip|Deterministic)?(?:-v(?P<version>\d+))?$")


def _ale_games() -> dict[str, str]:
    """``{"pong": "Pong", "spaceinvaders": "SpaceInvaders", ...}``: every ``ALE/<Game>-v5`` ale-py registered."""
    games = {}
    for env_id in gym.registry:
        if env_id.startswith("ALE/") and env_id.endswith("-v5"):
            name = env_id[len("ALE/") : -len("-v5")]
            games[name.lower()] = name
    return games


def parse_name(name: str, games: dict[str, str]) -> tuple[str, int | None]:
    """``"PongNoFrameskip-v4"`` -> ``("Pong", 4)``: the ALE game name and the version the id asked for."""
    m = _NAME.match(name)
    if not m:
        raise gym.error.Error(f"atari/{name}: not an Atari game name; use e.g. atari/Pong or atari/ALE/Pong-v5")
    version = int(m["version"]) if m["version"] is not None else None
    if version not in (None, 0, 4, 5):
        raise gym.error.VersionNotFound(f"atari/{name}: version v{version} does not exist; use v5 (or no version)")
    key = m["game"].replace("_", "").lower()
    if key not in games:
        close = difflib.get_close_matches(key, list(games), n=3, cutoff=0.6)
        if close:
            hint = f"did you mean {' or '.join('atari/' + games[c] for c in close)}?"
        else:
            hint = f"the {len(games)} games: {', '.join(sorted(games.values()))}"
        raise gym.error.NameNotFound(f"atari/{name}: unknown Atari game {m['game']!r}; {hint}")
    return games[key], version


def make_atari(name: str, **kwargs: Any) -> gym.Env:
    """``atari/<name>``: the ALE v5 game with the standard DQN preprocessing and frame stack."""
    try:
        import ale_py
    except ImportError:
        raise gym.error.DependencyNotInstalled(f"env atari/{name} needs ale-py: {INSTALL}") from None
    gym.register_envs(ale_py)  # importing ale_py registered the ALE/ ids; this names the dependency
    game, version = parse_name(name, _ale_games())
    opts = dict(DEFAULTS)
    if version == 4:
        opts["repeat_action_probability"] = 0.0  # what PongNoFrameskip-v4 means everywhere (SB3, CleanRL)
    for key in DEFAULTS:
        if key in kwargs:
            opts[key] = kwargs.pop(key)
    screen = opts["screen_size"]
    if isinstance(screen, list):  # TOML has no tuples
        screen = tuple(screen)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=float(opts["repeat_action_probability"]),
        full_action_space=bool(opts["full_action_space"]),
        **kwargs,
    )
    try:
        env = gym.wrappers.AtariPreprocessing(
            env,
            noop_max=int(opts["noop_max"]),
            frame_skip=int(opts["frame_skip"]),
            screen_size=screen,
            terminal_on_life_loss=bool(opts["terminal_on_life_loss"]),
            grayscale_obs=bool(opts["grayscale"]),
        )
    except gym.error.DependencyNotInstalled:
        env.close()
        raise gym.error.DependencyNotInstalled(
            f"env atari/{name} needs opencv (AtariPreprocessing resizes with cv2): {INSTALL}"
        ) from None
    if int(opts["frame_stack"]) > 1:
        env = gym.wrappers.FrameStackObservation(env, int(opts["frame_stack"]))
    if opts["max_episode_steps"]:
        env = gym.wrappers.TimeLimit(env, int(opts["max_episode_steps"]))
    return env


@hookimpl
def mqttrl_register_envs(register: Callable[[str, Callable[..., gym.Env], str], None]) -> None:
    register(
        "atari/",
        make_atari,
        "Atari 2600 via ale-py (mqttrl[atari]): atari/Pong is ALE/Pong-v5, frame skip 4, 84x84 gray, 4 stacked: uint8 (4, 84, 84)",
    )
