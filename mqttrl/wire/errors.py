"""Rejections: why a received payload was refused, counted by reason."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

#: The reasons a payload can be rejected. Metrics report counts under these keys.
REASONS = (
    "garbage",  # not our format at all (bad magic, not JSON, ...)
    "truncated",  # shorter than its header says
    "protocol_version",  # a protocol version this node does not speak
    "bad_header",  # header present but malformed
    "wrong_run",  # header names another run
    "sender_mismatch",  # header worker differs from the topic's worker
    "unknown_sender",  # worker never announced itself (no birth message)
    "missing_field",
    "unknown_field",
    "dtype",
    "shape",
    "non_finite",  # NaN or inf in a float field
    "out_of_range",  # e.g. action index outside the action space
    "oversize",
    "stale_version",  # model version older than the staleness window
    "future_version",  # model version the learner never published
    "wrong_round",  # synchronous mode: sample for another round
    "old_epoch",  # synchronous mode: made with a model of a previous learner incarnation
    "future_epoch",  # made with a model of a learner incarnation newer than this one (two learners?)
    "duplicate",  # sequence number already seen
    "checksum",
    "codec",  # compressed with a codec this node does not know or has not installed
    "bad_compression",  # compressed data that does not decompress to exactly its declared size
    "decompression_bomb",  # compressed data that declares, or decompresses to, more than allowed
    "bad_value",
    "internal_error",  # a handler raised unexpectedly: a bug, logged with its traceback
)


class Rejected(Exception):
    """A payload was refused. ``reason`` is one of :data:`REASONS`. ``quiet``: counted, not logged
    (the refusing code said it once already, in its own words: a worker of another protocol)."""

    def __init__(self, reason: str, detail: str, quiet: bool = False):
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.quiet = quiet


class RejectionCounter:
    """Thread-safe counts of rejections by reason, with rate-limited logging.

    Logging every bad message would let a flood of garbage fill the disk, so
    each reason logs at most once per ``log_every`` seconds, with the count of
    the ones it skipped.
    """

    def __init__(self, logger: logging.Logger, log_every: float = 5.0):
        self._log = logger
        self._every = log_every
        self._counts: Counter[str] = Counter()
        self._last_log: dict[str, float] = {}
        self._skipped: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, rejection: Rejected, source: str = "") -> None:
        now = time.monotonic()
        with self._lock:
            self._counts[rejection.reason] += 1
            if rejection.quiet:
                return
            last = self._last_log.get(rejection.reason, -1e18)
            if now - last < self._every:
                self._skipped[rejection.reason] += 1
                return
            skipped = self._skipped.pop(rejection.reason, 0)
            self._last_log[rejection.reason] = now
        more = f" (+{skipped} more since last report)" if skipped else ""
        self._log.warning("rejected %s: %s%s", source or "payload", rejection, more)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())
