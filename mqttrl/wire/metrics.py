"""The learner's metrics (``metrics/learner``, QoS 0, every ``learner.metrics_interval_s``).

The learner node fills it from its core's snapshot, its algorithm's counters and its fleet timing
(:meth:`LearnerMetrics.of`: keyword arguments, so a key the record does not declare is an error
at the source); telemetry, ``mqttrl status`` and ``mqttrl train``'s record read it.
"""

from __future__ import annotations

import attrs

from .record import JsonRecord, wire_field


@attrs.define
class LearnerMetrics(JsonRecord):
    """What the learner did in the last interval and so far."""

    updates: int = wire_field("gradient updates so far")
    model_version: int = wire_field("its newest model version")
    time: float | None = wire_field("its wall clock when sent", None)
    updates_per_s: float | None = wire_field("gradient updates per second over the interval", None)
    samples: int | None = wire_field("transitions taken in so far", None)
    samples_per_s: float | None = wire_field("transitions taken in per second over the interval", None)
    batches: int | None = wire_field("sample batches taken in so far", None)
    inbox: int | None = wire_field("messages waiting in its inbox", None)
    inbox_dropped: int | None = wire_field("messages dropped from a full inbox", None)
    paused_workers: bool | None = wire_field("whether it has paused the workers (flow control)", None)
    rejected: dict | None = wire_field("messages refused so far, by reason", None)
    missing_batches: int | None = wire_field("batches the workers' sequence numbers say never came", None)
    worker_restarts: int | None = wire_field("worker processes restarted under a known name", None)
    env_restarts: int | None = wire_field("envs the workers made afresh after their game crashed", None)
    epoch: int | None = wire_field("this learner process's epoch", None)
    old_epoch_batches: int | None = wire_field("batches made by an earlier epoch's model, taken in", None)
    workers_online: int | None = wire_field("workers online now", None)
    workers_known: int | None = wire_field("workers in its table", None)
    workers: dict | None = wire_field("per worker (a turn of the table in big fleets): online, lag, samples ...", None)
    train: dict | None = wire_field("the algorithm's training metrics (loss, q_mean, ...)", None)
    round: dict | None = wire_field("sync mode: the open round (members, delivered, age); null in async mode", None)
    timing: dict | None = wire_field("where its time went in the interval, per block", None)
    timing_total: dict | None = wire_field("seconds per block since it started", None)
    worker_timing: dict | None = wire_field("the workers' blocks over the interval (from heartbeats)", None)
    worker_timing_total: dict | None = wire_field("the workers' blocks since it started", None)
    realtime: dict | None = wire_field("real-time workers' control periods combined; null when none", None)
    act_latency: dict | None = wire_field("capture to action over the run's steps; null before a report", None)
    uptime_s: float | None = wire_field("seconds since it started", None)

    def point_fields(self) -> dict[str, float | int]:
        """The fields of telemetry's ``learner`` point less the timing ones (docs/telemetry.md's
        table, held by a test): the counters, the rates, the refusals and ``train_<metric>``."""
        fields: dict[str, float | int] = {}
        for key in ("updates", "samples", "model_version", "workers_online", "inbox", "missing_batches"):
            value = getattr(self, key)
            if value is not None:
                fields[key] = value
        for key in ("updates_per_s", "samples_per_s"):
            value = getattr(self, key)
            if value is not None:
                fields[key] = value
        fields["rejected_total"] = self.rejected_total()
        for key, value in (self.train or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                fields[f"train_{key}"] = float(value)
        return fields

    def rejected_total(self) -> int:
        """Messages refused so far, all reasons."""
        return int(sum(v for v in (self.rejected or {}).values() if isinstance(v, int)))


@attrs.define
class InferenceMetrics(JsonRecord):
    """What an inference server served in the last interval."""

    server: str | None = wire_field("the server's name", None)
    model_version: int | None = wire_field("the model version it serves", None)
    epoch: int | None = wire_field("the learner epoch of that model", None)
    requests_per_s: float | None = wire_field("requests answered per second", None)
    rows_per_s: float | None = wire_field("observations evaluated per second", None)
    mean_batch_rows: float | None = wire_field("observations per forward, on average", None)
    service_ms_p50: float | None = wire_field("median time from a request's arrival to its reply", None)
    service_ms_p99: float | None = wire_field("99th percentile of the same", None)
    rejected: dict | None = wire_field("messages refused so far, by reason", None)
    time: float | None = wire_field("its wall clock when sent", None)
