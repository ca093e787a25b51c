"""`mqttrl record --keys` with a gamepad: pygame's joystick events (JOYBUTTONDOWN/UP, JOYAXISMOTION,
JOYHATMOTION) posted to its event queue under SDL's dummy video driver become the recorded actions
through the TOML map (buttons, stick directions past the deadzone, the d-pad, and for a Box action
space stick positions as action dimensions). No pad is attached: pygame has no virtual joystick to
attach, so SDL reading a real device is not tested."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pygame = pytest.importorskip("pygame")

from mqttrl.demos.keyboard import KeyboardPlayer, KeyMap  # noqa: E402
from mqttrl.demos.sources import SourceError  # noqa: E402

PAD = """
noop = 0
[actions]
"button:0" = 1
"axis:0:pos" = 1
"hat:0:right" = 1
left = 0
[gamepad]
deadzone = 0.5
"""


@pytest.fixture(autouse=True)
def no_screen(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def _post(kind: int, **fields) -> None:
    pygame.event.post(pygame.event.Event(kind, joy=0, instance_id=0, **fields))


def _play(tmp_path, keys: str, env_id: str, script, steps: int):
    (tmp_path / "pad.toml").write_text(keys)
    env = gym.make(env_id, render_mode="rgb_array")
    player = KeyboardPlayer(env, KeyMap.from_toml(tmp_path / "pad.toml", env.action_space), 500.0, script)
    (ep,) = list(player.play(1, "person:pad", seed=1, max_steps=steps))
    return ep


def test_buttons_stick_directions_and_the_dpad_are_the_recorded_actions(tmp_path):
    def script(frame):
        events = {
            1: [(pygame.JOYBUTTONDOWN, {"button": 0})],
            3: [(pygame.JOYBUTTONUP, {"button": 0})],
            4: [(pygame.JOYAXISMOTION, {"axis": 0, "value": 0.3})],  # inside the deadzone: nothing
            5: [(pygame.JOYAXISMOTION, {"axis": 0, "value": 0.9})],
            7: [(pygame.JOYAXISMOTION, {"axis": 0, "value": -0.9})],  # the other way: not mapped
            8: [(pygame.JOYAXISMOTION, {"axis": 0, "value": 0.0}), (pygame.JOYHATMOTION, {"hat": 0, "value": (1, 0)})],
            10: [(pygame.JOYHATMOTION, {"hat": 0, "value": (0, 0)}), (pygame.JOYBUTTONDOWN, {"button": 3})],
        }
        for kind, fields in events.get(frame, []):
            _post(kind, **fields)

    ep = _play(tmp_path, PAD, "CartPole-v1", script, 12)
    np.testing.assert_array_equal(ep.actions, [0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0])
    assert ep.played_by == "person:pad"


def test_sticks_set_box_action_dimensions(tmp_path):
    keys = """
noop = [0.0]
[actions]
"button:1" = [1.0]
[gamepad]
deadzone = 0.2
axes = { "0" = { axis = 1, scale = -3.0 } }
"""

    def script(frame):
        values = {1: -0.5, 3: -0.1, 4: 0.4, 5: -0.9, 6: 0.0}
        if frame in values:
            _post(pygame.JOYAXISMOTION, axis=1, value=values[frame])

    ep = _play(tmp_path, keys, "Pendulum-v1", script, 7)
    # -0.5 * -3 = 1.5; -0.1 is inside the deadzone; 0.4 * -3 = -1.2; -0.9 * -3 = 2.7 clipped to the box's 2
    np.testing.assert_allclose(ep.actions[:, 0], [0.0, 1.5, 1.5, 0.0, -1.2, 2.0, 0.0], atol=1e-6)


def test_a_gamepad_map_is_checked(tmp_path):
    cases = [
        ("noop = 0\n[actions]\n'button:x' = 1\n", gym.spaces.Discrete(2), "'button:x' is not a gamepad input"),
        ("noop = 0\n[actions]\n'axis:0:up' = 1\n", gym.spaces.Discrete(2), "is not a gamepad input"),
        ("noop = 0\n[actions]\nleft = 1\n[gamepad]\ndeadzone = 1.5\n", gym.spaces.Discrete(2), "deadzone = 1.5"),
        (
            "noop = 0\n[actions]\nleft = 1\n[gamepad]\naxes = { '0' = { axis = 1 } }\n",
            gym.spaces.Discrete(2),
            "only for a Box action space",
        ),
        (
            "noop = [0.0]\n[actions]\nleft = [1.0]\n[gamepad]\naxes = { '3' = { axis = 1 } }\n",
            gym.spaces.Box(-2, 2, (1,), np.float32),
            "not an action dimension",
        ),
        ("noop = 0\n[actions]\nleft = 1\n[gamepad]\nrumble = 1\n", gym.spaces.Discrete(2), "unknown key"),
    ]
    for keys, space, words in cases:
        (tmp_path / "k.toml").write_text(keys)
        with pytest.raises(SourceError, match=words.replace("[", r"\[")):
            KeyMap.from_toml(tmp_path / "k.toml", space)


def test_a_button_and_a_key_combine(tmp_path):
    (tmp_path / "k.toml").write_text("noop = 0\n[actions]\nup = 2\n'up+button:0' = 3\n")
    km = KeyMap.from_toml(tmp_path / "k.toml", gym.spaces.Discrete(4))
    assert km.action({pygame.K_UP}) == 2 and km.action({pygame.K_UP, ("button", 0)}) == 3
    assert km.action({("button", 0)}) == 0  # a combination needs every part held


def test_the_shipped_lunarlander_pad_map_loads():
    from pathlib import Path

    path = Path(__file__).parent.parent / "configs" / "keys" / "lunarlander_pad.toml"
    km = KeyMap.from_toml(path, gym.spaces.Discrete(4))
    assert km.action({("axis", 1, "neg")}) == 2 and km.action({("hat", 0, "left")}) == 1 and km.deadzone == 0.4
