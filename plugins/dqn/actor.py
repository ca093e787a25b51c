"""DQN's worker side, numpy only: the Ape-X epsilon ladder and the actor.

``DQNActor`` picks batched epsilon-greedy actions over the Q-values of any
forward (the numpy one of :mod:`.numpy_net`, a torch one, or a central
inference server) and assembles n-step transitions per env, which the worker
sends to the learner as sample batches (:func:`.common.sample_spec`).
Observations keep their dtype; image observations travel as frames
(:mod:`.frames`: the n-step windows hold frame serials, not pixels).

1. ``epsilon_ladder``: each env's exploration rate, spread over all envs of the run;
2. ``DQNActor``: actions, n-step windows, and the transitions ready to send.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import FLEET_PROGRESS_KEY, INTERVENTION, UPDATES_KEY, ActorContext, Forward, Tensors, obs_dtype

from .common import DQNParams, actor_priorities, check_spaces
from .frames import ArrayObs, FrameObs, frame_layout

# --------------------------------------------------------------------------
# 1. Epsilon ladder
# --------------------------------------------------------------------------


def epsilon_ladder(i: int, n: int, base: float, alpha: float) -> float:
    """Ape-X exploration of env ``i`` of ``n``: ``base ** (1 + alpha * i / (n - 1))``."""
    if n <= 1:
        return float(base)
    return float(base ** (1.0 + alpha * i / (n - 1)))


def ladder_of(ctx: ActorContext, base: float, alpha: float) -> np.ndarray:
    """Each env's ladder epsilon: its place among all envs of the run, or, for a worker without an
    index, its place on a ladder of the worker's own envs shifted by the worker's phase."""
    if ctx.ladder_phase is not None:
        position = (np.arange(ctx.num_envs) + ctx.ladder_phase) / ctx.num_envs
        return base ** (1.0 + alpha * position)
    total = max(ctx.total_envs, ctx.first_env_index + ctx.num_envs)
    return np.array(
        [epsilon_ladder(ctx.first_env_index + k, total, base, alpha) for k in range(ctx.num_envs)], dtype=np.float64
    )


# --------------------------------------------------------------------------
# 2. The actor
# --------------------------------------------------------------------------


class DQNActor:
    """Epsilon-greedy over the Q-values of ``forward``; n-step transitions per env."""

    #: a transition whose first step a person took over is marked ``intervention`` in the batch
    takes_interventions = True

    def __init__(
        self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext, forward: Forward
    ):
        self.params = params
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        assert obs_space.shape is not None  # a Box: check_spaces took it
        self.obs_shape = tuple(obs_space.shape)
        self.num_envs = ctx.num_envs
        self.rng = np.random.default_rng(ctx.seed)
        #: Q-values from local torch, local numpy or the central inference servers
        self.forward = forward
        self.ladder = ladder_of(ctx, params.epsilon_base, params.epsilon_alpha)
        #: env steps this actor has recorded, summed over its envs (drives the epsilon decay)
        self.env_steps = 0
        #: the run's progress as the learner last said (weights info): the epsilon schedule starts there
        self.fleet_env_steps = 0
        #: the loaded model had gradient updates behind it (weights info; noisy nets explore with it)
        self.trained = False
        layout = frame_layout(params.frames, obs_space)
        #: what the windows hold for an observation: the observation itself, or its frames' serials
        self.keys = (
            FrameObs(ctx.num_envs, layout) if layout else ArrayObs(ctx.num_envs, self.obs_shape, obs_dtype(obs_space))
        )
        # n-step windows, all envs at once: slot k of env e holds its k-th oldest step not yet emitted
        n, e = params.n_step, ctx.num_envs
        self.w_obs = np.zeros((e, n, *self.keys.key_shape), self.keys.key_dtype)
        self.w_act = np.zeros((e, n), np.int64)
        self.w_rew = np.zeros((e, n), np.float64)
        self.w_len = np.zeros(e, np.int64)
        #: Ape-X priorities: Q(s, a) of each window step, as the actor's network gave it when acting
        self.priorities = actor_priorities(params)
        self.w_q = np.zeros((e, n), np.float64)
        #: a person took over this window step (the worker's ``intervention`` extra: a takeover)
        self.w_person = np.zeros((e, n), bool)
        self.gammas = params.gamma ** np.arange(n + 1, dtype=np.float64)
        #: emitted transitions, as chunks of arrays (concatenated by take())
        self.out: list[tuple[np.ndarray, ...]] = []
        self._pending = 0

    def epsilons(self) -> np.ndarray:
        """Current epsilon per env: the linear decay from epsilon_start, floored at the ladder value."""
        p = self.params
        if p.noisy:
            # noisy nets explore instead of epsilon-greedy, once trained. An untrained noisy net's
            # argmax barely moves with its noise (sigma0 0.1 / sqrt(fan_in)): on MinAtar Breakout it
            # never put the paddle under the ball, and the replay held no reward at all. Until the
            # first trained model, actions are uniform at random (SB3's and CleanRL's warm-up)
            return np.full(self.num_envs, 0.0 if self.trained else p.epsilon_start)
        steps = max(self.env_steps, self.fleet_env_steps)
        frac = 1.0 if p.epsilon_decay_steps == 0 else min(1.0, steps / p.epsilon_decay_steps)
        decayed = p.epsilon_start + frac * (self.ladder - p.epsilon_start)
        return np.maximum(self.ladder, decayed)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        if (
            int(info.get("obs_dim", self.obs_dim)) != self.obs_dim
            or int(info.get("n_actions", self.n_actions)) != self.n_actions
        ):
            raise ValueError(
                f"weights are for obs_dim={info.get('obs_dim')}, n_actions={info.get('n_actions')}; "
                f"this env has obs_dim={self.obs_dim}, n_actions={self.n_actions}"
            )
        self.forward.load_weights(tensors, info)
        # a restarted worker goes on decaying from where its peers are, not from epsilon_start
        self.fleet_env_steps = max(self.fleet_env_steps, int(info.get(FLEET_PROGRESS_KEY, 0)))
        self.trained = int(info.get(UPDATES_KEY, 1)) > 0  # no key: an older learner's, taken as trained

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        # greedy: a noisy head's mean weights, where the forward offers them (local forwards do)
        q = (getattr(self.forward, "noiseless", self.forward) if greedy else self.forward)(obs)["q"]
        actions = q.argmax(axis=1).astype(np.int64)
        if greedy:
            return actions, {}
        if len(obs) != self.num_envs:
            raise ValueError(
                f"act() got {len(obs)} observations for {self.num_envs} envs (greedy=False needs one per env)"
            )
        eps = self.epsilons()
        explore = self.rng.random(self.num_envs) < eps
        actions = np.where(explore, self.rng.integers(0, self.n_actions, self.num_envs), actions)
        extras = {"epsilon": eps.astype(np.float32)}
        if self.priorities:  # Q(s, a) of the action taken: half of the TD error the priority needs
            extras["q"] = q[np.arange(len(q)), actions].astype(np.float32)
        return actions, extras

    def record(self, obs, actions, extras, rewards, next_obs, terminated, truncated) -> None:
        """Append one step per env; emit every n-step transition that is complete.

        A full window (n steps) emits its oldest step, bootstrapping from ``next_obs``
        with gamma**n. An episode end emits every open window of that env: terminated ones
        with discount 0, truncated ones bootstrapping from the true final observation.
        Vectorised over envs: the per-env Python loop only runs for envs whose episode ended.
        """
        n = self.params.n_step
        envs = np.arange(self.num_envs)
        slot = self.w_len
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        obs, next_obs = self.keys.observe(obs, next_obs, ended)
        self.w_obs[envs, slot] = obs
        self.w_act[envs, slot] = actions
        self.w_rew[envs, slot] = rewards
        if self.priorities:
            self.w_q[envs, slot] = extras["q"]
        self.w_person[envs, slot] = extras.get(INTERVENTION, False)
        self.w_len += 1
        full = np.flatnonzero((self.w_len == n) & ~ended)
        if len(full):
            ret = self.w_rew[full] @ self.gammas[:n]
            self._push(
                self.w_obs[full, 0].copy(),
                self.w_act[full, 0].copy(),
                ret,
                next_obs[full],
                np.full(len(full), self.gammas[n]),
                self.w_q[full, 0].copy(),
                self.w_person[full, 0].copy(),
            )
            self.w_obs[full, :-1] = self.w_obs[full, 1:]
            self.w_q[full, :-1] = self.w_q[full, 1:]
            self.w_person[full, :-1] = self.w_person[full, 1:]
            self.w_act[full, :-1] = self.w_act[full, 1:]
            self.w_rew[full, :-1] = self.w_rew[full, 1:]
            self.w_len[full] -= 1
        for i in np.flatnonzero(ended):  # every open window of this env ends here
            self._end_episode(i, next_obs[i], bool(terminated[i]))
        self.env_steps += self.num_envs

    def truncate(self, env_index: int, final_obs: np.ndarray) -> None:
        """Env ``env_index``'s game failed mid-step: its open windows end as at a truncation
        (bootstrapping from ``final_obs``); nothing is recorded for the failed step."""
        self._end_episode(env_index, self.keys.observe_one(env_index, final_obs), False)

    def _end_episode(self, i: int | np.integer, final_obs: np.ndarray, terminated: bool) -> None:
        """Emit every open window of env ``i``: discount 0 if terminated, else bootstrap from ``final_obs``."""
        k = int(self.w_len[i])
        if k == 0:
            return
        r = self.w_rew[i, :k]
        # return of the window starting at slot j: sum over the rest of the episode
        ret = np.array([r[j:] @ self.gammas[: k - j] for j in range(k)])
        discount = np.zeros(k) if terminated else self.gammas[k - np.arange(k)]
        self._push(
            self.w_obs[i, :k].copy(),
            self.w_act[i, :k].copy(),
            ret,
            np.repeat(final_obs[None], k, axis=0),
            discount,
            self.w_q[i, :k].copy(),
            self.w_person[i, :k].copy(),
        )
        self.w_len[i] = 0

    def _push(self, obs, action, ret, next_obs, discount, q_taken, person) -> None:
        self.out.append((obs, action, ret, next_obs, discount, q_taken, person))
        self._pending += len(action)

    def pending(self) -> int:
        return self._pending

    def take(self) -> Tensors:
        out, self.out, self._pending = self.out, [], 0
        if not out:
            return {
                **self.keys.empty(),
                "action": np.zeros(0, np.int64),
                "reward": np.zeros(0, np.float32),
                "discount": np.zeros(0, np.float32),
                **({"priority": np.zeros(0, np.float32)} if self.priorities else {}),
            }
        obs, action, reward, next_obs, discount, q_taken, person = (np.concatenate(parts) for parts in zip(*out))
        priority = self._priorities(reward, next_obs, discount, q_taken) if self.priorities else None
        open_windows = [self.w_obs[i, : self.w_len[i]] for i in np.flatnonzero(self.w_len)]
        batch = {
            **self.keys.pack(obs, next_obs, open_windows),
            "action": action.astype(np.int64, copy=False),
            "reward": reward.astype(np.float32),
            "discount": discount.astype(np.float32),
        }
        if priority is not None:
            batch["priority"] = priority
        if person.any():  # only then: a batch without a takeover is the format older learners read
            batch[INTERVENTION] = person.astype(np.uint8)
        return batch

    #: observations per forward call when bootstrapping priorities
    PRIORITY_CHUNK = 256

    def _priorities(self, ret: np.ndarray, next_keys: np.ndarray, discount: np.ndarray, q_taken: np.ndarray):
        """Ape-X's initial priorities: |R + discount * max_a Q(s', a) - Q(s, a)| by this actor's network
        (the version it acted with; Q(s, a) saved when it acted), one batched forward over the
        next observations that bootstrap (discount > 0).

        The learner's priority after a replay is the same quantity, |E[target] - E[Z(s, a)]|, with
        its target net valuing s' (and double DQN's choice of a'): the same n-step return, discount
        and bootstrap, only the network differs (Ape-X's actors act with a copy a few versions old).
        C51's target is clipped to the support [v_min, v_max], as the learner's projection clips
        each shifted atom: equal to its expected value whenever no atom is clipped (at a
        termination, clip(R) exactly)."""
        target = ret.astype(np.float64)
        boot = np.flatnonzero(discount > 0)
        for start in range(0, len(boot), self.PRIORITY_CHUNK):
            rows = boot[start : start + self.PRIORITY_CHUNK]
            q_next = self.forward(self.keys.arrays(next_keys[rows]))["q"]
            target[rows] += discount[rows] * q_next.max(axis=1)
        if self.params.distributional == "c51":
            target = np.clip(target, self.params.v_min, self.params.v_max)
        return np.abs(target - q_taken).astype(np.float32)
