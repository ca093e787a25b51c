"""The window seam on Windows (:class:`~.window.WindowSystem`): user32 through ctypes, no package.

``EnumWindows`` lists the top-level windows, ``IsWindowVisible`` and ``GetWindowTextW`` keep the shown
ones with a title; a window's client area (what the game draws, without its frame and title bar) is
``GetClientRect`` moved to screen coordinates by ``ClientToScreen``, the rectangle mss's GDI capture
then grabs. A handle whose window closed is ``IsWindow`` false, and ``GetClientRect`` fails on it.

DPI: the first use makes the process per-monitor DPI aware (``SetProcessDpiAwareness(2)``, else
``SetProcessDPIAware`` on Windows before 8.1; :func:`dpi_aware`), as mss does itself, so that the rectangles here and
the pixels mss grabs are physical pixels on a scaled display (a DPI-unaware process sees scaled,
virtualised coordinates). Tried under Wine 8.0 (tests/test_screen_window_contract.py); a real
Windows desktop with a scale other than 100 % has not been.
"""

from __future__ import annotations

import ctypes
from ctypes import wintypes

from .basics import Region

#: the DPI awareness this process got (:func:`dpi_aware`), once; empty: not asked yet
_DPI: list[str] = []
#: EnumWindows' callback type (``WINFUNCTYPE`` is Windows-only: CFUNCTYPE elsewhere, so the module imports anywhere)
ENUMPROC = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)(wintypes.BOOL, wintypes.HWND, wintypes.LPARAM)


def _user32():
    """user32.dll with the signatures used here (an HWND is pointer-sized: untyped, it would be cut to 32 bits)."""
    u = ctypes.WinDLL("user32", use_last_error=True)
    hwnd = wintypes.HWND
    u.EnumWindows.argtypes = (ENUMPROC, wintypes.LPARAM)
    u.IsWindowVisible.argtypes = u.IsWindow.argtypes = u.IsIconic.argtypes = (hwnd,)
    u.GetWindowTextLengthW.argtypes = (hwnd,)
    u.GetWindowTextW.argtypes = (hwnd, wintypes.LPWSTR, ctypes.c_int)
    u.GetClientRect.argtypes = (hwnd, ctypes.POINTER(wintypes.RECT))
    u.ClientToScreen.argtypes = (hwnd, ctypes.POINTER(wintypes.POINT))
    u.GetWindowThreadProcessId.argtypes = (hwnd, ctypes.POINTER(wintypes.DWORD))
    u.GetWindowThreadProcessId.restype = wintypes.DWORD
    return u


#: PROCESS_DPI_AWARENESS's values
AWARENESS = {0: "unaware", 1: "system", 2: "per-monitor"}


def dpi_aware() -> str:
    """Make this process per-monitor DPI aware, once (Windows refuses when the awareness is set
    already: by the program's manifest, or by mss first); the awareness it has then, one of
    :data:`AWARENESS`'s names (``system`` on Windows before 8.1, which has no shcore)."""
    if not _DPI:
        # ignore: ctypes.WinDLL is Windows-only, and typeshed has it on win32 alone (mypy checks for linux)
        try:
            shcore = ctypes.WinDLL("shcore")  # type: ignore[attr-defined]
        except OSError:  # before Windows 8.1
            ctypes.WinDLL("user32").SetProcessDPIAware()  # type: ignore[attr-defined]
            _DPI.append("system")
            return _DPI[0]
        shcore.SetProcessDpiAwareness(2)  # PROCESS_PER_MONITOR_DPI_AWARE
        value = ctypes.c_int(-1)
        shcore.GetProcessDpiAwareness(None, ctypes.byref(value))
        _DPI.append(AWARENESS.get(value.value, f"unknown ({value.value})"))
    return _DPI[0]


class Win32Windows:
    """:class:`~.window.WindowSystem` on Windows: one desktop (a display name means nothing here)."""

    def __init__(self, display: str | None = None) -> None:
        self.display = display
        dpi_aware()
        self.user32 = _user32()

    def titled(self) -> list[tuple[int, str]]:
        u, found = self.user32, []

        def visit(hwnd, _):
            if hwnd and u.IsWindowVisible(hwnd):
                n = u.GetWindowTextLengthW(hwnd)
                buf = ctypes.create_unicode_buffer(n + 1)
                if n and u.GetWindowTextW(hwnd, buf, n + 1) and buf.value:
                    found.append((int(hwnd), buf.value))
            return True

        u.EnumWindows(ENUMPROC(visit), 0)
        return found

    def client_region(self, handle: int) -> Region | None:
        rect, origin = wintypes.RECT(), wintypes.POINT(0, 0)
        if not (
            self.user32.GetClientRect(handle, ctypes.byref(rect))
            and self.user32.ClientToScreen(handle, ctypes.byref(origin))
        ):
            return None  # the window closed meanwhile
        return Region(origin.x, origin.y, rect.right - rect.left, rect.bottom - rect.top)

    def pid(self, handle: int) -> int | None:
        pid = wintypes.DWORD(0)
        if not self.user32.GetWindowThreadProcessId(handle, ctypes.byref(pid)):
            return None  # the window closed meanwhile
        return int(pid.value) or None

    def lost(self, handle: int) -> str | None:
        u = self.user32
        if not u.IsWindow(handle):
            return "closed: did the game exit or crash?"
        if u.IsIconic(handle) or not u.IsWindowVisible(handle):
            return "is no longer shown (minimised or hidden)"
        return None

    def close(self) -> None:
        pass
