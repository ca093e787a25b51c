"""The screen kit's vocabulary, below everything else in it: its error, a region and a window on
the screen, and the :class:`WindowSystem` seam each platform answers (:mod:`.window`'s X11,
:mod:`.win32window`'s Win32); the platforms' modules import these, never each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import gymnasium as gym

from mqttrl.plugin import ConfigError


class ScreenEnvError(ConfigError):
    """A screen-kit setting or a game that cannot be used: one line that says what to do (the
    commands print it as a config error, exit code 2)."""


class WindowMissing(ScreenEnvError):
    """No window has the title (yet): the one lookup failure that waiting may cure (a game that is
    starting, or being started again after a crash)."""

    def __init__(self, title: str, there: str, waited_s: float = 0.0, owner: int | None = None):
        self.title, self.there, self.owner = title, there, owner
        after = f" after {waited_s:g} s" if waited_s else ""
        of = f" of the launched game (pid {owner})" if owner else ""
        super().__init__(
            f"screen env: no window titled {title!r}{of}{after} (windows with a title: {there}); is the game running?"
        )


def missing(what: str, package: str) -> gym.error.DependencyNotInstalled:
    """A package of the screen extra is not installed (the commands exit 5 with this line)."""
    return gym.error.DependencyNotInstalled(f"screen env: {what} needs {package}: pip install 'mqttrl[screen]'")


@dataclass(frozen=True)
class Region:
    """A rectangle on the screen, in pixels (what mss grabs: ``left, top, width, height``)."""

    left: int
    top: int
    width: int
    height: int

    def as_monitor(self) -> dict[str, int]:
        return {"left": self.left, "top": self.top, "width": self.width, "height": self.height}


@dataclass(frozen=True)
class Window:
    """A found window: its id (X window id or HWND) and where its inside is on the screen."""

    handle: int
    title: str
    region: Region


def matches(title: str, wanted: str, exact: bool) -> bool:
    return title == wanted if exact else wanted.lower() in title.lower()


class WindowSystem(Protocol):
    """What the kit asks of a platform's windows; :class:`X11Windows` (Linux, Xvfb included) and
    :class:`~.win32window.Win32Windows` (Windows) both answer it, and tests/test_screen_window_contract.py
    runs the same checks on both (Windows under Wine). Lookup by title (:func:`find_on`) is common."""

    def titled(self) -> list[tuple[int, str]]:
        """``(handle, title)`` of every shown window that has a title."""
        ...

    def client_region(self, handle: int) -> Region | None:
        """Where the window's inside (its client area) is on the screen; None when it has closed."""
        ...

    def lost(self, handle: int) -> str | None:
        """None while the window is shown; else what became of it (the end of a sentence)."""
        ...

    def pid(self, handle: int) -> int | None:
        """The process that made the window (None when it cannot be told, or it closed)."""
        ...

    def close(self) -> None: ...


class DisplayClosed(ScreenEnvError):
    """The X server went away (or was restarted) while we looked."""
