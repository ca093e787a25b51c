"""``[env] game_speed`` for a game the worker launches and that has no speed setting: libfaketime
(mqttrl.envs.faketime). The control period follows the speed (control_hz is game time), a missing
library or Windows is one line, and a launched Catch really plays N times as fast."""

from __future__ import annotations

import logging
import shutil
import sys
import time

import pytest

from benchmarks.harness.game_ticks import ticks_per_s
from mqttrl.config import EnvConfig
from mqttrl.config.settings import ConfigError
from mqttrl.envs.faketime import faked_speed, faketime_env, find_library
from mqttrl.envs.launch import GameProcess, LaunchSettings
from mqttrl.envs.realtime import real_time_settings, with_game_speed
from mqttrl.envs.realtime_clock import ControlClock


def launched(**kw) -> EnvConfig:
    return EnvConfig(id="screen", num_envs=1, launch=["python", "-m", "mygame"], **kw)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libfaketime is Linux's")
def test_control_period_is_game_time_under_libfaketime():
    clock = ControlClock(**real_time_settings(launched(control_hz=10, game_speed=4)))
    assert clock.period == pytest.approx(0.025)  # 100 ms of game time at 4x: 25 ms of wall time
    # a game started by hand keeps its set_speed path and wall-clock periods
    assert ControlClock(**real_time_settings(EnvConfig(control_hz=10, game_speed=4))).period == pytest.approx(0.1)


def test_set_speed_is_not_called_on_a_game_sped_up_by_libfaketime():
    class Game:
        speeds: list = []  # noqa: RUF012

        unwrapped = None

        def set_speed(self, factor):
            self.speeds.append(factor)

    game = Game()
    game.unwrapped = game
    with_game_speed(game, launched(game_speed=4))
    assert game.speeds == ([] if sys.platform.startswith("linux") else [4])
    with_game_speed(game, EnvConfig(game_speed=4))
    assert game.speeds[-1] == 4


def test_missing_libfaketime_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setenv("MQTTRL_LIBFAKETIME", "/nowhere/libfaketime.so.1")
    assert find_library() is None
    with pytest.raises(ConfigError, match="apt-get install libfaketime") as e:
        faketime_env(4.0)
    assert "\n" not in str(e.value)


def test_windows_launch_is_one_warning_and_no_speed_up(caplog):
    with caplog.at_level(logging.WARNING, logger="mqttrl.envs"):
        assert faked_speed(launched(game_speed=4), platform="win32") == 0.0
    assert len(caplog.records) == 1 and "Linux only" in caplog.records[0].getMessage()
    assert faked_speed(launched(game_speed=4), platform="linux") == 4.0
    assert faked_speed(launched(game_speed=1), platform="linux") == 0.0


def test_faketime_env_prepends_to_an_existing_preload():
    env = faketime_env(4, {"LD_PRELOAD": "/x/other.so"}, library="/l/libfaketime.so.1")
    assert env == {"LD_PRELOAD": "/l/libfaketime.so.1:/x/other.so", "FAKETIME": "+0 x4"}


@pytest.mark.skipif(find_library() is None or not shutil.which("Xvfb"), reason="needs libfaketime and Xvfb")
def test_launched_catch_plays_four_times_as_fast(tmp_path):
    """Catch's own frames (pygame.display.flip) per wall second, launched by the worker's launcher
    at game_speed 1 and 4: ~4x (tolerance for a busy 2-core machine: 2.8x-5x)."""
    from benchmarks.harness.xvfb import Xvfb

    xvfb = Xvfb(tmp_path, "320x240")
    rates = {}
    try:
        for speed in (0.0, 4.0):
            ticks = tmp_path / f"ticks{speed:g}"
            cfg = EnvConfig(
                num_envs=1,
                game_speed=speed,
                launch=[sys.executable, "-m", "benchmarks.harness.game_ticks", str(ticks), "pygame"]
                + ["mqttrl_plugins.screen.demo_game", "--fps", "20", "--size", "64"],
                launch_env={"DISPLAY": xvfb.display, "SDL_VIDEODRIVER": "x11", "SDL_AUDIODRIVER": "dummy"},
            )
            game = GameProcess(LaunchSettings.of(cfg))
            game.start()
            try:
                deadline = time.monotonic() + 30
                while (ticks.exists() and ticks.read_text().strip() not in ("", "0")) is False:
                    assert game.running() and time.monotonic() < deadline, "Catch did not start"
                    time.sleep(0.1)
                rates[speed] = ticks_per_s(ticks, 2.0, warmup_s=0.5)
            finally:
                game.close()
    finally:
        xvfb.stop()
    assert rates[0.0] == pytest.approx(20, rel=0.3)
    assert 2.8 <= rates[4.0] / rates[0.0] <= 5.0, rates
