"""The per-worker table of the learner's metrics message, bounded for big fleets.

A fleet of a thousand would put ~200 kB into every metrics message; past
``learner.metrics_workers`` rows, the workers whose state changed since their last row (online,
restarts, missing batches) come first, then the others in turn. The totals above the table
always count every worker.
"""

from __future__ import annotations

from typing import Any


class WorkerTable:
    """Which workers this metrics message's table shows, and each one's row."""

    def __init__(self, limit: int):
        self.limit = limit
        #: per worker, what its last row said (online, restarts, missing): a change is reported first
        self.reported: dict[str, tuple] = {}
        #: where the next turn of the table starts
        self.cursor = 0

    def forget(self, name: str) -> None:
        self.reported.pop(name, None)

    def rows(self, workers: list[Any], version: int, now: float) -> dict[str, dict]:
        """This message's table: ``{worker: row}`` (``workers`` are the core's ``WorkerStatus``)."""
        return {w.name: row(w, version, now) for w in self.choose(workers)}

    def choose(self, workers: list[Any]) -> list[Any]:
        """All the workers up to ``limit``; past that, the changed ones first, then the others in turn."""
        if len(workers) <= self.limit:
            chosen = workers
        else:
            chosen = [w for w in workers if self.reported.get(w.name) != _state(w)][: self.limit]
            taken = {w.name for w in chosen}
            start = self.cursor % len(workers)
            for k in range(len(workers)):
                if len(chosen) >= self.limit:
                    break
                w = workers[(start + k) % len(workers)]
                self.cursor = start + k + 1
                if w.name not in taken:
                    chosen.append(w)
        for w in chosen:
            self.reported[w.name] = _state(w)
        return chosen


def _state(w: Any) -> tuple:
    return (w.online, w.restarts, w.missing)


def row(w: Any, version: int, now: float) -> dict[str, Any]:
    """One worker's row: liveness, version lag, progress, sequence numbers."""
    return {
        "online": w.online,
        "last_seen_s": round(now - w.last_seen, 2) if w.last_seen is not None else None,
        "model_version": w.model_version,
        "version_lag": version - w.model_version if w.model_version >= 0 else None,
        "env_steps": w.env_steps,
        "samples": w.samples,
        "missing_batches": w.missing,
        "incarnation": w.incarnation,
        "restarts": w.restarts,
        "env_restarts": w.env_restarts_total,
        "first_seq": w.first_seq,
        "last_seq": w.last_seq,
    }
