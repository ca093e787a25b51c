"""The screen kit's window seam, the same checks on each platform (tests/test_screen_window_contract.py).

Run as a script on an X display: by Linux's python (:class:`~mqttrl_plugins.screen.window.X11Windows`)
and by the Windows CPython under Wine (:class:`~mqttrl_plugins.screen.win32window.Win32Windows`).
It makes two windows of its own with the platform's own API (python-xlib; ``CreateWindowExW``)
whose client areas have a known place, size and colour, puts the kit's lookup, capture (mss) and
watch through them, and prints what they saw as one JSON line; the test expects the same answers
from both. Only numbers, titles and the first words of errors go out: the platforms' own words
(an X window id, an HWND) stay here.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from mqttrl_plugins.screen.capture import Grabber
from mqttrl_plugins.screen.window import (
    Region,
    ScreenEnvError,
    WindowMissing,
    WindowWatch,
    find_window,
    wait_for_window,
    window_system,
)

#: title, client area, colour (RGB) of the two windows (Windows widens a captioned window narrower than
#: its title bar's buttons: Beta's 64 px came out 104)
ALPHA = ("mqttrl contract Alpha", Region(40, 50, 120, 80), (200, 30, 40))
BETA = ("mqttrl contract Beta", Region(300, 200, 128, 64), (20, 180, 60))


class X11Maker:
    """Windows on $DISPLAY through python-xlib (no window manager: a window is where it is made)."""

    def __init__(self) -> None:
        from Xlib import X, display

        self.X, self.d = X, display.Display()

    def make(self, title: str, r: Region, rgb: tuple[int, int, int]):
        s = self.d.screen()
        pixel = (rgb[0] << 16) | (rgb[1] << 8) | rgb[2]
        w = s.root.create_window(
            r.left, r.top, r.width, r.height, 0, s.root_depth, self.X.InputOutput, background_pixel=pixel
        )
        w.set_wm_name(title)
        w.map()
        self.d.sync()
        return w

    def hide(self, w) -> None:
        w.unmap()
        self.d.sync()

    def destroy(self, w) -> None:
        w.destroy()
        self.d.sync()

    def pump(self, seconds: float) -> None:
        time.sleep(seconds)  # the X server paints a window's background itself


class Win32Maker:
    """Top-level windows with a title bar, their client areas placed with ``AdjustWindowRectEx``."""

    def __init__(self) -> None:
        import ctypes
        from ctypes import wintypes

        self.ctypes, self.wt = ctypes, wintypes
        u = self.user32 = ctypes.WinDLL("user32", use_last_error=True)
        self.gdi32 = ctypes.WinDLL("gdi32")
        lresult = ctypes.c_ssize_t
        self.WNDPROC = ctypes.WINFUNCTYPE(lresult, wintypes.HWND, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM)
        u.DefWindowProcW.argtypes = (wintypes.HWND, wintypes.UINT, wintypes.WPARAM, wintypes.LPARAM)
        u.DefWindowProcW.restype = lresult
        u.CreateWindowExW.restype = wintypes.HWND
        u.CreateWindowExW.argtypes = (wintypes.DWORD, wintypes.LPCWSTR, wintypes.LPCWSTR, wintypes.DWORD)
        u.CreateWindowExW.argtypes += (ctypes.c_int,) * 4 + (wintypes.HWND, wintypes.HMENU, wintypes.HINSTANCE)
        u.CreateWindowExW.argtypes += (wintypes.LPVOID,)
        u.ShowWindow.argtypes = (wintypes.HWND, ctypes.c_int)
        u.DestroyWindow.argtypes = u.UpdateWindow.argtypes = (wintypes.HWND,)
        self.gdi32.CreateSolidBrush.restype = wintypes.HBRUSH
        self.proc = self.WNDPROC(lambda h, m, w, lp: u.DefWindowProcW(h, m, w, lp))
        self.hinstance = ctypes.WinDLL("kernel32").GetModuleHandleW(None)
        self.classes = 0

    def _register(self, rgb: tuple[int, int, int]) -> str:
        """A window class whose background is ``rgb`` (Windows paints it: ``WM_ERASEBKGND``)."""
        ctypes, wt = self.ctypes, self.wt

        class WNDCLASSW(ctypes.Structure):
            _fields_ = [  # noqa: RUF012 (ctypes reads the class attribute)
                ("style", wt.UINT),
                ("lpfnWndProc", self.WNDPROC),
                ("cbClsExtra", ctypes.c_int),
                ("cbWndExtra", ctypes.c_int),
                ("hInstance", wt.HINSTANCE),
                ("hIcon", wt.HICON),
                ("hCursor", wt.HANDLE),
                ("hbrBackground", wt.HBRUSH),
                ("lpszMenuName", wt.LPCWSTR),
                ("lpszClassName", wt.LPCWSTR),
            ]

        self.classes += 1
        name = f"mqttrlContract{self.classes}"
        brush = self.gdi32.CreateSolidBrush(rgb[0] | (rgb[1] << 8) | (rgb[2] << 16))  # COLORREF: 0x00BBGGRR
        self._wc = WNDCLASSW(lpfnWndProc=self.proc, hInstance=self.hinstance, hbrBackground=brush, lpszClassName=name)
        assert self.user32.RegisterClassW(ctypes.byref(self._wc)), ctypes.get_last_error()
        return name

    def make(self, title: str, r: Region, rgb: tuple[int, int, int]) -> int:
        style = 0x00CF0000  # WS_OVERLAPPEDWINDOW: a caption and a sizing frame around the client area
        rect = self.wt.RECT(r.left, r.top, r.left + r.width, r.top + r.height)
        self.user32.AdjustWindowRectEx(self.ctypes.byref(rect), style, False, 0)
        hwnd = self.user32.CreateWindowExW(
            0, self._register(rgb), title, style, rect.left, rect.top, rect.right - rect.left,
            rect.bottom - rect.top, None, None, self.hinstance, None,
        )  # fmt: skip
        assert hwnd, self.ctypes.get_last_error()
        self.user32.ShowWindow(hwnd, 5)  # SW_SHOW
        self.user32.UpdateWindow(hwnd)
        return hwnd

    def hide(self, hwnd: int) -> None:
        self.user32.ShowWindow(hwnd, 0)  # SW_HIDE

    def destroy(self, hwnd: int) -> None:
        self.user32.DestroyWindow(hwnd)

    def pump(self, seconds: float) -> None:
        msg, end = self.wt.MSG(), time.monotonic() + seconds
        while time.monotonic() < end:
            while self.user32.PeekMessageW(self.ctypes.byref(msg), None, 0, 0, 1):
                self.user32.TranslateMessage(self.ctypes.byref(msg))
                self.user32.DispatchMessageW(self.ctypes.byref(msg))
            time.sleep(0.01)


def box(r: Region) -> list[int]:
    return [r.left, r.top, r.width, r.height]


def failure(call) -> str:
    """The kind of error ``call`` raised and its words up to the first parenthesis (none: "none")."""
    try:
        call()
    except WindowMissing as e:
        return "missing: " + str(e).split(" (")[0]
    except ScreenEnvError as e:
        return "error: " + str(e).split(" (")[0]
    return "none"


def colours(region: Region) -> tuple[list[list[int]], bool]:
    """The RGB colours inside ``region`` as mss grabs it, and whether the 2-pixel ring around it holds
    the same colour as its inside (it must not: the region is the client area, no more, no less)."""
    grab = Grabber(Region(region.left - 2, region.top - 2, region.width + 4, region.height + 4))
    big = grab.grab()[:, :, 2::-1]
    grab.close()
    inside = big[2:-2, 2:-2].reshape(-1, 3)
    ring = np.ones(big.shape[:2], bool)
    ring[2:-2, 2:-2] = False
    inside_colours = np.unique(inside, axis=0)
    same = any((big[ring] == c).all(axis=1).any() for c in inside_colours)
    return inside_colours.tolist(), bool(same)


def lookup_checks(ws) -> dict:
    """Lookup by title: a part of it in any case, exact, ambiguous, missing; the listing."""
    alpha = find_window("CONTRACT alpha")
    return {
        "part": [alpha.title, box(alpha.region)],
        "exact": box(find_window(BETA[0], exact=True).region),
        "exact_is_case_sensitive": failure(lambda: find_window(BETA[0].lower(), exact=True)),
        "ambiguous": failure(lambda: find_window("mqttrl contract")),
        "missing": failure(lambda: find_window("no such window")),
        "waited": failure(lambda: wait_for_window("no such window", wait_s=0.3)),
        "listed": sorted(t for _, t in ws.titled() if "contract" in t),
        "capture": colours(alpha.region),
        # the process that made a window: this one; a launched game's lookup takes only its own windows
        "pid_is_ours": ws.pid(alpha.handle) == os.getpid(),
        "owned": [
            find_window("CONTRACT alpha", owner=os.getpid()).title,
            failure(lambda: find_window("CONTRACT alpha", owner=1)),
        ],
    }


def gone_checks(maker, beta_window) -> dict:
    """A window hidden, then closed: the watch says which, the lookup no longer finds it."""
    watch = WindowWatch(find_window(BETA[0]), None)
    alpha_watch = WindowWatch(find_window(ALPHA[0]), None)
    out = {"shown": [watch.lost(), alpha_watch.lost()]}
    maker.hide(beta_window)
    maker.pump(0.3)
    out["hidden"] = [watch.lost(), failure(lambda: find_window(BETA[0]))]
    handle = watch.window.handle
    maker.destroy(beta_window)
    maker.pump(0.3)
    ws = window_system()
    out["closed"] = [watch.lost(), ws.client_region(handle), alpha_watch.lost()]
    ws.close()
    watch.close()
    alpha_watch.close()
    return out


def main() -> None:
    started = time.monotonic()
    maker = Win32Maker() if sys.platform == "win32" else X11Maker()
    maker.make(*ALPHA)
    beta = maker.make(*BETA)
    maker.pump(0.5)
    ws = window_system()
    out = {"platform": sys.platform, "system": type(ws).__name__, **lookup_checks(ws)}
    ws.close()
    out.update(gone_checks(maker, beta))
    if sys.platform == "win32":
        from mqttrl_plugins.screen.win32window import dpi_aware

        out["dpi"] = dpi_aware()
    out["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
