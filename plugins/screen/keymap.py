"""Key names, mapped once for every platform: an X keysym name (what configs write and XTest presses
on Linux) -> the PC keyboard key it is on Windows, as a hardware scan code (set 1, with the ``E0``
prefix as the "extended" flag) and a virtual-key code.

The Windows keys backend sends the scan code by default (``KEYEVENTF_SCANCODE``): games that read
the keyboard through DirectInput or raw input see a key of the physical keyboard, which virtual-key
events may not reach; ``keys_backend = "vk"`` sends the virtual-key code instead (with the scan code
alongside, for a game that reads it from ``WM_KEYDOWN``). Keys name the key, not the character: the
scan codes are those of a US layout's key positions (``a`` is the key right of Caps Lock; on an
AZERTY keyboard that key types "q"), and ``A`` is the same key as ``a`` (no Shift), as XTest presses it.
Pure data and functions: the tests check them on any platform.
"""

from __future__ import annotations

from typing import NamedTuple


class PcKey(NamedTuple):
    """A key of a PC keyboard: its set-1 scan code, whether it has the ``E0`` prefix, its virtual-key code."""

    scan: int
    extended: bool
    vk: int


#: keys without the E0 prefix: name -> (scan code, virtual key)
_PLAIN = {
    "Escape": (0x01, 0x1B),
    "minus": (0x0C, 0xBD),
    "equal": (0x0D, 0xBB),
    "BackSpace": (0x0E, 0x08),
    "Tab": (0x0F, 0x09),
    "bracketleft": (0x1A, 0xDB),
    "bracketright": (0x1B, 0xDD),
    "Return": (0x1C, 0x0D),
    "Control_L": (0x1D, 0xA2),
    "semicolon": (0x27, 0xBA),
    "apostrophe": (0x28, 0xDE),
    "grave": (0x29, 0xC0),
    "Shift_L": (0x2A, 0xA0),
    "backslash": (0x2B, 0xDC),
    "comma": (0x33, 0xBC),
    "period": (0x34, 0xBE),
    "slash": (0x35, 0xBF),
    "Shift_R": (0x36, 0xA1),
    "KP_Multiply": (0x37, 0x6A),
    "Alt_L": (0x38, 0xA4),
    "space": (0x39, 0x20),
    "Caps_Lock": (0x3A, 0x14),
    "KP_7": (0x47, 0x67),
    "KP_8": (0x48, 0x68),
    "KP_9": (0x49, 0x69),
    "KP_Subtract": (0x4A, 0x6D),
    "KP_4": (0x4B, 0x64),
    "KP_5": (0x4C, 0x65),
    "KP_6": (0x4D, 0x66),
    "KP_Add": (0x4E, 0x6B),
    "KP_1": (0x4F, 0x61),
    "KP_2": (0x50, 0x62),
    "KP_3": (0x51, 0x63),
    "KP_0": (0x52, 0x60),
    "KP_Decimal": (0x53, 0x6E),
}
#: keys with the E0 prefix (the arrows and the block above them, the right-hand modifiers ...)
_EXTENDED = {
    "KP_Enter": (0x1C, 0x0D),
    "Control_R": (0x1D, 0xA3),
    "KP_Divide": (0x35, 0x6F),
    "Alt_R": (0x38, 0xA5),
    "Home": (0x47, 0x24),
    "Up": (0x48, 0x26),
    "Prior": (0x49, 0x21),
    "Left": (0x4B, 0x25),
    "Right": (0x4D, 0x27),
    "End": (0x4F, 0x23),
    "Down": (0x50, 0x28),
    "Next": (0x51, 0x22),
    "Insert": (0x52, 0x2D),
    "Delete": (0x53, 0x2E),
    "Super_L": (0x5B, 0x5B),
    "Super_R": (0x5C, 0x5C),
}


def _table() -> dict[str, PcKey]:
    keys: dict[str, PcKey] = {}
    rows = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
    for row, first in zip(rows, (0x10, 0x1E, 0x2C)):
        for i, ch in enumerate(row):
            keys[ch] = keys[ch.upper()] = PcKey(first + i, False, ord(ch.upper()))
    for i, ch in enumerate("1234567890"):
        keys[ch] = PcKey(0x02 + i, False, ord(ch))
    for i in range(10):
        keys[f"F{i + 1}"] = PcKey(0x3B + i, False, 0x70 + i)
    keys["F11"], keys["F12"] = PcKey(0x57, False, 0x7A), PcKey(0x58, False, 0x7B)
    keys.update({name: PcKey(scan, False, vk) for name, (scan, vk) in _PLAIN.items()})
    keys.update({name: PcKey(scan, True, vk) for name, (scan, vk) in _EXTENDED.items()})
    return keys


#: X keysym name -> the PC keyboard key (:class:`PcKey`)
KEYS: dict[str, PcKey] = _table()

# SendInput's KEYBDINPUT.dwFlags
KEYEVENTF_EXTENDEDKEY = 0x0001
KEYEVENTF_KEYUP = 0x0002
KEYEVENTF_SCANCODE = 0x0008
#: the Windows keys backends: hardware scan codes (the default) or virtual-key codes
MODES = ("scancode", "vk")


class UnknownKey(KeyError):
    """A key name the table does not hold."""


def pc_key(name: str) -> PcKey:
    """The PC keyboard key of X keysym name ``name``; :class:`UnknownKey` says which names there are."""
    try:
        return KEYS[name]
    except KeyError:
        raise UnknownKey(
            f"unknown key {name!r} on Windows: use X keysym names (Left, Right, Up, Down, space, Return, "
            "Escape, Tab, Shift_L, Control_L, Alt_L, a-z, 0-9, F1-F12, KP_0-KP_9 ...)"
        ) from None


def key_event(name: str, down: bool, mode: str = "scancode") -> tuple[int, int, int]:
    """``(wVk, wScan, dwFlags)`` of the KEYBDINPUT that presses (``down``) or releases key ``name``:
    ``scancode``: no virtual key, the scan code with ``KEYEVENTF_SCANCODE``; ``vk``: the virtual key
    with its scan code alongside. Both carry ``KEYEVENTF_EXTENDEDKEY`` for an ``E0`` key."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    key = pc_key(name)
    flags = (KEYEVENTF_EXTENDEDKEY if key.extended else 0) | (0 if down else KEYEVENTF_KEYUP)
    if mode == "scancode":
        return 0, key.scan, flags | KEYEVENTF_SCANCODE
    return key.vk, key.scan, flags
