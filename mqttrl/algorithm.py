"""The algorithm seam: what a plugin supplies so that learner and worker stay generic.

An algorithm is described by an :class:`AlgorithmInfo` and has two halves:

* an :class:`Actor` on each worker: picks actions for a batch of envs, turns
  the transitions it sees into sample arrays, loads weights;
* a :class:`Learner` in the learner process: takes validated batches, says when
  a training step is due, trains, exports weights and checkpoints its state.

Mode ``"async"`` (Ape-X style) accepts samples from any worker at any time
within a staleness window; the node calls ``train_step`` while ``train_due``.
Mode ``"sync"`` (PPO style) trains one round per model version: each live worker
sends one batch (its share) made with version v; when all have (or the round
times out) the node calls ``train_round`` and publishes v+1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.wire import SampleBatch, SampleSpec

Tensors = dict[str, np.ndarray]


@attrs.frozen
class ActorContext:
    """What a worker tells its actor about where it runs."""

    num_envs: int
    #: index of this actor's first env among all envs of the run (epsilon ladders)
    first_env_index: int = 0
    #: total envs in the run, if known
    total_envs: int = 1
    seed: int = 0


class Actor(Protocol):
    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Replace the policy's parameters (called between steps, never during one)."""

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations (one per env) and per-step extras."""

    def record(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        extras: dict[str, np.ndarray],
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        """Take one vector step's transitions (``next_obs`` is the final obs where an episode ended)."""

    def pending(self) -> int:
        """Transitions ready to send. In sync mode this stays 0 until the actor's whole
        share of the round is collected; the worker then sends it and blocks in
        ``sync()`` until the next model version arrives."""

    def take(self) -> Tensors:
        """Remove and return the ready transitions as arrays matching the sample spec."""


class Learner(Protocol):
    updates: int

    def add(self, batch: SampleBatch) -> int:
        """Ingest a validated batch; returns transitions added."""

    def train_due(self) -> bool:
        """Whether a training step should run now."""

    def behind(self) -> bool:
        """True when samples arrive faster than training keeps up (flow control)."""

    def train_step(self) -> dict[str, float]:
        """Async mode: run one update; returns scalar metrics."""

    def train_round(self, batches: list[SampleBatch]) -> dict[str, float]:
        """Sync mode: train on one round (every batch was produced with the current
        model version, at most one batch per worker); returns scalar metrics. The node
        publishes the next model version right after."""

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        """Policy parameters for workers, as numpy arrays, plus JSON-able info."""

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        """Everything needed to resume: tensors plus JSON-able metadata."""

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` output."""


class Forward(Protocol):
    """The network part of a policy: observations in, raw outputs out (Q-values, logits, values).

    Exploration and sampling are not part of it; the actor does those in numpy, so the
    same actor works with a torch forward, a numpy forward or a remote inference server.
    """

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None: ...

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]: ...


@attrs.frozen
class AlgorithmInfo:
    name: str
    description: str
    #: attrs class of hyperparameters; every field needs a default
    params: type
    mode: Literal["async", "sync"]
    sample_spec: Callable[[Any, gym.Space, gym.Space], SampleSpec]
    #: ``make_actor(params, obs_space, act_space, ctx, forward=None)``; without a forward
    #: the actor builds a local one (torch if importable, else numpy)
    make_actor: Callable[..., Actor]
    #: ``make_learner(params, obs_space, act_space, device, seed)``; may import torch
    make_learner: Callable[[Any, gym.Space, gym.Space, str, int], Learner]
    #: ``make_forward(params, obs_space, act_space, backend)`` with backend "torch" or "numpy";
    #: None if the algorithm cannot run on an inference server or without torch
    make_forward: Callable[[Any, gym.Space, gym.Space, str], Forward] | None = None
