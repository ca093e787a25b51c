"""SAC's policy forward in numpy: what a worker without torch acts with.

``NumpyPolicyForward`` loads the weights the learner exports (``learner.PolicyNet``'s layout,
described by :func:`.common.net_info`) and gives the same outputs as the torch forward, to
~1e-6 in float32: ``mean`` (the Gaussian's mean before tanh), ``log_std`` (squashed into
[LOG_STD_MIN, LOG_STD_MAX]) and ``action``, the greedy action ``tanh(mean)`` scaled into the
env's box. Sampling stays in the actor, so the same actor runs over a torch forward or an
inference server. CrossQ's policy (``info["batch_norm_eps"]``) applies its BatchRenorm layers as
torch's eval mode does, with their running statistics: ``(x - mean) / sqrt(var + eps) * weight + bias``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from .common import SACParams, action_scale, check_info, check_spaces, net_info, squash_log_std

if TYPE_CHECKING:
    from .crossq_params import CrossQParams


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
    if info.get("batch_norm_eps") is not None:  # CrossQ: before each Linear and before the heads
        for i, w in enumerate([int(info["obs_dim"]), *[int(h) for h in info["hidden"]]]):
            for part in NORM_PARTS:
                shapes[f"norm.{i}.{part}"] = (w,)
            shapes[f"norm.{i}.steps"] = (1,)
    return shapes


#: a BatchRenorm layer's tensors the forward uses (``steps``, its training count, travels unused)
NORM_PARTS = ("weight", "bias", "running_mean", "running_var")
#: their values in a fresh layer
_NORM_INIT = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0, "steps": 0.0}


def initial_policy_weights(info: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torch's default Linear init, U(+-1/sqrt(fan_in)), for the policy ``info`` describes (a
    BatchRenorm layer as torch starts it: the identity, with running mean 0 and variance 1)."""
    out = {}
    shapes = policy_shapes(info)
    for name, shape in shapes.items():
        if name.startswith("norm."):
            out[name] = np.full(shape, _NORM_INIT[name.rsplit(".", 1)[1]], np.float32)
            continue
        fan_in = shape[-1] if name.endswith("weight") else shapes[name[: -len("bias")] + "weight"][1]
        bound = 1.0 / np.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def norm_affine(tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    """CrossQ's BatchRenorm layers in eval mode as ``x * scale + shift`` (float32); [] for SAC's policy."""
    if info.get("batch_norm_eps") is None:
        return []
    eps = float(info["batch_norm_eps"])
    out = []
    for i in range(len(info["hidden"]) + 1):
        w, b, mean, var = (np.asarray(tensors[f"norm.{i}.{part}"], np.float64) for part in NORM_PARTS)
        scale = w / np.sqrt(var + eps)
        out.append((scale.astype(np.float32), (b - mean * scale).astype(np.float32)))
    return out


class NumpyPolicyForward:
    """The policy's forward in numpy (float32) from the learner's exported weights."""

    def __init__(self, params: SACParams | CrossQParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.act_dim = check_spaces(obs_space, act_space)
        assert isinstance(act_space, gym.spaces.Box)  # check_spaces took it
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
        norms = norm_affine(tensors, info)
        center, half = action_scale(info)
        self.layers, self.heads, self.norms = layers, heads, norms  # the swap, after every check
        self.center, self.half = center.astype(np.float32), half.astype(np.float32)
        self.info = dict(info)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors ``SACLearner.export_weights`` makes; raises before anything is replaced."""
        check_info(info, self.obs_dim, self.act_dim)
        self._load(tensors, {**self.info, **info})

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        for i, (w, b) in enumerate(self.layers):
            if self.norms:
                x = x * self.norms[i][0] + self.norms[i][1]
            x = np.maximum(x @ w + b, 0.0)
        if self.norms:
            x = x * self.norms[-1][0] + self.norms[-1][1]
        mean = x @ self.heads["mean"][0] + self.heads["mean"][1]
        log_std = squash_log_std(x @ self.heads["log_std"][0] + self.heads["log_std"][1]).astype(np.float32)
        action = (self.center + self.half * np.tanh(mean)).astype(np.float32)
        return {"action": action, "mean": mean.astype(np.float32), "log_std": log_std}

    def close(self) -> None:
        """Nothing to release."""
