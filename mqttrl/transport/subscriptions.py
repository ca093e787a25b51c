"""Subscription bookkeeping for one connection: what was subscribed, which SUBACKs came,
and when a subscription the broker refused is made again.

A refused subscription (a failure code in its SUBACK: an ACL, or NATS's MQTT timing out
while creating its JetStream consumer on a cluster that lost a node) is tried again after
:data:`~mqttrl.transport.backoff.SUBSCRIBE_RETRY` (0.5 s doubling up to 8 s) until granted.
:attr:`SubscriptionBook.settled` is set once every SUBSCRIBE of the connection's setup has
its SUBACK. No network here: :meth:`SubscriptionBook.subscribe` is given the function that
sends, so plain functions stand in for paho in tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import attrs

from mqttrl.transport.backoff import SUBSCRIBE_RETRY, Backoff

#: sends one SUBSCRIBE; its message id, or None when there is no connection
Send = Callable[[str, int], "int | None"]


def is_refusal(code: object) -> bool:
    """A SUBACK reason code that refuses (MQTT 5 reason codes, or 3.1.1's 0x80)."""
    return bool(getattr(code, "is_failure", False)) or code == 0x80


@attrs.frozen
class Refusal:
    """The broker refused the subscription to ``topic`` (``reason``), the ``tries``-th time;
    it is made again in ``delay`` seconds."""

    topic: str
    reason: object
    tries: int
    delay: float

    @property
    def worth_logging(self) -> bool:
        """The first three refusals, then one in ten (a NATS election can last a while)."""
        return self.tries <= 3 or self.tries % 10 == 0


class SubscriptionBook:
    def __init__(self, retry: Backoff = SUBSCRIBE_RETRY):
        self.retry = retry
        #: held while a SUBSCRIBE is sent, so its SUBACK (another thread) finds its id registered
        self._lock = threading.Lock()
        self._sent: dict[int, tuple[str, int]] = {}  # id -> (filter, qos) awaiting review
        self._acks: dict[int, list] = {}  # id -> the SUBACK's reason codes
        self._retry: dict[tuple[str, int], tuple[float, int]] = {}  # -> (next try at, tries)
        self._setup_ids: set[int] = set()
        #: every SUBSCRIBE of this connection's setup has its SUBACK (granted, or refused and retried)
        self.settled = threading.Event()
        #: when :meth:`review` next has work (a SUBACK to read, a retry due); a float read
        #: without the lock keeps it off the publishing hot path
        self.check_at = float("inf")
        #: SUBSCRIBEs the broker refused so far (each is tried again until granted)
        self.refused = 0

    def new_connection(self) -> None:
        """A new connection: nothing is subscribed on it yet, every subscription is made again."""
        with self._lock:
            self._sent.clear()
            self._acks.clear()
            self._retry.clear()
            self._setup_ids = set()
            self.settled.clear()
            self.check_at = float("inf")

    def subscribe(self, topic: str, qos: int, send: Send) -> int | None:
        """Send a SUBSCRIBE through ``send``; its id, or None when there was no connection."""
        with self._lock:
            mid = send(topic, qos)
            if mid is not None:
                self._sent[mid] = (topic, qos)
            return mid

    def setup(self, subscriptions: Iterable[tuple[str, int]], send: Send) -> None:
        """Subscribe to each of a new connection's filters; :attr:`settled` once all are answered."""
        mids = [self.subscribe(topic, qos, send) for topic, qos in subscriptions]
        with self._lock:  # SUBACKs that already came are in _acks
            self._setup_ids = {m for m in mids if m is not None and m not in self._acks}
            if not self._setup_ids:
                self.settled.set()

    def acked(self, mid: int, codes: Iterable[object]) -> None:
        """A SUBACK came (network thread): record it for :meth:`review`."""
        with self._lock:
            self._acks[mid] = list(codes)
            self.check_at = 0.0
            if mid in self._setup_ids:
                self._setup_ids.discard(mid)
                if not self._setup_ids:
                    self.settled.set()

    def due(self, now: float) -> bool:
        """A SUBACK to read or a refused subscription to make again."""
        return now >= self.check_at

    def review(self, now: float) -> tuple[list[tuple[str, int]], list[Refusal]]:
        """Read the SUBACKs that came: schedule each refused subscription again. Returns the
        subscriptions due to be made again now, and the refusals just read."""
        with self._lock:
            refusals = [r for mid in list(self._acks.keys() & self._sent.keys()) if (r := self._read(mid, now))]
            due = [key for key, (when, _) in self._retry.items() if when <= now]
            for key in due:
                self._retry[key] = (float("inf"), self._retry[key][1])  # until its SUBACK comes
            # the next look: a SUBACK in meanwhile (acked sets 0), else the next retry due
            pending_acks = bool(self._acks.keys() & self._sent.keys())
            next_retry = min((when for when, _ in self._retry.values()), default=float("inf"))
            self.check_at = 0.0 if pending_acks else next_retry
        return due, refusals

    def _read(self, mid: int, now: float) -> Refusal | None:
        topic, qos = self._sent.pop(mid)
        failed = [code for code in self._acks.pop(mid) if is_refusal(code)]
        if not failed:
            self._retry.pop((topic, qos), None)
            return None
        tries = self._retry.get((topic, qos), (0.0, 0))[1] + 1
        delay = self.retry.delay(tries)
        self._retry[(topic, qos)] = (now + delay, tries)
        self.refused += 1
        return Refusal(topic, failed[0], tries, delay)
