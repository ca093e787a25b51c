"""The pixel-game env plugins (atari/, minatar/) and the tiny image envs the tests train on (tests/pixel_env.py)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import pixel_env
from helpers.procs import node_env

from mqttrl.envs.make import make_env
from mqttrl.plugin.manager import MissingDependency, get_registry


def wrapper(env: gym.Env, cls: type) -> gym.Env:
    """The wrapper of type ``cls`` around ``env`` (fails when there is none)."""
    while not isinstance(env, cls):
        assert isinstance(env, gym.Wrapper), f"no {cls.__name__} in the wrappers"
        env = env.env
    return env


def rollout(env: gym.Env, seed: int, actions: np.ndarray) -> list:
    """reset(seed), then one step per action (reset without a seed after an episode ends):
    every observation, reward and end flag."""
    obs, _ = env.reset(seed=seed)
    out = [obs.copy()]
    for a in actions:
        obs, r, term, trunc, _ = env.step(int(a))
        out += [obs.copy(), r, term, trunc]
        if term or trunc:
            out.append(env.reset()[0].copy())
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_builtin_env_namespaces_are_registered():
    envs = get_registry().envs
    assert {"atari/", "minatar/"} <= set(envs)
    assert envs["atari/"].obj.__module__ == "mqttrl_plugins.atari_envs"
    assert envs["minatar/"].obj.__module__ == "mqttrl_plugins.minatar_envs"


# ---- atari/ ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ale():
    return pytest.importorskip("ale_py", reason="ale-py is not installed: pip install 'mqttrl[atari]'")


def test_atari_pong_is_preprocessed_and_stacked(ale):
    env = make_env("atari/Pong")
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert env.action_space == gym.spaces.Discrete(6)
    pre = wrapper(env, gym.wrappers.AtariPreprocessing)
    assert (pre.frame_skip, pre.noop_max, pre.terminal_on_life_loss, pre.grayscale_obs) == (4, 30, False, True)
    assert env.unwrapped._frameskip == 1  # the skipping is the wrapper's (max of the last two frames)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    env.close()


def test_atari_kwargs_are_applied(ale):
    kwargs = {
        "frame_skip": 2,
        "screen_size": [64, 48],  # TOML lists are [width, height], like gymnasium's tuple
        "grayscale": True,
        "noop_max": 0,
        "terminal_on_life_loss": True,
        "frame_stack": 1,
        "repeat_action_probability": 0.0,
        "full_action_space": True,
        "max_episode_steps": 5,
        "mode": 0,  # not one of the plugin's options: goes to gymnasium.make
    }
    env = make_env("atari/Breakout", dict(kwargs))
    assert env.observation_space.shape == (48, 64) and env.observation_space.dtype == np.uint8
    assert env.action_space == gym.spaces.Discrete(18)
    pre = wrapper(env, gym.wrappers.AtariPreprocessing)
    assert (pre.frame_skip, pre.noop_max, pre.terminal_on_life_loss) == (2, 0, True)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert env.unwrapped.spec.kwargs["mode"] == 0
    env.reset(seed=0)
    ends = [env.step(0)[3] for _ in range(5)]
    assert ends == [False] * 4 + [True]  # truncated at max_episode_steps agent steps
    env.close()
    rgb = make_env("atari/Breakout", {"grayscale": False, "frame_stack": 0})
    assert rgb.observation_space.shape == (84, 84, 3)
    rgb.close()


@pytest.mark.parametrize(
    "name,game,sticky",
    [
        ("Pong", "pong", 0.25),
        ("pong", "pong", 0.25),
        ("Pong-v5", "pong", 0.25),
        ("ALE/Pong-v5", "pong", 0.25),
        ("PongNoFrameskip-v4", "pong", 0.0),  # what -v4 means everywhere: no sticky actions
        ("space_invaders", "space_invaders", 0.25),
        ("SpaceInvaders", "space_invaders", 0.25),
    ],
)
def test_atari_names(ale, name, game, sticky):
    env = make_env(f"atari/{name}")
    assert env.unwrapped._game == game
    assert env.observation_space.shape == (4, 84, 84)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(sticky)
    env.close()


def test_atari_v4_name_takes_explicit_sticky_actions(ale):
    env = make_env("atari/PongNoFrameskip-v4", {"repeat_action_probability": 0.25})
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    env.close()


def test_atari_reset_seed_is_reproducible(ale):
    env = make_env("atari/Pong")
    actions = np.random.default_rng(0).integers(0, 6, 30)
    first = rollout(env, 11, actions)
    assert same(first, rollout(env, 11, actions))
    env.close()


@pytest.mark.parametrize(
    "name,error,needles",
    [
        ("Pnog", gym.error.NameNotFound, ["atari/Pnog", "unknown Atari game 'Pnog'", "did you mean atari/Pong"]),
        ("Zzzzqx", gym.error.NameNotFound, ["unknown Atari game 'Zzzzqx'", "games:", "Pong", "SpaceInvaders"]),
        ("Pong-v3", gym.error.VersionNotFound, ["atari/Pong-v3", "v3", "v5"]),
        ("Pong NoFrameskip", gym.error.Error, ["not an Atari game name", "atari/Pong"]),
    ],
)
def test_atari_unknown_names_say_what_exists(ale, name, error, needles):
    with pytest.raises(error) as info:
        make_env(f"atari/{name}")
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_atari_without_ale_py_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    with pytest.raises(MissingDependency, match=r"atari/Pong needs ale-py: pip install 'mqttrl\[atari\]'"):
        make_env("atari/Pong")


def test_atari_without_opencv_says_what_to_install(ale, monkeypatch):
    """gymnasium's AtariPreprocessing imports cv2 (it resizes with it) even at 84x84: part of the atari extra."""
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(MissingDependency, match=r"atari/Pong needs opencv.*pip install 'mqttrl\[atari\]'"):
        make_env("atari/Pong")


# ---- minatar/ --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minatar():
    return pytest.importorskip("minatar", reason="MinAtar is not installed: pip install 'mqttrl[minatar]'")


def test_minatar_breakout_observes_bool_channels(minatar):
    env = make_env("minatar/breakout")
    assert env.observation_space == gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
    assert env.action_space == gym.spaces.Discrete(3)  # the minimal action set
    obs, _ = env.reset(seed=0)
    assert obs.shape == (10, 10, 4) and obs.dtype == np.bool_
    obs, *_ = env.step(1)
    assert obs.shape == (10, 10, 4) and obs.dtype == np.bool_
    game = env.unwrapped.game
    assert game.sticky_action_prob == pytest.approx(0.1) and env.unwrapped.spec.kwargs["difficulty_ramping"] is True
    assert wrapper(env, gym.wrappers.TimeLimit)._max_episode_steps == 10_000


@pytest.mark.parametrize(
    "name,shape,actions",
    [
        ("Breakout-v1", (10, 10, 4), 3),
        ("MinAtar/Breakout-v1", (10, 10, 4), 3),
        ("Breakout-v0", (10, 10, 4), 6),  # v0: all six actions
        ("asterix", (10, 10, 4), 5),
        ("FREEWAY", (10, 10, 7), 3),
        ("seaquest", (10, 10, 10), 6),
        ("space_invaders", (10, 10, 6), 4),
        ("SpaceInvaders", (10, 10, 6), 4),
    ],
)
@pytest.mark.filterwarnings("ignore:.*is out of date")  # v0, on purpose
def test_minatar_names(minatar, name, shape, actions):
    env = make_env(f"minatar/{name}")
    assert env.observation_space.shape == shape and env.observation_space.dtype == np.bool_
    assert env.action_space == gym.spaces.Discrete(actions)


def test_minatar_kwargs_are_applied(minatar):
    asterix = make_env("minatar/asterix", {"sticky_action_prob": 0.0, "difficulty_ramping": False})
    game = asterix.unwrapped.game
    assert game.sticky_action_prob == 0.0 and game.env.ramping is False  # breakout and freeway do not ramp
    env = make_env("minatar/freeway", {"max_episode_steps": 7})
    env.reset(seed=0)
    ends = [env.step(0)[3] for _ in range(7)]  # freeway never ends by itself this early
    assert ends == [False] * 6 + [True]
    unlimited = make_env("minatar/breakout", {"max_episode_steps": 0})
    with pytest.raises(AssertionError, match="no TimeLimit"):
        wrapper(unlimited, gym.wrappers.TimeLimit)


@pytest.mark.parametrize("game", ["breakout", "asterix", "seaquest", "space_invaders", "freeway"])
def test_minatar_reset_seed_is_reproducible(minatar, game):
    """Two resets with one seed give the same first 50 steps under the same actions, whatever the
    env did before (MinAtar keeps the sticky-action memory across resets; the plugin clears it)."""
    env = make_env(f"minatar/{game}")
    rng = np.random.default_rng(1)
    actions = rng.integers(0, env.action_space.n, 50)
    first = rollout(env, 7, actions)
    rollout(env, 8, rng.integers(0, env.action_space.n, 300))  # play something else in between
    assert same(first, rollout(env, 7, actions))
    assert same(first, rollout(make_env(f"minatar/{game}"), 7, actions))  # and a fresh env agrees


@pytest.mark.parametrize(
    "name,error,needles",
    [
        ("brekout", gym.error.NameNotFound, ["minatar/brekout", "unknown MinAtar game", "minatar/breakout"]),
        ("pong", gym.error.NameNotFound, ["minatar/pong", "minatar/space_invaders"]),
        ("Breakout-v3", gym.error.VersionNotFound, ["minatar/Breakout-v3", "v0", "v1"]),
    ],
)
def test_minatar_unknown_names_say_what_exists(minatar, name, error, needles):
    with pytest.raises(error) as info:
        make_env(f"minatar/{name}")
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_minatar_without_minatar_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar", None)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(MissingDependency, match=r"minatar/breakout needs MinAtar: pip install 'mqttrl\[minatar\]'"):
        make_env("minatar/breakout")


def test_minatar_import_is_quiet_without_seaborn(minatar, tmp_path):
    """MinAtar logs a warning on the root logger when seaborn is missing (only rendering needs
    it); the plugin keeps it quiet, and leaves the root logger unconfigured."""
    code = (
        "import sys, logging; sys.modules['seaborn'] = None\n"
        "from mqttrl_plugins.minatar_envs import make_minatar\n"
        "env = make_minatar('breakout'); env.reset(seed=0); env.step(0)\n"
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "Cannot import" not in r.stderr and "seaborn" not in r.stderr, r.stderr


# ---- the tiny image envs of tests/pixel_env.py ------------------------------------------------

TINY = {
    pixel_env.PIXEL_DOT: (gym.spaces.Box(0, 255, (4, 16, 16), np.uint8), 3),
    pixel_env.BOOL_GRID: (gym.spaces.Box(0, 1, (8, 8, 2), np.bool_), 4),
}


@pytest.mark.parametrize("env_id", sorted(TINY))
def test_tiny_env_spaces(env_id):
    env = make_env(env_id)
    space, n = TINY[env_id]
    assert env.observation_space == space and env.action_space == gym.spaces.Discrete(n)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == space.dtype and obs.shape == space.shape and space.contains(obs)
    for a in range(n):
        obs, *_ = env.step(a)
        assert space.contains(obs)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", sorted(TINY))
def test_tiny_env_reset_seed_is_reproducible(env_id):
    env = make_env(env_id)
    actions = np.random.default_rng(0).integers(0, env.action_space.n, 200)
    first = rollout(env, 5, actions)
    assert same(first, rollout(env, 5, actions))
    assert same(first, rollout(make_env(env_id), 5, actions))
    assert not same(first, rollout(env, 6, actions))


@pytest.mark.parametrize("env_id", sorted(TINY))
def test_tiny_env_episodes_vary_end_both_ways_and_reward_can_be_learned(env_id):
    """Random play ends by termination and by truncation, at many lengths; the env's scripted
    expert (what a learner can find) earns well over the random return."""
    env = make_env(env_id)
    rng = np.random.default_rng(0)
    result = {}
    for policy in ("random", "expert"):
        returns, lengths, ends = [], [], {"terminated": 0, "truncated": 0}
        for ep in range(200):
            env.reset(seed=ep)
            ret = length = 0
            while True:
                a = rng.integers(env.action_space.n) if policy == "random" else env.unwrapped.expert()
                _, r, term, trunc, _ = env.step(a)
                ret, length = ret + r, length + 1
                if term or trunc:
                    ends["terminated" if term else "truncated"] += 1
                    break
            returns.append(ret)
            lengths.append(length)
        result[policy] = (np.mean(returns), ends, len(set(lengths)))
    random_mean, random_ends, random_lengths = result["random"]
    expert_mean, expert_ends, _ = result["expert"]
    assert random_ends["terminated"] >= 50 and random_ends["truncated"] >= 10, random_ends
    assert random_lengths >= 10
    assert expert_mean >= random_mean + 1.2, result
    assert expert_ends["truncated"] >= 190, expert_ends


def test_pixel_dot_frames_move_every_step():
    """Each observation shifts the stack by one frame, and the new frame differs from the last:
    consecutive observations share 3 of their 4 frames (what frame dedup saves on the wire)."""
    env = make_env(pixel_env.PIXEL_DOT)
    prev, _ = env.reset(seed=0)
    assert all(np.array_equal(prev[0], f) for f in prev)  # the stack starts as copies of the first frame
    for t in range(25):
        obs, _, term, trunc, _ = env.step(t % 3)
        assert np.array_equal(obs[:3], prev[1:])
        assert not np.array_equal(obs[3], obs[2])
        if term or trunc:
            break
        prev = obs


def test_tiny_envs_are_made_by_id_in_a_subprocess(tmp_path):
    """What a worker or learner the tests start does: make ``pixel_env:PixelDot-v0`` through mqttrl,
    from another directory, with only ``pixel_env.PYTHONPATH`` to find the module."""
    code = (
        "from mqttrl.envs.make import make_env\n"
        "for env_id in ('pixel_env:PixelDot-v0', 'pixel_env:BoolGrid-v0'):\n"
        "    env = make_env(env_id)\n"
        "    obs, _ = env.reset(seed=0)\n"
        "    print(env_id, obs.shape, obs.dtype)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=node_env(PYTHONPATH=pixel_env.PYTHONPATH),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == [
        "pixel_env:PixelDot-v0 (4, 16, 16) uint8",
        "pixel_env:BoolGrid-v0 (8, 8, 2) bool",
    ]
