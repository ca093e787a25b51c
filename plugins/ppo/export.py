"""PPO after training: its weights out of a checkpoint (numpy), its network as one torch module (export).

* ``weights_from_checkpoint``: the tensors and info ``PPOLearner.export_weights`` gives, read from
  what ``PPOLearner.state_dict`` wrote (the agent is ``agent.*``, the observation statistics
  ``obs_norm.*``, the description ``meta["net"]``), without building the learner, so a torch-free
  process loads a checkpoint;
* ``export_module``: the agent as a ``torch.nn.Module`` from exported weights, raw observations in
  their native dtype -> ``(logits, value)`` (Discrete actions) or ``(mean, log_std, value)`` (Box),
  the forward contract of :mod:`.numpy_net`; with ``obs_norm`` the statistics are inside the module
  (float64, as the forwards compute them), so it takes raw observations too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import Tensors

from .common import PPOParams, full_info, net_info, obs_stats, obs_std

#: the agent's tensors in a ``state_dict``: exported under the same names without the prefix
AGENT_PREFIX = "agent."


def weights_from_checkpoint(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> tuple[Tensors, dict]:
    """``(tensors, info)`` as ``export_weights`` gives them, from ``state_dict`` output; ValueError if it is not PPO's."""
    if meta.get("algorithm") != "ppo" or "net" not in meta:
        raise ValueError(f"not a ppo checkpoint (algorithm={meta.get('algorithm')!r})")
    out = {k[len(AGENT_PREFIX) :]: np.asarray(tensors[k]) for k in tensors if k.startswith(AGENT_PREFIX)}
    if not out:
        raise ValueError("the ppo checkpoint holds no agent (no agent.* tensors)")
    if meta["net"].get("obs_norm"):
        for name in ("obs_norm.mean", "obs_norm.var"):
            if name not in tensors:
                raise ValueError(f"the ppo checkpoint uses obs_norm but holds no {name}")
            out[name] = np.asarray(tensors[name])
    return out, {**meta["net"], "round": int(meta.get("rounds", 0))}


def export_module(
    params: PPOParams, obs_space: gym.Space, act_space: gym.Space, tensors: Mapping[str, np.ndarray], info: Mapping
):
    """``learner.Agent`` loaded with ``tensors``, with the observation normalisation in front."""
    import torch
    from torch import nn

    from mqttrl.plugin import load_module

    from .common import check_spaces
    from .learner import Agent

    obs_dim, continuous, act_dim = check_spaces(obs_space, act_space)
    full = full_info(net_info(obs_dim, continuous, act_dim, params), info, obs_dim.shape)
    agent = Agent(full, ortho_init=False)
    load_module(agent, tensors, ignore=("obs_norm.",))
    stats = obs_stats(tensors, full)

    class PolicyOutputs(nn.Module):
        output_names = ("mean", "log_std", "value") if continuous else ("logits", "value")

        def __init__(self):
            super().__init__()
            self.agent = agent
            self.normalize = stats is not None
            if stats is not None:  # normalize_obs's arithmetic: float64, clipped, then float32
                # not "mean": an ONNX graph's initializers and outputs share one namespace
                self.register_buffer("obs_mean", torch.from_numpy(np.asarray(stats[0], np.float64)))
                self.register_buffer("obs_std", torch.from_numpy(obs_std(stats[1])))
                self.clip = float(full["obs_clip"])

        def forward(self, obs):
            x = obs
            if self.normalize:
                x = ((x.flatten(1).double() - self.obs_mean) / self.obs_std).clamp(-self.clip, self.clip).float()
            out, value = self.agent(x)
            if continuous:
                return out, self.agent.actor_logstd.expand_as(out), value
            return out, value

    return PolicyOutputs().eval()
