"""Built-in storage ``influxdb``: InfluxDB 2.x/3.x and 1.8+ through influxdb-client.

Settings (option, else environment variable): ``url`` (INFLUXDB_URL, default
http://127.0.0.1:8086), ``token`` (INFLUXDB_TOKEN; for InfluxDB 1.8 use
"user:password" or leave empty), ``org`` (INFLUXDB_ORG, "-" for 1.8),
``bucket`` (INFLUXDB_BUCKET, "database/retention" for 1.8), ``batch_size``,
``flush_interval_s``, ``max_pending`` (points held while the database is down).

Points are batched by a background thread and written with influxdb-client's
write API. A batch that fails stays queued and is retried with backoff, so a
database restart loses nothing (influxdb-client's own batching mode gives up
on a batch after its retry budget and drops it). Only when ``max_pending`` is
exceeded are the oldest points dropped, and that is counted and logged.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable

from mqttrl import hookimpl
from mqttrl.plugin import Point, Storage, to_line

log = logging.getLogger("mqttrl.storage.influxdb")


class InfluxStorage:
    """A :class:`mqttrl.plugin.storage.Storage` for InfluxDB: ``write`` queues, a thread sends and retries."""

    def __init__(self, settings: dict):
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        get = lambda key, env, default=None: settings.get(key, os.environ.get(env, default))  # noqa: E731
        self.url = get("url", "INFLUXDB_URL", "http://127.0.0.1:8086")
        self.token = get("token", "INFLUXDB_TOKEN", "")
        self.org = get("org", "INFLUXDB_ORG", "-")
        self.bucket = get("bucket", "INFLUXDB_BUCKET", "mqttrl")
        self.batch_size = int(settings.get("batch_size", 1000))
        self.flush_interval_s = float(settings.get("flush_interval_s", 1.0))
        self.max_pending = int(settings.get("max_pending", 1_000_000))
        self.timeout_ms = int(settings.get("timeout_ms", 10_000))
        self._client = InfluxDBClient(url=self.url, token=self.token, org=self.org, timeout=self.timeout_ms)
        self._api = self._client.write_api(write_options=SYNCHRONOUS)
        self._pending: collections.deque[str] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self.written = 0
        self.dropped = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._flusher, name="influxdb-writer", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def write(self, points: list[Point]) -> None:
        lines = [line for line in map(to_line, points) if line is not None]
        with self._cv:
            self._pending.extend(lines)
            over = len(self._pending) - self.max_pending
            if over > 0:
                for _ in range(over):
                    self._pending.popleft()
                self.dropped += over
                log.error(
                    "InfluxDB unreachable for long: %d points pending; dropped the oldest %d (total dropped %d)",
                    len(self._pending),
                    over,
                    self.dropped,
                )
            if len(self._pending) >= self.batch_size:
                self._cv.notify()

    def _flusher(self) -> None:
        backoff = 0.5
        while True:
            with self._cv:
                if not self._closing:
                    self._cv.wait(self.flush_interval_s)
                if not self._pending:
                    if self._closing:
                        return
                    continue
                batch = [self._pending[i] for i in range(min(self.batch_size, len(self._pending)))]
            if self._send(batch):
                with self._cv:
                    for _ in range(len(batch)):
                        self._pending.popleft()
                self.written += len(batch)
                backoff = 0.5
                continue
            if self._closing:
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _send(self, batch: list[str]) -> bool:
        try:
            self._api.write(bucket=self.bucket, org=self.org, record=batch)
            return True
        except Exception as exc:  # connection refused, 5xx, timeouts: keep the batch and retry
            self.failures += 1
            if self.failures == 1 or self.failures % 20 == 0:
                log.warning(
                    "InfluxDB write to %s failed (%s); %d points held, retrying",
                    self.url,
                    str(exc).splitlines()[0][:200],
                    len(self._pending),
                )
            return False

    def flush(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            with self._cv:
                self._cv.notify()
            time.sleep(0.05)
        return not self._pending

    def close(self, timeout: float = 15.0) -> None:
        """Flush what is pending (bounded wait), then close the client."""
        ok = self.flush(timeout)
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout=5)
        if not ok:
            log.error("closing with %d points not written to InfluxDB at %s", len(self._pending), self.url)
        self._client.close()


@hookimpl
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    register(
        "influxdb",
        InfluxStorage,
        "InfluxDB 2.x/3.x/1.8+ via influxdb-client (url, token, org, bucket or INFLUXDB_* env vars)",
    )
