"""A base class for a storage that sends to a server: ``write`` queues, one thread sends and retries.

Telemetry calls ``write`` on its message loop, which must not wait on a network (the storage
contract, :class:`mqttrl.plugin.storage.Storage`). A storage built on :class:`BatchingStorage`
writes :meth:`~BatchingStorage.send` (one batch to the server; raise to have it retried) and
optionally :meth:`~BatchingStorage.encode` (a point into what ``send`` takes) and
:meth:`~BatchingStorage.shutdown`; the base keeps the queue, batches by size and time, retries a
failed batch with backoff (a server restart loses nothing), drops the oldest points only past
``max_pending`` (counted and logged), reports ``pending``, and flushes on close. The built-in
``influxdb`` storage is one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

from mqttrl.plugin.storage import Point

#: the first retry of a failed batch after this long, doubling up to MAX_BACKOFF_S
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0


class BatchingStorage:
    """Subclass it and write :meth:`send`; call ``super().__init__(...)`` last in your ``__init__``
    (it starts the sending thread). ``name`` names the thread and the log lines."""

    def __init__(
        self,
        name: str,
        batch_size: int = 1000,
        flush_interval_s: float = 1.0,
        max_pending: int = 1_000_000,
        log: logging.Logger | None = None,
    ):
        self.name = name
        self.batch_size, self.flush_interval_s, self.max_pending = batch_size, flush_interval_s, max_pending
        self.log = log or logging.getLogger(f"mqttrl.storage.{name}")
        self._pending: collections.deque[Any] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        #: points sent, dropped past max_pending, and failed sends (each retried)
        self.written = 0
        self.dropped = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._sender, name=f"{name}-writer", daemon=True)
        self._thread.start()

    # ---- what a storage writes -----------------------------------------------------------------
    def send(self, batch: list[Any]) -> None:
        """Send one batch (what :meth:`encode` made of up to ``batch_size`` points); raise to keep it
        and have it sent again after a backoff."""
        raise NotImplementedError(f"{type(self).__name__}.send(batch): send a batch to the server")

    def encode(self, point: Point) -> Any:
        """A point as :meth:`send` takes it (None: left out); the point itself by default."""
        return point

    def shutdown(self) -> None:
        """Release the connection, after the last batch went out (nothing by default)."""

    def describe_failure(self, error: Exception) -> str:
        """The line a failed send logs (the first and every 20th)."""
        return (
            f"{self.name}: a write failed ({str(error).splitlines()[0][:200] if str(error) else type(error).__name__})"
        )

    # ---- the storage contract --------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return len(self._pending)

    def write(self, points: list[Point]) -> None:
        """Queue the points (never waits on the server); past ``max_pending`` the oldest are dropped."""
        items = [item for item in map(self.encode, points) if item is not None]
        with self._cv:
            self._pending.extend(items)
            over = len(self._pending) - self.max_pending
            if over > 0:
                for _ in range(over):
                    self._pending.popleft()
                self.dropped += over
                self.log.error(
                    "%s unreachable for long: %d points pending; dropped the oldest %d (total dropped %d)",
                    self.name,
                    len(self._pending),
                    over,
                    self.dropped,
                )
            if len(self._pending) >= self.batch_size:
                self._cv.notify()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` s) until every queued point went out; whether they all did."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            with self._cv:
                self._cv.notify()
            time.sleep(0.05)
        return not self._pending

    def close(self, timeout: float = 15.0) -> None:
        """Flush what is pending (bounded wait), stop the thread, :meth:`shutdown`."""
        ok = self.flush(timeout)
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout=5)
        if not ok:
            self.log.error("%s: closing with %d points not written", self.name, len(self._pending))
        self.shutdown()

    # ---- the sending thread ------------------------------------------------------------------------
    def _sender(self) -> None:
        backoff = FIRST_BACKOFF_S
        while True:
            with self._cv:
                if not self._closing:
                    self._cv.wait(self.flush_interval_s)
                if not self._pending:
                    if self._closing:
                        return
                    continue
                batch = [self._pending[i] for i in range(min(self.batch_size, len(self._pending)))]
            if self._send_once(batch):
                with self._cv:
                    for _ in range(len(batch)):
                        self._pending.popleft()
                self.written += len(batch)
                backoff = FIRST_BACKOFF_S
                continue
            if self._closing:
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _send_once(self, batch: list[Any]) -> bool:
        try:
            self.send(batch)
            return True
        except Exception as exc:  # connection refused, 5xx, timeouts: keep the batch and retry
            self.failures += 1
            if self.failures == 1 or self.failures % 20 == 0:
                self.log.warning("%s; %d points held, retrying", self.describe_failure(exc), len(self._pending))
            return False
