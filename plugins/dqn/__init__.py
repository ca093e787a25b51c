"""DQN, Ape-X style: many actors with an epsilon ladder feed one replay learner.

This module only registers the algorithm. The package, by role:

* :mod:`.common`: ``DQNParams``, the supported spaces, the network description
  and the sample spec, shared by both sides;
* :mod:`.numpy_net`: the Q-network's forward in numpy (workers without torch);
* :mod:`.actor`: the worker side, numpy only (epsilon ladder, n-step windows);
* :mod:`.learner`: the learner side in torch (``QNetwork``, the torch forward,
  prioritized replay, ``DQNLearner``).

The factories import :mod:`.learner` only when torch is asked for, so a worker
that acts with the numpy forward never imports torch.
"""

from __future__ import annotations

from typing import Any

import attrs
import gymnasium as gym

from mqttrl import hookimpl
from mqttrl.plugin import AlgorithmInfo, AsyncLearner, Forward

from .actor import DQNActor
from .common import DQNParams, sample_spec
from .demo_replay import learn_from_demos
from .export import export_module, weights_from_checkpoint
from .numpy_net import NumpyQForward


def make_forward(params: DQNParams, obs_space: gym.Space, act_space: gym.Space, backend: str, seed: int = 0) -> Forward:
    """A forward for actors and inference servers: ``"numpy"`` or ``"torch"``; ``seed`` picks
    its weights until the first load."""
    if backend == "numpy":
        return NumpyQForward(params, obs_space, act_space, seed)
    if backend == "torch":
        from .learner import TorchQForward

        return TorchQForward(params, obs_space, act_space, seed)
    raise ValueError(f"backend {backend!r}: use torch or numpy")


def make_learner(*args: Any, **kwargs: Any) -> AsyncLearner:
    """``DQNLearner(params, obs_space, act_space, device="cpu", seed=0, context=None)``: the learner needs
    torch, imported here, not when this module loads (a worker never imports it)."""
    from .learner import DQNLearner

    return DQNLearner(*args, **kwargs)


def with_epsilon(params: DQNParams, epsilon: float) -> DQNParams:
    """Every actor at exploration rate ``epsilon`` (no ladder, no decay): a loaded policy's
    ``predict(..., deterministic=False)``."""
    return attrs.evolve(params, epsilon_base=epsilon, epsilon_alpha=0.0, epsilon_start=epsilon)


@hookimpl
def mqttrl_register_algorithms(register):
    register(
        AlgorithmInfo(
            name="dqn",
            description="DQN (double, dueling, n-step, prioritized replay, C51/QR, noisy nets; preset rainbow), Ape-X style",
            params=DQNParams,
            mode="async",
            action_spaces=(gym.spaces.Discrete,),
            sample_spec=sample_spec,
            make_actor=DQNActor,
            make_learner=make_learner,
            make_forward=make_forward,
            weights_from_checkpoint=weights_from_checkpoint,
            export_module=export_module,
            learn_from_demos=learn_from_demos,
            with_epsilon=with_epsilon,
        )
    )
