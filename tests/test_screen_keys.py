"""The screen kit's keys on Windows: one key-name table for both platforms (X keysym names -> PC
scan codes and virtual keys), SendInput's events and structures, the backend choice (issue 36).
Plain logic, run on Linux; tests/test_windows_worker.py sends the keys to a window under Wine."""

from __future__ import annotations

import ctypes

import pytest
from Xlib import XK

from mqttrl_plugins.screen import keys
from mqttrl_plugins.screen.keymap import (
    KEYEVENTF_EXTENDEDKEY,
    KEYEVENTF_KEYUP,
    KEYEVENTF_SCANCODE,
    KEYS,
    UnknownKey,
    key_event,
    pc_key,
)
from mqttrl_plugins.screen.options import parse_options
from mqttrl_plugins.screen.sendinput import INPUT, KEYBDINPUT, SendInputKeyboard, inputs
from mqttrl_plugins.screen.window import ScreenEnvError


def test_every_name_is_an_x_keysym_so_a_config_means_the_same_keys_on_linux_and_windows():
    unknown = [name for name in KEYS if not XK.string_to_keysym(name)]
    assert unknown == []


def test_each_key_of_the_table_is_a_distinct_pc_key():
    """Two names share a key only as a letter's two cases (XTest presses ``A`` as the ``a`` key too)."""
    by_key: dict[tuple[int, bool], set[str]] = {}
    for name, key in KEYS.items():
        by_key.setdefault((key.scan, key.extended), set()).add(name.lower())
    assert all(len(names) == 1 for names in by_key.values()), [n for n in by_key.values() if len(n) > 1]
    assert len({k.vk for k in KEYS.values() if not k.extended}) == len(
        {n.lower() for n in KEYS if not KEYS[n].extended}
    )


def test_well_known_keys():
    assert pc_key("a") == pc_key("A") == (0x1E, False, 0x41)
    assert pc_key("space") == (0x39, False, 0x20) and pc_key("Return") == (0x1C, False, 0x0D)
    assert pc_key("Escape").scan == 0x01 and pc_key("1").scan == 0x02 and pc_key("0").scan == 0x0B
    # the arrows share their scan codes with the keypad's 8 4 6 2: the E0 prefix tells them apart
    assert pc_key("Up") == (0x48, True, 0x26) and pc_key("KP_8") == (0x48, False, 0x68)
    assert pc_key("Left") == (0x4B, True, 0x25) and pc_key("Right") == (0x4D, True, 0x27)
    assert pc_key("Down") == (0x50, True, 0x28)
    assert pc_key("Control_R") == (0x1D, True, 0xA3) and pc_key("Control_L") == (0x1D, False, 0xA2)
    assert pc_key("F1") == (0x3B, False, 0x70) and pc_key("F12") == (0x58, False, 0x7B)


def test_scan_code_events_are_the_default_and_virtual_keys_the_option():
    assert key_event("Left", True) == (0, 0x4B, KEYEVENTF_SCANCODE | KEYEVENTF_EXTENDEDKEY)
    assert key_event("Left", False) == (0, 0x4B, KEYEVENTF_SCANCODE | KEYEVENTF_EXTENDEDKEY | KEYEVENTF_KEYUP)
    assert key_event("a", True, "vk") == (0x41, 0x1E, 0)
    assert key_event("a", False, "vk") == (0x41, 0x1E, KEYEVENTF_KEYUP)
    assert key_event("Up", True, "vk") == (0x26, 0x48, KEYEVENTF_EXTENDEDKEY)
    with pytest.raises(ValueError, match="mode"):
        key_event("a", True, "unicode")
    with pytest.raises(UnknownKey, match="unknown key 'Hyper_L' on Windows: use X keysym names"):
        pc_key("Hyper_L")


def test_the_input_structures_have_windows_x64_layout():
    """SendInput refuses a cbSize other than sizeof(INPUT), 40 bytes on x64, the key fields at 8."""
    assert ctypes.sizeof(INPUT) == 40 and ctypes.sizeof(KEYBDINPUT) == 24
    assert INPUT.u.offset == 8 and KEYBDINPUT.dwFlags.offset == 4
    arr = inputs([(0, 0x4B, 9), (0x41, 0x1E, 2)])
    assert [(i.type, i.u.ki.wVk, i.u.ki.wScan, i.u.ki.dwFlags) for i in arr] == [(1, 0, 0x4B, 9), (1, 0x41, 0x1E, 2)]


class FakeUser32:
    """What SendInput and SetForegroundWindow were called with."""

    def __init__(self, foreground: bool = True, take: int | None = None):
        self.calls: list[list[tuple[int, int, int]]] = []
        self.foreground, self.take, self.focused = foreground, take, []

    def SendInput(self, n, arr, size):
        assert size == ctypes.sizeof(INPUT)
        self.calls.append([(i.u.ki.wVk, i.u.ki.wScan, i.u.ki.dwFlags) for i in arr][:n])
        return n if self.take is None else self.take

    def SetForegroundWindow(self, hwnd):
        self.focused.append(hwnd)
        return self.foreground


def test_a_hold_sends_only_the_changes_in_one_sendinput_call():
    user32 = FakeUser32()
    kb = SendInputKeyboard("scancode", focus_window=0x1234, user32=user32)
    assert user32.focused == [0x1234]
    kb.hold(["Left", "space"])
    kb.hold(["space"])
    kb.press(["a"])
    kb.hold([])
    ext, sc, up = KEYEVENTF_EXTENDEDKEY, KEYEVENTF_SCANCODE, KEYEVENTF_KEYUP
    assert user32.calls == [
        [(0, 0x4B, sc | ext), (0, 0x39, sc)],  # both down, in one call
        [(0, 0x4B, sc | ext | up)],  # Left up; space stays down
        [(0, 0x39, sc | up), (0, 0x1E, sc), (0, 0x1E, sc | up)],  # press: the held key up, a down and up
    ]  # the last hold([]) has nothing to send


def test_keys_windows_did_not_take_are_one_line(caplog):
    kb = SendInputKeyboard("vk", focus_window=7, user32=FakeUser32(foreground=False, take=0))
    assert "did not bring the game's window to the front" in caplog.text
    with pytest.raises(ScreenEnvError, match="took 0 of 1 key events"):
        kb.hold(["Return"])
    with pytest.raises(ScreenEnvError, match="unknown key 'Hyper_L' on Windows"):
        kb.check(["Left", "Hyper_L"])


def test_the_backend_per_platform_and_the_config_values():
    assert keys.auto_backend("win32") == "scancode"
    assert keys.auto_backend("linux") == "xtest" and keys.auto_backend("darwin") == "pynput"
    for backend in keys.BACKENDS:
        assert parse_options(_options(keys_backend=backend)).keys_backend == backend
    with pytest.raises(ScreenEnvError, match='keys_backend = "scancode" is Windows'):
        keys.make_keyboard("scancode", None, None)


def _options(**extra) -> dict:
    """Screen env options that parse (the reward function of the demo game)."""
    return {"window": "g", "reward": "mqttrl_plugins.screen.demo_game:CatchScore", "keys": [["Left"], []], **extra}
