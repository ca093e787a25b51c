"""What ``mqttrl train`` keeps of a run beside its nodes: ``episodes.csv`` (every episode telemetry
decodes), ``evaluations.csv`` and ``best/`` (every result of the evaluator node), the target, and
the figures of the progress display and ``summary.json``.

Thread-safe: episodes arrive on the telemetry node's thread, evaluations on the evaluator's, and
the trainer's thread reads.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mqttrl.config import RunConfig
from mqttrl.state.atomic import is_disk_full
from mqttrl.state.best import GREEDY_EVAL, SCORE_FILE, BestScore, read_score, score_file, write_best_dir
from mqttrl.trainer.baseline import load_baseline
from mqttrl.wire.episodes import EpisodeStats

if TYPE_CHECKING:
    from mqttrl.nodes.evaluator import Result
    from mqttrl.nodes.telemetry import RunView

log = logging.getLogger("mqttrl.train")

EPISODE_COLUMNS = ["wall_s", "worker", "env", "return", "length", "terminated", "model_version", "worker_env_steps"]
#: ``env_steps``: all workers' env steps when the result came in; ``model_env_steps``: those the learner
#: had taken in when it published the evaluated model (the data it was trained on: curves by env step)
EVAL_COLUMNS = [
    "wall_s",
    "model_version",
    "env_steps",
    "episodes",
    "mean",
    "std",
    "min",
    "max",
    "eval_s",
    "training_s",
    "model_env_steps",
]


class CsvLog:
    """A CSV file rows are appended to, that a full disk never leaves with part of a row: the rows
    are buffered and flushed whole (:meth:`flush`); a flush the disk refuses cuts the file back to
    its last whole row and drops every later row (``full`` says so). A reader (``compare``, the
    next session's ``--resume``) finds whole rows only."""

    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.full = False
        self._rows = io.StringIO()
        self._writer = csv.writer(self._rows)
        with open(path, "a", newline=""):  # made now (an empty run still has its header)
            pass
        self.size = os.path.getsize(path)
        if self.size == 0:
            self._writer.writerow(columns)
            self.flush()

    def writerow(self, row: list) -> None:
        if not self.full:
            self._writer.writerow(row)

    def flush(self) -> None:
        """Append the rows written since the last flush; on a full disk cut back and set ``full``."""
        text = self._rows.getvalue()
        if self.full or not text:
            return
        self._rows.seek(0)
        self._rows.truncate()
        try:
            with open(self.path, "a", newline="") as f:
                f.write(text)
            self.size += len(text.encode())
        except OSError as e:
            if not is_disk_full(e):
                raise
            self.full = True
            log.error("the disk is full: %s keeps its rows up to here, later ones are dropped", self.path)
            try:
                os.truncate(self.path, self.size)  # shrinking takes no space
            except OSError:
                pass


class RunRecord:
    def __init__(self, config: RunConfig, run_dir: Path):
        self.config = config
        self.run_dir = run_dir
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False
        #: per worker, the most env steps an episode of it reported
        self.env_steps_by_worker: dict[str, int] = {}
        #: the env steps of this run's earlier sessions (a resumed run continues their count)
        self.env_steps_before = earlier_env_steps(run_dir)
        self.evals: list[dict] = []
        self.best_eval: float | None = None
        #: a person's returns (``[train] human_baseline``): read now, one line if it cannot be
        self.baseline = load_baseline(config.train.human_baseline)
        #: the score of ``best/`` (an earlier session's too): only a better evaluation replaces it
        self.best_score: BestScore | None = read_score(run_dir / "best")
        #: the first evaluation that reached ``train.target_return``
        self.solved_at: dict | None = None
        #: the evaluation of the model at the end of the budget (``train.final_eval``)
        self.final_eval: dict | None = None
        #: why a write was refused for a full disk ("" while none was): the trainer stops the run (exit 6)
        self.full_disk = ""
        self._episodes = CsvLog(run_dir / "episodes.csv", EPISODE_COLUMNS)
        self._evals = CsvLog(run_dir / "evaluations.csv", EVAL_COLUMNS)

    @property
    def disk_full(self) -> bool:
        """A write of the record found the disk full (what it had written is kept whole)."""
        return bool(self.full_disk) or self._episodes.full or self._evals.full

    @property
    def env_steps(self) -> int:
        with self._lock:
            return self._env_steps()

    def _env_steps(self) -> int:
        """The run's env steps (the lock held): earlier sessions' and every worker's latest count."""
        return self.env_steps_before + sum(self.env_steps_by_worker.values())

    def _count(self, worker: str, steps: int) -> None:
        """A worker's count of env steps (the lock held); counts only grow (a late report is older)."""
        self.env_steps_by_worker[worker] = max(self.env_steps_by_worker.get(worker, 0), steps)

    def on_env_steps(self, worker: str, steps: int) -> None:
        """A worker's env steps from its heartbeat: the budget in env steps holds to within a
        heartbeat, also where every episode is thousands of steps long (MinAtar's Freeway: 2,500)."""
        with self._lock:
            if not self._closed:
                self._count(worker, steps)

    def on_episode(self, worker: str, e: EpisodeStats) -> None:
        """An episode as the telemetry node decoded it: a row of episodes.csv."""
        steps = e.env_steps
        with self._lock:
            if self._closed:
                return
            if steps is not None:
                self._count(worker, steps)
            wall = round(time.monotonic() - self.t0, 3)
            row = [wall, worker, e.env, e.episode_return, e.length, e.terminated, e.model_version]
            self._episodes.writerow(row + [steps])

    def on_evaluation(self, result: Result, weights, payload: bytes | None) -> None:
        """A result of the evaluator node: a row of evaluations.csv, ``best/`` when it is the best
        so far, and the solve when it reached the target."""
        ev = result.evaluation
        with self._lock:
            if self._closed:
                return
            row = {
                "wall_s": round(time.monotonic() - self.t0, 2),
                "model_version": ev.model_version,
                "env_steps": self._env_steps(),
                **{k: getattr(ev, k) for k in ("episodes", "mean", "std", "min", "max", "eval_s")},
                "training_s": ev.training_s,
                "model_env_steps": ev.env_steps,
            }
            self.evals.append(row)
            self._evals.writerow(list(row.values()))
            self._evals.flush()
            if self.best_eval is None or row["mean"] > self.best_eval:
                self.best_eval = row["mean"]
            score = BestScore(ev.mean, ev.model_version, GREEDY_EVAL, ev.episodes, ev.model_epoch)
            if payload is not None and score.beats(
                self.best_score
            ):  # a worker's result of a model no longer held: no best/
                self._save_best(row, payload, score)
            target = self.config.train.target_return
            if target is not None and row["mean"] >= target and self.solved_at is None:
                self.solved_at = row

    def _save_best(self, row: dict, payload: bytes, score: BestScore) -> None:
        """``best/``: the weights, their evaluation and score, replaced together (atomically)."""
        files = {
            "weights.safetensors": payload,
            "evaluation.json": json.dumps(row, indent=2).encode(),
            SCORE_FILE: score_file(score),
        }
        try:
            write_best_dir(self.run_dir / "best", files)  # atomic: a full disk leaves the previous best/
        except OSError as e:
            if not is_disk_full(e):
                raise
            self.full_disk = f"best/ not replaced by model {row['model_version']}: the disk is full"
            log.error("%s (the previous best/ is kept)", self.full_disk)
            return
        self.best_score = score

    def curve(self) -> list[dict]:
        """Every greedy evaluation, in order, by env step and by clock (summary.json's ``curve``):
        ``env_steps`` the evaluated model was trained on (the learner's count at its publication;
        all workers' count when the result came in if the learner did not say), ``wall_s`` since the
        start, ``training_s`` from the first model to this one, the model version and the mean."""
        with self._lock:
            return [
                {
                    "env_steps": e["model_env_steps"] if e["model_env_steps"] is not None else e["env_steps"],
                    "wall_s": e["wall_s"],
                    "training_s": e["training_s"],
                    "model_version": e["model_version"],
                    "mean": e["mean"],
                }
                for e in self.evals
            ]

    def evaluation_of(self, version: int) -> dict | None:
        """The last evaluation of model ``version``, if any."""
        with self._lock:
            return next((e for e in reversed(self.evals) if e["model_version"] == version), None)

    def newest_evaluation(self, at_least: int) -> dict | None:
        """The evaluation of the newest model at least as new as ``at_least``, if any."""
        with self._lock:
            fit = [e for e in self.evals if e["model_version"] >= at_least]
        return max(fit, key=lambda e: e["model_version"], default=None)

    def snapshot(self, elapsed: float, view: RunView, model_version: int) -> dict:
        """The progress display's figures; ``view`` is the telemetry node's."""
        m = view.learner
        with self._lock:
            self._episodes.flush()
            last_eval = self.evals[-1] if self.evals else None
        return {
            "elapsed": elapsed,
            "env_steps": self.env_steps,
            "episodes": view.episodes,
            "mean_return": view.mean_return,
            "samples_per_s": m.samples_per_s if m else None,
            "updates_per_s": m.updates_per_s if m else None,
            "updates": m.updates if m else None,
            "model_version": m.model_version if m else model_version,
            "learner": view.learner_status,
            "workers_online": view.workers_online,
            "workers": view.workers,
            "rejected": sum(((m.rejected if m else None) or {}).values()),
            "last_eval": last_eval,
            "best_eval": self.best_eval,
        }

    def summary(self, stop_reason: str, wall: float, view: RunView, model_version: int) -> dict:
        """``summary.json`` less what the trainer adds (restarts, run_dir)."""
        s, f, tc = self.solved_at, self.final_eval, self.config.train
        m = view.learner
        return {
            "run": self.config.run,
            "algorithm": self.config.algorithm.name,
            "env": self.config.env.id,
            "seed": tc.seed,
            "stop_reason": stop_reason,
            "wall_s": round(wall, 2),
            "solved": s is not None,
            "target_return": tc.target_return,
            "time_to_solve_s": s["wall_s"] if s else None,
            # from the learner's first model to the publication of the model that solved: no start-up,
            # no evaluation cadence (what a single-process library's clock measures)
            "training_time_to_solve_s": s["training_s"] if s else None,
            "env_steps_at_solve": s["env_steps"] if s else None,
            "solve_eval_mean": s["mean"] if s else None,
            "solve_model_version": s["model_version"] if s else None,
            "best_eval_mean": self.best_eval,
            "final_eval_mean": f["mean"] if f else None,
            "final_model_version": f["model_version"] if f else None,
            **(self.baseline.fields(f["mean"] if f else None, self.best_eval) if self.baseline else {}),
            "evaluations": len(self.evals),
            "curve": self.curve(),
            # three lower bounds of the env steps made: the workers' at their last episode end, the
            # samples (one per env step) the learner took in by its last metrics row, and those of the
            # last evaluated model (a model published after that row counts more): the curve's last
            # model_env_steps never exceeds this
            "env_steps": max(
                self.env_steps,
                _int(m.samples if m else None),
                *(_int(e["model_env_steps"]) for e in self.evals),
            ),
            "episodes": view.episodes,
            "updates": m.updates if m else None,
            "model_version": model_version,
            "workers": view.workers,  # workers that announced themselves during the run
            # per worker that launched its game (env.launch): the game's relaunches
            "game_relaunches": view.game_relaunches,
            "game_crashes": view.game_crashes,
            "game_relaunch_s": view.game_relaunch_s,
            "rejected": (m.rejected if m else None) or {},
            # real-time workers' control periods (None: no worker stepped in real time), and where the
            # learner's and the workers' time went, per block (seconds over the run)
            "realtime": m.realtime if m else None,
            # capture to action: how old an observation was when its action went out (p50/p99 over
            # every worker's steps, ms; None before a worker reported one)
            "capture_to_action_ms": m.act_latency if m else None,
            "timing": {
                "learner": m.timing_total if m else None,
                "workers": m.worker_timing_total if m else None,
            },
        }

    def close(self) -> None:
        """Flush the CSVs; what arrives later is dropped."""
        with self._lock:
            self._closed = True
            self._episodes.flush()
            self._evals.flush()


def earlier_env_steps(run_dir: Path) -> int:
    """The env steps a run directory's earlier sessions made (0 for a new run): its ``summary.json``'s,
    or, for a session that was killed before writing one, the most its ``evaluations.csv`` counted."""
    steps = 0
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        steps = _int(summary.get("env_steps")) if isinstance(summary, dict) else 0
    except (OSError, ValueError):
        pass
    try:
        with open(run_dir / "evaluations.csv", newline="") as f:
            for row in csv.DictReader(f):
                for key in ("env_steps", "model_env_steps"):
                    value = row.get(key) or ""
                    steps = max(steps, int(value) if value.isdigit() else 0)
    except (OSError, csv.Error):
        pass
    return steps


def _int(value: object) -> int:
    """``value`` where it is a count, else 0 (a learner metric that has not come)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
