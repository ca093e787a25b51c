"""PPO (clipped surrogate, GAE), one synchronous round per model version.

This module only registers the algorithm. The package, by role:

* :mod:`.common`: ``PPOParams``, the network's description and weights layout,
  observation normalisation, the sample spec and GAE, shared by both sides;
* :mod:`.numpy_net`: the network's forward in numpy (workers without torch);
* :mod:`.actor`: the worker side, numpy only (``PPOActor``: sampling, rollouts,
  truncation bootstrap, advantages);
* :mod:`.learner`: the learner side in torch (``Agent``, the torch forward,
  ``PPOLearner``).

The factories import :mod:`.learner` only when torch is asked for, so a worker
that acts with the numpy forward never imports torch.
"""

from __future__ import annotations

import gymnasium as gym

from mqttrl import hookimpl
from mqttrl.plugin import AlgorithmInfo, Forward, SyncLearner

from .actor import PPOActor
from .common import PPOParams, sample_spec
from .demo_clone import learn_from_demos
from .export import export_module, weights_from_checkpoint
from .numpy_net import NumpyForward


def make_forward(params: PPOParams, obs_space: gym.Space, act_space: gym.Space, backend: str, seed: int = 0) -> Forward:
    """A forward for actors and inference servers: ``"numpy"`` (:class:`~.numpy_net.NumpyForward`)
    or ``"torch"`` (``learner.TorchForward``); ``seed`` picks its weights until the first load."""
    if backend == "numpy":
        return NumpyForward(params, obs_space, act_space, seed=seed)
    if backend == "torch":
        from .learner import TorchForward

        return TorchForward(params, obs_space, act_space, seed=seed)
    raise ValueError(f"unknown forward backend {backend!r}; use 'numpy' or 'torch'")


def make_learner(
    params: PPOParams, obs_space: gym.Space, act_space: gym.Space, device: str = "cpu", seed: int = 0
) -> SyncLearner:
    """The learner needs torch; it is imported here, not when this module loads."""
    from .learner import PPOLearner

    return PPOLearner(params, obs_space, act_space, device, seed)


@hookimpl
def mqttrl_register_algorithms(register):
    register(
        AlgorithmInfo(
            name="ppo",
            description="PPO (clipped surrogate, GAE, actor/critic MLPs or a shared CNN), one synchronous round per model version",
            params=PPOParams,
            mode="sync",
            action_spaces=(gym.spaces.Discrete, gym.spaces.Box),
            sample_spec=sample_spec,
            make_actor=PPOActor,
            make_learner=make_learner,
            make_forward=make_forward,
            weights_from_checkpoint=weights_from_checkpoint,
            export_module=export_module,
            learn_from_demos=learn_from_demos,
        )
    )
