"""DQN, Ape-X style: many actors with an epsilon ladder feed one replay learner.

Read top to bottom:

1. ``DQNParams``: the hyperparameters (``[algorithm]`` in a config file);
2. ``NumpyQForward``: the Q-network's forward in numpy (``QNetwork``, the same
   MLP in torch, lives in :mod:`mqttrl_plugins.dqn_torch` with the learner);
3. ``sample_spec``: what one n-step transition looks like on the wire;
4. ``DQNActor``: worker side, numpy only; batched epsilon-greedy actions over
   Q-values from any forward (local torch, local numpy, or a central inference
   server), n-step transitions assembled per env;
5. ``SumTree`` and ``DQNLearner`` (in ``dqn_torch``): replay buffer (uniform or
   proportional prioritized), double-DQN targets, Huber loss, target network,
   Adam; checkpoints as numpy arrays plus JSON metadata (no pickle, no torch.load);
6. the ``mqttrl_register_algorithms`` hook; torch is imported only by the
   factories that need it, so a torch-free worker can load this plugin.

The learner's pace is set by ``replay_ratio``: the mean number of times each
sample is replayed, ``updates * batch_size / samples_added``. The learner
trains while it is below that ratio, and ``behind()`` asks workers to pause
when it owes more than ``max_update_debt`` updates, so a slow learner sees
the same data-to-update ratio as a fast one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.algorithm import ActorContext, AlgorithmInfo
from mqttrl.config import ConfigError, layer_sizes, non_negative, positive, unit_interval, unit_positive
from mqttrl.plugin.spec import hookimpl
from mqttrl.wire import FieldSpec, SampleSpec

Tensors = dict[str, np.ndarray]


# --------------------------------------------------------------------------
# 1. Hyperparameters
# --------------------------------------------------------------------------


@attrs.define
class DQNParams:
    # --- optimisation
    #: Adam learning rate
    lr: float = attrs.field(default=2e-3, validator=positive)
    #: Adam epsilon
    adam_eps: float = attrs.field(default=1e-8, validator=positive)
    #: discount per env step
    gamma: float = attrs.field(default=0.99, validator=unit_positive)
    #: transitions per gradient update
    batch_size: int = attrs.field(default=128, validator=positive)
    #: clip the gradient's global norm to this (0: no clipping)
    grad_clip: float = attrs.field(default=10.0, validator=non_negative)
    #: use the online net to pick the next action and the target net to value it
    double: bool = True
    #: bootstrap after this many env steps (rewards summed on the worker)
    n_step: int = attrs.field(default=3, validator=positive)
    # --- network
    #: sizes of the hidden layers of the MLP
    hidden: list = attrs.field(factory=lambda: [128, 128], validator=layer_sizes)
    #: split the head into state value and action advantages
    dueling: bool = True
    # --- target network: every ``target_update_every`` updates,
    # target <- tau * online + (1 - tau) * target (tau = 1: a hard copy)
    #: updates between target-network updates
    target_update_every: int = attrs.field(default=100, validator=positive)
    #: share of the online net blended into the target at each target update
    tau: float = attrs.field(default=1.0, validator=unit_positive)
    # --- replay and pacing
    #: transitions the replay buffer holds (the oldest are overwritten)
    buffer_size: int = attrs.field(default=100_000, validator=positive)
    #: no training until the buffer holds this many transitions
    learning_starts: int = attrs.field(default=1000, validator=positive)
    #: mean times each sample is replayed (updates * batch_size / samples); the learner trains while below it
    replay_ratio: float = attrs.field(default=64.0, validator=positive)
    #: updates owed before behind() asks workers to pause (flow control)
    max_update_debt: int = attrs.field(default=100, validator=positive)
    # --- prioritized replay (proportional, Schaul et al. 2016)
    #: sample transitions in proportion to (|TD error| + per_eps) ** per_alpha
    prioritized: bool = False
    #: how strongly priorities skew sampling (0: uniform)
    per_alpha: float = attrs.field(default=0.6, validator=non_negative)
    #: importance-sampling exponent at the start, annealed linearly to 1
    per_beta0: float = attrs.field(default=0.4, validator=unit_interval)
    #: updates over which per_beta0 is annealed to 1
    per_beta_updates: int = attrs.field(default=50_000, validator=positive)
    #: added to |TD error| so that no transition gets priority 0
    per_eps: float = attrs.field(default=1e-3, validator=positive)
    # --- exploration (per env: max(ladder value, linear decay from epsilon_start))
    #: Ape-X ladder: env i of N explores with epsilon_base ** (1 + epsilon_alpha * i / (N - 1))
    epsilon_base: float = attrs.field(default=0.4, validator=unit_interval)
    #: Ape-X ladder exponent spread
    epsilon_alpha: float = attrs.field(default=7.0, validator=non_negative)
    #: epsilon of every env when its actor starts
    epsilon_start: float = attrs.field(default=1.0, validator=unit_interval)
    #: actor env steps (summed over its envs) over which epsilon falls linearly to the ladder value
    epsilon_decay_steps: int = attrs.field(default=10_000, validator=non_negative)

    def __attrs_post_init__(self):
        if self.buffer_size < self.batch_size:
            raise ConfigError(f"buffer_size={self.buffer_size}: must be >= batch_size ({self.batch_size})")


# --------------------------------------------------------------------------
# 2. Q-network
# --------------------------------------------------------------------------


def _spaces(obs_space: gym.Space, act_space: gym.Space) -> tuple[int, int]:
    """Observation size (flattened) and action count; only Box -> Discrete is supported."""
    if not isinstance(act_space, gym.spaces.Discrete):
        raise TypeError(f"dqn needs a Discrete action space, got {act_space!r}")
    if act_space.start != 0:
        raise TypeError(f"dqn needs actions numbered from 0, got {act_space!r}")
    if not isinstance(obs_space, gym.spaces.Box) or obs_space.shape is None:
        raise TypeError(f"dqn needs a Box observation space, got {obs_space!r}")
    if not np.issubdtype(obs_space.dtype, np.floating):
        raise TypeError(f"dqn needs float observations, got a Box of {obs_space.dtype}: {obs_space!r}")
    return int(np.prod(obs_space.shape, dtype=np.int64)), int(act_space.n)


def _net_info(obs_dim: int, n_actions: int, params: DQNParams) -> dict[str, Any]:
    return {"obs_dim": obs_dim, "n_actions": n_actions, "hidden": list(params.hidden), "dueling": bool(params.dueling)}


class NumpyQForward:
    """The Q-network's forward in numpy (float32), from the same weights the learner exports.

    Same layers as ``dqn_torch.QNetwork``: ``trunk.{0,2,...}`` Linear + ReLU, then
    ``value``/``advantage`` (dueling) or ``head``. Weight matrices are transposed once
    at load so the forward is plain ``x @ W + b``.
    """

    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.n_actions = _spaces(obs_space, act_space)
        self.info = _net_info(self.obs_dim, self.n_actions, params)
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


def make_forward(params: DQNParams, obs_space: gym.Space, act_space: gym.Space, backend: str):
    """A forward for actors and inference servers: ``"torch"`` or ``"numpy"``."""
    if backend == "numpy":
        return NumpyQForward(params, obs_space, act_space)
    if backend == "torch":
        from .dqn_torch import TorchQForward

        return TorchQForward(params, obs_space, act_space)
    raise ValueError(f"backend {backend!r}: use torch or numpy")


def _local_forward(params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
    """numpy: the same Q-values as torch (to ~1e-5) and cheaper than torch for these small MLPs."""
    return NumpyQForward(params, obs_space, act_space, seed)


def sample_spec(params: DQNParams, obs_space: gym.Space, act_space: gym.Space) -> SampleSpec:
    """``reward`` is the discounted n-step return; ``discount`` multiplies the bootstrap value.

    discount = gamma ** k for the k rewards summed, or 0 if the episode
    terminated inside the window (truncation still bootstraps from next_obs).
    """
    _, n_actions = _spaces(obs_space, act_space)
    shape = tuple(int(s) for s in obs_space.shape)
    return SampleSpec(
        fields={
            "obs": FieldSpec("float32", shape),
            "action": FieldSpec("int64", (), low=0, high=n_actions - 1),
            "reward": FieldSpec("float32", ()),
            "next_obs": FieldSpec("float32", shape),
            "discount": FieldSpec("float32", (), low=0.0, high=1.0),
        }
    )


# --------------------------------------------------------------------------
# 4. Actor (worker side)
# --------------------------------------------------------------------------


def epsilon_ladder(i: int, n: int, base: float, alpha: float) -> float:
    """Ape-X exploration of env ``i`` of ``n``: ``base ** (1 + alpha * i / (n - 1))``."""
    if n <= 1:
        return float(base)
    return float(base ** (1.0 + alpha * i / (n - 1)))


class DQNActor:
    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, ctx: ActorContext, forward=None):
        self.params = params
        self.obs_dim, self.n_actions = _spaces(obs_space, act_space)
        self.obs_shape = tuple(obs_space.shape)
        self.num_envs = ctx.num_envs
        self.rng = np.random.default_rng(ctx.seed)
        #: Q-values from local torch, local numpy or the central inference servers
        self.forward = forward if forward is not None else _local_forward(params, obs_space, act_space, ctx.seed)
        total = max(ctx.total_envs, ctx.first_env_index + ctx.num_envs)
        self.ladder = np.array(
            [
                epsilon_ladder(ctx.first_env_index + k, total, params.epsilon_base, params.epsilon_alpha)
                for k in range(ctx.num_envs)
            ],
            dtype=np.float64,
        )
        #: env steps this actor has recorded, summed over its envs (drives the epsilon decay)
        self.env_steps = 0
        # n-step windows, all envs at once: slot k of env e holds its k-th oldest step not yet emitted
        n, e = params.n_step, ctx.num_envs
        self.w_obs = np.zeros((e, n, *self.obs_shape), np.float32)
        self.w_act = np.zeros((e, n), np.int64)
        self.w_rew = np.zeros((e, n), np.float64)
        self.w_len = np.zeros(e, np.int64)
        self.gammas = params.gamma ** np.arange(n + 1, dtype=np.float64)
        #: emitted transitions, as chunks of arrays (concatenated by take())
        self.out: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending = 0

    def epsilons(self) -> np.ndarray:
        """Current epsilon per env: the linear decay from epsilon_start, floored at the ladder value."""
        p = self.params
        frac = 1.0 if p.epsilon_decay_steps == 0 else min(1.0, self.env_steps / p.epsilon_decay_steps)
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

    def act(self, obs: np.ndarray, greedy: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = self.forward(obs)["q"].argmax(axis=1).astype(np.int64)
        if greedy:
            return actions, {}
        if len(obs) != self.num_envs:
            raise ValueError(
                f"act() got {len(obs)} observations for {self.num_envs} envs (greedy=False needs one per env)"
            )
        eps = self.epsilons()
        explore = self.rng.random(self.num_envs) < eps
        actions = np.where(explore, self.rng.integers(0, self.n_actions, self.num_envs), actions)
        return actions, {"epsilon": eps.astype(np.float32)}

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
        self.w_obs[envs, slot] = np.asarray(obs, dtype=np.float32).reshape(self.num_envs, *self.obs_shape)
        self.w_act[envs, slot] = actions
        self.w_rew[envs, slot] = rewards
        self.w_len += 1
        next_obs = np.asarray(next_obs, dtype=np.float32).reshape(self.num_envs, *self.obs_shape)
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        full = np.flatnonzero((self.w_len == n) & ~ended)
        if len(full):
            ret = self.w_rew[full] @ self.gammas[:n]
            self._push(
                self.w_obs[full, 0].copy(),
                self.w_act[full, 0].copy(),
                ret,
                next_obs[full],
                np.full(len(full), self.gammas[n]),
            )
            self.w_obs[full, :-1] = self.w_obs[full, 1:]
            self.w_act[full, :-1] = self.w_act[full, 1:]
            self.w_rew[full, :-1] = self.w_rew[full, 1:]
            self.w_len[full] -= 1
        for i in np.flatnonzero(ended):  # every open window of this env ends here
            k = int(self.w_len[i])
            r = self.w_rew[i, :k]
            # return of the window starting at slot j: sum over the rest of the episode
            ret = np.array([r[j:] @ self.gammas[: k - j] for j in range(k)])
            discount = np.zeros(k) if terminated[i] else self.gammas[k - np.arange(k)]
            self._push(
                self.w_obs[i, :k].copy(),
                self.w_act[i, :k].copy(),
                ret,
                np.repeat(next_obs[i][None], k, axis=0),
                discount,
            )
            self.w_len[i] = 0
        self.env_steps += self.num_envs

    def _push(self, obs, action, ret, next_obs, discount) -> None:
        self.out.append((obs, action, ret, next_obs, discount))
        self._pending += len(action)

    def pending(self) -> int:
        return self._pending

    def take(self) -> Tensors:
        out, self.out, self._pending = self.out, [], 0
        if not out:
            return {
                "obs": np.zeros((0, *self.obs_shape), np.float32),
                "action": np.zeros(0, np.int64),
                "reward": np.zeros(0, np.float32),
                "next_obs": np.zeros((0, *self.obs_shape), np.float32),
                "discount": np.zeros(0, np.float32),
            }
        obs, action, reward, next_obs, discount = (np.concatenate(parts) for parts in zip(*out))
        return {
            "obs": obs.astype(np.float32, copy=False),
            "action": action.astype(np.int64, copy=False),
            "reward": reward.astype(np.float32),
            "next_obs": next_obs.astype(np.float32, copy=False),
            "discount": discount.astype(np.float32),
        }


_REPLAY_FIELDS = ("obs", "action", "reward", "next_obs", "discount")


# --------------------------------------------------------------------------
# 6. Registration
# --------------------------------------------------------------------------


def _make_learner(params: DQNParams, obs_space: gym.Space, act_space: gym.Space, device: str = "cpu", seed: int = 0):
    from .dqn_torch import DQNLearner

    return DQNLearner(params, obs_space, act_space, device, seed)


@hookimpl
def mqttrl_register_algorithms(register):
    register(
        AlgorithmInfo(
            name="dqn",
            description="DQN (double, dueling, n-step, optional prioritized replay), Ape-X style epsilon ladder",
            params=DQNParams,
            mode="async",
            sample_spec=sample_spec,
            make_actor=DQNActor,
            make_learner=_make_learner,
            make_forward=make_forward,
        )
    )
