"""SAC's worker side, numpy only: sample squashed Gaussian actions, emit one-step transitions.

``SACActor`` acts over any forward (numpy, torch, a central inference server): it draws
``u ~ N(mean, exp(log_std))`` with its own generator, squashes ``a = tanh(u)`` into [-1, 1] and
scales ``a`` into the env's box. Until the learner has trained (its weights' ``info["updates"]``
is 0) it acts uniformly at random in the box, SAC's initial exploration. Transitions carry the
squashed action (what the critics take), the reward and ``discount`` (gamma, 0 at a termination).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import ActorContext, Forward

from .common import SACParams, check_info, check_spaces, to_env_action, to_unit_action

#: the extras key that carries each env's squashed action from ``act`` to ``record``
UNIT_ACTION = "unit_action"


class SACActor:
    """Squashed Gaussian actions over the outputs of ``forward``; one-step transitions per env."""

    def __init__(
        self, params: SACParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext, forward: Forward
    ):
        self.params = params
        self.obs_dim, self.act_dim = check_spaces(obs_space, act_space)
        assert isinstance(act_space, gym.spaces.Box)  # check_spaces took it
        self.act_space = act_space
        self.num_envs = ctx.num_envs
        self.rng = np.random.default_rng([ctx.seed, ctx.first_env_index, 0x5AC])
        self.forward = forward
        #: the learner's updates when the weights were exported: 0 means random actions
        self.learner_updates = 0
        self.out: list[tuple[np.ndarray, ...]] = []
        self._pending = 0

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        check_info(info, self.obs_dim, self.act_dim)
        self.forward.load_weights(tensors, info)
        self.learner_updates = int(info.get("updates", 0))

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = len(obs)
        if greedy:  # tanh(mean), scaled into the box: the forward's own output
            action = np.asarray(self.forward(obs)["action"], np.float64)
            low = np.asarray(self.act_space.low, np.float64).reshape(-1)
            high = np.asarray(self.act_space.high, np.float64).reshape(-1)
            action = np.clip(action.reshape(n, -1), low, high).astype(self.act_space.dtype)
            return action.reshape(n, *self.act_space.shape), {}
        if self.learner_updates == 0:  # nothing learnt yet: uniform in the box
            unit = self.rng.uniform(-1.0, 1.0, (n, self.act_dim))
        else:
            out = self.forward(obs)
            mean = np.asarray(out["mean"], np.float64)
            std = np.exp(np.asarray(out["log_std"], np.float64))
            unit = np.tanh(mean + std * self.rng.standard_normal(mean.shape))
        return to_env_action(unit, self.act_space), {UNIT_ACTION: unit.astype(np.float32)}

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated) -> None:
        """One transition per env: discount gamma, or 0 where the episode terminated (a truncation
        bootstraps from ``next_obs``, the final observation)."""
        unit = extras.get(UNIT_ACTION) if extras else None
        if unit is None:  # actions someone else chose: their squashed form
            unit = to_unit_action(actions, self.act_space)
        n = len(obs)
        discount = self.params.gamma * (1.0 - np.asarray(terminated, np.float64))
        self.out.append(
            (
                np.asarray(obs, np.float32).reshape(n, -1),
                np.clip(np.asarray(unit, np.float32).reshape(n, -1), -1.0, 1.0),
                np.asarray(rewards, np.float32).reshape(n),
                np.asarray(next_obs, np.float32).reshape(n, -1),
                discount.astype(np.float32),
            )
        )
        self._pending += n

    def truncate(self, env_index: int, final_obs: np.ndarray) -> None:
        """Nothing to do: each step is sent as a whole transition, so no episode is left open."""

    def pending(self) -> int:
        return self._pending

    def take(self) -> dict[str, np.ndarray]:
        out, self.out, self._pending = self.out, [], 0
        if not out:
            return {
                "obs": np.zeros((0, self.obs_dim), np.float32),
                "action": np.zeros((0, self.act_dim), np.float32),
                "reward": np.zeros(0, np.float32),
                "next_obs": np.zeros((0, self.obs_dim), np.float32),
                "discount": np.zeros(0, np.float32),
            }
        obs, action, reward, next_obs, discount = (np.concatenate(parts) for parts in zip(*out))
        return {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "discount": discount}
