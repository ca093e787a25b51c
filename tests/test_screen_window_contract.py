"""The screen kit's window seam (plugins/screen/window.py, ``WindowSystem``): one contract, two
implementations. tests/helpers/window_contract.py makes two windows with known client areas and
colours and puts the kit's lookup by title, mss capture and window watch through them; it runs on
Linux (python-xlib on Xvfb) and on Windows (ctypes' user32, a Windows CPython under Wine drawing on
Xvfb), and both must answer the same. What Wine cannot show (a real desktop, DPI scaling other than
100 %, fullscreen exclusive games) is said in docs/windows.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers.paths import REPO, TESTS
from helpers.wine import WindowsPython, winpath

from benchmarks.harness.xvfb import Xvfb
from mqttrl_plugins.screen.window import (
    DisplayClosed,
    Finder,
    Region,
    ScreenEnvError,
    WindowMissing,
    find_on,
)

SCRIPT = TESTS / "helpers" / "window_contract.py"

#: what both platforms must answer (tests/helpers/window_contract.py)
EXPECTED = {
    "part": ["mqttrl contract Alpha", [40, 50, 120, 80]],  # a part of the title, any case: the client area
    "exact": [300, 200, 128, 64],
    "exact_is_case_sensitive": "missing: screen env: no window titled 'mqttrl contract beta'",
    "ambiguous": "error: screen env: 2 windows match 'mqttrl contract'",
    "missing": "missing: screen env: no window titled 'no such window'",
    "waited": "missing: screen env: no window titled 'no such window' after 0.3 s",
    "listed": ["mqttrl contract Alpha", "mqttrl contract Beta"],
    # mss grabs the window's colour inside the region, and another colour in the 2 pixels around it
    "capture": [[[200, 30, 40]], False],
    "pid_is_ours": True,
    "owned": ["mqttrl contract Alpha", "missing: screen env: no window titled 'CONTRACT alpha' of the launched game"],
    "shown": [None, None],
    "hidden": [
        "is no longer shown (minimised or hidden)",
        "missing: screen env: no window titled 'mqttrl contract Beta'",
    ],
    # closed: the watch says so, its region is None (the lookup's "missing"), the other window stays
    "closed": ["closed: did the game exit or crash?", None, None],
}


def _answers(out: str) -> dict:
    got = json.loads(out.strip().splitlines()[-1])
    print({k: got.pop(k, None) for k in ("platform", "system", "dpi", "seconds")})
    return got


# ---- the common part, with a stand-in platform -------------------------------------------------
class FakeWindows:
    """A :class:`WindowSystem` whose windows are a dict; ``gone``: handles that close when asked for."""

    def __init__(self, windows: dict[int, str], gone: tuple[int, ...] = ()):
        self.windows, self.gone, self.closed = windows, gone, False

    def titled(self):
        return list(self.windows.items())

    def client_region(self, handle):
        return None if handle in self.gone else Region(handle, 0, 10, 10)

    def lost(self, handle):
        return None

    def pid(self, handle):
        return 100 + handle

    def close(self):
        self.closed = True


def test_the_lookup_by_title_is_common_to_every_platform():
    ws = FakeWindows({1: "Game - Level 1", 2: "Notes", 3: "game launcher"})
    assert find_on(ws, "level").handle == 1 and find_on(ws, "Notes", exact=True).region == Region(2, 0, 10, 10)
    with pytest.raises(ScreenEnvError, match="2 windows match 'game'"):
        find_on(ws, "game")
    with pytest.raises(WindowMissing, match="no window titled 'notes'.*'Game - Level 1', 'Notes'"):
        find_on(ws, "notes", exact=True)
    # found, then closed before its client area was read: missing (what a wait cures), not a crash
    with pytest.raises(WindowMissing, match="no window titled 'Notes'"):
        find_on(FakeWindows({2: "Notes"}, gone=(2,)), "Notes")


def test_a_launched_games_lookup_takes_only_its_own_processes_window():
    """Two copies of a game with one title on one display (Tk's Pacman is always "Python Turtle
    Graphics"): with the launched game's pid, the lookup is its window, not the other's."""
    ws = FakeWindows({1: "Python Turtle Graphics", 2: "Python Turtle Graphics", 3: "Notes"})
    with pytest.raises(ScreenEnvError, match="2 windows match .* have the worker launch each copy"):
        find_on(ws, "Python Turtle Graphics", exact=True)
    assert find_on(ws, "Python Turtle Graphics", exact=True, owner=102).handle == 2
    assert find_on(ws, "Python Turtle Graphics", exact=True, owner=101).handle == 1
    with pytest.raises(WindowMissing, match=r"titled 'Python Turtle Graphics' of the launched game \(pid 7\) \("):
        find_on(ws, "Python Turtle Graphics", exact=True, owner=7)


def test_a_finder_drops_a_connection_whose_display_closed(monkeypatch):
    class Closing(FakeWindows):
        def titled(self):
            raise DisplayClosed("screen env: X display ':9' closed: gone")

    made: list[FakeWindows] = []
    monkeypatch.setattr("mqttrl_plugins.screen.window.window_system", lambda d: made.append(Closing({})) or made[-1])
    finder = Finder()
    with pytest.raises(DisplayClosed):
        finder.find("x", ":9")
    assert finder.connections == {} and made[0].closed  # the next look opens a new one


# ---- the same checks on both platforms -----------------------------------------------------------
@pytest.fixture
def display(tmp_path):
    x = Xvfb(tmp_path)
    yield x.display
    x.stop()


def test_the_contract_on_linux_x11(display):
    env = dict(os.environ, DISPLAY=display, PYTHONPATH=str(TESTS))
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _answers(r.stdout) == EXPECTED


@pytest.fixture(scope="module")
def winpy(tmp_path_factory) -> WindowsPython:
    wpy, why = WindowsPython.build(REPO / ".wine-py", tmp_path_factory.mktemp("wine"))
    if wpy is None:
        pytest.skip(f"no Windows CPython under Wine here: {why}")
    yield wpy
    wpy.shutdown()


@pytest.mark.slow
def test_the_contract_on_windows_under_wine(winpy, display):
    """``EnumWindows``/``GetWindowTextW``, ``GetClientRect`` + ``ClientToScreen`` and mss's GDI capture
    in a Windows process, on windows with a title bar and frame (Wine draws them itself here): the
    client area exactly, as on X11; the process is per-monitor DPI aware."""
    winpy.shutdown()  # a wineserver the display-less tests started has a desktop without windows
    started = time.monotonic()
    code, out = winpy.run([winpath(SCRIPT)], display=display, timeout=90)
    print(f"the contract under Wine: {time.monotonic() - started:.1f}s")
    assert code == 0, out[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["platform"] == "win32" and got["system"] == "Win32Windows" and got["dpi"] == "per-monitor", got
    assert _answers(out) == EXPECTED
