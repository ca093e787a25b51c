"""SAC and REDQ for Box actions, Ape-X style: workers act with the newest policy, the learner keeps a replay.

Written only against the public plugin API (``mqttrl.plugin``), as a third-party plugin would be.
``[algorithm] name = "sac"`` is SAC (twin critics, Polyak-averaged targets, automatic entropy
temperature, tanh-squashed Gaussian policy scaled into the action box); ``preset = "redq"`` makes
it REDQ (10 critics, a random pair in the target, 20 critic updates per env step). ``name = "crossq"``
is CrossQ (Bhatt et al. 2024: batch renormalisation in critics and policy, no target critics, the
current and next state-actions through the critics in one forward), over the same actor, replay,
numpy forward and export. The package, by role:

* :mod:`.common`: ``SACParams``, the supported spaces, action scaling, the network description
  and the sample spec, shared by both sides; :mod:`.crossq_params`: ``CrossQParams``;
* :mod:`.numpy_net`: the policy's forward in numpy (workers without torch);
* :mod:`.actor`: the worker side, numpy only (sampling, uniform exploration before training);
* :mod:`.replay`: the learner's replay ring (numpy);
* :mod:`.losses`, :mod:`.nets`, :mod:`.base`, :mod:`.learner`: the learner side in torch;
  :mod:`.batch_renorm` and :mod:`.crossq`: CrossQ's normalisation and learner;
* :mod:`.export`: a checkpoint's policy in numpy, and the policy as a torch module for ``mqttrl export``.

The factories import torch only when it is asked for, so a worker that acts with the numpy
forward never imports it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from mqttrl import hookimpl
from mqttrl.plugin import AlgorithmInfo, AsyncLearner, Forward

from .actor import SACActor
from .common import SACParams, sample_spec
from .crossq_params import CrossQParams
from .demo_clone import learn_from_demos
from .export import crossq_weights_from_checkpoint, export_module, weights_from_checkpoint
from .numpy_net import NumpyPolicyForward


def make_forward(
    params: SACParams | CrossQParams, obs_space: gym.Space, act_space: gym.Space, backend: str, seed: int = 0
) -> Forward:
    """A forward for actors and inference servers: ``"numpy"`` or ``"torch"``; ``seed`` picks its weights until the first load."""
    if backend == "numpy":
        return NumpyPolicyForward(params, obs_space, act_space, seed)
    if backend == "torch":
        from .nets import TorchPolicyForward

        return TorchPolicyForward(params, obs_space, act_space, seed)
    raise ValueError(f"backend {backend!r}: use torch or numpy")


def make_learner(*args: Any, **kwargs: Any) -> AsyncLearner:
    """``SACLearner(params, obs_space, act_space, device="cpu", seed=0, context=None)``: the learner needs
    torch, imported here, not when this module loads (a worker never imports it)."""
    from .learner import SACLearner

    return SACLearner(*args, **kwargs)


def make_crossq_learner(*args: Any, **kwargs: Any) -> AsyncLearner:
    """``CrossQLearner(params, obs_space, act_space, device="cpu", seed=0, context=None)``, torch imported here."""
    from .crossq import CrossQLearner

    return CrossQLearner(*args, **kwargs)


@hookimpl
def mqttrl_register_algorithms(register):
    register(
        AlgorithmInfo(
            name="sac",
            description="SAC for Box actions (twin critics, auto temperature; preset redq: REDQ's ensemble), Ape-X style",
            params=SACParams,
            mode="async",
            action_spaces=(gym.spaces.Box,),
            sample_spec=sample_spec,
            make_actor=SACActor,
            make_learner=make_learner,
            make_forward=make_forward,
            weights_from_checkpoint=weights_from_checkpoint,
            export_module=export_module,
            learn_from_demos=learn_from_demos,
            check_env="Pendulum-v1",
        )
    )
    register(
        AlgorithmInfo(
            name="crossq",
            description="CrossQ for Box actions (SAC with batch-renormalised critics, no target critics), Ape-X style",
            params=CrossQParams,
            mode="async",
            action_spaces=(gym.spaces.Box,),
            sample_spec=sample_spec,
            make_actor=SACActor,
            make_learner=make_crossq_learner,
            make_forward=make_forward,
            weights_from_checkpoint=crossq_weights_from_checkpoint,
            export_module=export_module,
            check_env="Pendulum-v1",
        )
    )
