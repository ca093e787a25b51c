"""SAC after training: its policy out of a checkpoint (numpy), and the policy as one torch module (export).

* ``weights_from_checkpoint``: the tensors and info ``SACLearner.export_weights`` gives, read from
  what ``SACLearner.state_dict`` wrote (the policy is ``actor.*``, its description ``meta["net"]``),
  without building the learner, so a torch-free process loads a checkpoint (CrossQ's as well);
* ``export_module``: the policy as a ``torch.nn.Module``, observations -> ``(action, mean, log_std)``,
  the forwards' outputs: ``action`` is the greedy action, ``tanh(mean)`` scaled into the env's box;
  ``mean`` and ``log_std`` give the Gaussian before the tanh, for sampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import Tensors

from .common import SACParams

#: the policy's tensors in a ``state_dict``: exported under the same names without the prefix
ACTOR_PREFIX = "actor."


def weights_from_checkpoint(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], algorithm: str = "sac"
) -> tuple[Tensors, dict]:
    """``(tensors, info)`` as ``export_weights`` gives them, from ``state_dict`` output; ValueError if
    not ``algorithm``'s ("sac", or "crossq": the same layout, its policy with BatchRenorm layers)."""
    if meta.get("algorithm") != algorithm or "net" not in meta:
        raise ValueError(f"not a {algorithm} checkpoint (algorithm={meta.get('algorithm')!r})")
    actor = {k[len(ACTOR_PREFIX) :]: np.asarray(tensors[k]) for k in tensors if k.startswith(ACTOR_PREFIX)}
    if not actor:
        raise ValueError(f"the {algorithm} checkpoint holds no policy (no actor.* tensors)")
    return actor, {**meta["net"], "updates": int(meta.get("updates", 0))}


def crossq_weights_from_checkpoint(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> tuple[Tensors, dict]:
    """:func:`weights_from_checkpoint` of a CrossQ learner's ``state_dict``."""
    return weights_from_checkpoint(tensors, meta, "crossq")


def export_module(
    params: SACParams, obs_space: gym.Space, act_space: gym.Space, tensors: Mapping[str, np.ndarray], info: Mapping
):
    """``nets.PolicyNet`` loaded with ``tensors``: observations -> ``(action, mean, log_std)`` (CrossQ's
    policy in eval mode: its BatchRenorm layers apply their running statistics)."""
    import torch
    from torch import nn

    from .nets import TorchPolicyForward

    forward = TorchPolicyForward(params, obs_space, act_space)
    forward.load_weights(tensors, info)  # checks names and shapes

    class PolicyOutputs(nn.Module):
        output_names = ("action", "mean", "log_std")

        def __init__(self, net: nn.Module):
            super().__init__()
            self.net = net

        def forward(self, obs):
            mean, log_std = self.net(obs)
            return self.net.action_center + self.net.action_half * torch.tanh(mean), mean, log_std

    return PolicyOutputs(forward.net).eval()
