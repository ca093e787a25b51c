"""Synthetic key presses: the keys of an action are held down for the whole step.

Backends, one interface (:class:`Keyboard`): ``xtest`` (Linux/X11: python-xlib's XTest
extension on the display the game is on, in this process, no subprocess per key), ``scancode`` and
``vk`` (Windows' ``SendInput`` through ctypes, hardware scan codes or virtual-key codes:
:mod:`.sendinput`, names mapped by :mod:`.keymap`) and ``pynput`` (macOS; untested here). Key
names are X keysym names, as ``xdotool`` spells them: ``Left``, ``Right``, ``Up``, ``Down``, ``space``, ``Return``, ``Escape``, ``Shift_L``,
``a`` ... Only changes are sent: :meth:`Keyboard.hold` releases the keys no longer wanted and
presses the new ones, so a key held over several steps is one press. :meth:`Keyboard.press` is
the other way to act (``key_mode = "tap"``, ``tap_s = 0``): each key down and up at once, a
key-down event every step, for games that act on key events only; :meth:`Keyboard.strike` starts a
tap that lasts (the env lets go ``tap_s`` later), for games that poll the keys once a frame.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable

from .basics import ScreenEnvError, missing
from .keyboard import Keyboard

#: X keysym names -> pynput ``Key`` attribute names (single characters go as characters)
PYNPUT_NAMES = {
    "Return": "enter",
    "BackSpace": "backspace",
    "Escape": "esc",
    "Shift_L": "shift_l",
    "Shift_R": "shift_r",
    "Control_L": "ctrl_l",
    "Control_R": "ctrl_r",
    "Alt_L": "alt_l",
    "Alt_R": "alt_r",
    "Prior": "page_up",
    "Next": "page_down",
}


def _ignore(*_error) -> bool:
    """An X error handler that takes the error (true: handled; python-xlib's default prints it)."""
    return True


class XTestKeyboard(Keyboard):
    """XTest key events on ``display``; ``focus_window`` (an X window id) gets the input focus
    first, so the keys reach the game even with no window manager (Xvfb), and again before every
    flush of keys, under a server grab: XTest keys go to whichever window has the focus, and with
    two games on one display another env may have taken it since (a game that polls held keys
    may see them let go when the focus moves: such games want a display each)."""

    def __init__(self, display: str | None = None, focus_window: int | None = None):
        super().__init__()
        try:
            from Xlib import XK, X
            from Xlib import display as xdisplay
            from Xlib.ext import xtest
        except ImportError:
            raise missing("pressing keys on Linux", "python-xlib") from None
        self._X, self._XK, self._xtest = X, XK, xtest
        try:
            self.d = xdisplay.Display(display)
        except Exception as e:  # Xlib's DisplayError, ConnectionClosedError
            raise ScreenEnvError(f"screen env: cannot open X display {display or '$DISPLAY'!r}: {e}") from None
        if not self.d.has_extension("XTEST"):
            raise ScreenEnvError(
                f"screen env: X display {display or '$DISPLAY'!r} has no XTEST extension: cannot press keys"
            )
        self.codes: dict[str, int] = {}
        self.focus_window = self.d.create_resource_object("window", focus_window) if focus_window else None
        self._grabbed = False
        self._focus()
        self._end_batch()

    def _focus(self) -> None:
        """The server grabbed (no other client's request until the batch's flush) and the focus on
        the game's window: the keys that follow reach it, whatever another env focused meanwhile."""
        if self.focus_window is not None and not self._grabbed:
            self.d.grab_server()
            self._grabbed = True
            # a window that closed meanwhile: no focus to take (the env says so at the next frame),
            # and no "X protocol error" printed by python-xlib for it
            self.focus_window.set_input_focus(self._X.RevertToParent, self._X.CurrentTime, onerror=_ignore)

    def _end_batch(self) -> None:
        if self._grabbed:
            self.d.ungrab_server()
            self._grabbed = False
        self.d.sync()

    def check(self, names: Iterable[str]) -> None:
        for name in names:
            self._code(name)

    def _code(self, name: str) -> int:
        if name not in self.codes:
            sym = self._XK.string_to_keysym(name)
            code = self.d.keysym_to_keycode(sym) if sym else 0
            if not code:
                raise ScreenEnvError(
                    f"screen env: unknown key {name!r}: use X keysym names (Left, Right, space, Return, a ...)"
                )
            self.codes[name] = code
        return self.codes[name]

    def _send(self, key: str, down: bool) -> None:
        code = self._code(key)
        self._focus()
        self._xtest.fake_input(self.d, self._X.KeyPress if down else self._X.KeyRelease, code)

    def _flush(self) -> None:
        self._end_batch()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.d.close()


class PynputKeyboard(Keyboard):  # pragma: no cover (Windows/macOS: untested here)
    """pynput's keyboard Controller (SendInput on Windows): keys go to the focused window."""

    def __init__(self) -> None:
        super().__init__()
        try:
            from pynput import keyboard
        except ImportError:
            raise missing("pressing keys on this system", "pynput") from None
        self._kb = keyboard
        self.controller = keyboard.Controller()

    def _key(self, name: str):
        if len(name) == 1:
            return self._kb.KeyCode.from_char(name)
        attr = PYNPUT_NAMES.get(name, name.lower())
        key = getattr(self._kb.Key, attr, None)
        if key is None:
            raise ScreenEnvError(
                f"screen env: unknown key {name!r}: use X keysym names (Left, Right, space, Return, a ...)"
            )
        return key

    def check(self, names: Iterable[str]) -> None:
        for name in names:
            self._key(name)

    def _send(self, key: str, down: bool) -> None:
        (self.controller.press if down else self.controller.release)(self._key(key))


class KeyActions:
    """An action's keys as ``key_mode`` sends them: held (only changes sent), or tapped: down at
    the step's start, up ``tap_s`` later (:meth:`end_by`), at the period's end (:meth:`end`, under
    the worker's clock) or at the next action, whichever comes first; ``tap_s = 0``: down and up at once."""

    def __init__(self, mode: str, tap_s: float):
        self.mode, self.tap_s = mode, tap_s
        #: when the keys of a tap went down, None when none is down
        self.tap_at: float | None = None

    def send(self, keyboard: Keyboard, keys: Iterable[str]) -> None:
        """The action's keys now; returns at once."""
        if self.mode == "hold":
            keyboard.hold(keys)
        elif not self.tap_s:
            keyboard.press(keys)  # a key-down event and nothing held
        else:
            keyboard.strike(keys)  # a new key-down event even for a key the last tap still holds
            self.tap_at = time.monotonic() if keyboard.held else None

    def end(self, keyboard: Keyboard) -> None:
        """A tap's keys up now (if one is down)."""
        if self.tap_at is not None:
            self.tap_at = None
            keyboard.release_all()

    def end_by(self, keyboard: Keyboard, deadline: float) -> None:
        """Wait for a tap's ``tap_s`` (at most until ``deadline``, the step's end) and let go; a step
        already over (``step_s = 0``: another clock paces) leaves the keys down until the next action."""
        if self.tap_at is not None and deadline > time.monotonic():
            sleep_until(min(self.tap_at + self.tap_s, deadline))
            self.end(keyboard)


def sleep_until(t: float) -> None:
    """Sleep until ``time.monotonic()`` reads ``t`` (not at all when it is past)."""
    wait = t - time.monotonic()
    if wait > 0:
        time.sleep(wait)


#: the keys backends a config may name (``keys_backend``)
BACKENDS = ("auto", "xtest", "scancode", "vk", "pynput")


def auto_backend(platform: str = sys.platform) -> str:
    """``auto``'s backend: XTest on Linux, SendInput with scan codes on Windows, pynput on macOS."""
    return {"win32": "scancode", "darwin": "pynput"}.get(platform, "xtest")


def make_keyboard(backend: str, display: str | None, focus_window: int | None) -> Keyboard:
    """The keyboard of backend ``backend`` (:data:`BACKENDS`; ``auto``: :func:`auto_backend`)."""
    if backend == "auto":
        backend = auto_backend()
    if backend == "xtest":
        return XTestKeyboard(display, focus_window)
    if backend in ("scancode", "vk"):
        if sys.platform != "win32":
            raise ScreenEnvError(
                f'screen env: keys_backend = "{backend}" is Windows\' SendInput; this is {sys.platform}'
            )
        from .sendinput import SendInputKeyboard

        return SendInputKeyboard(backend, focus_window)
    return PynputKeyboard()
