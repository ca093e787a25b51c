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

import logging
import os
from collections.abc import Callable
from typing import Any

from mqttrl import hookimpl
from mqttrl.plugin import BatchingStorage, Point, Storage, to_line

log = logging.getLogger("mqttrl.storage.influxdb")


class InfluxStorage(BatchingStorage):
    """A :class:`mqttrl.plugin.storage.Storage` for InfluxDB: the toolkit's batching storage (``write``
    queues, a thread sends and retries) over influxdb-client's synchronous write API."""

    def __init__(self, settings: dict):
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        def get(key: str, env: str, default: str) -> Any:
            """The setting ``key``, else the environment's ``env``, else ``default``."""
            return settings.get(key, os.environ.get(env, default))

        self.url = get("url", "INFLUXDB_URL", "http://127.0.0.1:8086")
        self.token = get("token", "INFLUXDB_TOKEN", "")
        self.org = get("org", "INFLUXDB_ORG", "-")
        self.bucket = get("bucket", "INFLUXDB_BUCKET", "mqttrl")
        self.timeout_ms = int(settings.get("timeout_ms", 10_000))
        self._client = InfluxDBClient(url=self.url, token=self.token, org=self.org, timeout=self.timeout_ms)
        self._api = self._client.write_api(write_options=SYNCHRONOUS)
        super().__init__(
            "InfluxDB",
            batch_size=int(settings.get("batch_size", 1000)),
            flush_interval_s=float(settings.get("flush_interval_s", 1.0)),
            max_pending=int(settings.get("max_pending", 1_000_000)),
            log=log,
        )

    def encode(self, point: Point) -> str | None:
        return to_line(point)

    def send(self, batch: list[str]) -> None:
        self._api.write(bucket=self.bucket, org=self.org, record=batch)

    def describe_failure(self, error: Exception) -> str:
        return f"InfluxDB write to {self.url} failed ({str(error).splitlines()[0][:200]})"

    def shutdown(self) -> None:
        self._client.close()


@hookimpl
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    register(
        "influxdb",
        InfluxStorage,
        "InfluxDB 2.x/3.x/1.8+ via influxdb-client (url, token, org, bucket or INFLUXDB_* env vars)",
    )
