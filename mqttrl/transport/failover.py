"""Which broker of a failover list to try next (pure bookkeeping, no network).

The rule: a connect attempt that fails (no socket, no CONNACK, a refusal, or a drop before
the CONNACK) moves to the next broker of the list, wrapping around; a connection that
worked and then dropped is first tried again on the same broker. The paho glue reports
the events (:meth:`Failover.attempt_started` before each attempt, :meth:`Failover.connected`
on a granted CONNACK, :meth:`Failover.attempt_failed` on a failure) and points paho at
:attr:`Failover.current` when a move happens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

B = TypeVar("B")


class Failover(Generic[B]):
    """The broker list, the current broker and how many moves were made."""

    def __init__(self, brokers: Sequence[B], start: int = 0):
        if not brokers:
            raise ValueError("a failover list needs at least one broker")
        if not 0 <= start < len(brokers):
            raise ValueError(f"start index {start} is outside the list of {len(brokers)} brokers")
        self.brokers: tuple[B, ...] = tuple(brokers)
        self.index = start
        #: how many times the client moved to another broker (tells messages of two brokers apart)
        self.moves = 0
        #: an attempt is under way and has not been granted yet: its failure means "move on"
        self._pending = False

    @property
    def current(self) -> B:
        """The broker connected to, or being tried."""
        return self.brokers[self.index]

    def attempt_started(self) -> None:
        """A connect attempt begins (on the current broker)."""
        self._pending = True

    def connected(self) -> None:
        """The broker granted the attempt: a later drop is retried here first."""
        self._pending = False

    def attempt_failed(self, stopping: bool = False) -> tuple[B, B] | None:
        """An attempt failed or a connection dropped. ``(gone, next)`` when the next attempt
        goes to another broker (the move is made), None when it stays: a drop of a connection
        that worked, a second report of one failure, a list of one, or the client stopping."""
        if not self._pending or len(self.brokers) < 2 or stopping:
            return None
        self._pending = False  # one move per failed attempt
        gone = self.current
        self.index = (self.index + 1) % len(self.brokers)
        self.moves += 1
        return gone, self.current
