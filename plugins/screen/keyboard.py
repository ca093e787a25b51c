"""The keyboard every key backend is (:mod:`.keys`' XTest and pynput, :mod:`.sendinput`'s SendInput):
only changes are sent, a held key is one press; the backends send one key each (:meth:`Keyboard._send`)."""

from __future__ import annotations

import time
from collections.abc import Iterable


class Keyboard:
    """Presses and releases named keys; subclasses send them (:meth:`_send`)."""

    def __init__(self) -> None:
        self.held: frozenset[str] = frozenset()

    def check(self, names: Iterable[str]) -> None:
        """Raises :class:`ScreenEnvError` for a name this backend cannot press."""

    def hold(self, keys: Iterable[str]) -> None:
        """Exactly ``keys`` down from now on: release the others, press the new ones."""
        wanted = frozenset(keys)
        for k in sorted(self.held - wanted):
            self._send(k, False)
        for k in sorted(wanted - self.held):
            self._send(k, True)
        self.held = wanted
        self._flush()

    def tap(self, keys: Iterable[str], hold_s: float = 0.05) -> None:
        """Press ``keys`` for ``hold_s`` (long enough for a game that polls once a frame), then release all."""
        self.hold(keys)
        time.sleep(hold_s)
        self.hold(())

    def press(self, keys: Iterable[str]) -> None:
        """Each of ``keys`` down, then up, at once and in one flush: a key-down event for a game that
        fires on it (a shot, a jump, a menu), again at every call; nothing stays held. A game that
        only polls which keys are down once a frame misses it: :meth:`strike` is for that."""
        wanted = self._down(keys)
        for k in reversed(wanted):
            self._send(k, False)
        self.held = frozenset()
        self._flush()

    def strike(self, keys: Iterable[str]) -> None:
        """Exactly ``keys`` down from now on, each with a key-down event of its own (one that was
        down goes up first, in the same flush): a tap's start, that a game polling the keys once a
        frame sees while they stay down; :meth:`release_all` ends it."""
        self.held = frozenset(self._down(keys))
        self._flush()

    def _down(self, keys: Iterable[str]) -> list[str]:
        """The held keys up, then ``keys`` down (not flushed); ``keys`` sorted."""
        wanted = sorted(set(keys))
        for k in sorted(self.held):
            self._send(k, False)
        self.held = frozenset()
        for k in wanted:
            self._send(k, True)
        return wanted

    def release_all(self) -> None:
        self.hold(())

    def close(self) -> None:
        self.release_all()

    def _send(self, key: str, down: bool) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        pass
