"""A person takes the game over from the agent, and gives it back (``takeover_key`` in ``[env.kwargs]``).

HIL-SERL's takeover, for a game on a screen: while the policy plays, the kit watches one key that no
action uses (``takeover_key``, e.g. ``"F12"``). When a person presses it, the kit lets go of the
policy's keys and from the next step on sends none: the person plays with the keyboard, and each
step reports the action of the keys the person held (``info["demo_action"]``, which the worker
records instead of the policy's, and ``info["intervention"] = True``). Control goes back to the
policy when the person presses the key again, or when none of the actions' keys has been held for
``takeover_idle_s`` seconds (0: only the key gives it back). One log line each way.

The keys are read by a thread of their own (:class:`X11KeyState`: ``XQueryKeymap`` 200 times a
second on its own X connection), so that a press shorter than a control period is still seen and
the control loop never waits for the X server: a change of hands takes effect at the next step,
within one period. :class:`Takeover` is the rule, plain logic over what the keys did.

Linux (X11, Xvfb included) only; on Windows the option is refused in one line (no key state reader
there yet). Under the tests a scripted person presses keys with ``xdotool`` on the game's display;
a real person at a real keyboard has not been tested (docs/demonstrations.md).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .basics import ScreenEnvError, missing

log = logging.getLogger("mqttrl.screen")

#: how often the key state is read (a person's shortest press is about 50 ms)
POLL_HZ = 200.0


@dataclass(frozen=True)
class Seen:
    """What the keys did since the last look: held now, and went down meanwhile (a press shorter
    than a step is among ``went_down`` though no longer held)."""

    held: frozenset[str]
    went_down: frozenset[str]
    #: the reader's poll count at the time: a key released just now may still read as held until
    #: the poll after the release
    poll: int = 0


class X11KeyState:
    """The state of ``names`` on an X display, read by a thread (``XQueryKeymap``): :meth:`take`
    gives what was held and what went down since the last call, and never waits for the server."""

    def __init__(self, display: str | None, names: Sequence[str], poll_hz: float = POLL_HZ):
        try:
            from Xlib import XK
            from Xlib import display as xdisplay
        except ImportError:
            raise missing("reading a person's keys (takeover_key)", "python-xlib") from None
        try:
            self.d = xdisplay.Display(display or None)
        except Exception as e:  # Xlib's DisplayError, ConnectionClosedError
            raise ScreenEnvError(f"screen env: cannot open X display {display or '$DISPLAY'!r}: {e}") from None
        self.codes: dict[str, int] = {}
        for name in names:
            sym = XK.string_to_keysym(name)
            code = self.d.keysym_to_keycode(sym) if sym else 0
            if not code:
                self.d.close()
                raise ScreenEnvError(
                    f"screen env: unknown key {name!r} (takeover): use X keysym names (F12, Pause ...)"
                )
            self.codes[name] = code
        self.period = 1.0 / poll_hz
        self._lock = threading.Lock()
        self._held: frozenset[str] = frozenset()
        self._went_down: set[str] = set()
        self._polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="screen-takeover-keys", daemon=True)
        self._thread.start()

    def _read(self) -> frozenset[str]:
        keymap = self.d.query_keymap()
        return frozenset(n for n, c in self.codes.items() if keymap[c // 8] & (1 << (c % 8)))

    def _watch(self) -> None:
        while not self._stop.wait(self.period):
            try:
                held = self._read()
            except Exception as e:  # the display went away: the env says so at its next frame
                log.debug("takeover keys: %s", e)
                return
            with self._lock:
                self._went_down |= held - self._held
                self._held = held
                self._polls += 1

    def take(self) -> Seen:
        with self._lock:
            seen = Seen(self._held, frozenset(self._went_down), self._polls)
            self._went_down = set()
        return seen

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        try:
            self.d.close()
        except Exception:
            pass


class Takeover:
    """Who plays: the policy, or the person who pressed ``key``. :meth:`look` is called once a step
    with what the keys did (:class:`Seen`) and the time; :meth:`person_action` is then the action
    index of the keys the person holds. Plain logic: the tests drive it with hand-made ``Seen``s."""

    def __init__(self, key: str, actions: Sequence[tuple[str, ...]], idle_s: float, clock: Callable[[], float]):
        self.key, self.idle_s, self.clock = key, idle_s, clock
        self.actions = [frozenset(a) for a in actions]
        #: the keys the actions use (a person's input is any of them)
        self.action_keys = frozenset().union(*self.actions) if self.actions else frozenset()
        self.by_person = False
        self.last_input_at = 0.0
        self._last_action = self._idle_action()
        #: steps played by the person, and takeovers, since the env was made
        self.person_steps = 0
        self.takeovers = 0
        #: the kit's own keys at the takeover and the poll then: they are let go of at once, but a
        #: look before the reader's next poll would still see them held
        self._stale: tuple[frozenset[str], int] | None = None

    def _idle_action(self) -> int:
        """The action of no key (a no-op), else the first."""
        return next((i for i, a in enumerate(self.actions) if not a), 0)

    def look(self, seen: Seen, own: frozenset[str] = frozenset()) -> str | None:
        """Take what the keys did, less ``own`` (the keys the kit itself holds for the policy: the
        X server cannot tell them from a person's); the change of hands it makes, as words for
        the log, or None."""
        now = self.clock()
        if self._stale is not None:
            if seen.poll > self._stale[1] + 1:
                self._stale = None
            else:
                own = own | self._stale[0]
        seen_own, seen = own, Seen(seen.held - own, seen.went_down - own, seen.poll)
        if seen.held & self.action_keys or seen.went_down & self.action_keys:
            self.last_input_at = now
        change = None
        if self.key in seen.went_down:
            self.by_person = not self.by_person
            if self.by_person:
                self.takeovers += 1
                self.last_input_at = now
                self._stale = (seen_own, seen.poll)
                change = f"a person took over ({self.key} pressed)"
            else:
                change = f"control back to the policy ({self.key} pressed again)"
        elif self.by_person and self.idle_s > 0 and now - self.last_input_at >= self.idle_s:
            self.by_person = False
            change = f"control back to the policy (no key for {self.idle_s:g} s)"
        if self.by_person:
            self._last_action = self._action_of(seen.held & self.action_keys)
        return change

    def _action_of(self, held: frozenset[str]) -> int:
        """The action whose keys are exactly ``held``; else the one that holds most of them (ties:
        the first); nothing held: the no-op action."""
        if not held:
            return self._idle_action()
        for i, keys in enumerate(self.actions):
            if keys == held:
                return i
        overlap = [len(keys & held) - len(keys - held) for keys in self.actions]
        return max(range(len(self.actions)), key=lambda i: (overlap[i], -i))

    def person_action(self) -> int:
        self.person_steps += 1
        return self._last_action


def check_takeover(o: Any) -> None:
    """One line for a takeover that cannot work (the screen options ``o``), before any window is looked for."""
    key, idle_s, actions = o.takeover_key, o.takeover_idle_s, o.keys
    if not isinstance(key, str) or not isinstance(idle_s, int | float) or not isinstance(o.takeover_start, bool):
        raise ScreenEnvError(f'screen env: takeover_key={key!r}: a key name such as "F12", takeover_idle_s in seconds')
    if o.takeover_start and not key:
        raise ScreenEnvError('screen env: takeover_start = true needs takeover_key = "F12" (or another key)')
    if not key:
        return
    if o.gamepad:
        raise ScreenEnvError("screen env: takeover_key works with keys, not with a gamepad (gamepad = [...])")
    if any(key in a for a in actions):
        raise ScreenEnvError(f"screen env: takeover_key {key!r} is one of the actions' keys: pick a key no action uses")
    if idle_s < 0:
        raise ScreenEnvError(f"screen env: takeover_idle_s={idle_s!r}: seconds >= 0 (0: only the key gives it back)")
    if sys.platform != "linux":
        raise ScreenEnvError(f"screen env: takeover_key reads the keyboard on Linux (X11) only; this is {sys.platform}")


def open_takeover(opts: Any, display: str | None, actions: Sequence[tuple[str, ...]]):
    """``(Takeover, X11KeyState)`` for the options' ``takeover_key`` (with ``takeover_start`` the
    person plays from the first step), or ``(None, None)`` when it is not set."""
    if not opts.takeover_key:
        return None, None
    action_keys = sorted({k for a in actions for k in a})
    keys = X11KeyState(display, [opts.takeover_key, *action_keys])
    takeover = Takeover(opts.takeover_key, actions, opts.takeover_idle_s, time.monotonic)
    takeover.by_person = bool(opts.takeover_start)
    return takeover, keys
