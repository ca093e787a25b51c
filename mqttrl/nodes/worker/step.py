"""One vector step as a record, and what happens to it: the same for the free and the real-time loop.

A step gives every env's row of a transition. Before the actor records it, a person's actions
replace the policy's where the env reports them (demonstrations), and the row of a game that
crashed mid-step is refilled with a real transition of the env made afresh; then the actor, the
demonstration recorder and the worker core (counts, finished episodes) each get the same record.
The actor gets a step whose game's frames stood still only once they move again (:class:`StillHold`):
a game found frozen meanwhile fails, and its still steps are dropped, never trained on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from mqttrl.envs.rollout import EnvSet
from mqttrl.nodes.worker.remote_forward import InferenceUnavailable
from mqttrl.observe.timing import BlockTimes
from mqttrl.plugin.algorithm import INTERVENTION, Actor, TakeoverActor

log = logging.getLogger("mqttrl.worker")


@attrs.define
class VectorStep:
    """Every env's row of one step: what the actor acted on, did, got and saw next, and which
    episodes ended (``EpisodeEnd``)."""

    obs: np.ndarray
    actions: np.ndarray
    #: the actor's per-row extras (log-probabilities, values, ...), by name
    extras: dict[str, np.ndarray]
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    ended: list

    @classmethod
    def of(cls, actions: Any, extras: dict, out: tuple) -> VectorStep:
        """The record of ``envs.step(actions)``'s ``out`` (obs, rewards, next_obs, terminated, truncated, ended)."""
        obs, rewards, next_obs, terminated, truncated, ended = out
        return cls(obs, actions, extras, rewards, next_obs, terminated, truncated, ended)

    def copy_inputs(self) -> None:
        """Own copies of what the refill overwrites (the arrays may be the envs' or the actor's)."""
        self.obs, self.actions = self.obs.copy(), self.actions.copy()
        self.extras = {k: v.copy() for k, v in self.extras.items()}


class StillHold:
    """Vector steps kept from the actor while a game's frames stand still (:attr:`EnvSet.still`,
    a screen env's frozen check): a hung game shows its last picture until ``frozen_s`` finds it,
    and those frames are not play. A step is recorded, in order, once every game still in it has
    moved since; when anything breaks the sequence first (a game fails: a still one was frozen;
    a step not recorded; a new model) the held steps are dropped, every game's open n-step
    window ending where they began. At most ``frozen_s`` of steps wait."""

    def __init__(self, actor: Actor):
        self.actor = actor
        self.steps: list[VectorStep] = []
        #: env -> index in :attr:`steps` of the first step of its open still run
        self.runs: dict[int, int] = {}
        #: the model version that acted the held steps
        self.version = -1

    def add(self, still: dict[int, float], step: VectorStep, version: int) -> list[VectorStep]:
        """``step`` held (``still``: its games whose frame stood still) after the earlier ones; the
        steps now safe to record, in order. A game whose episode ended at this step ends its still
        run here: the env judged the picture (a game over that stands still, as Pacman's does, is
        done after a few still frames, long before ``frozen_s``), so nothing is left to wait for;
        waiting for the next game's frames would hold the episode's end over a relaunch, and a
        new model meanwhile would drop it untrained."""
        if still:
            still = {i: s for i, s in still.items() if not (step.terminated[i] or step.truncated[i])}
        if not still and not self.steps:
            return [step]
        if not self.steps:
            self.version = version
        step.copy_inputs()  # the actor's buffers may be reused by its next act()
        self.steps.append(step)
        self.runs = {i: j for i, j in self.runs.items() if i in still}  # those that moved: their run is over
        for i in still:
            self.runs.setdefault(i, len(self.steps) - 1)
        k = min(self.runs.values(), default=len(self.steps))
        out, self.steps = self.steps[:k], self.steps[k:]
        self.runs = {i: j - k for i, j in self.runs.items()}
        return out

    def drop(self, failed: list[int]) -> None:
        """Forget the held steps (the games' streams end where they began); ``failed``: the games
        that failed now (a still one was frozen: the env's error said so, with how many steps)."""
        if not self.steps:
            return
        first = self.steps[0].obs
        for i in range(len(first)):
            self.actor.truncate(i, first[i])
        frozen = sorted(i for i in failed if i in self.runs)
        log.info(
            "%d vector steps held back while a game's frames stood still not recorded (%s)",
            len(self.steps),
            f"env {', '.join(map(str, frozen))} froze" if frozen else "the sequence broke before they moved",
        )
        self.steps, self.runs = [], {}


class StepRecorder:
    """Hands each vector step on: to the actor (recorded), the demonstration recorder and the core."""

    def __init__(
        self,
        actor: Actor,
        core: Any,
        blocks: BlockTimes,
        demo_recorder: Any,
        inference_down: Callable[[], None],
        stopping: Callable[[], bool],
    ):
        self.actor = actor
        #: the worker core: counts the step and the episodes it finished
        self.core = core
        self.blocks = blocks
        #: a person's whole episodes to a dataset (:mod:`mqttrl.demos.live`), or None
        self.demo_recorder = demo_recorder
        #: called while central inference is down during a refill (the worker heartbeats)
        self.inference_down = inference_down
        self.stopping = stopping
        #: steps whose games' frames stand still, until they move (or the game is found frozen)
        self.hold = StillHold(actor)
        #: the actor marks the steps a person took over in its batches (the INTERVENTION extra)
        self.marks_takeovers = isinstance(actor, TakeoverActor) and bool(actor.takes_interventions)

    def take(self, envs: EnvSet, step: VectorStep, record: bool, timed: bool) -> None:
        """A person's actions where the env reports them, crashed games' rows refilled, recorded
        (unless ``record`` is False: an idle game that cannot pause), counted; ``timed``: the
        recording is the ``record`` block (the real-time loop times every part of its period)."""
        step.actions = envs.taken(step.actions)  # a person's actions where the env reports them (demonstrations)
        if envs.demo_actions and self.marks_takeovers:  # and which rows they are, for the batch
            person = np.zeros(envs.num_envs, bool)
            person[list(envs.demo_actions)] = True
            step.extras = {**step.extras, INTERVENTION: person}
        hold = self.hold
        if hold.steps and (envs.failed or not record or self.core.version != hold.version):
            hold.drop(envs.failed)
        if envs.failed:  # a game crashed mid-step: its row gets a real transition from the env made afresh
            step.copy_inputs()
            for i in envs.failed:
                self.actor.truncate(i, step.obs[i])  # the episode ends where it really got to
                self.refill_row(envs, i, step)
        if record:
            with self.blocks.timed("record") if timed else contextlib.nullcontext():
                for s in hold.add(envs.still, step, self.core.version):
                    self.actor.record(s.obs, s.actions, s.extras, s.rewards, s.next_obs, s.terminated, s.truncated)
            if self.demo_recorder is not None:
                self.demo_recorder.step(
                    envs, step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated
                )
        # a game resetting on its thread made no step (its row holds no transition)
        self.core.stepped(envs.num_envs - len(getattr(envs, "resetting_rows", ())), step.ended, time.time())

    def refill_row(self, envs: EnvSet, i: int, step: VectorStep) -> None:
        """Fill row ``i`` of ``step`` in place with a real transition of env ``i``, made afresh
        after its step failed: act on its new first observation (row ``i`` of a policy call over
        all rows), step it alone; again while it fails (``EnvSet`` backs off, and raises
        :class:`EnvFailing` when it keeps failing)."""
        while True:
            step.obs[i] = envs.obs[i]
            try:
                acts, more = self.actor.act(step.obs)
            except InferenceUnavailable as e:  # the other rows are stepped already: wait for inference
                log.error("%s", e)
                self.inference_down()
                if self.stopping():
                    raise
                continue
            got = envs.step_env(i, acts[i])
            if got is not None:
                break
        step.obs[i], step.rewards[i], step.next_obs[i], step.terminated[i], step.truncated[i], end = got
        step.actions[i] = acts[i]
        for k, v in more.items():
            step.extras[k][i] = v[i]
        if INTERVENTION in step.extras:  # the policy acted the refilled row
            step.extras[INTERVENTION][i] = False
        if end is not None:
            step.ended.append(end)
