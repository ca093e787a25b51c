"""DQN after training: its weights out of a checkpoint (numpy), its network as one torch module (export).

* ``weights_from_checkpoint``: the tensors and info ``DQNLearner.export_weights`` gives, read from
  what ``DQNLearner.state_dict`` wrote (the online network is ``online.*``, its description
  ``meta["net"]``), without building the learner, so a torch-free process loads a checkpoint;
* ``export_module``: the Q-network as a ``torch.nn.Module`` from exported weights, observations
  in their native dtype -> ``(q,)``, the expected Q-values the forwards give (a noisy head with
  its mean weights, as greedy evaluation uses it); ``mqttrl export`` writes it as ONNX or TorchScript.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import Tensors

from .common import DQNParams

#: the online network's tensors in a ``state_dict``: exported under the same names without the prefix
ONLINE_PREFIX = "online."


def weights_from_checkpoint(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> tuple[Tensors, dict]:
    """``(tensors, info)`` as ``export_weights`` gives them, from ``state_dict`` output; ValueError if it is not DQN's."""
    if meta.get("algorithm") != "dqn" or "net" not in meta:
        raise ValueError(f"not a dqn checkpoint (algorithm={meta.get('algorithm')!r})")
    online = {k[len(ONLINE_PREFIX) :]: np.asarray(tensors[k]) for k in tensors if k.startswith(ONLINE_PREFIX)}
    if not online:
        raise ValueError("the dqn checkpoint holds no online network (no online.* tensors)")
    return online, dict(meta["net"])


def export_module(
    params: DQNParams, obs_space: gym.Space, act_space: gym.Space, tensors: Mapping[str, np.ndarray], info: Mapping
):
    """The Q-network (``learner.QNetwork``) loaded with ``tensors``: observations -> ``(q,)``."""
    from torch import nn

    from .learner import TorchQForward

    forward = TorchQForward(params, obs_space, act_space)
    forward.load_weights(tensors, info)  # checks names and shapes; the network follows the weights' info
    noisy = bool(forward.info.get("noisy", False))

    class QValues(nn.Module):
        output_names = ("q",)

        def __init__(self, net: nn.Module):
            super().__init__()
            self.net = net

        def forward(self, obs):
            return (self.net(obs, noise=False) if noisy else self.net(obs),)

    return QValues(forward.net).eval()
