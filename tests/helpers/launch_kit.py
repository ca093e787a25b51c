"""Launch settings for the tick game (tests/helpers/tick_game.py) that tests of the game launcher share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mqttrl.envs.launch import LaunchSettings

TESTS = Path(__file__).parent.parent  # tests/: where helpers.tick_game imports from


def tick_settings(state: Path, *extra: str, **kwargs) -> LaunchSettings:
    pythonpath = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH", "")]))
    command = (sys.executable, "-m", "helpers.tick_game", str(state), *extra)
    return LaunchSettings(command, env={"PYTHONPATH": pythonpath}, **kwargs)
