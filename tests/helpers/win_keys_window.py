"""Run by a Windows CPython (tests/test_windows_worker.py): a window that records the key messages it
gets, and the screen kit's SendInput keyboard (both modes) sending keys to it. Prints one JSON line:
per mode, ``[down|up, wParam (virtual key), scan code, extended]`` of each message, and whether the
window was brought to the front."""

import ctypes
import json
import time
from ctypes import wintypes

from mqttrl_plugins.screen.sendinput import SendInputKeyboard

user32 = ctypes.WinDLL("user32", use_last_error=True)
kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
LRESULT = ctypes.c_ssize_t
WNDPROC = ctypes.WINFUNCTYPE(LRESULT, wintypes.HWND, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM)
user32.DefWindowProcW.argtypes = (wintypes.HWND, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM)
user32.DefWindowProcW.restype = LRESULT
user32.CreateWindowExW.restype = wintypes.HWND
user32.CreateWindowExW.argtypes = (
    wintypes.DWORD,
    wintypes.LPCWSTR,
    wintypes.LPCWSTR,
    wintypes.DWORD,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    wintypes.HWND,
    wintypes.HMENU,
    wintypes.HINSTANCE,
    wintypes.LPVOID,
)
user32.PeekMessageW.argtypes = (
    ctypes.POINTER(wintypes.MSG),
    wintypes.HWND,
    wintypes.UINT,
    wintypes.UINT,
    wintypes.UINT,
)
user32.GetForegroundWindow.restype = wintypes.HWND
WM_KEYDOWN, WM_KEYUP = 0x100, 0x101
got = []


def wndproc(hwnd, msg, wparam, lparam):
    if msg in (WM_KEYDOWN, WM_KEYUP):
        got.append(["down" if msg == WM_KEYDOWN else "up", wparam, (lparam >> 16) & 0xFF, (lparam >> 24) & 1])
        return 0
    return user32.DefWindowProcW(hwnd, msg, wparam, lparam)


proc = WNDPROC(wndproc)


class WNDCLASSW(ctypes.Structure):
    _fields_ = [
        ("style", wintypes.UINT),
        ("lpfnWndProc", WNDPROC),
        ("cbClsExtra", ctypes.c_int),
        ("cbWndExtra", ctypes.c_int),
        ("hInstance", wintypes.HINSTANCE),
        ("hIcon", wintypes.HICON),
        ("hCursor", wintypes.HANDLE),
        ("hbrBackground", wintypes.HBRUSH),
        ("lpszMenuName", wintypes.LPCWSTR),
        ("lpszClassName", wintypes.LPCWSTR),
    ]


wc = WNDCLASSW(lpfnWndProc=proc, hInstance=kernel32.GetModuleHandleW(None), lpszClassName="mqttrlKeys")
assert user32.RegisterClassW(ctypes.byref(wc)), ctypes.get_last_error()
hwnd = user32.CreateWindowExW(
    0, "mqttrlKeys", "mqttrl keys", 0x10CF0000, 10, 10, 200, 150, None, None, wc.hInstance, None
)
assert hwnd, ctypes.get_last_error()
user32.ShowWindow(hwnd, 5)


def pump(seconds):
    msg = wintypes.MSG()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while user32.PeekMessageW(ctypes.byref(msg), None, 0, 0, 1):
            user32.TranslateMessage(ctypes.byref(msg))
            user32.DispatchMessageW(ctypes.byref(msg))
        time.sleep(0.01)


pump(0.5)
out = {}
for mode in ("scancode", "vk"):
    got.clear()
    kb = SendInputKeyboard(mode, focus_window=hwnd)
    pump(0.3)
    out.setdefault("foreground", user32.GetForegroundWindow() == hwnd)
    kb.hold(["Left"])
    pump(0.2)
    kb.hold([])
    pump(0.2)
    kb.press(["a"])
    pump(0.3)
    out[mode] = list(got)
print(json.dumps(out))
