"""A launched game sped up with libfaketime, for a game that has no speed setting of its own.

``[env] game_speed = N`` with ``[env] launch`` on Linux starts the game with libfaketime preloaded
(``LD_PRELOAD``) and ``FAKETIME="+0 xN"``: the game's clocks (``clock_gettime``, ``gettimeofday``)
run N times as fast and its sleeps (``nanosleep``, ``select``/``poll`` timeouts) last 1/N as long,
so a game paced by them (pygame's ``Clock.tick``, Tk's ``after``) plays N times as fast. The
worker's control period is then given in game time: ``1 / (control_hz * N)`` wall seconds. The
env's ``set_speed`` is not called then (the game would be sped up twice). Windows has no such
preload: one warning line, the game at its own speed. docs/real-time.md "Game speed".
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from mqttrl.config.settings import ConfigError

log = logging.getLogger("mqttrl.envs")

#: where Debian, Ubuntu, Fedora and Arch put it (multiarch dirs first)
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib/i386-linux-gnu/faketime",
    "/usr/lib64/faketime",
    "/usr/lib/faketime",
    "/usr/local/lib/faketime",
    "/usr/local/lib",
)
LIBRARY = "libfaketime.so.1"


def find_library(dirs: tuple[str, ...] = LIBRARY_DIRS) -> str | None:
    """The path of libfaketime.so.1 (``MQTTRL_LIBFAKETIME`` first), or None when it is not installed."""
    given = os.environ.get("MQTTRL_LIBFAKETIME")
    if given:
        return given if Path(given).is_file() else None
    for d in dirs:
        path = Path(d) / LIBRARY
        if path.is_file():
            return str(path)
    return None


def faked_speed(env_config: Any, platform: str = sys.platform, say: bool = True) -> float:
    """The rate libfaketime runs the launched game at: ``game_speed`` for a launched game on Linux
    (not 0 or 1), else 0 (no libfaketime; Windows: one warning line)."""
    speed = float(env_config.game_speed)
    if not env_config.launch or speed in (0.0, 1.0):
        return 0.0
    if not platform.startswith("linux"):
        if not say:
            return 0.0
        log.warning(
            "env.game_speed = %g: a launched game is sped up with libfaketime on Linux only; on %s the game "
            "runs at its own speed unless its env has set_speed (docs/windows.md)",
            speed,
            platform,
        )
        return 0.0
    return speed


def faketime_env(speed: float, environ: dict | None = None, library: str | None = None) -> dict:
    """The environment variables that run a game at ``speed`` under libfaketime (a ConfigError naming
    the package when it is not installed)."""
    library = library or find_library()
    if library is None:
        raise ConfigError(
            f"env.game_speed = {speed:g} runs the launched game under libfaketime, which is not installed: "
            "apt-get install libfaketime (Debian/Ubuntu; dnf install libfaketime on Fedora), or set "
            "MQTTRL_LIBFAKETIME to its libfaketime.so.1"
        )
    preload = (environ if environ is not None else os.environ).get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": f"{library}:{preload}" if preload else library,
        # "." whatever the locale: libfaketime reads the rate with the C locale's strtod
        "FAKETIME": f"+0 x{speed:g}",
    }


def wall_hz(env_config: Any, platform: str = sys.platform) -> float:
    """``control_hz`` in wall periods: given in game time, times libfaketime's rate where it applies."""
    hz = float(env_config.control_hz)
    speed = faked_speed(env_config, platform, say=False) if hz > 0 else 0.0
    return hz * speed if speed else hz
