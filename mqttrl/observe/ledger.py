"""An audit ledger: one JSON line per sample batch a node sent, got acknowledged or judged.

Set ``MQTTRL_LEDGER_DIR`` and every worker writes ``worker-<name>-<incarnation>.jsonl``
(``sent``, then ``acked`` once the broker acknowledged it; ``loaded`` with the epoch and version
of each model it starts playing) and every learner writes
``learner-<epoch>.jsonl`` (``accepted`` or ``refused`` with the reason, and ``checkpoint``
marks). Each line is flushed as written, so a process killed with SIGKILL leaves an
exact record up to its last line. ``benchmarks/chaos.py`` reconciles these files to
account for every sample; anyone chasing lost data can read them the same way.
Unset (the default), nothing is written and the cost is one attribute check.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV_VAR = "MQTTRL_LEDGER_DIR"


class Ledger:
    """Appends events to one JSONL file; each line carries the wall-clock time ``t``."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = open(path, "a", buffering=1)  # line buffered: every event reaches the OS at once

    @classmethod
    def from_env(cls, filename: str) -> Ledger | None:
        """The ledger named ``filename`` in ``$MQTTRL_LEDGER_DIR``, or None when it is unset."""
        root = os.environ.get(ENV_VAR)
        return cls(Path(root) / filename) if root else None

    def write(self, event: str, **fields) -> None:
        self._f.write(json.dumps({"ev": event, "t": round(time.time(), 4), **fields}, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._f.close()


def note(ledger: Ledger | None, event: str, **fields) -> None:
    """``ledger.write`` where a node has a ledger (unset, the default: nothing, one check)."""
    if ledger is not None:
        ledger.write(event, **fields)


def read(path: Path) -> list[dict]:
    """Every complete line of a ledger (a line cut by a kill is skipped)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
