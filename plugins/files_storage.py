"""Built-in storage ``files``: CSV per measurement and PNG curves, redrawn as the run goes.

``write`` appends CSV rows and returns; the curves are drawn by a thread of their own
(a redraw takes ~0.3 s, longer than telemetry's loop may wait), and once more on ``close``.

Options: ``dir`` (default ``telemetry``), ``plot_every_s`` (default 15),
``plot_every_episodes`` (default 50: redraw sooner after that many episodes),
``plot_min_interval_s`` (default 5: but never sooner than this). Writes ``<measurement>.csv`` and
``returns.png`` (episode returns, moving average, evaluations; with ``[train] human_baseline`` a
person's mean return and random play's as lines, where this host can read that file) and
``throughput.png`` (env steps/s, samples/s, updates/s).
"""

from __future__ import annotations

import collections
import csv
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqttrl import hookimpl
from mqttrl.plugin import Point, Storage

log = logging.getLogger("mqttrl.storage.files")


#: dots of the returns scatter drawn at most (a long run of a fast game has 10^5 episodes)
MAX_SCATTER = 20_000


class FilesStorage:
    """A :class:`mqttrl.plugin.storage.Storage` writing CSV files and PNG curves."""

    def __init__(self, settings: dict):
        self.dir = Path(settings.get("dir", "telemetry"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.plot_every_s = float(settings.get("plot_every_s", 15))
        self.plot_every_episodes = int(settings.get("plot_every_episodes", 50))
        #: never redraw sooner than this: a fast game finishes 50 episodes every second, and a
        #: redraw a second took ~15% of a core from the learner on a 2-core machine
        self.plot_min_interval_s = float(settings.get("plot_min_interval_s", 5))
        self._files: dict[str, tuple] = {}
        self._warned: set[str] = set()  # one-time warnings already given
        self._t0: float | None = None
        # what the curves plot, the values as the points hold them (Any: numbers, which matplotlib takes)
        #: (t, return, worker)
        self._episodes: collections.deque[tuple[float, Any, str]] = collections.deque(maxlen=200_000)
        self._avg: collections.deque[tuple[float, Any]] = collections.deque(maxlen=50_000)  # (t, mean_return)
        self._evals: collections.deque[tuple[float, Any]] = collections.deque(maxlen=10_000)  # (t, mean)
        #: (t, samples/s, updates/s)
        self._throughput: collections.deque[tuple[float, Any, Any]] = collections.deque(maxlen=50_000)
        #: worker -> (t, steps/s)
        self._steps: collections.defaultdict[str, collections.deque[tuple[float, Any]]] = collections.defaultdict(
            lambda: collections.deque(maxlen=50_000)
        )
        #: ``[train] human_baseline``'s means as lines on returns.png: label -> return
        self.references: dict[str, float] = {}
        self._since_plot = 0
        self._last_plot = time.monotonic()  # the first curves after plot_every_s, not on the first write
        self._lock = threading.Lock()
        self.plots_drawn = 0
        self._plot_wanted = threading.Event()
        self._closing = False
        self._plotter = threading.Thread(target=self._plot_loop, name="files-storage-plots", daemon=True)
        self._plotter.start()

    def run_config(self, config: dict) -> None:
        """The run's config (telemetry hands it over): its ``[train] human_baseline``, the person's
        and random play's means drawn on returns.png."""
        train = config.get("train") if isinstance(config, dict) else None
        path = train.get("human_baseline", "") if isinstance(train, dict) else ""
        self.references = read_baseline(path) if path else {}

    def _writer(self, p: Point):
        entry = self._files.get(p.measurement)
        if entry is None:
            path = self.dir / f"{p.measurement}.csv"
            new = not path.exists() or path.stat().st_size == 0
            f = open(path, "a", newline="")
            columns = ["time", *sorted(p.tags), *p.fields.keys()]
            if not new:  # appending to an earlier run's file: keep its columns
                with open(path) as r:
                    columns = next(csv.reader(r), columns)
            w = csv.writer(f)
            if new:
                w.writerow(columns)
            entry = self._files[p.measurement] = (f, w, columns)
        return entry

    def _grow(self, measurement: str, extra: set[str]) -> tuple:
        """New fields appeared (e.g. training metrics once training starts): rewrite the CSV with a wider header."""
        f, _, columns = self._files.pop(measurement)
        f.close()
        path = self.dir / f"{measurement}.csv"
        with open(path, newline="") as r:
            rows = list(csv.DictReader(r))
        columns = columns + sorted(extra)
        tmp = path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as out:
            w = csv.DictWriter(out, columns)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(path)
        f = open(path, "a", newline="")
        entry = self._files[measurement] = (f, csv.writer(f), columns)
        return entry

    def write(self, points: list[Point]) -> None:
        with self._lock:
            for p in points:
                f, w, columns = self._writer(p)
                row = {"time": f"{p.time:.3f}", **p.tags, **{k: v for k, v in p.fields.items() if v is not None}}
                extra = set(row) - set(columns)
                if extra:
                    f, w, columns = self._grow(p.measurement, extra)
                w.writerow([row.get(c, "") for c in columns])
                self._remember(p)
            for f, _, _ in self._files.values():
                f.flush()
        waited = time.monotonic() - self._last_plot
        if (
            self._since_plot
            and waited >= self.plot_min_interval_s
            and (self._since_plot >= self.plot_every_episodes or waited > self.plot_every_s)
        ):
            self._plot_wanted.set()

    def _plot_loop(self) -> None:
        while True:
            self._plot_wanted.wait()
            self._plot_wanted.clear()
            if self._closing:
                return
            try:
                self.plot()
            except Exception:  # a broken plot must not stop the CSVs or later plots
                log.exception("drawing the curves in %s failed", self.dir)

    def _remember(self, p: Point) -> None:
        if self._t0 is None:
            self._t0 = p.time
        t = p.time - self._t0
        if p.measurement == "episode":
            self._episodes.append((t, p.fields["return"], p.tags.get("worker", "")))
            self._since_plot += 1
        elif p.measurement == "episode_stats" and p.tags.get("worker") == "all":
            self._avg.append((t, p.fields["mean_return"]))
        elif p.measurement == "eval":
            self._evals.append((t, p.fields.get("mean")))
        elif p.measurement == "learner":
            self._throughput.append((t, p.fields.get("samples_per_s", 0.0), p.fields.get("updates_per_s", 0.0)))
        elif p.measurement == "worker":
            self._steps[p.tags.get("worker", "")].append((t, p.fields.get("env_steps_per_s", 0.0)))

    def plot(self) -> None:
        """Redraw returns.png and throughput.png (atomically replaced)."""
        try:
            import matplotlib
        except ImportError:
            if "matplotlib" not in self._warned:
                self._warned.add("matplotlib")
                log.warning(
                    "matplotlib is not installed: no PNG curves (pip install 'mqttrl[plots]'); CSVs are written"
                )
            self._since_plot = 0
            return

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        with self._lock:
            episodes, avg, evals = list(self._episodes), list(self._avg), list(self._evals)
            thr, steps = list(self._throughput), {k: list(v) for k, v in self._steps.items()}
            self._since_plot = 0
            self._last_plot = time.monotonic()
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
        if episodes:
            shown = episodes[:: -(-len(episodes) // MAX_SCATTER)]  # every k-th: at most MAX_SCATTER dots to draw
            label = (
                "episode return"
                if len(shown) == len(episodes)
                else f"episode return (every {len(episodes) // len(shown)}th)"
            )
            ax.scatter([e[0] for e in shown], [e[1] for e in shown], s=4, alpha=0.3, label=label)
        if avg:
            ax.plot([a[0] for a in avg], [a[1] for a in avg], color="C1", lw=2, label="moving average")
        if evals:
            ax.plot([e[0] for e in evals], [e[1] for e in evals], "o-", color="C2", label="greedy evaluation")
        for (label, value), colour in zip(self.references.items(), ("C3", "grey")):
            ax.axhline(value, color=colour, linestyle="--", linewidth=1, label=f"{label} ({value:g})")
        ax.set_xlabel("seconds since telemetry start")
        ax.set_ylabel("return")
        ax.set_title(f"returns ({len(episodes)} episodes)")
        ax.grid(alpha=0.3)
        if episodes or avg or evals or self.references:
            ax.legend(loc="upper left")
        self._save(fig, "returns.png")
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
        if thr:
            ax.plot([x[0] for x in thr], [x[1] for x in thr], label="learner samples/s")
            ax.plot([x[0] for x in thr], [x[2] for x in thr], label="learner updates/s")
        for name, series in sorted(steps.items()):
            ax.plot([x[0] for x in series], [x[1] for x in series], "--", lw=1, label=f"{name} env steps/s")
        ax.set_xlabel("seconds since telemetry start")
        ax.set_ylabel("per second")
        ax.set_title("throughput")
        ax.grid(alpha=0.3)
        if thr or steps:
            ax.legend(loc="upper left", fontsize=8)
        self._save(fig, "throughput.png")
        self.plots_drawn += 1

    def _save(self, fig, name: str) -> None:
        import matplotlib.pyplot as plt

        tmp = self.dir / f".{name}.tmp.png"
        fig.tight_layout()
        fig.savefig(tmp)
        plt.close(fig)
        tmp.replace(self.dir / name)

    def close(self) -> None:
        self._closing = True
        self._plot_wanted.set()
        self._plotter.join(timeout=30)
        if self._episodes or self._throughput:
            self.plot()
        with self._lock:
            for f, _, _ in self._files.values():
                f.close()
            self._files.clear()


@hookimpl
def mqttrl_register_storages(register: Callable[[str, Callable[[dict], Storage], str], None]) -> None:
    register("files", FilesStorage, "CSV per measurement and PNG curves in a directory (option: dir)")


def read_baseline(path: str) -> dict[str, float]:
    """``{"person": mean, "random play": mean}`` of a human baseline file (``mqttrl play -o``; the
    random mean where it holds one), or nothing, said in one line, where this host cannot read it
    (telemetry on another host than ``mqttrl train``'s: the file stays on the game PC)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        log.info("train.human_baseline = %r not readable here (%s): returns.png has no baseline lines", path, e)
        return {}
    number = lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    out = {"person": float(data["mean"])} if isinstance(data, dict) and number(data.get("mean")) else {}
    random = data.get("random") if out else None
    if isinstance(random, dict) and number(random.get("mean")):
        out["random play"] = float(random["mean"])
    return out
