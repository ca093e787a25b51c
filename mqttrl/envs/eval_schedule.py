"""When a greedy evaluation is due: every so many seconds, or every so many env steps of data.

A time cadence suits a real game, where an evaluation's episodes cost wall clock. An env-step
cadence is what comparing runs at equal data wants (SB3's ``eval_freq``, the benchmarks'
baselines): every run gets one reading a mark however fast it trains, and the best of a run's
evaluations is not raised by a faster run simply being evaluated more often. The env steps of a
model are those the learner had taken in when it published it; a learner that does not say them
(one older than that key) is evaluated by time. Shared by the evaluator node and a worker that
evaluates on its own game.

Models are named by :class:`~mqttrl.wire.model_ref.ModelRef` (epoch, version): a learner resumed
from an older checkpoint opens a new epoch whose versions are lower than the old ones', and its
models are due all the same. A bare version (an older caller) is a model of epoch 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from mqttrl.plugin.algorithm import INGESTED_KEY
from mqttrl.wire.model_ref import NO_MODEL, ModelRef


def trained_env_steps(info: Mapping) -> int | None:
    """The env steps a model was trained on, from its weights' info: those the learner had taken
    in when it published it (None: a learner that does not say, as one older than this key)."""
    steps = info.get(INGESTED_KEY)
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else None


class EvalSchedule:
    """Due for a model not evaluated yet once the period passed (``every_s``) or, with
    ``every_env_steps``, once the model was trained on the next multiple of it."""

    def __init__(
        self,
        every_s: float,
        every_env_steps: int = 0,
        clock: Callable[[], float] = time.monotonic,
        first_after_s: float | None = None,
    ):
        self.every_s, self.every_env_steps, self.clock = every_s, every_env_steps, clock
        #: the newest model evaluated (NO_MODEL: none)
        self.last: ModelRef = NO_MODEL
        self._next_at = clock() + (every_s if first_after_s is None else first_after_s)
        self._next_mark = every_env_steps

    @property
    def next_mark(self) -> int | None:
        """The env steps the next model evaluated by data must have (None: by time)."""
        return self._next_mark if self.every_env_steps else None

    @property
    def evaluated(self) -> int:
        """The version of the newest model evaluated (-1: none)."""
        return self.last.version

    @evaluated.setter
    def evaluated(self, model: int | ModelRef) -> None:
        self.last = ModelRef.of(model)

    def due(self, model: int | ModelRef, env_steps: int | None = None) -> bool:
        """Model ``model`` (trained on ``env_steps``) should be evaluated now: one newer than the
        last evaluated, by epoch, then version."""
        ref = ModelRef.of(model)
        if ref.version < 0 or ref <= self.last:
            return False
        if self.every_env_steps and env_steps is not None:
            return env_steps >= self._next_mark or self._data_went_back(ref, env_steps)
        return self.clock() >= self._next_at

    def _data_went_back(self, ref: ModelRef, env_steps: int) -> bool:
        """A new epoch's model trained on fewer env steps than the last one evaluated (a learner
        resumed from an older checkpoint): due at once, and the marks count on from its data."""
        return ref.epoch > self.last.epoch and env_steps < self._next_mark - self.every_env_steps

    def judged(self, model: int | ModelRef, env_steps: int | None = None) -> None:
        """Model ``model`` was evaluated (or its evaluation failed: not again at once): the next
        is due a period from now or at the first mark past ``env_steps``."""
        self.last = max(self.last, ModelRef.of(model))
        self._next_at = self.clock() + self.every_s
        if self.every_env_steps and env_steps is not None:
            self._next_mark = (env_steps // self.every_env_steps + 1) * self.every_env_steps
