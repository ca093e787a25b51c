"""SAC's networks in torch: the squashed Gaussian policy, the critic ensemble, and a torch forward.

* ``PolicyNet``: ``body.{0,2,...}`` Linear + ReLU, then ``mean`` and ``log_std`` heads (the layout of
  :func:`.common.net_info`, which the numpy forward and the export follow); CrossQ's (``info`` with
  ``batch_norm_eps``) has a :class:`.batch_renorm.BatchRenorm` ``norm.{i}`` before each Linear and
  one before the heads;
* ``CriticEnsemble``: N MLP critics Q(s, a) held as stacked weights (N, in, out) and run with one
  batched matmul per layer, so REDQ's ten critics cost about one wide critic, not ten calls; with
  ``norm`` (CrossQ) a BatchRenorm per critic before each layer, the input (s, a) included;
* ``TorchPolicyForward``: the policy's outputs for actors and inference servers, as the numpy one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from mqttrl.plugin import load_module

from .batch_renorm import BatchRenorm
from .common import LOG_STD_MAX, LOG_STD_MIN, SACParams, action_scale, check_info, check_spaces, net_info
from .losses import squashed_log_prob

if TYPE_CHECKING:
    from .crossq_params import CrossQParams


class PolicyNet(nn.Module):
    """The squashed Gaussian policy of ``info`` (:func:`.common.net_info`); ``renorm``: the training
    settings of its BatchRenorm layers where ``info`` has them (momentum, warmup, r_max, d_max)."""

    #: the action box's center and half-width (buffers, registered in ``__init__``; declared for type checkers)
    action_center: torch.Tensor
    action_half: torch.Tensor

    def __init__(self, info: Mapping[str, Any], renorm: Mapping[str, Any] | None = None):
        super().__init__()
        layers: list[nn.Module] = []
        widths = [int(info["obs_dim"]), *[int(h) for h in info["hidden"]]]
        for fan_in, fan_out in itertools.pairwise(widths):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        width = widths[-1]
        self.body = nn.Sequential(*layers)
        self.norm: nn.ModuleList | None = None
        if info.get("batch_norm_eps") is not None:  # CrossQ: before each Linear and before the heads
            eps = float(info["batch_norm_eps"])
            self.norm = nn.ModuleList(BatchRenorm((w,), eps=eps, **(renorm or {})) for w in widths)
        self.mean = nn.Linear(width, int(info["act_dim"]))
        self.log_std = nn.Linear(width, int(info["act_dim"]))
        center, half = action_scale(info)
        self.register_buffer("action_center", torch.as_tensor(center, dtype=torch.float32), persistent=False)
        self.register_buffer("action_half", torch.as_tensor(half, dtype=torch.float32), persistent=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std), each (B, A); log_std squashed into [LOG_STD_MIN, LOG_STD_MAX]."""
        x = obs.flatten(1).float()
        if self.norm is None:
            x = self.body(x)
        else:
            for i in range(len(self.norm) - 1):
                x = torch.relu(self.body[2 * i](self.norm[i](x)))
            x = self.norm[-1](x)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(self.log_std(x)) + 1.0)
        return self.mean(x), log_std

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed action in [-1, 1] (B, A) and its log-density (B,)."""
        mean, log_std = self(obs)
        noise = torch.randn(mean.shape, generator=generator, device="cpu").to(mean.device)
        u = mean + log_std.exp() * noise
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """tanh(mean) scaled into the env's box (B, A)."""
        mean, _ = self(obs)
        return self.action_center + self.action_half * torch.tanh(mean)


class CriticEnsemble(nn.Module):
    """``n`` critics Q(s, a), MLPs of ``hidden`` with ReLU, as stacked weights ``w{i}`` (n, in, out)
    and ``b{i}`` (n, 1, out); each critic initialised as torch's Linear, U(+-1/sqrt(fan_in)). With
    ``norm`` (BatchRenorm's settings: CrossQ), ``norm.{i}`` normalises each critic's input to layer i."""

    def __init__(self, n: int, obs_dim: int, act_dim: int, hidden: list[int], norm: Mapping[str, Any] | None = None):
        super().__init__()
        sizes = [obs_dim + act_dim, *[int(h) for h in hidden], 1]
        self.n = n
        self.depth = len(sizes) - 1
        self.norm = None if norm is None else nn.ModuleList(BatchRenorm((n, w), **norm) for w in sizes[:-1])
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            bound = 1.0 / math.sqrt(fan_in)
            self.register_parameter(f"w{i}", nn.Parameter(torch.empty(n, fan_in, fan_out).uniform_(-bound, bound)))
            self.register_parameter(f"b{i}", nn.Parameter(torch.empty(n, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, subset: torch.Tensor | None = None) -> torch.Tensor:
        """Q-values (n, B), or (len(subset), B) of the critics ``subset`` indexes."""
        x = torch.cat([obs.flatten(1).float(), action], dim=1)
        k = self.n if subset is None else len(subset)
        x = x.unsqueeze(0).expand(k, *x.shape)
        for i in range(self.depth):
            w, b = getattr(self, f"w{i}"), getattr(self, f"b{i}")
            if subset is not None:
                w, b = w[subset], b[subset]
            if self.norm is not None:  # CrossQ has no target critics: never a subset
                x = self.norm[i](x)
            x = torch.baddbmm(b, x, w)
            if i < self.depth - 1:
                x = torch.relu(x)
        return x.squeeze(-1)


class TorchPolicyForward:
    """The policy's outputs with torch (inference mode): ``action`` (greedy, in the box), ``mean``, ``log_std``."""

    def __init__(self, params: SACParams | CrossQParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.act_dim = check_spaces(obs_space, act_space)
        assert isinstance(act_space, gym.spaces.Box)  # check_spaces took it
        self.info = net_info(self.obs_dim, act_space, params)
        with torch.random.fork_rng(devices=[]):  # leave the process-wide torch RNG alone
            torch.manual_seed(seed)
            self.net = PolicyNet(self.info).eval()

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        check_info(info, self.obs_dim, self.act_dim)
        full = {**self.info, **info}
        with torch.random.fork_rng(devices=[]):
            net = PolicyNet(full)
        load_module(net, tensors)  # raises before anything is replaced
        self.net, self.info = net.eval(), full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        x = torch.from_numpy(np.array(obs, np.float32, copy=True))
        with torch.inference_mode():
            mean, log_std = self.net(x)
            action = self.net.action_center + self.net.action_half * torch.tanh(mean)
        return {"action": action.numpy(), "mean": mean.numpy(), "log_std": log_std.numpy()}

    def close(self) -> None:
        """Nothing to release."""
