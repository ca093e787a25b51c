"""Where a game's pixels are: a window found by its title, or a fixed screen region.

One seam, :class:`WindowSystem` (the shown windows with their titles, a window's client area on
the screen, whether it is still shown), with one implementation per platform; the lookup by title
(:func:`find_on`: a part of it, case-insensitive, or ``exact``) is common to both.

Linux (X11, Xvfb included): :class:`X11Windows`, python-xlib walks the window tree for a window whose
title (``_NET_WM_NAME`` or ``WM_NAME``) matches, and translates its inside to root-window coordinates,
so the region is the window's client area exactly (no hand-tuned border offsets).
Windows: :class:`~.win32window.Win32Windows`, ``EnumWindows``/``GetWindowTextW`` and
``GetClientRect``/``ClientToScreen`` through ctypes (tried under Wine; a real desktop has not been).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Any

from .basics import DisplayClosed as DisplayClosed
from .basics import Region as Region
from .basics import ScreenEnvError as ScreenEnvError
from .basics import Window as Window
from .basics import WindowMissing as WindowMissing
from .basics import WindowSystem as WindowSystem
from .basics import matches as matches
from .basics import missing as missing

log = logging.getLogger("mqttrl.screen")

#: seconds between two looks for a window that is not there yet
WAIT_POLL_S = 0.1


# ---- the seam: one implementation per platform -------------------------------------------------
def window_system(display: str | None = None) -> WindowSystem:
    """This platform's :class:`WindowSystem` (``display``: the X display; ignored on Windows)."""
    if sys.platform == "win32":
        from .win32window import Win32Windows

        return Win32Windows(display)
    return X11Windows(display)


def find_on(ws: WindowSystem, title: str, exact: bool = False, owner: int | None = None) -> Window:
    """The one window of ``ws`` whose title is ``title`` (``exact``) or contains it (case-insensitive)
    and, with ``owner`` (a launched game's pid), that this process or one of its process group
    made (two copies of a game with the same title on one display are told apart so); none is
    :class:`WindowMissing`, several a :class:`ScreenEnvError`, both naming the windows there are."""
    windows = ws.titled()
    titles = [t for _, t in windows]
    hits = [(h, t) for h, t in windows if matches(t, title, exact)]
    if owner:
        hits = [(h, t) for h, t in hits if of_process(ws.pid(h), owner)]
    _check_one(title, hits, titles, owner)
    handle, name = hits[0]
    region = ws.client_region(handle)
    if region is None:  # it closed while we looked (a game starting, or restarting)
        raise WindowMissing(title, _there(titles), owner=owner)
    return Window(handle, name, region)


def of_process(pid: int | None, owner: int) -> bool:
    """Whether a window made by ``pid`` is the launched game ``owner``'s: the game's own process, or
    one in its process group (the launcher starts a game in a group of its own: a launcher
    script's game is a child). A window whose process cannot be told is no one's."""
    if pid is None:
        return False
    if pid == owner:
        return True
    if not hasattr(os, "getpgid"):  # Windows: the game's own process
        return False
    try:
        return os.getpgid(pid) == owner
    except OSError:  # gone meanwhile, or another user's
        return False


def find_window(title: str, display: str | None = None, exact: bool = False, owner: int | None = None) -> Window:
    """:func:`find_on` this platform's windows (one connection for the look)."""
    ws = window_system(display)
    try:
        return find_on(ws, title, exact, owner)
    finally:
        ws.close()


class Finder:
    """:func:`find_window` again and again (a wait for a game), on one X connection per display
    kept open until :meth:`close`. An X server whose last client leaves resets itself (Xvfb
    does), and a game connecting meanwhile fails to start: a connection per look would do that
    to the very game being waited for, on a display of its own."""

    def __init__(self) -> None:
        self.connections: dict[str | None, WindowSystem] = {}

    def find(self, title: str, display: str | None = None, exact: bool = False, owner: int | None = None) -> Window:
        if display not in self.connections:
            self.connections[display] = window_system(display)
        try:
            return find_on(self.connections[display], title, exact, owner)
        except DisplayClosed:
            self.connections.pop(display).close()
            raise

    def close(self) -> None:
        for ws in self.connections.values():
            ws.close()
        self.connections.clear()

    def __enter__(self) -> Finder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_for_window(
    title: str,
    display: str | None = None,
    exact: bool = False,
    wait_s: float = 0.0,
    finder: Finder | None = None,
    owner: int | None = None,
) -> Window:
    """:func:`find_window`, waiting up to ``wait_s`` for a window that is not there yet (one log line
    when the wait starts), then the missing-window line. A display that does not open or a title
    that matches several windows fails at once: waiting cures neither. ``finder``: the caller's
    connections (else one of its own for the wait); ``owner``: the launched game's pid (:func:`find_on`)."""
    if finder is None:
        with Finder() as own:
            return wait_for_window(title, display, exact, wait_s, own, owner)
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            return finder.find(title, display, exact, owner)
        except WindowMissing as e:
            if time.monotonic() >= deadline:
                raise WindowMissing(e.title, e.there, wait_s if announced else 0.0, owner) from None
            if not announced:
                announced = True
                log.info(
                    "screen env: no window titled %r on %s yet; waiting up to %g s for it (window_wait_s)",
                    title,
                    display or "$DISPLAY",
                    wait_s,
                )
        time.sleep(min(WAIT_POLL_S, max(deadline - time.monotonic(), 0.0)))


def _check_one(title: str, hits: list, titles: list[str], owner: int | None = None) -> None:
    if len(hits) == 1:
        return
    if not hits:
        raise WindowMissing(title, _there(titles), owner=owner)
    names = ", ".join(repr(t) for _, t in hits[:5])
    if owner:
        raise ScreenEnvError(
            f"screen env: {len(hits)} windows of the launched game (pid {owner}) match {title!r} ({names}); "
            "give a longer title or window_exact = true"
        )
    raise ScreenEnvError(
        f"screen env: {len(hits)} windows match {title!r} ({names}); give a longer title or window_exact = true, "
        "or have the worker launch each copy of the game ([env] launch): it then plays its own game's window"
    )


def _there(titles: list[str]) -> str:
    """The titles there are, for a line that says the wanted one is not among them."""
    return ", ".join(repr(t) for t in sorted(set(titles))[:10]) or "none"


# ---- Linux: X11 through python-xlib ------------------------------------------------------------
def _open_display(display: str | None):
    try:
        from Xlib import display as xdisplay
        from Xlib import error as xerror
    except ImportError:
        raise missing("finding a window on Linux", "python-xlib") from None
    try:
        return xdisplay.Display(display)
    except (xerror.DisplayError, xerror.ConnectionClosedError) as e:
        raise ScreenEnvError(f"screen env: cannot open X display {display or '$DISPLAY'!r}: {e}") from None


def _x11_title(d, win) -> str:
    for atom_name in ("_NET_WM_NAME", "WM_NAME"):
        atom = d.intern_atom(atom_name)
        prop = win.get_full_property(atom, 0)
        if prop is not None and prop.value:
            value = prop.value
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return ""


def _x11_windows(d, root) -> list[tuple[Any, str]]:
    """Every viewable window under ``root`` that has a title, depth first."""
    from Xlib import X
    from Xlib import error as xerror

    found, stack = [], list(root.query_tree().children)
    while stack:
        win = stack.pop()
        try:
            if win.get_attributes().map_state != X.IsViewable:
                continue
            title = _x11_title(d, win)
            stack.extend(win.query_tree().children)
        except xerror.XError:  # a window that went away while we looked
            continue
        if title:
            found.append((win, title))
    return found


class X11Windows:
    """:class:`WindowSystem` on an X display, one connection until :meth:`close`. A titled window's
    region is its inside translated to root coordinates: the client area exactly, whatever frame
    a window manager adds (no hand-tuned border offsets)."""

    def __init__(self, display: str | None = None) -> None:
        self.display, self.d = display, _open_display(display)  # first: it names python-xlib when missing
        from Xlib import error as xerror

        self._xerror = xerror

    def _closed(self, e: Exception) -> DisplayClosed:
        return DisplayClosed(f"screen env: X display {self.display or '$DISPLAY'!r} closed: {e}")

    def titled(self) -> list[tuple[int, str]]:
        try:
            return [(w.id, t) for w, t in _x11_windows(self.d, self.d.screen().root)]
        except self._xerror.ConnectionClosedError as e:
            raise self._closed(e) from None

    def client_region(self, handle: int) -> Region | None:
        win = self.d.create_resource_object("window", handle)
        try:
            geom = win.get_geometry()
            origin = win.translate_coords(self.d.screen().root, 0, 0)  # the window's (0, 0) in root coordinates
        except self._xerror.XError:
            return None
        except self._xerror.ConnectionClosedError as e:
            raise self._closed(e) from None
        return Region(-origin.x, -origin.y, geom.width, geom.height)

    def pid(self, handle: int) -> int | None:
        """The X client's process (the X-Resource extension: any local client, no help from the
        game), else the window's ``_NET_WM_PID`` (which toolkits set, SDL and Tk among them)."""
        try:
            if self.d.has_extension("X-Resource"):
                from Xlib.ext import res

                spec = {"client": handle, "mask": res.LocalClientPIDMask}
                for got in self.d.res_query_client_ids([spec]).ids:
                    if got.spec.mask & res.LocalClientPIDMask and got.value:
                        return int(got.value[0])
            prop = self.d.create_resource_object("window", handle).get_full_property(
                self.d.intern_atom("_NET_WM_PID"), 0
            )
        except self._xerror.XError:
            return None
        except self._xerror.ConnectionClosedError as e:
            raise self._closed(e) from None
        return int(prop.value[0]) if prop is not None and len(prop.value) else None

    def lost(self, handle: int) -> str | None:
        from Xlib import X

        try:
            state = self.d.create_resource_object("window", handle).get_attributes().map_state
        except self._xerror.XError:  # BadWindow: destroyed
            return "closed: did the game exit or crash?"
        except self._xerror.ConnectionClosedError:
            return f"is gone: its X display {self.display or '$DISPLAY'!r} closed"
        return None if state == X.IsViewable else "is no longer shown (minimised or hidden)"

    def close(self) -> None:
        try:
            self.d.close()
        except Exception:  # a connection the X server already closed
            pass


# ---- a window that closes: noticed at the next frame ------------------------------------------
class WindowWatch:
    """Whether a found window is still shown and where it is, asked once a frame (X11: three round
    trips on a connection of its own). A game that exited or crashed took its window with it, and a grab of
    its screen area would go on returning whatever is under it (black on Xvfb) as frames."""

    def __init__(self, window: Window, display: str | None):
        self.window, self.display, self.handle = window, display, window.handle
        self.ws = window_system(display)

    def lost(self) -> str | None:
        """None while the window is shown; else what became of it (the end of a sentence)."""
        return self.ws.lost(self.window.handle)

    def region(self) -> Region | None:
        """Where the window's inside is now (None: it closed meanwhile). A game may move or resize
        its window after it appeared (turtle's ``setup()`` does, a moment after the title is set)."""
        return self.ws.client_region(self.window.handle)

    def close(self) -> None:
        self.ws.close()


class ShownWindow:
    """The window an env plays, looked at once a frame through a :class:`WindowWatch` (made anew for
    another window or display): closed or hidden is an error (its screen area shows something
    else now: the worker makes the env again, which waits window_wait_s for the game to be back);
    moved or resized, it is followed (one log line)."""

    def __init__(self) -> None:
        self.watch: WindowWatch | None = None

    def check(self, window: Window, display: str | None) -> Window | None:
        """``window`` with its new region when it moved or was resized, None when it is where it was;
        :class:`ScreenEnvError` when it closed or is hidden."""
        watch = self.watch
        if watch is None or watch.handle != window.handle or watch.display != display:
            self.close()
            watch = self.watch = WindowWatch(window, display)
        where = display or "$DISPLAY"
        lost = watch.lost()
        if lost:
            raise ScreenEnvError(f"screen env: the window {window.title!r} on {where} {lost}")
        region = watch.region()
        if region is None or region == window.region:
            return None
        log.info(
            "screen env: the window %r on %s moved or was resized to %s; following it", window.title, where, region
        )
        return dataclasses.replace(window, region=region)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None


# ---- claims: one env per window, across processes ---------------------------------------------
#: the X property on a game's window that names the env playing it: ``"<host> <pid> <serial>"``
CLAIM_PROPERTY = "_MQTTRL_SCREEN_ENV"


def claim_owner(value: str, host: str, alive) -> str | None:
    """Who holds a claim (``value`` read from the window), or None when it is free: no claim, or
    one of this host whose process has ended or whose env is gone (``alive(pid, serial)``)."""
    parts = value.split()
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    if parts[0] != host:
        return f"pid {parts[1]} on {parts[0]}"  # another machine's process: cannot check, held
    return f"pid {parts[1]}" if alive(int(parts[1]), parts[2]) else None


def claim_window(display: str | None, handle: int, token: str, alive) -> str | None:
    """Mark the window ``handle`` as played by ``token`` unless a live env holds it; atomic across
    processes (the X server is grabbed between the read and the write). None when claimed, else
    who holds it."""
    import socket

    from Xlib import X
    from Xlib import error as xerror

    d = _open_display(display)
    try:
        atom, string = d.intern_atom(CLAIM_PROPERTY), d.intern_atom("STRING")
        win = d.create_resource_object("window", handle)
        d.grab_server()
        try:
            prop = win.get_full_property(atom, X.AnyPropertyType)
            value = prop.value if prop is not None else b""
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            holder = None if value == token else claim_owner(value, socket.gethostname(), alive)
            if holder is None:
                win.change_property(atom, string, 8, token.encode())
            return holder
        finally:
            d.ungrab_server()
            d.sync()
    except xerror.XError:  # the window closed meanwhile (the game restarted)
        return "nobody: the window closed"
    finally:
        d.close()


def release_window(display: str | None, handle: int, token: str) -> None:
    """Remove this env's claim from the window (nothing if another holds it or the window is gone)."""
    from Xlib import X
    from Xlib import error as xerror

    try:
        d = _open_display(display)
    except ScreenEnvError:
        return
    try:
        atom = d.intern_atom(CLAIM_PROPERTY)
        win = d.create_resource_object("window", handle)
        d.grab_server()
        try:
            prop = win.get_full_property(atom, X.AnyPropertyType)
            if prop is not None and prop.value in (token, token.encode()):
                win.delete_property(atom)
        finally:
            d.ungrab_server()
            d.sync()
    except xerror.XError:  # the game closed its window meanwhile
        pass
    finally:
        d.close()
