"""The Windows keys backend: ``SendInput`` through ctypes, no third-party package.

Hardware scan codes by default (``KEYEVENTF_SCANCODE``), virtual-key codes as an option; the names
are mapped by :mod:`.keymap`. The events of one :meth:`~.keys.Keyboard.hold` or ``press`` go in one
``SendInput`` call, so no other input is interleaved with them. Keys go to the foreground window:
with a window to focus, the backend brings it to the front first (``SetForegroundWindow``, which
Windows refuses when another program holds the foreground; the worker then says so once and the
game must be brought to the front by hand). Runs in the tests under Wine (a Windows CPython);
a real Windows PC has not been tried (docs/windows.md).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterable
from ctypes import wintypes

from .basics import ScreenEnvError
from .keyboard import Keyboard
from .keymap import MODES, UnknownKey, key_event

log = logging.getLogger("mqttrl.screen")

INPUT_KEYBOARD = 1
# Windows' sizes, on every platform (ctypes.wintypes' DWORD and LONG are C longs: 8 bytes on Linux),
# so that the layout test runs anywhere
WORD, DWORD, LONG, ULONG_PTR = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_int32, ctypes.c_size_t


class KEYBDINPUT(ctypes.Structure):
    _fields_ = (
        ("wVk", WORD),
        ("wScan", WORD),
        ("dwFlags", DWORD),
        ("time", DWORD),
        ("dwExtraInfo", ULONG_PTR),
    )


class MOUSEINPUT(ctypes.Structure):
    _fields_ = (
        ("dx", LONG),
        ("dy", LONG),
        ("mouseData", DWORD),
        ("dwFlags", DWORD),
        ("time", DWORD),
        ("dwExtraInfo", ULONG_PTR),
    )


class _INPUTUNION(ctypes.Union):
    # the union is as large as its largest member (MOUSEINPUT): SendInput checks cbSize
    _fields_ = (("ki", KEYBDINPUT), ("mi", MOUSEINPUT))


class INPUT(ctypes.Structure):
    _fields_ = (("type", DWORD), ("u", _INPUTUNION))


def inputs(events: list[tuple[int, int, int]]) -> ctypes.Array:
    """An ``INPUT`` array of keyboard events ``(wVk, wScan, dwFlags)`` (:func:`.keymap.key_event`)."""
    arr = (INPUT * len(events))()
    for item, (vk, scan, flags) in zip(arr, events):
        item.type = INPUT_KEYBOARD
        item.u.ki = KEYBDINPUT(vk, scan, flags, 0, 0)
    return arr


def _user32():
    """user32.dll with SendInput's and SetForegroundWindow's signatures."""
    user32 = ctypes.WinDLL("user32", use_last_error=True)
    user32.SendInput.argtypes = (wintypes.UINT, ctypes.c_void_p, ctypes.c_int)
    user32.SendInput.restype = wintypes.UINT
    user32.SetForegroundWindow.argtypes = (wintypes.HWND,)
    user32.SetForegroundWindow.restype = wintypes.BOOL
    return user32


class SendInputKeyboard(Keyboard):
    """Keys through ``SendInput``: ``mode`` ``scancode`` (the default) or ``vk``; ``focus_window`` (an
    ``HWND``) is brought to the front first; ``user32``: a stand-in for the DLL (tests)."""

    def __init__(self, mode: str = "scancode", focus_window: int | None = None, user32=None):
        super().__init__()
        if mode not in MODES:
            raise ScreenEnvError(f"screen env: keys mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self._pending: list[tuple[int, int, int]] = []
        self._user32 = user32 if user32 is not None else _user32()
        if focus_window is not None and not self._user32.SetForegroundWindow(focus_window):
            log.warning(
                "screen env: Windows did not bring the game's window to the front (another program holds the "
                "foreground); keys go to the foreground window, so bring the game to the front"
            )

    def check(self, names: Iterable[str]) -> None:
        for name in names:
            self._event(name, True)

    def _event(self, name: str, down: bool) -> tuple[int, int, int]:
        try:
            return key_event(name, down, self.mode)
        except UnknownKey as e:
            raise ScreenEnvError(f"screen env: {e.args[0]}") from None

    def _send(self, key: str, down: bool) -> None:
        self._pending.append(self._event(key, down))

    def _flush(self) -> None:
        events, self._pending = self._pending, []
        if not events:
            return
        sent = self._user32.SendInput(len(events), inputs(events), ctypes.sizeof(INPUT))
        if sent != len(events):
            error = ctypes.get_last_error() if hasattr(ctypes, "get_last_error") else None  # Windows only
            raise ScreenEnvError(
                f"screen env: Windows took {sent} of {len(events)} key events (error {error}): a "
                "game that runs as administrator takes no input from a worker that does not (run both alike)"
            )
