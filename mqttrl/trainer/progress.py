"""The live progress display of ``mqttrl train`` (rich), or plain lines when not on a terminal or
not wanted, or nothing at all (``quiet``: ``mqttrl.train(progress=False)``)."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


def _fmt(v, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


class Progress:
    def __init__(self, config, enabled: bool = True, quiet: bool = False):
        self.config = config
        self.quiet = quiet
        enabled = enabled and not quiet
        self.console = Console(stderr=True)
        self.live_mode = enabled and self.console.is_terminal
        self._live = Live(console=self.console, refresh_per_second=4, transient=False) if self.live_mode else None
        if self._live:
            self._live.start()
        self._next_line = 0.0

    def _table(self, s: dict) -> Table:
        target = self.config.train.target_return
        t = Table(
            title=f"mqttrl train · run {self.config.run} · {self.config.algorithm.name} on {self.config.env.id}",
            expand=False,
        )
        for col in (
            "elapsed",
            "env steps",
            "episodes",
            "mean return (100)",
            "samples/s",
            "updates/s",
            "model",
            "workers",
            "last eval",
            "best eval",
        ):
            t.add_column(col, justify="right")
        ev = s["last_eval"]
        t.add_row(
            f"{s['elapsed']:.0f}s",
            _fmt(s["env_steps"]),
            _fmt(s["episodes"]),
            _fmt(s["mean_return"], ".1f"),
            _fmt(s["samples_per_s"]),
            _fmt(s["updates_per_s"]),
            f"v{s['model_version']}" if s["model_version"] is not None else "-",
            f"{s['workers_online']}/{s['workers']}",
            f"{ev['mean']:.1f}" if ev else "-",
            (f"{s['best_eval']:.1f}" if s["best_eval"] is not None else "-")
            + (f" / {target:g}" if target is not None else ""),
        )
        if s["rejected"]:
            t.caption = f"{s['rejected']} samples rejected (see metrics/learner)"
        return t

    def update(self, s: dict) -> None:
        if self._live:
            self._live.update(self._table(s))
            return
        if self.quiet:
            return
        now = time.monotonic()
        if now < self._next_line:
            return
        self._next_line = now + 5
        ev = s["last_eval"]
        print(
            f"[{s['elapsed']:6.0f}s] steps {s['env_steps']:>8,} episodes {s['episodes']:>6,} "
            f"return(100) {_fmt(s['mean_return'], '.1f'):>6} samples/s {_fmt(s['samples_per_s']):>6} "
            f"updates/s {_fmt(s['updates_per_s']):>5} model v{s['model_version']} "
            f"workers {s['workers_online']}/{s['workers']} eval {_fmt(ev['mean'] if ev else None, '.1f')} "
            f"best {_fmt(s['best_eval'], '.1f')}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self._live:
            self._live.stop()
