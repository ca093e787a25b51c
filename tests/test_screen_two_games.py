"""Two copies of one game, with one title, on one display, each launched by its own launcher: a
game PC running two workers of a game whose title cannot be changed (freegames' Pacman is always
"Python Turtle Graphics"). Each env plays its own game's window, found by the process that made
it (X-Resource), and its keys reach that game only: the focus is taken again before each flush of
keys. Real games (their own processes) on an Xvfb display."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers.pacman_play import board

from benchmarks.harness.xvfb import Xvfb
from mqttrl.envs.launch import GameProcess, LaunchSettings, launched_game_pid
from mqttrl_plugins.screen import ScreenEnvError, make_screen_env
from mqttrl_plugins.screen.window import X11Windows, of_process

TITLE = "Python Turtle Graphics"
#: no key, Left, Right
KEYS = [[], ["Left"], ["Right"]]


def test_a_window_belongs_to_its_process_and_to_its_process_group():
    """A launcher script's game is a child in the launched process's group: its windows are the
    launched game's; this test's process is not in that group."""
    sh = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True)
    try:
        child = int(sh.stdout.readline())
        assert of_process(sh.pid, sh.pid) and of_process(child, sh.pid)
        assert not of_process(os.getpid(), sh.pid) and not of_process(None, sh.pid)
    finally:
        os.killpg(sh.pid, 9)
        sh.wait()
    assert launched_game_pid() is None  # outside a launcher's make()


def pacman(display: str) -> GameProcess:
    return GameProcess(LaunchSettings((sys.executable, "-m", "freegames.pacman"), env={"DISPLAY": display}, ready_s=60))


def screen_env(display: str):
    # frozen_s = 0: a Pacman blocked by a wall may stand still while a ghost is out of the region
    return make_screen_env(
        window=TITLE,
        window_exact=True,
        display=display,
        keys=KEYS,
        reward="mqttrl_plugins.screen.demo_game:CatchScore",
        key_mode="tap",
        step_s=0.1,
        frozen_s=0,
    )


def column(env) -> int:
    """Pacman's column in the maze (its tile, read off the env's frame)."""
    return board(env.grab())[3][1]


@pytest.mark.slow
def test_two_copies_of_a_game_on_one_display_are_each_played_by_their_own_env(tmp_path):
    pytest.importorskip("freegames")
    if not shutil.which("xdotool"):
        pytest.fail("xdotool is not on PATH: apt-get install xdotool (scripts/test.sh does this)")
    x = Xvfb(tmp_path, "1280x960")
    games, envs = [pacman(x.display), pacman(x.display)], []
    try:
        envs = [g.make_env(lambda: screen_env(x.display)) for g in games]
        ws = X11Windows(x.display)
        try:
            assert [ws.pid(e.window.handle) for e in envs] == [g.proc.pid for g in games]
        finally:
            ws.close()
        # both games put their window at one place: the person (here xdotool) moves one aside,
        # and its env follows it
        move = ["xdotool", "windowmove", "--sync", str(envs[1].window.handle), "0", "470"]
        subprocess.run(move, env=dict(os.environ, DISPLAY=x.display), check=True, timeout=10)
        # not launched, an env cannot tell the two apart: one line that says what would
        with pytest.raises(ScreenEnvError, match="2 windows match 'Python Turtle Graphics'.*launch each copy"):
            screen_env(x.display)
        for e in envs:
            e.reset()
        start = [column(e) for e in envs]
        assert envs[1].region.top == 470 and envs[0].region.top != 470
        for _ in range(10):  # the envs' steps interleave: B turns left, A gets no key and runs on right
            envs[0].step(0)
            envs[1].step(1)
        mid = [column(e) for e in envs]
        assert mid[1] <= start[1] - 2 and mid[0] >= start[0], (start, mid)
        for _ in range(10):  # and now A turns left, B gets no key
            envs[0].step(1)
            envs[1].step(0)
        end = [column(e) for e in envs]
        assert end[0] <= mid[0] - 2, (start, mid, end)
    finally:
        for e in envs:
            e.close()
        for g in games:
            g.close()
        x.stop()
