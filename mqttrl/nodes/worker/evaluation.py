"""Greedy evaluation played by a worker on its own game, between its training episodes.

A real game has one window per PC, so no evaluator elsewhere can have a copy of it. With
``[train] eval_on = "workers"`` each worker, every ``eval_every_s`` (or every
``eval_every_env_steps`` of the model's data) and only for a model it has not evaluated yet, stops
recording, ends its open episodes for the actor (no n-step window spans the evaluation), plays
``eval_episodes`` greedy episodes on its own envs (seeded as every evaluator seeds a model
version: :func:`mqttrl.envs.rollout.evaluation_seed`; a launched game is started afresh first, and
each game over starts the next episode on a new game: :mod:`mqttrl.envs.launched`), resets its
envs and trains on.
The result is published on ``eval/<worker>`` with the fields of the evaluator's, so it feeds what
those feed: ``mqttrl train``'s record (``evaluations.csv``, the target, ``best/``), telemetry and the
learner's best-model save.

A sync-mode worker (PPO) evaluates between rounds only: after it sent its share, while the learner
trains on the round (the next round waits for the evaluation's end when it takes longer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from mqttrl.envs.eval_schedule import EvalSchedule, trained_env_steps
from mqttrl.envs.launched import new_game_for_evaluation
from mqttrl.envs.rollout import EnvSet, evaluation_seed, greedy_returns
from mqttrl.wire.evaluation import Evaluation
from mqttrl.wire.model_ref import ModelRef

log = logging.getLogger("mqttrl.worker")


def why_not_evaluating(train: Any, mode: str, index: int | None) -> str | None:
    """Why this worker plays no greedy evaluations (None: it does): the evaluator node plays them, or
    ``train.eval_workers`` leaves it out. (``mode``: a sync-mode worker evaluates too, between rounds.)"""
    if train.eval_on != "workers":
        return "the evaluator node plays them"
    if train.eval_workers and (index is None or index >= train.eval_workers):
        where = "it has no --index" if index is None else f"its --index is {index}"
        return f"train.eval_workers = {train.eval_workers} and {where}"
    return None


def worker_evaluation(
    train: Any, mode: str, index: int | None, name: str, clock: Callable[[], float]
) -> WorkerEvaluation | None:
    """This worker's evaluation schedule from the run's ``[train]`` (None: it does not evaluate)."""
    why_not = why_not_evaluating(train, mode, index)
    if why_not is not None:
        if train.eval_on == "workers":  # said once: the run asked workers to evaluate
            log.info('train.eval_on = "workers": worker %s does not evaluate (%s)', name, why_not)
        return None
    return WorkerEvaluation(train.eval_episodes, train.eval_every_s, clock, train.eval_every_env_steps)


class WorkerEvaluation:
    """When this worker evaluates, and the playing of it (pure scheduling plus the env loop)."""

    def __init__(
        self, episodes: int, every_s: float, clock: Callable[[], float] = time.monotonic, every_env_steps: int = 0
    ):
        self.episodes = episodes
        #: the first after one period (or at the first mark): a model worth judging
        self.schedule = EvalSchedule(every_s, every_env_steps, clock)

    @property
    def evaluated(self) -> int:
        """The newest model version this worker evaluated (-1: none)."""
        return self.schedule.evaluated

    @evaluated.setter
    def evaluated(self, model: int | ModelRef) -> None:
        self.schedule.evaluated = model

    def due(self, model: int | ModelRef, info: dict | None = None) -> bool:
        """An evaluation is due: the model (its :class:`ModelRef`: a resumed learner's new epoch is
        newer at a lower version) is one not evaluated yet and the period has passed (or, with
        ``train.eval_every_env_steps``, its env steps, from its ``info``, reached the next mark)."""
        return self.schedule.due(model, trained_env_steps(info or {}))

    def play(
        self,
        envs: EnvSet,
        actor: Any,
        version: int | ModelRef,
        info: dict,
        during: Callable[[], None] | None = None,
        max_steps: int = 100_000,
    ) -> Evaluation:
        """Play the greedy episodes on ``envs`` (their open episodes are ended for ``actor`` first, and
        every env is reset after), calling ``during`` after each step; the result as an evaluator
        publishes it."""
        env_steps = trained_env_steps(info)  # the data the model was trained on: curves by env step
        ref = ModelRef.of(version)  # the model: its epoch too (a bare version: epoch 0)
        self.schedule.judged(ref, env_steps)  # also when it fails: not again at once
        started = time.monotonic()
        for i in range(envs.num_envs):  # the open training episodes end here (as a truncation)
            actor.truncate(i, envs.obs[i])
        new_game_for_evaluation(envs.envs)  # a launched game: the first episode on a fresh game
        seed = evaluation_seed(ref.version, self.episodes)
        returns = greedy_returns(envs.envs, envs.dtype, actor, self.episodes, seed, max_steps, during)
        envs.reset_all()
        self.schedule.judged(ref, env_steps)  # the period counts from the evaluation's end
        return Evaluation.of_returns(ref, returns, time.monotonic() - started, env_steps)
