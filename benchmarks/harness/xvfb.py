"""A real X display for the screen kit's tests and benchmarks: Xvfb on a free display number, and the
Catch game (plugins/screen/demo_game.py) in its own process, in a window on it. What goes wrong is a
:class:`DisplayError` (a failed test, a stopped benchmark)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .procs import stop_server


class DisplayError(RuntimeError):
    """Xvfb or the game did not come up."""


class Xvfb:
    """An Xvfb server; Xvfb picks a free display number itself (``-displayfd``)."""

    def __init__(self, workdir: Path, size: str = "640x480"):
        if not shutil.which("Xvfb"):
            raise DisplayError("Xvfb is not on PATH: apt-get install xvfb (scripts/test.sh does this)")
        self.log = open(workdir / "xvfb.log", "ab")
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            # -noreset: the server does not reset when its last client goes (a look for a window that
            # connects and disconnects would otherwise reset it under a game that is starting)
            ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size}x24", "-nolisten", "tcp", "-ac", "-noreset"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
        )
        os.close(write)
        with os.fdopen(read) as f:
            number = f.readline().strip()
        if not number:
            self.stop()
            raise DisplayError(f"Xvfb gave no display number; see {workdir / 'xvfb.log'}")
        self.display = f":{number}"

    def stop(self) -> None:
        stop_server(self.proc, self.log, timeout=5.0)


class Game:
    """Catch (``python -m mqttrl_plugins.screen.demo_game``) on ``display``, until :meth:`stop`."""

    def __init__(self, display: str, workdir: Path, title: str, *args: str):
        self.title = title
        self.log = open(workdir / f"game-{time.monotonic_ns()}.log", "ab")
        # a real X window: not pygame's dummy driver, and no Wayland probe first (it fails without
        # XDG_RUNTIME_DIR, and is nothing these tests exercise)
        env = dict(
            os.environ, DISPLAY=display, SDL_VIDEODRIVER="x11", SDL_AUDIODRIVER="dummy", PYGAME_HIDE_SUPPORT_PROMPT="1"
        )
        argv = [sys.executable, "-m", "mqttrl_plugins.screen.demo_game", "--title", title, *args]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.display = display

    def wait_window(self, timeout: float = 60.0):
        """The game's window once it is mapped (fails with the game's log when it does not come).

        Half a second here; the minute is for a CI machine whose two cores are busy with what the
        previous test left shutting down (one CI run waited 15 s in vain)."""
        from mqttrl_plugins.screen.window import ScreenEnvError, find_window

        deadline = time.monotonic() + timeout
        while True:
            try:
                return find_window(self.title, self.display, exact=True)
            except ScreenEnvError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.flush()
                    state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
                    log = Path(self.log.name).read_text()[-2000:]
                    raise DisplayError(
                        f"the game's window did not appear in {timeout:.0f} s (game {state}); its log: {log}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        stop_server(self.proc, self.log, timeout=5.0)
