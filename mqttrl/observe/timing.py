"""Where the time goes: per-block seconds and control-period errors, as plain objects.

A node times its blocks (a worker: env step, forward, encode, publish, wait; a learner:
receive, sample, train step, publish) with :class:`BlockTimes`, and a real-time worker
records how late each control period ended with :class:`PeriodStats`. Both are read the same
way by heartbeats, metrics messages, telemetry, ``summary.json`` and the Prometheus endpoint
(:mod:`mqttrl.observe.prometheus`): a snapshot is a small JSON-able dict. No clock reads here except
in :meth:`BlockTimes.timed`, which takes an injectable clock, so tests drive them with made-up
times.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mqttrl.wire.heartbeat import Heartbeat

#: upper edges (ms) of the control-period error histogram; the last bucket is everything above
ERROR_BUCKETS_MS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    1.5,
    2,
    2.5,
    3,
    4,
    5,
    7.5,
    10,
    15,
    20,
    30,
    50,
    75,
    100,
    150,
    250,
    500,
    1000,
    2500,
    5000,
)
#: the same edges in seconds, a plain list: :func:`bucket_of` bisects it (a fraction of numpy's call
#: cost; it runs once per control period and once per env step of every worker)
_EDGES_S = [edge / 1000.0 for edge in ERROR_BUCKETS_MS]


def bucket_of(seconds: float) -> int:
    """The index of the :data:`ERROR_BUCKETS_MS` bucket that holds ``seconds`` (upper edges
    inclusive; the last index is everything above)."""
    return bisect.bisect_left(_EDGES_S, seconds)


class BlockTimes:
    """Seconds spent per named block, and how often each ran; :meth:`take` reads and clears
    the window, while :attr:`total` keeps counting (Prometheus counters read it)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.window: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.total: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, block: str, seconds: float) -> None:
        self.window[block] = self.window.get(block, 0.0) + seconds
        self.calls[block] = self.calls.get(block, 0) + 1
        self.total[block] = self.total.get(block, 0.0) + seconds
        self.counts[block] = self.counts.get(block, 0) + 1

    @contextmanager
    def timed(self, block: str):
        t0 = self.clock()
        try:
            yield
        finally:
            self.add(block, self.clock() - t0)

    def take(self) -> dict[str, dict[str, float]]:
        """Per block, seconds and calls since the last take: ``{"forward": {"s": .., "n": ..}}``."""
        out = {b: {"s": round(s, 6), "n": self.calls.get(b, 0)} for b, s in self.window.items()}
        self.window = {}
        self.calls = {}
        return out


def add_windows(windows: Iterable[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """The sum of several :meth:`BlockTimes.take` windows (the fleet's, from heartbeats)."""
    out: dict[str, dict[str, float]] = {}
    for w in windows:
        for block, v in w.items():
            if not isinstance(v, Mapping):
                continue
            o = out.setdefault(block, {"s": 0.0, "n": 0})
            o["s"] += float(v.get("s", 0.0) or 0.0)
            o["n"] += int(v.get("n", 0) or 0)
    return out


def percentile_from_histogram(counts: list[int], q: float) -> float | None:
    """The upper edge (ms) of the bucket that holds quantile ``q`` of a histogram over
    :data:`ERROR_BUCKETS_MS` (an upper bound: the fleet's percentiles come from summed histograms)."""
    total = sum(counts)
    if not total:
        return None
    need = q * total
    acc = 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= need:
            return ERROR_BUCKETS_MS[i] if i < len(ERROR_BUCKETS_MS) else float("inf")
    return float("inf")


class PeriodStats:
    """How late control periods ended: exact p50/p99/max of the recent window (bounded ring),
    a histogram of the whole run, and the counters a real-time worker reports.

    ``overruns``: periods that ended later than the tolerance; ``skipped``: whole periods
    missed (the schedule skipped them instead of bursting to catch up); ``lost_s``: their
    time; ``reset_s`` and ``paused_s``: time excused (a game resetting or paused is not late).
    """

    def __init__(self, window: int = 4096):
        self._ring = np.zeros(window, dtype=np.float64)
        self._n = 0  # values in the ring since the last take (capped at its size)
        self._pos = 0
        self.hist = [0] * (len(ERROR_BUCKETS_MS) + 1)
        self.periods = 0
        self.overruns = 0
        self.skipped = 0
        self.lost_s = 0.0
        self.reset_s = 0.0
        self.paused_s = 0.0
        self.max_s = 0.0
        #: seconds the clocks slept waiting for periods to end (a worker's "wait" block)
        self.wait_s = 0.0
        #: of which seconds spun (the clock's ``spin_s`` before each period's end: CPU time)
        self.spin_s = 0.0
        #: the sum of all errors (a Prometheus histogram's ``_sum``)
        self.err_sum = 0.0

    def record(self, error_s: float) -> None:
        """One period ended ``error_s`` seconds after it should have."""
        self._ring[self._pos] = error_s
        self._pos = (self._pos + 1) % len(self._ring)
        self._n = min(self._n + 1, len(self._ring))
        self.hist[bucket_of(error_s)] += 1
        self.periods += 1
        self.err_sum += error_s
        if error_s > self.max_s:
            self.max_s = error_s

    def take(self) -> dict:
        """The report since the last take (window percentiles) with the run's totals."""
        window = self._ring[: self._n]  # filled from 0 since the last take; all of it once wrapped
        if self._n:
            p50, p99 = np.percentile(window, [50, 99])
            wmax = float(window.max())
        else:
            p50 = p99 = wmax = None
        self._n = 0
        self._pos = 0
        ms = lambda v: None if v is None else round(float(v) * 1000.0, 3)  # noqa: E731
        return {
            "period_err_ms": {"p50": ms(p50), "p99": ms(p99), "max": ms(wmax)},
            "run_err_ms": {
                "p50": percentile_from_histogram(self.hist, 0.5),
                "p99": percentile_from_histogram(self.hist, 0.99),
                "max": ms(self.max_s) if self.periods else None,
            },
            "periods": self.periods,
            "overruns": self.overruns,
            "skipped": self.skipped,
            "lost_s": round(self.lost_s, 4),
            "reset_s": round(self.reset_s, 4),
            "paused_s": round(self.paused_s, 4),
            "spin_s": round(self.spin_s, 4),
            "hist": list(self.hist),
        }


class LatencyStats:
    """How old each observation was when the action that answers it went out (capture to action):
    a histogram over :data:`ERROR_BUCKETS_MS` of the whole run, its count, sum and max. What a
    worker's heartbeat carries (:meth:`report`, cumulative) and the learner combines per run."""

    def __init__(self):
        self.hist = [0] * (len(ERROR_BUCKETS_MS) + 1)
        self.n = 0
        self.sum_s = 0.0
        self.max_s = 0.0

    def record(self, seconds: float) -> None:
        self.hist[bucket_of(seconds)] += 1
        self.n += 1
        self.sum_s += seconds
        if seconds > self.max_s:
            self.max_s = seconds

    def report(self) -> dict:
        """``{"n", "mean_ms", "max_ms", "hist"}`` of the run so far."""
        return {
            "n": self.n,
            "mean_ms": round(1000.0 * self.sum_s / self.n, 3) if self.n else None,
            "max_ms": round(1000.0 * self.max_s, 3) if self.n else None,
            "hist": list(self.hist),
        }


def combine_latency(reports: Mapping[str, Mapping]) -> dict | None:
    """The run's capture-to-action latency from each worker's newest :meth:`LatencyStats.report`:
    p50/p99 from the summed histograms (bucket upper edges, ms), the mean over all steps, the worst
    max, and the p99 of each worker (a slow game PC stands out). None before any worker reported."""
    hist = [0] * (len(ERROR_BUCKETS_MS) + 1)
    n, total_ms, maxes, by_worker = 0, 0.0, [], {}
    for worker, r in reports.items():
        h = r.get("hist")
        if not (isinstance(h, list) and len(h) == len(hist) and all(isinstance(c, int) and c >= 0 for c in h)):
            continue
        hist = [a + b for a, b in zip(hist, h)]
        count = sum(h)
        n += count
        mean = r.get("mean_ms")
        if isinstance(mean, int | float) and count:
            total_ms += float(mean) * count
        maxes += _numbers([r.get("max_ms")])
        by_worker[worker] = percentile_from_histogram(h, 0.99)
    if not n:
        return None
    return {
        "steps": n,
        "p50_ms": percentile_from_histogram(hist, 0.5),
        "p99_ms": percentile_from_histogram(hist, 0.99),
        "mean_ms": round(total_ms / n, 3),
        "max_ms": max(maxes, default=None),
        "p99_ms_by_worker": by_worker,
    }


class FleetTiming:
    """The learner's view of its workers' timing, from their heartbeats: the blocks summed over
    the fleet (window and run), and the control periods of the real-time workers combined."""

    def __init__(self):
        self.window: dict[str, dict[str, float]] = {}
        self.total: dict[str, dict[str, float]] = {}
        #: per worker, its newest real-time report (``PeriodStats.take`` plus the pause state)
        self.realtime: dict[str, dict] = {}
        #: per worker, its newest capture-to-action report (``LatencyStats.report``)
        self.latency: dict[str, dict] = {}

    def on_heartbeat(self, worker: str, hb: Heartbeat) -> None:
        if hb.timing is not None:
            self.window = add_windows([self.window, hb.timing])
            self.total = add_windows([self.total, hb.timing])
        if hb.realtime is not None:
            self.realtime[worker] = dict(hb.realtime)
        if hb.act_latency is not None:
            self.latency[worker] = dict(hb.act_latency)

    def forget(self, worker: str) -> None:
        self.realtime.pop(worker, None)

    def take(self) -> dict:
        """``worker_timing`` (the window since the last take), ``worker_timing_total``, ``realtime``
        (None when no worker steps in real time) and ``act_latency`` (capture to action, the run's;
        None before a worker reported it) for the learner's metrics message."""
        window, self.window = self.window, {}
        return {
            "worker_timing": window,
            "worker_timing_total": self.total,
            "realtime": combine_realtime(self.realtime),
            "act_latency": combine_latency(self.latency),
        }


def _numbers(values: Iterable) -> list[float]:
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def combine_realtime(reports: Mapping[str, Mapping]) -> dict | None:
    """The fleet's control periods from each real-time worker's newest report: the window's p99
    and max are the worst worker's, p50 the median worker's; the run's percentiles come from the
    summed histograms (bucket upper edges); counters are summed."""
    if not reports:
        return None
    rs = list(reports.values())
    win = [r.get("period_err_ms") or {} for r in rs]
    run = [r.get("run_err_ms") or {} for r in rs]
    hist = [0] * (len(ERROR_BUCKETS_MS) + 1)
    for r in rs:
        h = r.get("hist")
        if isinstance(h, list) and len(h) == len(hist):
            hist = [a + int(b) for a, b in zip(hist, h)]
    p50s = sorted(_numbers(w.get("p50") for w in win))
    out = {
        "workers": len(rs),
        "period_err_ms": {
            "p50": p50s[len(p50s) // 2] if p50s else None,
            "p99": max(_numbers(w.get("p99") for w in win), default=None),
            "max": max(_numbers(w.get("max") for w in win), default=None),
        },
        "run_err_ms": {
            "p50": percentile_from_histogram(hist, 0.5),
            "p99": percentile_from_histogram(hist, 0.99),
            "max": max(_numbers(r.get("max") for r in run), default=None),
        },
        "games_paused": sum(1 for r in rs if r.get("games_paused")),
    }
    for key in ("periods", "overruns", "skipped"):
        out[key] = int(sum(_numbers(r.get(key) for r in rs)))
    for key in ("lost_s", "reset_s", "paused_s", "spin_s"):
        out[key] = round(sum(_numbers(r.get(key) for r in rs)), 4)
    return out


def timing_fields(metrics: Mapping) -> dict[str, float]:
    """Flat numeric fields of a learner metrics message's timing, for storages (InfluxDB,
    TensorBoard, files, wandb): per block ``time_<who>_<block>_s`` (seconds in the window) and
    ``time_<who>_<block>_ms`` (mean per call), and ``rt_*`` for real-time control periods."""
    fields: dict[str, float] = {}
    for who, key in (("learner", "timing"), ("workers", "worker_timing")):
        blocks = metrics.get(key)
        if not isinstance(blocks, Mapping):
            continue
        for block, v in blocks.items():
            if isinstance(v, Mapping) and isinstance(v.get("s"), int | float):
                fields[f"time_{who}_{block}_s"] = float(v["s"])
                if v.get("n"):
                    fields[f"time_{who}_{block}_ms"] = 1000.0 * float(v["s"]) / float(v["n"])
    rt = metrics.get("realtime")
    if isinstance(rt, Mapping):
        for q, v in (rt.get("period_err_ms") or {}).items():
            if isinstance(v, int | float):
                fields[f"rt_err_{q}_ms"] = float(v)
        for key in ("periods", "overruns", "skipped", "lost_s", "reset_s", "paused_s", "games_paused"):
            if isinstance(rt.get(key), int | float):
                fields[f"rt_{key}"] = float(rt[key])
    latency = metrics.get("act_latency")
    if isinstance(latency, Mapping):
        for key in ("p50_ms", "p99_ms", "mean_ms", "max_ms"):
            if isinstance(latency.get(key), int | float):
                fields[f"act_latency_{key}"] = float(latency[key])
    return fields
