"""A run's figures, read off its greedy-evaluation curve alike for every library, and a side's
summary over seeds: what the results JSON holds and the page's tables show."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mqttrl.observe.curves import Point, first_reaching


def run_figures(curve: Sequence[Point], target: float) -> dict:
    """Best and last greedy mean, and the env steps and seconds of the first evaluation at or above
    ``target`` (None: never), of a curve of (env_steps, seconds, mean) points."""
    reached = next((p for p in curve if p[2] >= target), None)
    return {
        "best": max((p[2] for p in curve), default=None),
        "final": curve[-1][2] if curve else None,
        "steps_to_target": first_reaching(curve, target),
        "seconds_to_target": reached[1] if reached else None,
        "evaluations": len(curve),
    }


#: how many of a run's last training episodes its training return averages (SB3's ep_info_buffer)
TRAINING_EPISODES = 100


def training_figures(episodes: Sequence[tuple[int, float]], env_steps: int | None, wall_s: float | None) -> dict:
    """What the run's own play says, beside its greedy evaluations: the mean return of its last
    ``TRAINING_EPISODES`` training episodes (exploration included: the MinAtar paper's curves are
    of these) and the wall clock per env step in milliseconds (what an env step costs on a real game
    is wall time; the learner may spend compute to save env steps)."""
    last = [r for _, r in episodes[-TRAINING_EPISODES:]]
    per_step = 1000.0 * wall_s / env_steps if wall_s and env_steps else None
    return {
        "training_return": statistics.fmean(last) if last else None,
        "training_episodes": len(episodes),
        "ms_per_env_step": per_step,
    }


def summarize(runs: Sequence[dict]) -> dict:
    """Each figure's median over a side's runs (seeds), and how many reached the target; a run that
    never reached it counts as infinitely late (a median of "never" is None)."""
    keys = dict.fromkeys(k for r in runs for k in r["figures"])
    out: dict = {"seeds": len(runs), "reached": sum(r["figures"].get("steps_to_target") is not None for r in runs)}
    for key in keys:
        values = [r["figures"].get(key) for r in runs]
        out[key] = _median(values, late=key.endswith("_to_target"))
    return out


def _median(values: list, late: bool) -> float | None:
    if late:
        ranked = sorted(values, key=lambda v: (v is None, v))
        middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
        return None if None in middle or not middle else statistics.fmean(middle)
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
