"""The bounded outbox: messages waiting for the publisher thread, and its drop rule.

When full, a new message pushes out the oldest waiting message *of its own kind* (an old
sample makes room for a new sample, never for a heartbeat), or the oldest of all when none
of its kind waits. Every drop is counted per kind (reported in heartbeats) and a dropped
message's tag is kept for :meth:`Outbox.take_dropped`. Not thread-safe: the owner holds
its lock around every call but :meth:`Outbox.take_dropped`.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable

from mqttrl.transport.messages import Outgoing

log = logging.getLogger("mqttrl.transport")

#: at most one "outbox full" warning per this many seconds
LOG_EVERY_S = 5.0


class Outbox:
    def __init__(self, limit: int, name: str = "", clock: Callable[[], float] = time.monotonic):
        if limit < 1:
            raise ValueError(f"outbox limit {limit}: it must hold at least one message")
        self.limit = limit
        self.name = name
        self._clock = clock
        self._waiting: collections.deque[Outgoing] = collections.deque()
        #: messages dropped so far, per kind
        self.dropped: collections.Counter[str] = collections.Counter()
        self._dropped_tags: collections.deque[object] = collections.deque()
        self._last_log = float("-inf")

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, msg: Outgoing) -> Outgoing | None:
        """Queue ``msg`` last; the message dropped to make room for it, if one was."""
        dropped = self._drop_one(msg.kind) if len(self._waiting) >= self.limit else None
        self._waiting.append(msg)
        return dropped

    def take(self) -> Outgoing | None:
        """The oldest waiting message, or None."""
        return self._waiting.popleft() if self._waiting else None

    def discard_retained(self, topics: set[str]) -> int:
        """Forget the queued retained messages on ``topics``: a newer value of each is going out
        first (a birth after a reconnect), and these older ones sent after it would replace it on
        the broker. Not counted as dropped (superseded, not lost); returns how many."""
        keep = collections.deque(m for m in self._waiting if not (m.retain and m.topic in topics))
        gone = len(self._waiting) - len(keep)
        self._waiting = keep
        return gone

    def put_back(self, msg: Outgoing) -> None:
        """``msg`` could not be sent: it goes first again (not counted against the limit)."""
        self._waiting.appendleft(msg)

    def take_dropped(self) -> list[object]:
        """Tags of the tagged messages dropped since the last call (safe from any one thread)."""
        out = []
        while self._dropped_tags:
            out.append(self._dropped_tags.popleft())
        return out

    def _drop_one(self, kind: str) -> Outgoing:
        for i, m in enumerate(self._waiting):
            if m.kind == kind:
                del self._waiting[i]
                break
        else:
            m = self._waiting.popleft()
        self.dropped[m.kind] += 1
        if m.tag is not None:
            self._dropped_tags.append(m.tag)
        now = self._clock()
        if now - self._last_log > LOG_EVERY_S:
            self._last_log = now
            log.warning(
                "%s: outbox full (%d messages; broker slow or unreachable); dropped oldest %s messages so far: %s",
                self.name,
                self.limit,
                m.kind,
                dict(self.dropped),
            )
        return m
