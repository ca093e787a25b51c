"""Greedy-evaluation curves compared at equal env steps: what ``mqttrl compare`` and the benchmarks report.

A curve is a run's evaluations in the order they came, each ``(env_steps, wall_s, mean)`` as
:func:`mqttrl.api.read_curve` reads them: ``env_steps`` are those the evaluated model was trained on.
On a real game an env step costs wall-clock time, so two configs are compared by what their
agents can do after the same number of env steps, over several seeds:

* :func:`at_budget`: a run's greedy mean at a budget of N env steps;
* :func:`first_reaching`: the env steps at which a run first reached a return;
* :func:`best_at_marks`: a run's best greedy mean read at fixed budgets (as often for every run);
* :func:`median_gap`: the difference of two groups' medians with a bootstrap confidence interval,
  so that "at or above" is told apart from "inside the seeds' spread".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import attrs
import numpy as np

#: one evaluation: (env steps the model was trained on, seconds into the run, greedy mean return)
Point = tuple[int, float, float]


def at_budget(curve: Sequence[Point], steps: int, window: int = 0, interpolate: bool = False) -> float | None:
    """The run's greedy mean at a budget of ``steps`` env steps, or None before its first evaluation.

    By default: the last evaluation of a model trained on at most ``steps`` (what the run had at that
    budget). Of evaluations at the same env steps the last counts (the earlier ones are of models
    published while the learner caught up on the updates those env steps owed). With a ``window``:
    the mean of the evaluations of models trained on ``(steps - window, steps]`` env steps (one
    evaluation is a few episodes; the window evens out their noise), or as without where there are
    none. With ``interpolate``: the straight line between the evaluations just before and just after
    ``steps``, an estimate of a model trained on exactly ``steps``: on a rising curve evaluated every
    few hundred env steps the last evaluation before a mark lags it by half an interval on average,
    which a curve evaluated exactly at the marks does not."""
    last = {s: mean for s, _, mean in curve}  # curve order is time order: the last of equal steps wins
    if window:
        inside = [m for s, m in last.items() if steps - window < s <= steps]
        if inside:
            return statistics.fmean(inside)
    before = [s for s in last if s <= steps]
    if not before:
        return None
    s0 = max(before)
    after = [s for s in last if s > steps]
    if not interpolate or s0 == steps or not after:
        return last[s0]
    s1 = min(after)
    return last[s0] + (last[s1] - last[s0]) * (steps - s0) / (s1 - s0)


def best_at_marks(curve: Sequence[Point], marks: Sequence[int]) -> float | None:
    """The best of the run's greedy means read at ``marks`` (:func:`at_budget` at each), or None
    before its first evaluation.

    The best of all evaluations grows with their number (a maximum of noisy readings): a run
    evaluated 35 times is not compared fairly by it with one evaluated 20 times. Read at the same
    marks, every run gets one reading a mark: the best an evaluator on that schedule would have
    seen (of models trained on at most each mark, the newest)."""
    readings = [v for m in marks if (v := at_budget(curve, m)) is not None]
    return max(readings) if readings else None


def first_reaching(curve: Sequence[Point], threshold: float) -> int | None:
    """Env steps of the first evaluation at or above ``threshold`` (None: never)."""
    return next((s for s, _, mean in curve if mean >= threshold), None)


@attrs.frozen
class Gap:
    """``median(a) - median(b)`` and its bootstrap confidence interval ``[low, high]`` at ``level``
    (None with fewer than two values on a side: a gap, but no spread to judge it by)."""

    median_a: float
    median_b: float
    gap: float
    low: float | None
    high: float | None
    level: float

    @property
    def verdict(self) -> str:
        """ "above" or "below" where the interval excludes 0, "level" where it holds it (inside the
        seeds' spread), "no interval" without one."""
        if self.low is None or self.high is None:
            return "no interval"
        if self.low > 0:
            return "above"
        if self.high < 0:
            return "below"
        return "level"


def median_gap(a: Sequence[float], b: Sequence[float], level: float = 0.9, resamples: int = 4000, seed: int = 0) -> Gap:
    """The difference of the medians of ``a`` and ``b`` (e.g. two configs' greedy means at one budget,
    a value per seed) with a percentile bootstrap interval: each resample draws ``len(a)`` values
    of ``a`` and ``len(b)`` of ``b`` with replacement. Deterministic for a ``seed``. With 3 seeds
    a side the interval is wide: it says how little 3 seeds settle, which is the point. With one
    value on a side there is no interval (low and high None)."""
    if not a or not b:
        raise ValueError("median_gap needs at least one value on each side")
    if not 0 < level < 1:
        raise ValueError(f"level {level}: expected a fraction between 0 and 1")
    xa, xb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
        raise ValueError("median_gap: a value is not finite")
    med_a, med_b = float(np.median(xa)), float(np.median(xb))
    if len(xa) < 2 or len(xb) < 2:
        return Gap(med_a, med_b, med_a - med_b, None, None, level)
    rng = np.random.default_rng(seed)
    ma = np.median(xa[rng.integers(0, len(xa), (resamples, len(xa)))], axis=1)
    mb = np.median(xb[rng.integers(0, len(xb), (resamples, len(xb)))], axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(ma - mb, [tail, 1.0 - tail])
    return Gap(med_a, med_b, med_a - med_b, float(low), float(high), level)


def default_marks(budget: int, count: int = 5) -> list[int]:
    """``count`` budgets up to ``budget`` env steps, evenly spaced and rounded to two significant digits."""
    if budget < 1:
        return []
    marks = []
    for i in range(1, count + 1):
        x = budget * i / count
        digits = max(0, math.floor(math.log10(x)) - 1)
        rounded = int(round(x / 10**digits) * 10**digits)
        marks.append(min(rounded, budget))
    return sorted(set(marks))
