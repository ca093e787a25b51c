"""What the end-to-end tests read off a run while it goes: the learner's updates (its run
directory), each worker's episodes (telemetry's files), and a bounded wait that shows the logs."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest


def learner_updates(run_dir: Path) -> int:
    """The learner's updates so far (``learner_metrics.jsonl``), 0 before its first line."""
    path = run_dir / "learner_metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return max((r.get("updates") or 0 for r in rows), default=0)


def episodes_by_worker(telemetry_dir: Path) -> dict[str, int]:
    """Episodes per worker in telemetry's files storage (``episode.csv``)."""
    path = telemetry_dir / "episode.csv"
    if not path.exists():
        return {}
    counts: dict[str, int] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            counts[row["worker"]] = counts.get(row["worker"], 0) + 1
    return counts


def wait_for(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    logs: Iterable[Path] = (),
    procs: Iterable[subprocess.Popen] = (),
) -> None:
    """Until ``ready()``; a failure (the time is up, or one of ``procs`` exited) shows the logs' tails."""
    deadline, logs, procs = time.monotonic() + timeout, list(logs), list(procs)
    while not ready():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in logs if p.exists())
            exited = f" (exited: {[p.args[0] for p in dead]})" if dead else ""
            pytest.fail(f"{what}: not within {timeout:.0f} s{exited}\n{tails}")
        time.sleep(0.3)
