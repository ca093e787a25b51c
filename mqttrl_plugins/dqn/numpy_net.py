"""DQN's Q-network forward in numpy: what a worker without torch acts with.

``NumpyQForward`` loads the weights the learner exports (the layout of
``learner.QNetwork``, described by :func:`.common.net_info`) and computes the
same Q-values as the torch network, to ~1e-5. For the small MLPs DQN uses it is
also cheaper than torch, so workers prefer it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from .common import DQNParams, check_spaces, net_info


class NumpyQForward:
    """The Q-network's forward in numpy (float32), from the same weights the learner exports.

    Same layers as ``learner.QNetwork``: ``trunk.{0,2,...}`` Linear + ReLU, then
    ``value``/``advantage`` (dueling) or ``head``. Weight matrices are transposed once
    at load so the forward is plain ``x @ W + b``.
    """

    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        self.info = net_info(self.obs_dim, self.n_actions, params)
        # until the first weights arrive: torch.nn.Linear's default init, U(+-1/sqrt(fan_in)), seeded
        rng = np.random.default_rng(seed)
        hidden, dueling = [int(h) for h in self.info["hidden"]], bool(self.info["dueling"])

        def init(fan_in: int, fan_out: int) -> tuple[np.ndarray, np.ndarray]:
            bound = 1.0 / np.sqrt(fan_in)
            return (
                rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32),
            )

        widths = [self.obs_dim, *hidden]
        self.layers: list[tuple[np.ndarray, np.ndarray]] = [init(a, b) for a, b in itertools.pairwise(widths)]
        self.heads: tuple = (
            (init(widths[-1], 1), init(widths[-1], self.n_actions)) if dueling else (init(widths[-1], self.n_actions),)
        )

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """The tensors ``DQNLearner.export_weights`` makes; raises before anything is replaced."""
        full = {**self.info, **{k: info[k] for k in ("hidden", "dueling") if k in info}}
        hidden, dueling = [int(h) for h in full["hidden"]], bool(full["dueling"])
        expected = {f"trunk.{2 * i}.{p}" for i in range(len(hidden)) for p in ("weight", "bias")}
        expected |= {f"{h}.{p}" for h in (("value", "advantage") if dueling else ("head",)) for p in ("weight", "bias")}
        if set(tensors) != expected:
            raise ValueError(
                f"weights do not fit the network: missing {sorted(expected - set(tensors))}, "
                f"unexpected {sorted(set(tensors) - expected)}"
            )

        def lin(name: str) -> tuple[np.ndarray, np.ndarray]:
            return (
                np.ascontiguousarray(np.asarray(tensors[f"{name}.weight"], dtype=np.float32).T),
                np.asarray(tensors[f"{name}.bias"], dtype=np.float32).copy(),
            )

        layers = [lin(f"trunk.{2 * i}") for i in range(len(hidden))]
        width = self.obs_dim
        for (w, _), h in zip(layers, hidden):
            if w.shape != (width, h):
                raise ValueError(f"trunk layer has shape {w.shape[::-1]}, the network needs {(h, width)}")
            width = h
        heads = (lin("value"), lin("advantage")) if dueling else (lin("head"),)
        self.layers, self.heads = layers, heads  # the swap

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        layers, heads = self.layers, self.heads
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        for w, b in layers:
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        if len(heads) == 2:
            (wv, bv), (wa, ba) = heads
            adv = x @ wa + ba
            q = (x @ wv + bv) + adv - adv.mean(axis=1, keepdims=True)
        else:
            q = x @ heads[0][0] + heads[0][1]
        return {"q": q.astype(np.float32, copy=False)}

    def close(self) -> None:
        """Nothing to release."""
