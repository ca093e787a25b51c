"""PPO's network in numpy: what a worker without torch acts with.

The forward contract. ``forward(obs)`` takes raw observations ``[N, *obs_shape]`` in
their native dtype (uint8, bool or float32) and returns, for Discrete actions, ``{"logits": [N, n],
"value": [N]}`` and, for Box actions, ``{"mean": [N, act_dim], "log_std":
[N, act_dim], "value": [N]}`` (all float32). It normalises the observations
itself (the statistics come with the weights), so an inference server answers
for raw observations. ``NumpyForward`` here and ``learner.TorchForward``
compute the same function from the same tensors (the layout of
:func:`.common.weight_shapes`; float32, equal to ~1e-6); sampling,
log-probabilities and greedy actions are the actor's.

For the small MLPs PPO uses this is 2-3x cheaper than torch, so workers prefer it. A CNN
torso runs as :class:`mqttrl.nets.NumpyTorso` (im2col), close to torch on one thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin import NumpyTorso, Tensors

from .common import (
    TORSO_PREFIX,
    PPOParams,
    check_spaces,
    full_info,
    initial_weights,
    mlp_scale,
    net_info,
    obs_stats,
    obs_std,
    scale_obs,
    weight_shapes,
)


def checked_weights(tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> Tensors:
    """float32 copies of the network tensors (the source may be read-only), after checking that
    names and shapes fit the network ``info`` describes exactly; raises ValueError otherwise."""
    shapes = weight_shapes(info)
    names = {k for k in tensors if not k.startswith("obs_norm.")}
    if names != set(shapes):
        raise ValueError(
            f"weights do not fit the network: missing {sorted(set(shapes) - names)}, unexpected {sorted(names - set(shapes))}"
        )
    out: Tensors = {}
    for name, shape in shapes.items():
        arr = np.asarray(tensors[name])
        if tuple(arr.shape) != shape:
            raise ValueError(f"weight {name} has shape {arr.shape}, the network needs {shape}")
        out[name] = np.array(arr, dtype=np.float32)
    return out


def _tanh(h: np.ndarray) -> np.ndarray:
    return np.tanh(h, out=h)


def _relu(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0, out=h)


_NP_ACTIVATIONS = {"tanh": _tanh, "relu": _relu}


@attrs.frozen
class _NumpyCNN:
    """One model version with a CNN torso: the torso, then both heads as one matmul (critic column first)."""

    torso: NumpyTorso
    #: (width, 1 + act_dim): the critic's and the actor's weights side by side, transposed
    heads_w: np.ndarray
    heads_b: np.ndarray
    log_std: np.ndarray | None


@attrs.frozen
class _NumpyNet:
    """One model version of the MLPs, ready to run: weights pre-transposed to (in, out), contiguous,
    float32 (the input scale folded into the first layer)."""

    #: first layers of critic and actor side by side (both read the same input): (in, 2 * hidden[0])
    first_w: np.ndarray
    first_b: np.ndarray
    #: columns of the first layer's output that belong to the critic
    split: int
    #: the remaining layers of each head as (W^T, b); an activation follows all but the last
    critic: tuple
    actor: tuple
    #: Box actions: log-std (act_dim,); None for Discrete
    log_std: np.ndarray | None
    #: (mean, sqrt(var + 1e-8)) with obs_norm, else None
    stats: tuple[np.ndarray, np.ndarray] | None
    clip: float
    activate: Any


def _tail(h: np.ndarray, layers: tuple, activate) -> np.ndarray:
    for i, (w, b) in enumerate(layers):
        h = h @ w
        h += b
        if i < len(layers) - 1:
            activate(h)
    return h


class NumpyForward:
    """PPO's forward in numpy: float32 matmuls ``x @ W.T + b`` with ``W.T`` cached at load time (a CNN
    torso runs as :class:`mqttrl.nets.NumpyTorso`, then both heads as one matmul).

    ``forward(obs)`` returns ``{"logits", "value"}`` (Discrete) or ``{"mean", "log_std", "value"}``
    (Box) for raw observations, normalised inside with the statistics of the loaded weights.
    Until weights are loaded it holds fresh ones (:func:`initial_weights` with ``seed``).
    """

    #: the loaded network, swapped whole by :meth:`load_weights`
    _net: _NumpyCNN | _NumpyNet

    def __init__(self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        obs_dim, continuous, act_dim = check_spaces(obs_space, act_space)
        self.obs_dim = obs_dim
        self.obs_shape = obs_dim.shape
        self.info = net_info(obs_dim, continuous, act_dim, params)
        self.load_weights(initial_weights(self.info, seed, params.ortho_init, params.log_std_init), self.info)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors :meth:`PPOLearner.export_weights` makes; raises before anything is replaced."""
        full = full_info(self.info, info, self.obs_shape)
        arrays = checked_weights(tensors, full)
        if "torso" in full:
            torso = NumpyTorso(full["torso"], arrays, TORSO_PREFIX)
            self._net = _NumpyCNN(  # the swap: one assignment
                torso=torso,
                heads_w=np.ascontiguousarray(np.concatenate([arrays["critic.weight"], arrays["actor.weight"]]).T),
                heads_b=np.concatenate([arrays["critic.bias"], arrays["actor.bias"]]),
                log_std=arrays["actor_logstd"].reshape(-1) if full["continuous"] else None,
            )
            self.info = full
            return
        stats = obs_stats(tensors, full)

        def head(name: str) -> list[tuple[np.ndarray, np.ndarray]]:
            n = len(full["hidden"]) + 1
            return [
                (np.ascontiguousarray(arrays[f"{name}.{2 * i}.weight"].T), arrays[f"{name}.{2 * i}.bias"])
                for i in range(n)
            ]

        critic, actor = head("critic"), head("actor")
        first_w = np.concatenate([critic[0][0], actor[0][0]], axis=1)
        if stats is None and mlp_scale(full) != 1.0:  # uint8 observations: x * scale @ W == x @ (scale * W)
            first_w *= np.float32(mlp_scale(full))
        self._net = _NumpyNet(  # the swap: one assignment
            first_w=np.ascontiguousarray(first_w),
            first_b=np.concatenate([critic[0][1], actor[0][1]]),
            split=critic[0][0].shape[1],
            critic=tuple(critic[1:]),
            actor=tuple(actor[1:]),
            log_std=arrays["actor_logstd"].reshape(-1) if full["continuous"] else None,
            stats=None if stats is None else (stats[0], obs_std(stats[1])),
            clip=float(full["obs_clip"]),
            activate=_NP_ACTIVATIONS[full["activation"]],
        )
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        net = self._net
        if isinstance(net, _NumpyCNN):
            h = net.torso(obs) @ net.heads_w
            h += net.heads_b
            value, out = h[:, 0].copy(), np.ascontiguousarray(h[:, 1:])
        else:
            x = np.asarray(obs, dtype=np.float32).reshape(len(obs), self.obs_dim)
            if net.stats is not None:
                x = scale_obs(x, *net.stats, net.clip)
            h = x @ net.first_w
            h += net.first_b
            net.activate(h)
            value = _tail(h[:, : net.split], net.critic, net.activate).reshape(len(x))
            out = _tail(h[:, net.split :], net.actor, net.activate)
        if net.log_std is None:
            return {"logits": out, "value": value}
        return {"mean": out, "log_std": np.broadcast_to(net.log_std, out.shape).copy(), "value": value}

    def close(self) -> None:
        """Nothing to release."""
