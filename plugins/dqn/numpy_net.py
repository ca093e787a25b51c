"""DQN's Q-network forward in numpy: what a worker without torch acts with.

``NumpyQForward`` loads the weights the learner exports (the layout of
``learner.QNetwork``, described by :func:`.common.net_info`) and computes the
same Q-values as the torch network, to ~1e-5, for every head (:mod:`.numpy_heads`:
plain, C51, QR, dueling or not, noisy or not). Its torso is :class:`mqttrl.nets.NumpyTorso`
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

from mqttrl.plugin import (
    NumpyTorso,
    describe_torso,
    initial_torso_weights,
    torso_out_size,
    torso_weight_shapes,
    validate_torso,
)

from .common import DQNParams, check_spaces, net_info
from .numpy_heads import HeadSpec, NumpyHead, initial_head_weights

#: the tensor names of the torso in the exported weights
TORSO_PREFIX = "trunk."


def torso_of(info: Mapping[str, Any], obs_shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The checked torso a network ``info`` describes: its ``torso`` entry, or without one the MLP of
    ``hidden`` over float observations. Given ``obs_shape`` (this side's observations), raises
    ValueError if the torso is made for observations of another shape; ValueError if it is malformed."""
    if "torso" not in info:
        return describe_torso("mlp", obs_shape or (int(info["obs_dim"]),), np.float32, [int(h) for h in info["hidden"]])
    torso = validate_torso(info["torso"])
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


#: the keys of a network ``info`` that describe the architecture (they follow the weights)
ARCHITECTURE_KEYS = (
    "hidden",
    "dueling",
    "torso",
    "distributional",
    "n_atoms",
    "v_min",
    "v_max",
    "n_quantiles",
    "noisy",
    "noisy_layers",
)
#: the architecture keys a full ``info`` (one with ``hidden``) leaves out when they take their plain value
OPTIONAL_KEYS = ("torso", "distributional", "n_atoms", "v_min", "v_max", "n_quantiles", "noisy", "noisy_layers")


def noisy_torso(info: Mapping[str, Any]) -> bool:
    """Whether the torso's dense layers are noisy (``noisy_layers: "all"`` beside ``noisy: true``);
    ValueError for another value."""
    layers = info.get("noisy_layers", "head")
    if layers not in ("head", "all"):
        raise ValueError(f"noisy_layers={layers!r}: 'head' or 'all'")
    return bool(info.get("noisy")) and layers == "all"


def follow_weights(own: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """The network ``info`` (received with weights) describes, completed from ``own``: architecture
    keys (hidden, dueling, torso, the head's kind) follow the weights; an info with ``hidden`` describes
    the whole network, so an optional key it leaves out takes its plain value (no ``torso``: an MLP over
    float observations; no ``distributional``: one Q-value per action; no ``noisy``: plain layers)."""
    full = {**own, **{k: info[k] for k in ARCHITECTURE_KEYS if k in info}}
    if "hidden" in info:
        for k in OPTIONAL_KEYS:
            if k not in info:
                full.pop(k, None)
    return full


@attrs.frozen
class _QNet:
    """One model version, ready to run: the torso and the head."""

    torso: NumpyTorso
    head: NumpyHead


class NumpyQForward:
    """The Q-network's forward in numpy (float32), from the same weights the learner exports.

    Same layers as ``learner.QNetwork``: the torso under ``trunk.`` (for an MLP ``trunk.{0,2,...}``
    Linear + ReLU), then ``value``/``advantage`` (dueling) or ``head`` (:class:`.numpy_heads.NumpyHead`:
    plain, C51 or QR, noisy or not). Weights are re-laid out once at load (head matrices transposed,
    so the heads are plain ``x @ W + b``). Whatever the head, a call gives ``{"q": (N, n_actions)}``,
    the expected Q-values.

    Noisy layers (the head's, and with ``noisy_layers: "all"`` the torso's dense layers too): each call
    samples fresh factorised noise, one independent draw per row (per env),
    from this forward's own generator (seeded by ``seed``): per step, as Rainbow acts, and per env, so
    that the envs of one worker (or of every worker an inference server batches) explore independently,
    as separate actors would. Two small matmuls per layer on top of the mean's; no torch RNG involved.
    :meth:`noiseless` (greedy evaluation) uses the mean weights.
    """

    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        assert obs_space.shape is not None  # a Box: check_spaces took it
        self.obs_shape = tuple(int(s) for s in obs_space.shape)
        self.info = net_info(self.obs_dim, self.n_actions, params)
        # until the first weights arrive: torch's default init, U(+-1/sqrt(fan_in)), seeded
        rng = np.random.default_rng(seed)
        torso = torso_of(self.info, self.obs_shape)
        sigma0 = params.noisy_sigma0 if noisy_torso(self.info) else None
        tensors = initial_torso_weights(torso, rng, TORSO_PREFIX, noisy_sigma0=sigma0)
        tensors.update(initial_head_weights(HeadSpec.of(self.info), torso_out_size(torso), rng, params.noisy_sigma0))
        #: noisy layers' noise (its own stream: the weights' draws above do not shift it)
        self.noise_rng = np.random.default_rng([seed, 0x401DE])
        #: the loaded network (torso and heads), replaced as a whole by load_weights
        self.layers = self._build(tensors, self.info)

    def _build(self, tensors: Mapping[str, np.ndarray], full: Mapping[str, Any]) -> _QNet:
        torso = torso_of(full, self.obs_shape)
        spec = HeadSpec.of({**full, "n_actions": self.n_actions})
        width = torso_out_size(torso)
        noisy = noisy_torso(full)
        expected = set(torso_weight_shapes(torso, TORSO_PREFIX, noisy)) | set(spec.tensor_shapes(width))
        if set(tensors) != expected:
            raise ValueError(
                f"weights do not fit the network: missing {sorted(expected - set(tensors))}, "
                f"unexpected {sorted(set(tensors) - expected)}"
            )
        head = NumpyHead(spec, tensors, width)  # checks the head's shapes
        return _QNet(NumpyTorso(torso, tensors, TORSO_PREFIX, noisy), head)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors ``DQNLearner.export_weights`` makes; raises before anything is replaced."""
        full = follow_weights(self.info, info)
        self.layers = self._build(tensors, full)  # the swap
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        net = self.layers
        rows = len(obs)
        x = net.torso(obs, net.torso.sample_noise(self.noise_rng, rows) if net.torso.noisy else None)
        noise = net.head.sample_noise(self.noise_rng, rows) if net.head.spec.noisy else None
        return {"q": net.head(x, noise).astype(np.float32, copy=False)}

    def noiseless(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """As a call, with a noisy head's mean weights (greedy evaluation); the same as a call otherwise."""
        net = self.layers
        return {"q": net.head(net.torso(obs)).astype(np.float32, copy=False)}

    def close(self) -> None:
        """Nothing to release."""
