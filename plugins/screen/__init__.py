"""Built-in env plugin: ``id = "screen"``, a game with no API seen through its window and played
with key presses (``pip install 'mqttrl[screen]'``; docs/real-time.md).

* :mod:`.window`: find a window by its title (X11 via python-xlib; Windows via ctypes, :mod:`.win32window`)
* :mod:`.capture`: grab its pixels (mss), shrink them (OpenCV)
* :mod:`.keys`: hold an action's keys for the step (XTest on Linux; SendInput on Windows, :mod:`.sendinput`,
  with the names mapped by :mod:`.keymap`; pynput on macOS, untested here)
* :mod:`.gamepad`: or a virtual Xbox 360 pad for a Box action (vgamepad/ViGEm on Windows, uinput
  through python-evdev on Linux, a recording fake), for games steered with axes
* :mod:`.options`: the ``[env.kwargs]``, checked, and the user's ``module:function`` reward
* :mod:`.env`: the gymnasium env built from them
* :mod:`.demo_game`: Catch, a small pygame game to try it on (and the tests' game)
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym

from mqttrl import hookimpl

from .env import ScreenEnv, make_screen_env
from .window import ScreenEnvError

__all__ = ["ScreenEnv", "ScreenEnvError", "make_screen_env"]


@hookimpl
def mqttrl_register_envs(register: Callable[[str, Callable[..., gym.Env], str], None]) -> None:
    register("screen", make_screen_env, "a game's window (mss) and keys (XTest/SendInput); needs mqttrl[screen]")
