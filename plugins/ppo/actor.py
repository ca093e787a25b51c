"""PPO's worker side, numpy only: the actor that plays one rollout per model version.

``PPOActor`` (a :class:`~mqttrl.plugin.algorithm.SyncActor`) samples actions in numpy
from the outputs of any forward (the numpy one of :mod:`.numpy_net`, a torch
one, or a central inference server), records ``rollout_steps`` steps per env,
bootstraps truncated episodes, computes advantages and returns, then hands the
whole rollout over as one batch.

The sync protocol, as PPO sees it. With model version v every worker's actor
collects ``rollout_steps`` steps in each of its envs (``pending()`` is 0
until then), computes advantages with its copy of the critic and sends the
rollout as one batch. The learner trains on all batches of round v and
publishes v+1; workers wait for it before they step again. A rollout is
therefore on-policy: logprob and value in a batch come from the weights the
learner starts the round from (the actor's numpy log-probabilities equal the
learner's to float32 rounding, so the first ratio is 1 to ~1e-6). When a round
finishes without this worker, the worker calls ``discard()``.

Truncation is bootstrapped (as in SB3 and recent CleanRL): where an episode
was truncated (time limit) rather than terminated, the actor adds
``gamma * V(final obs)`` to that step's reward, computed with its forward;
GAE then cuts the trace there like at a termination.

1. log-probabilities in numpy (the learner's formulas);
2. ``PPOActor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import ActorContext, Forward, Tensors

from .common import LOG_SQRT_2PI, PPOParams, check_spaces, compute_gae, full_info, net_info

# --------------------------------------------------------------------------
# 1. Log-probabilities
# --------------------------------------------------------------------------


def categorical_logprob(logits: np.ndarray, action: np.ndarray) -> np.ndarray:
    """log softmax(logits)[i, action[i]] for each row i, in the logits' dtype (as torch's log_softmax)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z[np.arange(len(z)), action] - np.log(np.exp(z).sum(axis=-1))


def gaussian_logprob(action: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """Log-density of a diagonal Gaussian, summed over the action dims (the learner's formula, float32)."""
    return (-0.5 * ((action - mean) / np.exp(log_std)) ** 2 - log_std - np.float32(LOG_SQRT_2PI)).sum(-1)


# --------------------------------------------------------------------------
# 2. The actor
# --------------------------------------------------------------------------


class PPOActor:
    """Samples actions in numpy from what its forward returns (local numpy or torch, or a remote
    inference server)."""

    def __init__(
        self, params: PPOParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext, forward: Forward
    ):
        self.params = p = params
        self.obs_dim, self.continuous, self.act_dim = check_spaces(obs_space, act_space)
        self.obs_shape = self.obs_dim.shape
        #: observations are recorded and sent in their own dtype (uint8, bool or float32)
        self.obs_dtype = self.obs_dim.dtype
        self.act_shape: tuple[int, ...] = ()
        if self.continuous:
            assert isinstance(act_space, gym.spaces.Box)  # check_spaces: continuous actions are a Box
            self.act_shape = tuple(act_space.shape)
            self.low = np.asarray(act_space.low, np.float32).reshape(self.act_shape)
            self.high = np.asarray(act_space.high, np.float32).reshape(self.act_shape)
        self.num_envs = ctx.num_envs
        self.info = net_info(self.obs_dim, self.continuous, self.act_dim, p)
        self.rng = np.random.default_rng(ctx.seed)
        self.forward = forward
        #: round of the loaded weights (-1: none yet); a new round drops a partial rollout
        self.round = -1
        #: finished rollouts waiting for take()
        self.ready: list[Tensors] = []
        self._new_rollout()

    def _new_rollout(self) -> None:
        T, E = self.params.rollout_steps, self.num_envs
        self.t = 0
        self.buf_obs = np.zeros((T, E, *self.obs_shape), self.obs_dtype)
        self.buf_action = np.zeros((T, E, *self.act_shape), np.float32 if self.continuous else np.int64)
        self.buf_logprob = np.zeros((T, E), np.float32)
        self.buf_value = np.zeros((T, E), np.float32)
        self.buf_reward = np.zeros((T, E), np.float64)
        self.buf_ended = np.zeros((T, E), np.float64)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Swap in a new model version (the forward loads nets and obs statistics together).

        A rollout half collected with another version is dropped, so a batch
        never mixes versions (in the sync protocol this happens only when a
        round went on without this worker); finished rollouts are kept. A remote
        forward ignores the tensors (the inference servers load them).
        """
        for key in ("obs_dim", "continuous", "act_dim", "obs_norm"):
            if key in info and info[key] != self.info[key]:
                raise ValueError(f"weights are for {key}={info[key]!r}, this actor has {key}={self.info[key]!r}")
        full = full_info(self.info, info, self.obs_shape)
        self.forward.load_weights(tensors, full)  # raises before anything is replaced
        new_round = int(info.get("round", -1))
        if self.t and new_round != self.round:
            self._new_rollout()
        self.info = full
        self.round = new_round

    def discard(self) -> None:
        """Drop everything not yet taken (the sync worker calls this when a round finished
        without it: its partial share was made with a version the learner has moved past)."""
        self.ready = []
        self._new_rollout()

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Env-ready actions (Box: clipped to the bounds) and extras: logprob, value and,
        for Box actions, the raw sample ``raw_action`` the logprob belongs to."""
        if not greedy and len(obs) != self.num_envs:
            raise ValueError(
                f"act() got {len(obs)} observations for {self.num_envs} envs (greedy=False needs one per env)"
            )
        out = self.forward(obs)
        if self.continuous:
            mean = np.asarray(out["mean"], np.float32).reshape(len(obs), self.act_dim)
            if greedy:
                return self._env_action(mean), {}
            log_std = np.asarray(out["log_std"], np.float32).reshape(len(obs), self.act_dim)
            action = mean + np.exp(log_std) * self.rng.standard_normal(mean.shape, dtype=np.float32)
            logprob = gaussian_logprob(action, mean, log_std)
        else:
            logits = np.asarray(out["logits"], np.float32).reshape(len(obs), self.act_dim)
            if greedy:
                return self._env_action(logits.argmax(axis=-1)), {}
            action = (logits + self.rng.gumbel(size=logits.shape)).argmax(axis=-1)  # Gumbel-max: a Categorical sample
            logprob = categorical_logprob(logits, action)
        extras: dict[str, np.ndarray] = {
            "logprob": logprob.astype(np.float32),
            "value": np.asarray(out["value"], np.float32).reshape(len(obs)),
        }
        if self.continuous:
            extras["raw_action"] = action.reshape(len(obs), *self.act_shape)
        return self._env_action(action), extras

    def _env_action(self, action: np.ndarray) -> np.ndarray:
        if not self.continuous:
            return action.astype(np.int64)
        return np.clip(action.reshape(len(action), *self.act_shape), self.low, self.high).astype(np.float32)

    def _values(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self.forward(obs)["value"], np.float64).reshape(len(obs))

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated) -> None:
        p, t = self.params, self.t
        if "logprob" not in extras or "value" not in extras:
            raise ValueError("ppo record() needs the extras of a non-greedy act() (logprob, value)")
        terminated = np.asarray(terminated, bool)
        ended = terminated | np.asarray(truncated, bool)
        last = t == p.rollout_steps - 1
        reward = np.asarray(rewards, np.float64).copy()
        # V(next_obs): for truncated episodes (the true final obs) and after the last step (bootstrap)
        need = (ended & ~terminated) | last
        next_value = self._values(next_obs) if need.any() else None
        bootstrap = ended & ~terminated
        if bootstrap.any():
            assert next_value is not None  # bootstrap is part of need
            reward[bootstrap] += p.gamma * next_value[bootstrap]
        self.buf_obs[t] = np.asarray(obs).reshape(self.num_envs, *self.obs_shape)
        raw = extras["raw_action"] if self.continuous else actions
        self.buf_action[t] = np.asarray(raw).reshape(self.num_envs, *self.act_shape)
        self.buf_logprob[t] = extras["logprob"]
        self.buf_value[t] = extras["value"]
        self.buf_reward[t] = reward
        self.buf_ended[t] = ended
        self.t += 1
        if last:
            assert next_value is not None  # need is every env after the last step
            self._finish(next_value)

    def truncate(self, env_index: int, final_obs: np.ndarray) -> None:
        """Env ``env_index``'s game failed mid-step: its previous step in this rollout ends the
        episode as a truncation (``gamma * V(final_obs)`` added to its reward; GAE cuts there).
        At the rollout's first step there is nothing to do: the previous rollout's last step
        already bootstrapped from ``final_obs``. Nothing is recorded for the failed step."""
        t, i = self.t, env_index
        if t == 0 or self.buf_ended[t - 1, i]:  # no open episode in this rollout (or it already ended)
            return
        obs = np.asarray(final_obs, self.obs_dtype).reshape(1, *self.obs_shape)
        self.buf_reward[t - 1, i] += self.params.gamma * self._values(obs)[0]
        self.buf_ended[t - 1, i] = 1.0

    def _finish(self, last_value: np.ndarray) -> None:
        """Advantages and returns for the finished rollout; it becomes ready to take()."""
        p = self.params
        values = self.buf_value.astype(np.float64)
        adv, ret = compute_gae(self.buf_reward, values, self.buf_ended, last_value, p.gamma, p.gae_lambda)
        n = p.rollout_steps * self.num_envs
        self.ready.append(
            {
                "obs": self.buf_obs.reshape(n, *self.obs_shape),
                "action": self.buf_action.reshape(n, *self.act_shape),
                "logprob": self.buf_logprob.reshape(n),
                "value": self.buf_value.reshape(n),
                "advantage": adv.astype(np.float32).reshape(n),
                "ret": ret.astype(np.float32).reshape(n),
            }
        )
        self._new_rollout()

    def pending(self) -> int:
        return sum(len(r["logprob"]) for r in self.ready)

    def take(self) -> Tensors:
        ready, self.ready = self.ready, []
        if not ready:
            return {}  # the worker sends nothing for an empty dict
        if len(ready) == 1:
            return ready[0]
        return {k: np.concatenate([r[k] for r in ready]) for k in ready[0]}
