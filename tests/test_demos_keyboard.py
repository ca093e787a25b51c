"""`mqttrl record --keys`: a person at the keyboard, driven by pygame key events posted under SDL's
dummy video driver (no screen): held keys become the recorded actions, at the set frame rate."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

pygame = pytest.importorskip("pygame")

from mqttrl.demos.keyboard import KeyboardPlayer, KeyMap  # noqa: E402
from mqttrl.demos.sources import SourceError  # noqa: E402

KEYS = """
noop = 0
[actions]
left = 0
right = 1
"""


@pytest.fixture(autouse=True)
def no_screen(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def _post(key: int, down: bool) -> None:
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN if down else pygame.KEYUP, key=key))


def _player(tmp_path, script, fps=500.0, keys=KEYS, env_id="CartPole-v1"):
    (tmp_path / "keys.toml").write_text(keys)
    env = gym.make(env_id, render_mode="rgb_array")
    keymap = KeyMap.from_toml(tmp_path / "keys.toml", env.action_space)
    return KeyboardPlayer(env, keymap, fps=fps, before_frame=script)


def test_held_keys_are_the_recorded_actions(tmp_path):
    def script(frame):
        if frame == 2:
            _post(pygame.K_RIGHT, True)
        elif frame == 6:
            _post(pygame.K_RIGHT, False)
        elif frame == 8:
            _post(pygame.K_a, True)  # not mapped: still the noop

    player = _player(tmp_path, script, fps=100.0)
    t0 = time.monotonic()
    (ep,) = list(player.play(1, "person:test", seed=3, max_steps=12))
    elapsed = time.monotonic() - t0
    np.testing.assert_array_equal(ep.actions, [0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    assert ep.steps == 12 and ep.truncated and ep.played_by == "person:test" and ep.seed == 3
    assert elapsed >= 11 / 100.0  # one step per frame at the set rate
    # the observations are the env's under those actions
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    for t, a in enumerate(ep.actions):
        np.testing.assert_allclose(ep.obs[t], obs, rtol=1e-6)
        obs, *_ = env.step(int(a))


def test_escape_ends_the_recording_keeping_finished_episodes(tmp_path):
    def script(frame):
        if frame == 7:  # in the second episode (each is cut at 5 steps)
            _post(pygame.K_ESCAPE, True)

    eps = list(_player(tmp_path, script).play(3, "person", max_steps=5))
    assert len(eps) == 1 and eps[0].steps == 5


def test_a_key_map_is_checked_against_the_action_space(tmp_path):
    env = gym.make("CartPole-v1")
    for keys, words in [
        ("noop = 0\n[actions]\nleft = 5\n", "left = 5 is not an action"),
        ("noop = 0\n[actions]\nnokey = 1\n", "'nokey' is not a pygame key name"),
        ("[actions]\nleft = 1\n", "needs noop"),
        ("noop = 0\n", "needs an [actions] table"),
    ]:
        (tmp_path / "k.toml").write_text(keys)
        with pytest.raises(SourceError, match=words.replace("[", r"\[")):
            KeyMap.from_toml(tmp_path / "k.toml", env.action_space)


def test_key_combinations_choose_their_own_action(tmp_path):
    keys = "noop = 0\n[actions]\nup = 2\nleft = 1\n'up+left' = 3\n"
    (tmp_path / "k.toml").write_text(keys)
    km = KeyMap.from_toml(tmp_path / "k.toml", gym.spaces.Discrete(4))
    assert km.action({pygame.K_UP}) == 2
    assert km.action({pygame.K_UP, pygame.K_LEFT}) == 3
    assert km.action({pygame.K_UP, pygame.K_LEFT, pygame.K_x}) == 3  # unmapped keys are ignored
    assert km.action(set()) == 0


def test_record_with_keys_writes_a_dataset(tmp_path, capsys):
    """The command's --keys path end to end (nothing pressed: every action is the noop)."""
    from mqttrl.cli import main
    from mqttrl.demos import read_dataset

    (tmp_path / "keys.toml").write_text(KEYS.replace("noop = 0", "noop = 1"))
    out = tmp_path / "demos"
    main(["record", str(out), "--env", "CartPole-v1", "--keys", str(tmp_path / "keys.toml"), "--episodes", "1", "--max-steps", "6", "--fps", "500", "--played-by", "me"])  # fmt: skip
    (ep,) = read_dataset(out).episodes
    assert ep.played_by == "me" and list(ep.actions) == [1] * 6
    assert read_dataset(out).env_kwargs == {}  # the window is not part of the game
