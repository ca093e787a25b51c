"""The acknowledgement ledger: which tagged messages the broker has acknowledged.

Each tracked message is a handle with ``is_published()`` (paho's ``MQTTMessageInfo``, which
paho flags when the PUBACK comes), its tag, and when it was handed over. Handles rather
than message ids: a PUBACK can arrive before the publishing thread gets the id back from
paho, and paho reuses ids after 65535 messages; a handle has neither problem.
Thread-safe: the publisher thread tracks, any one other thread takes.
"""

from __future__ import annotations

import collections
import threading
from typing import Protocol


class Handle(Protocol):
    def is_published(self) -> bool: ...


class AckLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (handle, tag, sent at) in the order they were handed over, not yet reported acked
        self._waiting: collections.deque[tuple[Handle, object, float]] = collections.deque()

    def __len__(self) -> int:
        """Messages tracked and not yet reported by :meth:`take_acked`."""
        with self._lock:
            return len(self._waiting)

    def track(self, handle: Handle, tag: object, now: float) -> None:
        """A tagged message was handed over at ``now``; report ``tag`` once it is acknowledged."""
        with self._lock:
            self._waiting.append((handle, tag, now))

    def take_acked(self) -> list[object]:
        """Tags of the messages acknowledged since the last call, in the order they were sent."""
        with self._lock:
            if not self._waiting:
                return []
            done, waiting = [], collections.deque()
            for entry in self._waiting:  # one look per message: an ack landing now is seen next time
                (done.append(entry[1]) if entry[0].is_published() else waiting.append(entry))
            self._waiting = waiting
        return done

    def unacked(self) -> int:
        """How many tracked messages the broker has not acknowledged yet."""
        with self._lock:
            return sum(1 for handle, _tag, _sent in self._waiting if not handle.is_published())

    def take_unacked(self) -> list[object]:
        """Tags of the messages still unacknowledged, forgotten here (at stop: what never made it)."""
        with self._lock:
            left = [tag for handle, tag, _sent in self._waiting if not handle.is_published()]
            self._waiting = collections.deque(e for e in self._waiting if e[0].is_published())
        return left

    def oldest_unacked_age(self, now: float) -> float:
        """Seconds since the oldest message still unacknowledged was handed over (0.0: none)."""
        with self._lock:
            for handle, _tag, sent_at in self._waiting:
                if not handle.is_published():
                    return max(0.0, now - sent_at)
        return 0.0
