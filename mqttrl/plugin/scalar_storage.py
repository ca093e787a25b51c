"""Telemetry points as named scalars on one step axis: what the ``tensorboard`` and ``wandb`` storages write.

:class:`ScalarMapper` turns the points of docs/telemetry.md's schema into :class:`Scalars`
(a time, a step and ``{name: value}``), named as dashboards group them:

=================  ==========================================================================
measurement        names
=================  ==========================================================================
``episode``        ``episode/return``, ``episode/length`` (every worker) and
                   ``worker/<w>/return``, ``worker/<w>/length``
``episode_stats``  ``episode/mean_return``, ``episode/mean_length``, ``episode/count`` (worker ``all``);
                   ``worker/<w>/mean_return``, ``worker/<w>/mean_length``
``learner``        ``throughput/samples_per_s``, ``throughput/updates_per_s``; each training metric
                   ``train_<m>`` as ``learner/<m>`` (``learner/loss``); the counters as ``learner/<field>``
                   (``learner/updates``, ``learner/model_version``, ``learner/rejected_total`` ...);
                   ``rt_<x>`` as ``realtime/<x>``, ``time_<who>_<block>_<unit>`` as ``time/<who>/<block>_<unit>``
``worker``         ``worker/<w>/env_steps_per_s``, ``.../env_steps``, ``.../version_lag``, ``.../outbox``,
                   ``.../dropped``, ``.../online``; per batch ``throughput/env_steps_per_s`` (all workers)
``eval``           ``eval/mean``, ``eval/std``, ``eval/min``, ``eval/max``
``best``           ``best/mean_return``
``rejections``     ``rejections/<reason>``
``telemetry``      ``telemetry/loop_ms``, ``telemetry/messages_per_s``, ``telemetry/pending_points``
other              ``<measurement>/<tag values>/<field>``
=================  ==========================================================================

The step is ``env_steps`` (default): the environment steps of every worker of the run seen so
far (the sum of each worker's counter, from its episodes and heartbeats; a counter a little
below the last one seen is an older count and changes nothing, one below half of it is a
restarted worker counting again from 0 and adds on), so it never decreases and runs compare by
experience. ``seconds``: whole seconds since the run's first point. The wall-clock
time of every scalar is the point's own time, so a dashboard can plot against time as well.
Only numbers are scalars: ``None`` (not known yet) and strings are left out, booleans are 0/1.
A character other than letters, digits, ``_ . / -`` in a name (from a worker name, a reason, a
training metric) becomes ``_``.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Iterable

import attrs

from mqttrl.plugin.storage import Point

#: the step axes a storage may choose (option ``step``)
STEPS = ("env_steps", "seconds")

#: learner fields that are counters, not training metrics (a training metric of the same name is kept apart)
_LEARNER_COUNTERS = ("updates", "samples", "model_version", "workers_online", "inbox", "missing_batches")
#: characters TensorBoard renames in a tag (and wandb's panels mangle): replaced by ``_`` for both alike
_UNSAFE = re.compile(r"[^A-Za-z0-9_./-]")
_WORKER_FIELDS = ("env_steps_per_s", "env_steps", "version_lag", "outbox", "dropped", "online", "person_steps")


@attrs.frozen
class Scalars:
    """Named values at one step: ``values`` maps a name such as ``episode/return`` to a float."""

    run: str
    time: float
    step: int
    values: dict[str, float]


def _number(v) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return None


@attrs.define
class _RunState:
    env_steps: int = 0
    t0: float | None = None
    counters: dict[str, int] = attrs.Factory(dict)  # worker -> its last env_steps counter
    rates: dict[str, float] = attrs.Factory(dict)  # worker -> its last env_steps_per_s


class ScalarMapper:
    """Points in, :class:`Scalars` out; keeps the step axis of each run (``run`` tag).

    Not thread-safe: one caller (telemetry calls ``write`` from its one loop).
    """

    def __init__(self, step: str = "env_steps"):
        if step not in STEPS:
            raise ValueError(f"step={step!r}: allowed values are {', '.join(STEPS)}")
        self.step_axis = step
        self._runs: dict[str, _RunState] = {}

    def _advance(self, state: _RunState, worker: str, counter) -> None:
        if not isinstance(counter, int) or isinstance(counter, bool) or counter < 0:
            return
        last = state.counters.get(worker, 0)
        if counter >= last:
            state.env_steps += counter - last
        elif counter < last // 2:  # far below: a restarted worker counting from 0 again
            state.env_steps += counter
        else:  # a little below: an older count (a heartbeat sent before the episode just seen)
            return
        state.counters[worker] = counter

    def _step(self, state: _RunState, t: float) -> int:
        if self.step_axis == "seconds":
            assert state.t0 is not None  # set with the run's first point
            return int(max(0.0, t - state.t0))
        return state.env_steps

    def _point_step(self, p: Point, state: _RunState) -> int:
        """A point's step: an evaluation sits at the env steps its model was trained on (its
        ``env_steps``: curves compare runs at equal data), everything else at the run's step."""
        steps = p.fields.get("env_steps")
        if p.measurement == "eval" and self.step_axis == "env_steps" and isinstance(steps, int):
            return steps
        return self._step(state, p.time)

    def map(self, points: Iterable[Point]) -> list[Scalars]:
        """The scalars of a batch of points, in order (a point without numbers gives none)."""
        out: list[Scalars] = []
        rates_changed: dict[str, tuple[_RunState, float]] = {}
        for p in points:
            run = str(p.tags.get("run", ""))
            state = self._runs.get(run)
            if state is None:
                state = self._runs[run] = _RunState(t0=p.time)
            values = self._values(p, state)
            if p.measurement == "worker" and isinstance(p.fields.get("env_steps_per_s"), (int, float)):
                rates_changed[run] = (state, p.time)
            if values:
                out.append(Scalars(run, p.time, self._point_step(p, state), values))
        for run, (state, t) in rates_changed.items():
            total = sum(state.rates.values())
            out.append(Scalars(run, t, self._step(state, t), {"throughput/env_steps_per_s": total}))
        return out

    def _values(self, p: Point, state: _RunState) -> dict[str, float]:
        f, m = p.fields, p.measurement
        worker = str(p.tags.get("worker", ""))
        values: dict[str, float] = {}

        def put(name: str, v) -> None:
            x = _number(v)
            if x is not None:
                values[_UNSAFE.sub("_", name)] = x

        if m == "episode":
            self._advance(state, worker, f.get("env_steps"))
            for k in ("return", "length"):
                put(f"episode/{k}", f.get(k))
                put(f"worker/{worker}/{k}", f.get(k))
        elif m == "episode_stats":
            prefix = "episode" if worker == "all" else f"worker/{worker}"
            put(f"{prefix}/mean_return", f.get("mean_return"))
            put(f"{prefix}/mean_length", f.get("mean_length"))
            if worker == "all":
                put("episode/count", f.get("episodes"))
        elif m == "learner":
            for k, v in f.items():
                if k in ("samples_per_s", "updates_per_s"):
                    put(f"throughput/{k}", v)
                elif k.startswith("train_"):
                    name = k[len("train_") :]
                    put(f"learner/{k if name in _LEARNER_COUNTERS or name == 'rejected_total' else name}", v)
                elif k.startswith("rt_"):  # real-time workers' control periods (docs/real-time.md)
                    put(f"realtime/{k[len('rt_') :]}", v)
                elif k.startswith("time_"):  # where the time goes: time/learner/<block>_s, time/workers/<block>_ms
                    who, _, block = k[len("time_") :].partition("_")
                    put(f"time/{who}/{block}", v)
                else:
                    put(f"learner/{k}", v)
        elif m == "worker":
            self._advance(state, worker, f.get("env_steps"))
            for k in _WORKER_FIELDS:
                put(f"worker/{worker}/{k}", f.get(k))
            rate = _number(f.get("env_steps_per_s"))
            if rate is not None:
                state.rates[worker] = rate if f.get("online", 1) else 0.0
        elif m == "eval":
            for k in ("mean", "std", "min", "max"):
                put(f"eval/{k}", f.get(k))
        elif m == "best":
            put("best/mean_return", f.get("mean_return"))
        elif m == "rejections":
            put(f"rejections/{p.tags.get('reason', 'unknown')}", f.get("count"))
        elif m == "telemetry":
            for k, v in f.items():
                put(f"telemetry/{k}", v)
        else:  # a measurement this mapper does not know (a newer telemetry): keep it, named by its tags
            labels = [str(v) for k, v in sorted(p.tags.items()) if k != "run" and str(v)]
            prefix = "/".join([m, *labels])
            for k, v in f.items():
                put(f"{prefix}/{k}", v)
        return values


class ScalarStorage:
    """Base of the scalar storages: ``write`` maps points and queues them; a thread of its own hands
    them to the backend (:meth:`_emit`), flushes every ``flush_every_s``, and on :meth:`close`
    drains the queue, flushes and closes the backend (:meth:`_finish`) within ``close_timeout_s``.

    Options (strings, as telemetry's ``--storage-opt`` gives them): ``step`` (``env_steps`` or
    ``seconds``), ``flush_every_s`` (default 5), ``max_pending`` (points held while the backend lags or
    is not there, default 100000; past it the oldest are dropped, counted and logged), ``retry_s``
    (default 30: how often a backend that could not start is tried again), ``close_timeout_s`` (default 30).
    """

    #: the writer thread's name
    thread_name = "scalar-storage"

    def __init__(self, settings: dict, log: logging.Logger):
        self.log = log
        self.mapper = ScalarMapper(str(settings.get("step", "env_steps")))
        self.flush_every_s = float(settings.get("flush_every_s", 5.0))
        self.max_pending = int(settings.get("max_pending", 100_000))
        self.close_timeout_s = float(settings.get("close_timeout_s", 30.0))
        self.retry_s = float(settings.get("retry_s", 30.0))
        #: scalars handed to the backend, points dropped (backlog or a failed backend), backend errors
        self.written = 0
        self.dropped = 0
        self.errors = 0
        self._queue: collections.deque[tuple[int, list[Scalars] | dict]] = collections.deque()
        self._pending = 0
        self._cv = threading.Condition()
        self._closing = False
        self._new_config: dict | None = None
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Points accepted and not yet handed to the backend."""
        return self._pending

    # ---- telemetry's side: cheap -------------------------------------------------------
    def write(self, points: list[Point]) -> None:
        scalars = self.mapper.map(points)
        with self._cv:
            self._queue.append((len(points), scalars))
            self._pending += len(points)
            while self._pending > self.max_pending and len(self._queue) > 1:
                n, _ = self._queue.popleft()
                self._pending -= n
                self.dropped += n
                if self.dropped == n or self.dropped % 10_000 < n:  # the first drop, then every ~10k
                    self.log.error("%s lags: dropped the oldest points (%d so far)", type(self).__name__, self.dropped)
            self._cv.notify()

    def run_config(self, config: dict) -> None:
        """The run's resolved config (telemetry passes the learner's retained ``config`` message)."""
        with self._cv:
            self._new_config = dict(config)
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(self.close_timeout_s)
        if self._thread.is_alive():
            self.log.error(
                "%s: not closed within %.0f s; %d points still pending",
                type(self).__name__,
                self.close_timeout_s,
                self._pending,
            )

    # ---- the storage's own thread ---------------------------------------------------------
    def _take(self, last_flush: float) -> tuple[list, dict | None, bool]:
        """Wait for work (points, a config, a flush due, close); what to do now."""
        with self._cv:
            now = time.monotonic()
            backing_off = now < self._retry_at
            if not self._closing and self._new_config is None and (not self._queue or backing_off):
                timeout = self.flush_every_s - (now - last_flush)
                if self._queue:
                    timeout = min(timeout, self._retry_at - now)
                self._cv.wait(timeout=max(0.05, timeout))
            config, self._new_config = self._new_config, None
            items: list = []
            if self._closing or time.monotonic() >= self._retry_at:
                items = list(self._queue)
                self._queue.clear()
            return items, config, self._closing

    def _loop(self) -> None:
        last_flush = time.monotonic()
        dirty = False
        while True:
            items, config, closing = self._take(last_flush)
            if config is not None:
                self._safe(lambda c=config: self._config(c), "taking the run config")
            for i, (n, scalars) in enumerate(items):
                if scalars and not self._ready(scalars):  # the backend is not there (yet): keep the points
                    with self._cv:
                        self._queue.extendleft(reversed(items[i:]))
                        self._retry_at = time.monotonic() + self.retry_s
                    break
                try:
                    for s in scalars:
                        self._emit(s)
                        self.written += len(s.values)
                        dirty = True
                except Exception:
                    self.errors += 1
                    if self.errors == 1 or self.errors % 1000 == 0:
                        self.log.exception("%s: writing failed (%d times so far)", type(self).__name__, self.errors)
                with self._cv:
                    self._pending -= n
            if dirty and (closing or time.monotonic() - last_flush >= self.flush_every_s):
                self._safe(self._flush, "flushing")
                dirty, last_flush = False, time.monotonic()
            if closing:
                with self._cv:
                    if self._queue and time.monotonic() >= self._retry_at:
                        continue  # more came in while this batch was written
                    if self._pending:
                        self.log.error(
                            "%s: closing with %d points never stored (the backend was not available)",
                            type(self).__name__,
                            self._pending,
                        )
                self._safe(self._finish, "closing")
                return

    def _safe(self, fn, what: str) -> None:
        try:
            fn()
        except Exception:
            self.errors += 1
            self.log.exception("%s: %s failed", type(self).__name__, what)

    # ---- the backend (subclasses) -----------------------------------------------------------
    def _ready(self, scalars: list[Scalars]) -> bool:
        """Can the backend take these now? False keeps them queued and asks again after ``retry_s``
        (once more on close). By default always."""
        return True

    def _emit(self, scalars: Scalars) -> None:
        raise NotImplementedError

    def _config(self, config: dict) -> None:
        """The run's config arrived (or changed); by default it is not stored."""

    def _flush(self) -> None:
        """Make what was emitted durable."""

    def _finish(self) -> None:
        """Flush and release the backend; nothing is emitted after it."""
