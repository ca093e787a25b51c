"""The algorithm seam: what a plugin supplies so that learner and worker stay generic.

An algorithm is described by an :class:`AlgorithmInfo` and has three parts:

* a :class:`Forward` — the network: observations in, raw outputs out (Q-values,
  logits, values). It runs in local torch, local numpy, or on a remote
  inference server; exploration and sampling are not part of it.
* an :class:`Actor` on each worker, numpy only: picks actions over any forward,
  turns the transitions it sees into sample arrays, loads weights.
* a learner in the learner process, one protocol per mode:

  - mode ``"async"`` (Ape-X): an :class:`AsyncLearner` takes batches from any
    worker at any time within the staleness window; the node calls
    ``train_step`` while ``train_due``, and pauses workers while ``behind``.
  - mode ``"sync"`` (PPO rounds): a :class:`SyncLearner` trains one round per
    model version; each live worker sends one batch (its share) made with
    version v; when all have (or the round times out) the node calls
    ``train_round`` and publishes v+1. Its actor is a :class:`SyncActor`: it can
    ``discard`` a partial share when a round finished without it.

Every method a node calls is in these protocols: nodes never probe for optional
methods with ``getattr``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.wire import SampleBatch, SampleSpec

Tensors = dict[str, np.ndarray]
Mode = Literal["async", "sync"]

#: a key the learner adds to every weights ``info``: the median env steps of the workers it
#: heard from. An actor whose schedule counts env steps (DQN's epsilon decay) starts from it,
#: so a restarted worker explores as far into the run as its peers, not from the start.
FLEET_PROGRESS_KEY = "fleet_env_steps_per_worker"
#: the extra a worker adds to a :class:`TakeoverActor`'s ``record`` extras: a bool per env row, True
#: where a person took that step instead of the policy (a takeover: the env reported
#: ``info["demo_action"]``, docs/demonstrations.md); such an actor marks those transitions in its
#: batches (DQN: an optional ``intervention`` field, uint8, sent only when a batch holds one)
INTERVENTION = "intervention"
#: a key the learner adds to every weights ``info``: the samples (one per env step) it had taken in
#: when it published them. Evaluations keep it as their ``env_steps``, so runs compare at equal data.
INGESTED_KEY = "env_steps_ingested"
#: a key the learner adds to every weights ``info``: the gradient updates behind them (0: the
#: untrained first model). An actor whose exploration needs a trained model (DQN's noisy nets)
#: acts at random until then; an info without it comes from an older learner: take it as trained.
UPDATES_KEY = "learner_updates"


@attrs.frozen
class ActorContext:
    """What a worker tells its actor about where it runs."""

    num_envs: int
    #: index of this actor's first env among all envs of the run (epsilon ladders)
    first_env_index: int = 0
    #: total envs in the run, if known
    total_envs: int = 1
    seed: int = 0
    #: a worker started without an index: its envs spread over a whole exploration ladder of their
    #: own, env k at position (k + ladder_phase) / num_envs, the phase in [0, 1) derived from the
    #: worker's name so that no two workers explore alike (None: use first_env_index / total_envs)
    ladder_phase: float | None = None


@runtime_checkable
class Forward(Protocol):
    """The network part of a policy: observations in, raw outputs out.

    The same actor works with a torch forward, a numpy forward or a remote
    inference server, because exploration and sampling stay in the actor.
    """

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Replace the parameters (from :meth:`AsyncLearner.export_weights` / :meth:`SyncLearner.export_weights`)."""

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """Raw outputs for a batch of observations, each array with the batch as its first axis."""

    def close(self) -> None:
        """Release what the forward holds (a remote forward's MQTT client); local forwards do nothing."""


# ---- a forward's optional members: each its own protocol, so a caller asks ``isinstance`` (and a
# type checker knows what it got) instead of probing a plugin's attributes
@runtime_checkable
class MovableForward(Forward, Protocol):
    """A forward that can move its network to a torch device (the inference server's ``device``)."""

    def to_device(self, device: str) -> None:
        """Run on ``device`` ("cuda", "cuda:1", "mps") from now on."""


@runtime_checkable
class NoisyForward(Forward, Protocol):
    """A forward with noisy layers that can also run with their mean weights (what an exported
    model computes): ``Policy.outputs`` calls that."""

    def noiseless(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """The outputs for ``obs`` with every noisy layer at its mean weights."""


@runtime_checkable
class Actor(Protocol):
    """The worker side of an algorithm, numpy only, over any :class:`Forward`."""

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Replace the policy's parameters (called between steps, never during one). ``info``
        is the learner's export info plus :data:`FLEET_PROGRESS_KEY`."""

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

    def truncate(self, env_index: int, final_obs: np.ndarray) -> None:
        """Env ``env_index``'s game failed before its step finished: end its open episode as
        truncated at ``final_obs`` (the last observation it really reached); nothing is
        recorded for the failed step; the next ``record`` for that env starts a new episode."""

    def pending(self) -> int:
        """Transitions ready to send. For a :class:`SyncActor` this stays 0 until the actor's
        whole share of the round is collected; the worker then sends it and waits for the
        next model version."""

    def take(self) -> Tensors:
        """Remove and return the ready transitions as arrays matching the sample spec."""


@runtime_checkable
class TakeoverActor(Actor, Protocol):
    """An actor that learns which steps a person took over: the worker adds the :data:`INTERVENTION`
    extra to ``record``'s extras of a step where a person played (other actors get only the extras
    they made, so their batches are unchanged)."""

    #: True: hand this actor the takeover flags
    takes_interventions: bool


@runtime_checkable
class SyncActor(Actor, Protocol):
    """The actor of a sync-mode algorithm."""

    def discard(self) -> None:
        """Drop a partial share: its round finished without this worker, and the share's
        model version is no longer the open round's."""


class _LearnerCommon(Protocol):
    #: gradient updates so far (checkpoint names and cadence count these)
    updates: int

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        """Policy parameters for workers, as numpy arrays, plus JSON-able info."""

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        """Everything needed to resume: tensors plus JSON-able metadata."""

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` output."""


@runtime_checkable
class AsyncLearner(_LearnerCommon, Protocol):
    """Mode ``"async"``: batches from any worker at any time, training whenever due."""

    def add(self, batch: SampleBatch) -> int:
        """Ingest a validated batch; returns transitions added."""

    def train_due(self) -> bool:
        """Whether a training step should run now."""

    def behind(self) -> bool:
        """True when samples arrive faster than training keeps up (the node pauses workers)."""

    def train_step(self) -> dict[str, float]:
        """Run one update; returns scalar metrics."""


@runtime_checkable
class SyncLearner(_LearnerCommon, Protocol):
    """Mode ``"sync"``: one training round per model version."""

    def train_round(self, batches: list[SampleBatch]) -> dict[str, float]:
        """Train on one round: every batch was made with the current model version, at most
        one batch per worker. The node publishes the next model version right after."""


def _untimed(block: str) -> AbstractContextManager:
    return contextlib.nullcontext()


@attrs.frozen
class LearnerContext:
    """What the learner node gives ``make_learner`` besides the hyperparameters and spaces, so that
    nothing has to patch a plugin from outside: the device and seed, ``timed(block)`` (a context
    manager: the seconds inside it count as that block in heartbeats, metrics and Prometheus;
    ``"sample"`` for drawing a training batch from a replay) and the learner's logger."""

    device: str = "cpu"
    seed: int = 0
    timed: Callable[[str], AbstractContextManager] = _untimed
    log: logging.Logger = attrs.field(factory=lambda: logging.getLogger("mqttrl.learner"))


def takes_context(make_learner: Callable[..., Any]) -> bool:
    """Whether ``make_learner`` accepts ``context=`` (newer plugins); older ones are called as before."""
    try:
        params = inspect.signature(make_learner).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "context" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


@attrs.frozen
class AlgorithmInfo:
    """What ``mqttrl_register_algorithms`` registers."""

    name: str
    description: str
    #: attrs class of hyperparameters; every field needs a default
    params: type
    mode: Mode
    #: ``sample_spec(params, obs_space, act_space)``: what one batch must hold
    sample_spec: Callable[[Any, gym.Space, gym.Space], SampleSpec]
    #: ``make_actor(params, obs_space, act_space, ctx, forward)``: an :class:`Actor`
    #: (a :class:`SyncActor` in sync mode) over the given forward
    make_actor: Callable[[Any, gym.Space, gym.Space, ActorContext, Forward], Actor]
    #: ``make_learner(params, obs_space, act_space, device, seed, context=None)``: an :class:`AsyncLearner`
    #: or a :class:`SyncLearner`, as ``mode`` says; may import torch. ``context`` (a :class:`LearnerContext`)
    #: is passed where the function accepts it (the block timer, the logger); older plugins without it
    #: are called with the five arguments as before
    make_learner: Callable[[Any, gym.Space, gym.Space, str, int], AsyncLearner | SyncLearner]
    #: ``make_forward(params, obs_space, act_space, backend, seed)`` with backend "torch" or "numpy"
    make_forward: Callable[..., Forward]
    #: the backends ``make_forward`` accepts, best first for a worker ("numpy" needs no torch)
    backends: tuple[str, ...] = ("numpy", "torch")
    #: ``weights_from_checkpoint(tensors, meta)``: the policy's weights in the layout ``export_weights``
    #: gives, ``(tensors, info)``, taken from a learner's ``state_dict(...)`` output, in numpy (no learner
    #: is built, no torch imported), so :func:`mqttrl.load_policy` reads a checkpoint anywhere. None: a
    #: checkpoint is read by building the learner (torch) and calling ``load_state_dict`` + ``export_weights``
    weights_from_checkpoint: Callable[[Mapping[str, np.ndarray], Mapping[str, Any]], tuple[Tensors, dict]] | None = None
    #: ``export_module(params, obs_space, act_space, tensors, info)``: a ``torch.nn.Module`` built from
    #: exported weights that maps a batch of observations in their native dtype (uint8 stays uint8) to
    #: the forward's outputs as a tuple, named by the module's ``output_names`` attribute (a tuple of
    #: str); what ``mqttrl export`` writes as ONNX or TorchScript; may import torch. None: not exportable
    export_module: Callable[..., Any] | None = None
    #: ``learn_from_demos(learner, dataset, settings, pretrain)``: take a demonstration dataset (a
    #: :class:`mqttrl.demos.Dataset`, every episode already checked against the run's spaces) into the
    #: learner ``make_learner`` made, before it trains on any worker's sample: DQN keeps it as a replay part
    #: that is never evicted, PPO clones it. ``settings`` is the run's ``[demos]`` section; ``pretrain`` is
    #: False for a learner resumed from a checkpoint (the demonstrations are taken again, any pretraining
    #: is not repeated). Returns figures for the log. None: the algorithm does not learn from
    #: demonstrations, and a run with ``demos.path`` set is refused with one line
    learn_from_demos: Callable[[Any, Any, Any, bool], Mapping[str, float]] | None = None
    #: ``with_epsilon(params, epsilon)``: ``params`` whose actors explore epsilon-greedily at ``epsilon`` on
    #: every env (``mqttrl.load_policy(..., epsilon=)``, ``mqttrl enjoy --epsilon``). None: the algorithm
    #: does not explore that way, and ``epsilon=`` is refused with one line
    with_epsilon: Callable[[Any, float], Any] | None = None
    #: the env id ``mqttrl check-plugin`` runs the algorithm's round trip on: one whose spaces the
    #: algorithm supports (a Box-action algorithm cannot be checked on CartPole's Discrete actions)
    check_env: str = "CartPole-v1"
    #: the gymnasium action-space classes the algorithm acts in (e.g. ``(gym.spaces.Discrete,)``), so a
    #: run that does not fit is refused in one line before anything starts, naming the algorithms that
    #: do fit. Empty: not declared; ``sample_spec`` is then asked (a TypeError or ValueError from it refuses)
    action_spaces: tuple[type, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("async", "sync"):
            raise ValueError(f"algorithm {self.name!r}: mode must be 'async' or 'sync', not {self.mode!r}")
