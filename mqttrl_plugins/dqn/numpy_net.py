"""DQN's Q-network forward in numpy: what a worker without torch acts with.

``NumpyQForward`` loads the weights the learner exports (the layout of
``learner.QNetwork``, described by :func:`.common.net_info`) and computes the
same Q-values as the torch network, to ~1e-5. Its torso is :class:`mqttrl.nets.NumpyTorso`
(MLP or CNN), so observations go in as the env made them (uint8, bool or float). For the
small MLPs DQN uses it is also cheaper than torch, so workers prefer it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.nets import NumpyTorso, describe, initial_weights, out_size, validate, weight_shapes

from .common import DQNParams, check_spaces, net_info

#: the tensor names of the torso in the exported weights
TORSO_PREFIX = "trunk."


def torso_of(info: Mapping[str, Any], obs_shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The checked torso a network ``info`` describes: its ``torso`` entry, or without one the MLP of
    ``hidden`` over float observations. Given ``obs_shape`` (this side's observations), raises
    ValueError if the torso is made for observations of another shape; ValueError if it is malformed."""
    if "torso" not in info:
        return describe("mlp", obs_shape or (int(info["obs_dim"]),), np.float32, [int(h) for h in info["hidden"]])
    torso = validate(info["torso"])
    if obs_shape is not None:
        if torso["layout"] == "flat":
            fits = math.prod(torso["obs_shape"]) == math.prod(obs_shape)
        else:
            fits = tuple(torso["obs_shape"]) == tuple(obs_shape)
        if not fits:
            raise ValueError(
                f"weights are for observations of shape {tuple(torso['obs_shape'])}, these are {obs_shape}"
            )
    return torso


def head_names(dueling: bool) -> tuple[str, ...]:
    return ("value", "advantage") if dueling else ("head",)


def follow_weights(own: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """The network ``info`` (received with weights) describes, completed from ``own``: architecture
    keys (hidden, dueling, torso) follow the weights; an info with ``hidden`` but no ``torso`` is an
    MLP over float observations."""
    full = {**own, **{k: info[k] for k in ("hidden", "dueling", "torso") if k in info}}
    if "hidden" in info and "torso" not in info:
        full.pop("torso", None)
    return full


@attrs.frozen
class _QNet:
    """One model version, ready to run: the torso and the heads as (W^T (in, out), b), float32."""

    torso: NumpyTorso
    heads: tuple


class NumpyQForward:
    """The Q-network's forward in numpy (float32), from the same weights the learner exports.

    Same layers as ``learner.QNetwork``: the torso under ``trunk.`` (for an MLP ``trunk.{0,2,...}``
    Linear + ReLU), then ``value``/``advantage`` (dueling) or ``head``. Weights are re-laid out once
    at load (head matrices transposed, so the heads are plain ``x @ W + b``).
    """

    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        self.obs_shape = tuple(int(s) for s in obs_space.shape)
        self.info = net_info(self.obs_dim, self.n_actions, params)
        # until the first weights arrive: torch's default init, U(+-1/sqrt(fan_in)), seeded
        rng = np.random.default_rng(seed)
        torso = torso_of(self.info, self.obs_shape)
        tensors = initial_weights(torso, rng, TORSO_PREFIX)
        width = out_size(torso)
        for name in head_names(bool(self.info["dueling"])):
            bound = 1.0 / np.sqrt(width)
            out = 1 if name == "value" else self.n_actions
            tensors[f"{name}.weight"] = rng.uniform(-bound, bound, (out, width)).astype(np.float32)
            tensors[f"{name}.bias"] = rng.uniform(-bound, bound, out).astype(np.float32)
        #: the loaded network (torso and heads), replaced as a whole by load_weights
        self.layers = self._build(tensors, self.info)

    def _build(self, tensors: Mapping[str, np.ndarray], full: Mapping[str, Any]) -> _QNet:
        torso = torso_of(full, self.obs_shape)
        heads = head_names(bool(full["dueling"]))
        width = out_size(torso)
        expected = set(weight_shapes(torso, TORSO_PREFIX)) | {f"{h}.{p}" for h in heads for p in ("weight", "bias")}
        if set(tensors) != expected:
            raise ValueError(
                f"weights do not fit the network: missing {sorted(expected - set(tensors))}, "
                f"unexpected {sorted(set(tensors) - expected)}"
            )
        layers = []
        for h in heads:
            w, b = np.asarray(tensors[f"{h}.weight"]), np.asarray(tensors[f"{h}.bias"])
            out = 1 if h == "value" else self.n_actions
            if w.shape != (out, width) or b.shape != (out,):
                raise ValueError(f"weight {h} has shape {w.shape}, the network needs {(out, width)}")
            layers.append((np.ascontiguousarray(w.T, np.float32), np.array(b, np.float32)))
        return _QNet(NumpyTorso(torso, tensors, TORSO_PREFIX), tuple(layers))

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors ``DQNLearner.export_weights`` makes; raises before anything is replaced."""
        full = follow_weights(self.info, info)
        self.layers = self._build(tensors, full)  # the swap
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        net = self.layers
        x = net.torso(obs)
        if len(net.heads) == 2:
            (wv, bv), (wa, ba) = net.heads
            adv = x @ wa + ba
            q = (x @ wv + bv) + adv - adv.mean(axis=1, keepdims=True)
        else:
            q = x @ net.heads[0][0] + net.heads[0][1]
        return {"q": q.astype(np.float32, copy=False)}

    def close(self) -> None:
        """Nothing to release."""
