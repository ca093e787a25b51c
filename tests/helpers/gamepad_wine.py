"""Run by a Windows CPython (under Wine, tests/test_gamepad.py): the screen kit's vgamepad backend
with the real vgamepad package, first absent, then present (``argv[2]``: an unpacked vgamepad sdist)
on a system without the ViGEmBus driver. Prints one JSON line: the error lines the user would read."""

from __future__ import annotations

import json
import sys

import mqttrl_plugins

mqttrl_plugins.__path__.insert(0, sys.argv[1])  # the checkout's plugins before the installed wheel's

from mqttrl_plugins.screen.gamepad import Gamepad, GamepadError, Layout, VGamepadPad  # noqa: E402


def attempt() -> str:
    try:
        pad = Gamepad(VGamepadPad(), Layout(["lx", "rt", "lt"]))
    except GamepadError as e:
        return str(e)
    pad.act([1.0, 1.0, 0.0])
    pad.close()
    return "opened"


seen = {"platform": sys.platform, "absent": attempt()}
sys.path.insert(0, sys.argv[2])
seen["no_bus"] = attempt()
seen["no_bus_again"] = attempt()  # a reconnect: vgamepad's failed import is retried
print(json.dumps(seen))
