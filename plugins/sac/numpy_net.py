"""SAC's policy forward in numpy: what a worker without torch acts with.

``NumpyPolicyForward`` loads the weights the learner exports (``learner.PolicyNet``'s layout,
described by :func:`.common.net_info`) and gives the same outputs as the torch forward, to
~1e-6 in float32: ``mean`` (the Gaussian's mean before tanh), ``log_std`` (squashed into
[LOG_STD_MIN, LOG_STD_MAX]) and ``action``, the greedy action ``tanh(mean)`` scaled into the
env's box. Sampling stays in the actor, so the same actor runs over a torch forward or an
inference server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from .common import SACParams, action_scale, check_info, check_spaces, net_info, squash_log_std


def policy_shapes(info: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of the policy network ``info`` describes (torch's Linear layout: (out, in))."""
    shapes: dict[str, tuple[int, ...]] = {}
    width = int(info["obs_dim"])
    for i, h in enumerate(info["hidden"]):
        shapes[f"body.{2 * i}.weight"], shapes[f"body.{2 * i}.bias"] = (int(h), width), (int(h),)
        width = int(h)
    a = int(info["act_dim"])
    for head in ("mean", "log_std"):
        shapes[f"{head}.weight"], shapes[f"{head}.bias"] = (a, width), (a,)
    return shapes


def initial_policy_weights(info: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torch's default Linear init, U(+-1/sqrt(fan_in)), for the policy ``info`` describes."""
    out = {}
    for name, shape in policy_shapes(info).items():
        fan_in = shape[-1] if name.endswith("weight") else None
        if fan_in is None:  # a bias: the fan-in of its weight
            fan_in = policy_shapes(info)[name[: -len("bias")] + "weight"][1]
        bound = 1.0 / np.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


class NumpyPolicyForward:
    """The policy's forward in numpy (float32) from the learner's exported weights."""

    def __init__(self, params: SACParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.act_dim = check_spaces(obs_space, act_space)
        self.info = net_info(self.obs_dim, act_space, params)
        self._load(initial_policy_weights(self.info, np.random.default_rng(seed)), self.info)

    def _load(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        shapes = policy_shapes(info)
        if set(tensors) != set(shapes):
            raise ValueError(
                f"weights do not fit the policy: missing {sorted(set(shapes) - set(tensors))}, "
                f"unexpected {sorted(set(tensors) - set(shapes))}"
            )
        for name, shape in shapes.items():
            if tuple(np.shape(tensors[name])) != shape:
                raise ValueError(f"weights: {name} has shape {np.shape(tensors[name])}, expected {shape}")
        # transposed once, so each layer is x @ W + b
        layers = [
            (
                np.asarray(tensors[f"body.{2 * i}.weight"], np.float32).T.copy(),
                np.asarray(tensors[f"body.{2 * i}.bias"], np.float32),
            )
            for i in range(len(info["hidden"]))
        ]
        heads = {
            h: (np.asarray(tensors[f"{h}.weight"], np.float32).T.copy(), np.asarray(tensors[f"{h}.bias"], np.float32))
            for h in ("mean", "log_std")
        }
        center, half = action_scale(info)
        self.layers, self.heads = layers, heads  # the swap, after every check
        self.center, self.half = center.astype(np.float32), half.astype(np.float32)
        self.info = dict(info)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors ``SACLearner.export_weights`` makes; raises before anything is replaced."""
        check_info(info, self.obs_dim, self.act_dim)
        self._load(tensors, {**self.info, **info})

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        for w, b in self.layers:
            x = np.maximum(x @ w + b, 0.0)
        mean = x @ self.heads["mean"][0] + self.heads["mean"][1]
        log_std = squash_log_std(x @ self.heads["log_std"][0] + self.heads["log_std"][1]).astype(np.float32)
        action = (self.center + self.half * np.tanh(mean)).astype(np.float32)
        return {"action": action, "mean": mean.astype(np.float32), "log_std": log_std}

    def close(self) -> None:
        """Nothing to release."""
