"""Greedy evaluation played by a worker on its own game, between its training episodes.

A real game has one window per PC, so no evaluator elsewhere can have a copy of it. With
``[train] eval_on = "workers"`` each worker, every ``eval_every_s`` and only for a model it has not
evaluated yet, stops recording, ends its open episodes for the actor (no n-step window spans the
evaluation), plays ``eval_episodes`` greedy episodes on its own envs (seeded as every evaluator
seeds a model version: :func:`mqttrl.envs.rollout.evaluation_seed`), resets its envs and trains on.
The result is published on ``eval/<worker>`` with the fields of the evaluator's, so it feeds what
those feed: ``mqttrl train``'s record (``evaluations.csv``, the target, ``best/``), telemetry and the
learner's best-model save.

A sync-mode worker (PPO) evaluates between rounds only: after it sent its share, while the learner
trains on the round (the next round waits for the evaluation's end when it takes longer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mqttrl.envs.rollout import EnvSet, evaluation_seed, greedy_returns
from mqttrl.plugin.algorithm import INGESTED_KEY
from mqttrl.wire.evaluation import Evaluation


def why_not_evaluating(train: Any, mode: str, index: int | None) -> str | None:
    """Why this worker plays no greedy evaluations (None: it does): the evaluator node plays them, or
    ``train.eval_workers`` leaves it out. (``mode``: a sync-mode worker evaluates too, between rounds.)"""
    if train.eval_on != "workers":
        return "the evaluator node plays them"
    if train.eval_workers and (index is None or index >= train.eval_workers):
        where = "it has no --index" if index is None else f"its --index is {index}"
        return f"train.eval_workers = {train.eval_workers} and {where}"
    return None


class WorkerEvaluation:
    """When this worker evaluates, and the playing of it (pure scheduling plus the env loop)."""

    def __init__(self, episodes: int, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.episodes, self.every_s, self.clock = episodes, every_s, clock
        #: the newest model version this worker evaluated (-1: none)
        self.evaluated = -1
        self._next_at = clock() + every_s  # the first after one period: a model worth judging

    def due(self, version: int) -> bool:
        """An evaluation is due: the period has passed and the model is one not evaluated yet."""
        return version >= 0 and version > self.evaluated and self.clock() >= self._next_at

    def play(
        self,
        envs: EnvSet,
        actor: Any,
        version: int,
        info: dict,
        during: Callable[[], None] | None = None,
        max_steps: int = 100_000,
    ) -> Evaluation:
        """Play the greedy episodes on ``envs`` (their open episodes are ended for ``actor`` first, and
        every env is reset after), calling ``during`` after each step; the result as an evaluator
        publishes it."""
        self.evaluated = version
        self._next_at = self.clock() + self.every_s  # also when it fails: not again at once
        started = time.monotonic()
        for i in range(envs.num_envs):  # the open training episodes end here (as a truncation)
            actor.truncate(i, envs.obs[i])
        seed = evaluation_seed(version, self.episodes)
        returns = greedy_returns(envs.envs, envs.dtype, actor, self.episodes, seed, max_steps, during)
        envs.reset_all()
        self._next_at = self.clock() + self.every_s
        ingested = info.get(INGESTED_KEY)  # the data the model was trained on: curves by env step
        env_steps = ingested if isinstance(ingested, int) and not isinstance(ingested, bool) else None
        return Evaluation.of_returns(version, returns, time.monotonic() - started, env_steps)
